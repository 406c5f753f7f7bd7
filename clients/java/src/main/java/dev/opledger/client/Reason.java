package dev.opledger.client;

import dev.opledger.v1.ErrorReason;

/**
 * Reason is the reason of an opledger error: the ErrorInfo reason string, which is the {@link
 * ErrorReason} name without its {@code ERROR_REASON_} prefix, as in the Go, Python and TypeScript
 * clients ({@code IDEMPOTENCY_KEY_REUSED}). Switch on it; {@link #UNSPECIFIED} stands for a status
 * without an opledger ErrorInfo (a refused connection, a deadline) or a reason newer than this
 * client ({@link OpledgerException#getReasonName()} keeps the string as sent). {@code
 * DOWNSTREAM_REJECTED} and {@code DOWNSTREAM_OUTCOME_UNKNOWN} only appear in {@code
 * Operation.error}, never as an RPC error.
 */
public enum Reason {
  UNSPECIFIED,
  API_KEY_MISSING,
  API_KEY_INVALID,
  ROLE_REQUIRED,
  IDEMPOTENCY_KEY_MISSING,
  IDEMPOTENCY_KEY_INVALID,
  IDEMPOTENCY_KEY_REUSED,
  TOOL_UNKNOWN,
  TOOL_VERSION_UNKNOWN,
  ARGS_INVALID,
  ARGS_TOO_LARGE,
  FIELD_INVALID,
  OPERATION_NOT_FOUND,
  APPROVAL_REQUIRED,
  APPROVAL_EXPIRED,
  APPROVAL_FINGERPRINT_MISMATCH,
  APPROVAL_CONFLICT,
  SELF_APPROVAL_FORBIDDEN,
  APPROVAL_NOT_APPLICABLE,
  OPERATION_REJECTED,
  OPERATION_CANCELLED,
  OPERATION_IN_PROGRESS,
  RESOLUTION_NOT_APPLICABLE,
  LEDGER_UNAVAILABLE,
  INTERNAL,
  DOWNSTREAM_UNAVAILABLE,
  DEADLINE_INVALID,
  DOWNSTREAM_REJECTED,
  DOWNSTREAM_OUTCOME_UNKNOWN,
  OPERATOR_REQUIRED,
  RATE_LIMITED,
  QUOTA_EXCEEDED,
  CANCEL_NOT_APPLICABLE,
  POLICY_DENIED,
  LIMIT_EXCEEDED,
  OPERATION_DUPLICATE,
  OPERATION_SUPERSEDED;

  private static final String PREFIX = "ERROR_REASON_";

  /** Of returns the reason named by an ErrorInfo reason string; UNSPECIFIED for "" or unknown. */
  public static Reason of(String name) {
    if (name == null || name.isEmpty()) {
      return UNSPECIFIED;
    }
    try {
      return valueOf(name);
    } catch (IllegalArgumentException unknown) {
      return UNSPECIFIED;
    }
  }

  /** FromProto returns the reason of a generated enum value. */
  public static Reason fromProto(ErrorReason r) {
    return r == null || r == ErrorReason.UNRECOGNIZED
        ? UNSPECIFIED
        : of(r.name().substring(PREFIX.length()));
  }

  /** ToProto returns the generated enum value ({@code ERROR_REASON_…}). */
  public ErrorReason toProto() {
    return ErrorReason.valueOf(PREFIX + name());
  }
}
