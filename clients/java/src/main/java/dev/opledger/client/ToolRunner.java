package dev.opledger.client;

import com.google.protobuf.Struct;
import com.google.protobuf.Value;
import dev.opledger.v1.ExecuteResponse;
import dev.opledger.v1.Operation;
import dev.opledger.v1.State;
import dev.opledger.v1.Tool;
import java.time.Duration;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Objects;
import java.util.Set;
import java.util.function.Consumer;

/**
 * ToolRunner runs an agent's tool calls through the ledger end to end: Prepare; the approval (call
 * {@code onApprovalRequired}, then wait up to {@code approvalWait} for a person's decision, or
 * answer {@link ToolOutcome.AwaitingApproval} at once); Execute with a wait; and one typed {@link
 * ToolOutcome}. It also builds the model's tool list from ListTools. Thread-safe.
 *
 * <p>Running the same call again (same tool, args and idempotency key) is how an agent resumes it
 * after AwaitingApproval, after OutcomeUnknown or after a crash: the ledger replays the operation
 * and the run continues from its state, without a second effect. A call that needs no approval
 * takes one request (Prepare with execute, the one-call path).
 *
 * <pre>{@code
 * ToolRunner runner = ToolRunner.builder(agent).approvalWait(Duration.ofMinutes(2)).build();
 * ToolOutcome out = runner.run(call.name(), call.argumentsJson(), key);
 * String toolResult = out.forModel();
 * }</pre>
 */
public final class ToolRunner {
  /** The refusals that are answers about the call itself: nothing was done. */
  private static final Set<Reason> REFUSALS =
      EnumSet.of(
          Reason.ARGS_INVALID,
          Reason.ARGS_TOO_LARGE,
          Reason.TOOL_UNKNOWN,
          Reason.TOOL_VERSION_UNKNOWN,
          Reason.IDEMPOTENCY_KEY_REUSED,
          Reason.OPERATION_REJECTED,
          Reason.OPERATION_CANCELLED,
          Reason.POLICY_DENIED,
          Reason.LIMIT_EXCEEDED,
          Reason.OPERATION_DUPLICATE);

  /**
   * The refusals of an Execute that settle the operation: a person denied it, it was cancelled, or
   * the policy in force at its claim refused it (POLICY_DENIED: now REJECTED).
   */
  private static final Set<Reason> SETTLED =
      EnumSet.of(Reason.OPERATION_REJECTED, Reason.OPERATION_CANCELLED, Reason.POLICY_DENIED);

  /**
   * MAX_EDITS bounds the supersede links a run follows (an edit of an edited operation, …), and the
   * way back to the call as made.
   */
  private static final int MAX_EDITS = 8;

  /**
   * The refusals of the request itself, before anything was recorded: under a key that already
   * names an earlier call, the refusal carries it.
   */
  private static final Set<Reason> KEYED =
      EnumSet.of(
          Reason.IDEMPOTENCY_KEY_REUSED,
          Reason.TOOL_UNKNOWN,
          Reason.TOOL_VERSION_UNKNOWN,
          Reason.ARGS_INVALID,
          Reason.ARGS_TOO_LARGE);

  /**
   * The refusals that name another call than this one when they carry an operation_id: the key's
   * earlier call (KEYED; POLICY_DENIED unless it names this call, refused at its claim), or the same
   * action under another key (OPERATION_DUPLICATE). That call may have taken effect.
   */
  private static final Set<Reason> NAMES_OTHER =
      EnumSet.of(
          Reason.IDEMPOTENCY_KEY_REUSED,
          Reason.TOOL_UNKNOWN,
          Reason.TOOL_VERSION_UNKNOWN,
          Reason.ARGS_INVALID,
          Reason.ARGS_TOO_LARGE,
          Reason.POLICY_DENIED,
          Reason.OPERATION_DUPLICATE);

  private final OpledgerClient client;
  private final Duration approvalWait;
  private final Consumer<Operation> onApprovalRequired;
  private final Duration executeWait;
  private final String toolVersion;

  private ToolRunner(Builder b) {
    this.client = b.client;
    this.approvalWait = b.approvalWait;
    this.onApprovalRequired = b.onApprovalRequired;
    this.executeWait = b.executeWait;
    this.toolVersion = b.toolVersion;
  }

  /** Builder starts a runner that calls the ledger with an agent's client. */
  public static Builder builder(OpledgerClient agent) {
    return new Builder(agent);
  }

  /** Builder configures a {@link ToolRunner}. */
  public static final class Builder {
    private final OpledgerClient client;
    private Duration approvalWait = Duration.ZERO;
    private Consumer<Operation> onApprovalRequired;
    private Duration executeWait = Duration.ofSeconds(30);
    private String toolVersion = "";

    private Builder(OpledgerClient client) {
      this.client = Objects.requireNonNull(client);
    }

    /**
     * ApprovalWait is how long run waits for a person's decision on a call that needs approval
     * (polling get) before it answers AwaitingApproval; zero (the default) answers at once.
     */
    public Builder approvalWait(Duration d) {
      this.approvalWait = Objects.requireNonNull(d);
      return this;
    }

    /**
     * OnApprovalRequired is called with the operation each time a run finds it awaiting approval (a
     * repeated run too), before waiting: notify the approvers, or ask a person in-process and
     * approve with an approver's client. Its exceptions propagate out of run.
     */
    public Builder onApprovalRequired(Consumer<Operation> hook) {
      this.onApprovalRequired = hook;
      return this;
    }

    /** ExecuteWait is how long Execute waits when another caller is executing (default 30 s). */
    public Builder executeWait(Duration d) {
      this.executeWait = Objects.requireNonNull(d);
      return this;
    }

    /** ToolVersion pins every call to this tool version (default: the tool's current one). */
    public Builder toolVersion(String v) {
      this.toolVersion = v == null ? "" : v;
      return this;
    }

    /** Build creates the runner. */
    public ToolRunner build() {
      return new ToolRunner(this);
    }
  }

  /**
   * CHECK_OPERATION_TOOL is the runner's own model tool (as the MCP gateway has): it reports an
   * earlier call's outcome by its operation_id, and runs it if a person approved it since; it never
   * makes a new call. The messages of AwaitingApproval and OutcomeUnknown point the model to it.
   */
  public static final String CHECK_OPERATION_TOOL = "check_operation";

  /**
   * MESSAGE_CHECK_UNKNOWN_OPERATION is the message of a check_operation call whose operation_id the
   * ledger does not know.
   */
  public static final String MESSAGE_CHECK_UNKNOWN_OPERATION =
      "No operation has this id. This says nothing about the earlier call: do not make it again; pass the operation_id its answer gave.";

  /** CheckOperationModelTool is the model tool {@link #modelTools()} adds for CHECK_OPERATION_TOOL. */
  public static ModelTool checkOperationModelTool() {
    Struct schema =
        Args.fromJson(
            "{\"type\":\"object\",\"additionalProperties\":false,\"required\":[\"operation_id\"],"
                + "\"properties\":{\"operation_id\":{\"type\":\"string\","
                + "\"description\":\"the operation_id of an earlier answer\"}}}");
    return new ModelTool(
        CHECK_OPERATION_TOOL,
        "Report the outcome of an earlier tool call by the operation_id its answer gave, and run it if"
            + " a person approved it since. It never makes a new call: use it, not the original tool,"
            + " for a call that awaited approval or whose outcome was not known.",
        schema,
        "",
        false,
        "idempotent");
  }

  /**
   * ModelTools returns the tools the ledger enforces, current versions only, then {@link
   * #checkOperationModelTool()}. A tool's description carries its policy's summary ({@link
   * ModelTool#describe}). A ledger tool named check_operation is an IllegalStateException:
   * rename it in the tools file.
   */
  public List<ModelTool> modelTools() {
    List<ModelTool> out = new ArrayList<>();
    for (Tool t : client.listTools().getToolsList()) {
      if (!t.getCurrent()) {
        continue;
      }
      if (t.getName().equals(CHECK_OPERATION_TOOL)) {
        throw new IllegalStateException(
            "the ledger has a tool named \"check_operation\", which is the runner's own tool; rename it"
                + " in the tools file");
      }
      out.add(
          new ModelTool(
              t.getName(),
              ModelTool.describe(t.getDescription(), t.getPolicy().getSummary()),
              t.getArgsSchema(),
              t.getVersion(),
              t.getApprovalRequired(),
              effect(t)));
    }
    out.add(checkOperationModelTool());
    return out;
  }

  private static String effect(Tool t) {
    return switch (t.getEffect()) {
      case EFFECT_READ_ONLY -> "read_only";
      case EFFECT_IDEMPOTENT -> "idempotent";
      case EFFECT_SIDE_EFFECT -> "side_effect";
      default -> "";
    };
  }

  /** Run runs one tool call whose arguments are the model's JSON text; see {@link #run(String, Struct, String)}. */
  public ToolOutcome run(String tool, String argsJson, String idempotencyKey) {
    if (CHECK_OPERATION_TOOL.equals(tool)) {
      Struct args = null;
      try {
        args = argsJson == null || argsJson.isBlank() ? null : Args.fromJson(argsJson);
      } catch (IllegalArgumentException e) {
        // not an object: no operation_id, which check answers as an unknown operation
      }
      return run(tool, args, idempotencyKey);
    }
    return run(tool, argsJson == null || argsJson.isBlank() ? null : Args.fromJson(argsJson), idempotencyKey);
  }

  /**
   * Run runs one tool call to its final answer. idempotencyKey is the call's business identity
   * ({@link IdempotencyKeys#derive}). It throws {@link OpledgerException} only for what the
   * runtime, not the model, must handle (the ledger unreachable after the client's retries, a bad
   * key); the same run may simply be repeated. Refusals of the call itself come back as {@link
   * ToolOutcome.Failed}. An approval that expired before the call ran is not one: the ledger put the
   * operation back before its approvers, and the run continues as for any call awaiting approval
   * ({@link ToolOutcome.AwaitingApproval}).
   */
  public ToolOutcome run(String tool, Struct args, String idempotencyKey) {
    if (CHECK_OPERATION_TOOL.equals(tool)) {
      Value id = args == null ? null : args.getFieldsMap().get("operation_id");
      return check(id == null ? "" : id.getStringValue());
    }
    Operation op;
    try {
      // The one-call path: Prepare also executes a call that needs no approval.
      op = client.prepareAndExecute(tool, args, idempotencyKey, toolVersion, executeWait).getOperation();
    } catch (OpledgerException e) {
      String next = supersededBy(e);
      if (!next.isEmpty()) {
        // The key names a call an approver approved with edits: the edited one is the one to run.
        return carryOn(client.get(next).getOperation(), false);
      }
      if (!e.is(Reason.APPROVAL_EXPIRED)) {
        return refused(e, null);
      }
      // The approval lapsed before the call ran: the ledger put the operation back to
      // AWAITING_APPROVAL and asked its approvers again. It is the same call waiting for a new
      // decision.
      op = reawaiting(e, null);
    }
    return carryOn(op, false);
  }

  /**
   * Check is the check_operation tool: the outcome of an earlier call by its operation id. An
   * unknown outcome is looked up at the downstream first (Reconcile); an operation approved since,
   * or executing now, is executed or waited for, as run would; anything else is answered as it
   * stands. It never prepares anything. An id the ledger does not know is a {@link
   * ToolOutcome.Failed}.
   */
  public ToolOutcome check(String operationId) {
    Operation op;
    try {
      op = client.get(operationId).getOperation();
    } catch (OpledgerException e) {
      if (e.is(Reason.OPERATION_NOT_FOUND) || e.is(Reason.FIELD_INVALID)) {
        return new ToolOutcome.Failed(e.getReasonName(), MESSAGE_CHECK_UNKNOWN_OPERATION, null);
      }
      throw e;
    }
    if (op.getState() == State.STATE_OUTCOME_UNKNOWN) {
      try {
        op = client.reconcile(op.getId()).getOperation(); // the ledger may know more now
      } catch (OpledgerException e) {
        // as it stands
      }
    }
    return carryOn(op, true);
  }

  /**
   * CarryOn takes the operation to its answer; one an approver approved with edits (REJECTED with
   * superseded_by, or an Execute answered OPERATION_SUPERSEDED) is followed to the edited one, which
   * is run (it may still await another approver), and the answer says what the approver changed
   * ({@link ToolOutcome#edit()}).
   */
  private ToolOutcome carryOn(Operation op, boolean check) {
    ToolOutcome out = settle(op, check);
    Operation last = operationOf(out);
    if (last == null || last.getSupersedes().isEmpty()) {
      return out;
    }
    Operation root = last;
    for (int i = 0; !root.getSupersedes().isEmpty(); i++) {
      if (i >= MAX_EDITS) {
        throw new IllegalStateException(
            "opledger: more than " + MAX_EDITS + " approver edits in a row before " + last.getId());
      }
      root = client.get(root.getSupersedes()).getOperation();
    }
    return withEdit(out, Edit.of(root.getId(), root.getArgs(), last.getArgs()));
  }

  private ToolOutcome settle(Operation op, boolean check) {
    for (int hops = 0; ; hops++) {
      if (hops > MAX_EDITS) {
        throw new IllegalStateException(
            "opledger: more than " + MAX_EDITS + " approver edits in a row; stopped at " + op.getId());
      }
      if (followed(op)) {
        op = client.get(op.getSupersededBy()).getOperation();
        continue;
      }
      if (op.getState() == State.STATE_AWAITING_APPROVAL) {
        op = awaitDecision(op);
        if (followed(op)) {
          continue; // approved with edits meanwhile: follow the link
        }
        if (op.getState() == State.STATE_AWAITING_APPROVAL) {
          return new ToolOutcome.AwaitingApproval(op);
        }
      } else if (op.getState() == State.STATE_EXECUTING && check) {
        // a check waits for its outcome
      } else if (op.getState() == State.STATE_REJECTED || op.getState() == State.STATE_CANCELLED) {
        // Execute answers it as a refusal (a Failed with the operation)
      } else if (op.getState() != State.STATE_READY) {
        return outcomeOf(op); // READY: not executed (a server without the one-call path)
      }
      ExecuteResponse done;
      try {
        done = client.execute(op.getId(), executeWait);
      } catch (OpledgerException e) {
        String next = supersededBy(e);
        if (!next.isEmpty()) {
          op = client.get(next).getOperation();
          continue;
        }
        if (e.is(Reason.APPROVAL_REQUIRED)) {
          return new ToolOutcome.AwaitingApproval(op);
        }
        if (e.is(Reason.APPROVAL_EXPIRED)) {
          return new ToolOutcome.AwaitingApproval(reawaiting(e, op));
        }
        ToolOutcome refused = refused(e, op);
        if (refused instanceof ToolOutcome.Failed f && !SETTLED.contains(Reason.of(f.reason()))) {
          // An Execute refused for another reason (a replica without the tool's version,
          // say): the operation is not settled, and "failed" would say nothing happened.
          return new ToolOutcome.OutcomeUnknown(op, true);
        }
        return refused;
      }
      return outcomeOf(done.getOperation());
    }
  }

  /** Followed: an approver approved op with edits; the edited operation is the one to run. */
  private static boolean followed(Operation op) {
    return op.getState() == State.STATE_REJECTED && !op.getSupersededBy().isEmpty();
  }

  /** SupersededBy is the operation an OPERATION_SUPERSEDED refusal names, or "". */
  private static String supersededBy(OpledgerException e) {
    if (!e.is(Reason.OPERATION_SUPERSEDED)) {
      return "";
    }
    String id = e.getMetadata().get("superseded_by");
    return id == null ? "" : id;
  }

  private static Operation operationOf(ToolOutcome out) {
    if (out instanceof ToolOutcome.Succeeded s) {
      return s.operation();
    }
    if (out instanceof ToolOutcome.Failed f) {
      return f.operation();
    }
    if (out instanceof ToolOutcome.OutcomeUnknown u) {
      return u.operation();
    }
    return ((ToolOutcome.AwaitingApproval) out).operation();
  }

  /** WithEdit is the outcome with an approver's edit. */
  private static ToolOutcome withEdit(ToolOutcome out, Edit edit) {
    if (out instanceof ToolOutcome.Succeeded s) {
      return new ToolOutcome.Succeeded(s.operation(), s.result(), edit);
    }
    if (out instanceof ToolOutcome.Failed f) {
      return new ToolOutcome.Failed(f.reason(), f.message(), f.operation(), edit);
    }
    if (out instanceof ToolOutcome.OutcomeUnknown u) {
      return new ToolOutcome.OutcomeUnknown(u.operation(), u.pending(), edit);
    }
    return new ToolOutcome.AwaitingApproval(((ToolOutcome.AwaitingApproval) out).operation(), edit);
  }

  /** OutcomeOf maps the operation an Execute answered with to a ToolOutcome. */
  static ToolOutcome outcomeOf(Operation op) {
    return switch (op.getState()) {
      case STATE_SUCCEEDED -> new ToolOutcome.Succeeded(op, op.getResult());
      case STATE_FAILED -> {
        Reason r = OpledgerException.operationErrorReason(op);
        String reason = r == Reason.UNSPECIFIED ? Reason.DOWNSTREAM_REJECTED.name() : r.name();
        yield new ToolOutcome.Failed(reason, op.getError().getMessage(), op);
      }
      case STATE_OUTCOME_UNKNOWN -> new ToolOutcome.OutcomeUnknown(op, false);
      case STATE_EXECUTING, STATE_READY -> new ToolOutcome.OutcomeUnknown(op, true);
      default -> throw new IllegalStateException("opledger: Execute answered with state " + op.getState());
    };
  }

  /**
   * Reawaiting reads the operation an APPROVAL_EXPIRED refusal is about (the refusal's operation_id,
   * else op) as it stands now: back in AWAITING_APPROVAL. An expired approval is never a Failed: the
   * call is the same and must not be made again under a new key. Without an operation to read, the
   * refusal is rethrown.
   */
  private Operation reawaiting(OpledgerException e, Operation op) {
    String id = e.getMetadata().get("operation_id");
    if (id == null || id.isEmpty()) {
      id = op == null ? "" : op.getId();
    }
    if (id.isEmpty()) {
      throw e;
    }
    return client.get(id).getOperation();
  }

  /**
   * Refused turns a refusal of the call itself into a Failed (with the operation the refusal names:
   * the one-call execution's own, or the earlier call a used key names, which may have taken effect
   * and is said so) and rethrows anything else.
   */
  private ToolOutcome refused(OpledgerException e, Operation op) {
    if (!REFUSALS.contains(e.getReason())) {
      throw e;
    }
    String message = ToolOutcome.refusalMessage(e.getReasonName(), e.getStatusMessage());
    String id = e.getMetadata().get("operation_id");
    if (op == null && id != null && !id.isEmpty()) {
      try {
        op = client.get(id).getOperation();
        if (e.is(Reason.OPERATION_DUPLICATE)) {
          message =
              String.format(ToolOutcome.MESSAGE_OPERATION_DUPLICATE, ToolOutcome.stateWords(op.getState()));
        } else if (KEYED.contains(e.getReason())
            || (e.is(Reason.POLICY_DENIED) && op.getState() != State.STATE_REJECTED)) {
          // (A POLICY_DENIED naming a REJECTED operation is this call's own, refused at its claim.)
          message = ToolOutcome.keyNamesEarlierCall(op.getState());
        }
      } catch (OpledgerException ignored) {
        if (NAMES_OTHER.contains(e.getReason())) {
          throw e; // the other call cannot be read now: not a final answer
        }
      }
    }
    return new ToolOutcome.Failed(e.getReasonName(), message, op);
  }

  private Operation awaitDecision(Operation op) {
    if (onApprovalRequired != null) {
      onApprovalRequired.accept(op);
    } else if (approvalWait.isZero() || approvalWait.isNegative()) {
      return op;
    }
    long deadline = System.nanoTime() + approvalWait.toNanos();
    long interval = 200;
    while (true) {
      op = client.get(op.getId()).getOperation();
      long leftMillis = (deadline - System.nanoTime()) / 1_000_000;
      if (op.getState() != State.STATE_AWAITING_APPROVAL || leftMillis <= 0) {
        return op;
      }
      try {
        Thread.sleep(Math.min(interval, leftMillis));
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        return op;
      }
      interval = Math.min(interval * 3 / 2, 2000);
    }
  }
}
