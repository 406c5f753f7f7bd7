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

  /** OperationId is the ledger's operation, or "" when the call was refused before one existed. */
  String operationId();

  /**
   * ForModel is the answer for the model: RFC 8785 JSON with a "status" of succeeded, failed,
   * outcome_unknown or awaiting_approval.
   */
  String forModel();

  /**
   * Succeeded is a call whose effect happened once; result is the downstream's answer
   * (Operation.result).
   */
  record Succeeded(Operation operation, Struct result) implements ToolOutcome {
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
      return Jcs.canonicalize(m);
    }
  }

  /**
   * Failed is a call that definitively did not happen: reason is DOWNSTREAM_REJECTED (the downstream
   * refused it), OPERATION_REJECTED (a person denied it), OPERATION_CANCELLED, or a refusal of the
   * request itself (ARGS_INVALID, TOOL_UNKNOWN, IDEMPOTENCY_KEY_REUSED …; then operation is null,
   * unless the key already names an earlier call: then operation is that call, which may have taken
   * effect, and the message says so, {@link #MESSAGE_KEY_NAMES_EARLIER_CALL}). An approval that
   * expired is not a Failed: see {@link AwaitingApproval}.
   */
  record Failed(String reason, String message, Operation operation) implements ToolOutcome {
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
      return Jcs.canonicalize(m);
    }
  }

  /**
   * OutcomeUnknown is a call that may or may not have taken effect (OUTCOME_UNKNOWN, or still
   * EXECUTING by another caller: pending). Never make it again under a new key; run the same call
   * later to learn the outcome.
   */
  record OutcomeUnknown(Operation operation, boolean pending) implements ToolOutcome {
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
      return Jcs.canonicalize(m);
    }
  }

  /**
   * AwaitingApproval is a call that waits for a person's decision, also when an approval given
   * earlier expired before the call ran (APPROVAL_EXPIRED: the ledger put it back before its
   * approvers); run the same call (same key) again later, never under a new key.
   */
  record AwaitingApproval(Operation operation) implements ToolOutcome {
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
      return Jcs.canonicalize(m);
    }
  }
}
