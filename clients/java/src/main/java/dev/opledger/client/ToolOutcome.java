package dev.opledger.client;

import com.google.protobuf.Struct;
import dev.opledger.v1.Operation;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * ToolOutcome is {@link ToolRunner#run}'s final answer: {@link Succeeded}, {@link Failed}, {@link
 * OutcomeUnknown} or {@link AwaitingApproval}. OutcomeUnknown is its own type, never a Failed: an
 * agent may correct a failed call and make it under a new key, but must never do that with a call
 * whose effect may already have happened. {@link #forModel()} renders any of them as the JSON text
 * to hand the model as the tool result, byte for byte the same in every opledger client.
 */
public sealed interface ToolOutcome
    permits ToolOutcome.Succeeded,
        ToolOutcome.Failed,
        ToolOutcome.OutcomeUnknown,
        ToolOutcome.AwaitingApproval {

  /** MESSAGE_AWAITING_APPROVAL is what forModel tells the model about a call that waits. */
  String MESSAGE_AWAITING_APPROVAL =
      "A person must approve this call before it can run; it is recorded under operation_id. Do not"
          + " call the tool again for it: a new call would be a second, separate request. Call"
          + " check_operation with the operation_id later to learn its outcome.";

  /** MESSAGE_OUTCOME_UNKNOWN is what forModel tells the model about a call whose effect is unknown. */
  String MESSAGE_OUTCOME_UNKNOWN =
      "The outcome is not known yet: the request may have reached the service. Do not call the tool"
          + " again for it, or do it another way: a new call would be a second, separate request. Call"
          + " check_operation with the operation_id later to learn its outcome.";

  /**
   * MESSAGE_KEY_NAMES_EARLIER_CALL (formatted with the earlier call's state, as {@link #stateWords}
   * gives it) is what forModel tells the model about a call refused under a key that already names
   * an earlier call (IDEMPOTENCY_KEY_REUSED, or a tool, version or args refused), which may have
   * taken effect.
   */
  String MESSAGE_KEY_NAMES_EARLIER_CALL =
      "This call was not made: its idempotency key already names an earlier call, which is %s. If"
          + " that was this same action, it is done or under way: do not make it again under a new"
          + " key.";

  /**
   * MESSAGE_KEY_NAMES_UNDONE_CALL is MESSAGE_KEY_NAMES_EARLIER_CALL for an earlier call that did not
   * take effect (failed, rejected, cancelled).
   */
  String MESSAGE_KEY_NAMES_UNDONE_CALL =
      "This call was not made: its idempotency key already names an earlier call, which is %s and"
          + " did not take effect.";

  /**
   * StateWords is how the model's texts name a state: "outcome unknown" for STATE_OUTCOME_UNKNOWN, and
   * "in a state this client does not know" for one newer than this client.
   */
  static String stateWords(dev.opledger.v1.State state) {
    if (state == null
        || state == dev.opledger.v1.State.UNRECOGNIZED
        || state == dev.opledger.v1.State.STATE_UNSPECIFIED) {
      return "in a state this client does not know";
    }
    return state.name().replaceFirst("^STATE_", "").replace('_', ' ').toLowerCase(java.util.Locale.ROOT);
  }

  /** KeyNamesEarlierCall is the message of a refusal under a key that names an earlier call. */
  static String keyNamesEarlierCall(dev.opledger.v1.State state) {
    boolean undone =
        state == dev.opledger.v1.State.STATE_FAILED
            || state == dev.opledger.v1.State.STATE_REJECTED
            || state == dev.opledger.v1.State.STATE_CANCELLED;
    return String.format(
        undone ? MESSAGE_KEY_NAMES_UNDONE_CALL : MESSAGE_KEY_NAMES_EARLIER_CALL, stateWords(state));
  }

  /**
   * MESSAGE_EDITED (formatted with the changes, the verb of the outcome's status, the arguments that
   * ran, the edited operation and the original) tells the model that an approver changed the call's
   * arguments before approving it: what ran is not what the model asked for, and the call as made
   * never runs ({@link Edit#message}).
   */
  String MESSAGE_EDITED =
      "An approver changed %s; %s: %s. Operation %s replaces %s, the call as it was made, which will"
          + " not run.";

  /**
   * MESSAGE_POLICY_DENIED (formatted with the ledger's refusal, which names the rule and says its
   * message) tells the model that the tool's policy refuses the call and that the same call is
   * refused again.
   */
  String MESSAGE_POLICY_DENIED =
      "The tool's policy refuses this call: %s. Calling the tool again with the same arguments will"
          + " be refused again: tell the user, and do not try to get around the rule.";

  /** MESSAGE_LIMIT_EXCEEDED (formatted with the ledger's refusal): a budget refused the call. */
  String MESSAGE_LIMIT_EXCEEDED =
      "This call was not made: %s. Nothing was recorded; the same call may be accepted once the"
          + " limit's window has room again, but do not split or change it to get around the limit:"
          + " tell the user.";

  /**
   * MESSAGE_OPERATION_DUPLICATE (formatted with the other call's state, as {@link #stateWords}
   * gives it) tells the model that the same action (the tool's business identity) is already
   * recorded under another key.
   */
  String MESSAGE_OPERATION_DUPLICATE =
      "This call was not made: the same action is already recorded as another call, operation_id,"
          + " which is %s. Do not make it again, under this key or another; call check_operation with"
          + " that operation_id to learn its outcome.";

  /**
   * RefusalMessage is what a runner tells the model about a refusal of the call with that reason
   * and ledger message: the message itself, or for POLICY_DENIED and LIMIT_EXCEEDED the message
   * with what it means for the model.
   */
  static String refusalMessage(String reason, String message) {
    if (Reason.POLICY_DENIED.name().equals(reason)) {
      return String.format(MESSAGE_POLICY_DENIED, message);
    }
    if (Reason.LIMIT_EXCEEDED.name().equals(reason)) {
      return String.format(MESSAGE_LIMIT_EXCEEDED, message);
    }
    return message;
  }

  /** OperationId is the ledger's operation, or "" when the call was refused before one existed. */
  String operationId();

  /**
   * Edit is the approver's edit when the operation is not the one the agent prepared
   * (approve-with-edit: the runner followed the link and ran the edited one), else null.
   */
  Edit edit();

  /**
   * ForModel is the answer for the model: RFC 8785 JSON with a "status" of succeeded, failed,
   * outcome_unknown or awaiting_approval.
   */
  String forModel();

  /**
   * Succeeded is a call whose effect happened once; result is the downstream's answer
   * (Operation.result); edit, when set, says that an approver changed the arguments (what ran is
   * edit.args).
   */
  record Succeeded(Operation operation, Struct result, Edit edit) implements ToolOutcome {
    public Succeeded(Operation operation, Struct result) {
      this(operation, result, null);
    }

    @Override
    public String operationId() {
      return operation.getId();
    }

    @Override
    public String forModel() {
      Map<String, Object> m = new LinkedHashMap<>();
      m.put("status", "succeeded");
      m.put("operation_id", operationId());
      m.put("result", result == null ? Struct.getDefaultInstance() : result);
      return render(m, edit);
    }
  }

  /** Render is an outcome's forModel text, with an approver's edit as its "edited" member. */
  private static String render(Map<String, Object> m, Edit edit) {
    if (edit != null) {
      m.put("edited", edit.forModel((String) m.get("status"), (String) m.get("operation_id")));
    }
    return Jcs.canonicalize(m);
  }

  /**
   * Failed is a call that definitively did not happen: reason is DOWNSTREAM_REJECTED (the downstream
   * refused it), OPERATION_REJECTED (a person denied it), OPERATION_CANCELLED, or a refusal of the
   * request itself (ARGS_INVALID, TOOL_UNKNOWN, IDEMPOTENCY_KEY_REUSED …; then operation is null,
   * unless the key already names an earlier call: then operation is that call, which may have taken
   * effect, and the message says so, {@link #MESSAGE_KEY_NAMES_EARLIER_CALL}). An approval that
   * expired is not a Failed: see {@link AwaitingApproval}.
   */
  record Failed(String reason, String message, Operation operation, Edit edit) implements ToolOutcome {
    public Failed(String reason, String message, Operation operation) {
      this(reason, message, operation, null);
    }

    /** ReasonCode is the reason as a {@link Reason}. */
    public Reason reasonCode() {
      return Reason.of(reason);
    }

    @Override
    public String operationId() {
      return operation == null ? "" : operation.getId();
    }

    @Override
    public String forModel() {
      Map<String, Object> m = new LinkedHashMap<>();
      m.put("status", "failed");
      m.put("reason", reason);
      m.put("message", message);
      if (!operationId().isEmpty()) {
        m.put("operation_id", operationId());
      }
      return render(m, edit);
    }
  }

  /**
   * OutcomeUnknown is a call that may or may not have taken effect (OUTCOME_UNKNOWN, or still
   * EXECUTING by another caller: pending). Never make it again under a new key; run the same call
   * later to learn the outcome.
   */
  record OutcomeUnknown(Operation operation, boolean pending, Edit edit) implements ToolOutcome {
    public OutcomeUnknown(Operation operation, boolean pending) {
      this(operation, pending, null);
    }

    @Override
    public String operationId() {
      return operation.getId();
    }

    @Override
    public String forModel() {
      Map<String, Object> m = new LinkedHashMap<>();
      m.put("status", "outcome_unknown");
      m.put("operation_id", operationId());
      m.put("message", MESSAGE_OUTCOME_UNKNOWN);
      return render(m, edit);
    }
  }

  /**
   * AwaitingApproval is a call that waits for a person's decision, also when an approval given
   * earlier expired before the call ran (APPROVAL_EXPIRED: the ledger put it back before its
   * approvers); run the same call (same key) again later, never under a new key.
   */
  record AwaitingApproval(Operation operation, Edit edit) implements ToolOutcome {
    public AwaitingApproval(Operation operation) {
      this(operation, null);
    }

    @Override
    public String operationId() {
      return operation.getId();
    }

    @Override
    public String forModel() {
      Map<String, Object> m = new LinkedHashMap<>();
      m.put("status", "awaiting_approval");
      m.put("operation_id", operationId());
      m.put("message", MESSAGE_AWAITING_APPROVAL);
      return render(m, edit);
    }
  }
}
