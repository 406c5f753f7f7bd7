package dev.opledger.client;

import com.google.protobuf.Any;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.rpc.ErrorInfo;
import com.google.rpc.RetryInfo;
import dev.opledger.v1.ErrorReason;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.time.Duration;
import java.util.Map;
import java.util.Optional;

/**
 * OpledgerException is every error an {@link OpledgerClient} call throws: the gRPC status decoded.
 * Branch on {@link #getReason()} (a {@link Reason}: {@code IDEMPOTENCY_KEY_REUSED}, the names the
 * server sends and the other clients use), never on the message text. The reason is {@link
 * Reason#UNSPECIFIED} when the status carries no opledger ErrorInfo, as with transport failures
 * (connection refused, deadline exceeded).
 */
public class OpledgerException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /** DOMAIN is the google.rpc.ErrorInfo domain of every opledger error. */
  public static final String DOMAIN = "opledger.v1";

  private final Status.Code code;
  private final String reasonName;
  private final String statusMessage;
  private final transient Map<String, String> metadata;
  private final Duration retryDelay; // null without RetryInfo
  private final transient com.google.rpc.Status statusProto;

  /** Creates an exception from its parts; {@link #from} is the usual way. */
  public OpledgerException(
      Status.Code code,
      String reasonName,
      String message,
      Map<String, String> metadata,
      Duration retryDelay,
      com.google.rpc.Status statusProto,
      Throwable cause) {
    super(format(code, reasonName, message), cause);
    this.code = code;
    this.reasonName = reasonName == null ? "" : reasonName;
    this.statusMessage = message == null ? "" : message;
    this.metadata = metadata == null ? Map.of() : Map.copyOf(metadata);
    this.retryDelay = retryDelay;
    this.statusProto = statusProto;
  }

  /** From decodes a grpc-java failure, with its ErrorInfo and RetryInfo details. */
  public static OpledgerException from(StatusRuntimeException e) {
    Status st = e.getStatus();
    com.google.rpc.Status sp = StatusProto.fromThrowable(e);
    String reason = "";
    Map<String, String> md = Map.of();
    Duration delay = null;
    if (sp != null) {
      for (Any d : sp.getDetailsList()) {
        try {
          if (d.is(ErrorInfo.class)) {
            ErrorInfo info = d.unpack(ErrorInfo.class);
            if (DOMAIN.equals(info.getDomain()) && reason.isEmpty()) {
              reason = info.getReason();
              md = info.getMetadataMap();
            }
          } else if (d.is(RetryInfo.class)) {
            com.google.protobuf.Duration rd = d.unpack(RetryInfo.class).getRetryDelay();
            delay = Duration.ofSeconds(Math.max(rd.getSeconds(), 0), Math.max(rd.getNanos(), 0));
          }
        } catch (InvalidProtocolBufferException ignored) {
          // A malformed detail is ignored like an unknown one: the code still stands.
        }
      }
    }
    String message = st.getDescription() == null ? "" : st.getDescription();
    return new OpledgerException(st.getCode(), reason, message, md, delay, sp, e);
  }

  private static String format(Status.Code code, String reason, String message) {
    return reason == null || reason.isEmpty()
        ? "opledger: " + code + ": " + message
        : "opledger: " + code + " " + reason + ": " + message;
  }

  /** GetCode returns the gRPC status code. */
  public Status.Code getCode() {
    return code;
  }

  /**
   * GetReason returns the reason ({@code Reason.IDEMPOTENCY_KEY_REUSED}), or {@link
   * Reason#UNSPECIFIED} when there is none or this client version does not know it (see {@link
   * #getReasonName()}).
   */
  public Reason getReason() {
    return Reason.of(reasonName);
  }

  /** GetErrorReason returns the reason as the generated enum ({@code ERROR_REASON_…}). */
  public ErrorReason getErrorReason() {
    return getReason().toProto();
  }

  /** GetReasonName returns the reason string as sent ("IDEMPOTENCY_KEY_REUSED"), or "". */
  public String getReasonName() {
    return reasonName;
  }

  /** Is reports whether the reason is r (never for UNSPECIFIED). */
  public boolean is(Reason r) {
    return r != Reason.UNSPECIFIED && getReason() == r;
  }

  /** GetStatusMessage returns the status message as the server sent it, for people; never parse it. */
  public String getStatusMessage() {
    return statusMessage;
  }

  /** GetMetadata returns the ErrorInfo metadata (e.g. "operation_id"). */
  public Map<String, String> getMetadata() {
    return metadata;
  }

  /** GetRetryDelay returns the google.rpc.RetryInfo delay, when the server sent one. */
  public Optional<Duration> getRetryDelay() {
    return Optional.ofNullable(retryDelay);
  }

  /**
   * GetStatusProto returns the full google.rpc.Status (BadRequest, PreconditionFailure and other
   * details included), or null when the failure carried none.
   */
  public com.google.rpc.Status getStatusProto() {
    return statusProto;
  }

  /**
   * IsRetryable reports whether the client's retry rule applies: UNAVAILABLE, or ABORTED with a
   * RetryInfo. Both mean the same request may be repeated with the same idempotency key.
   */
  public boolean isRetryable() {
    return code == Status.Code.UNAVAILABLE || (code == Status.Code.ABORTED && retryDelay != null);
  }

  /**
   * OperationErrorReason returns the reason stored in a FAILED or OUTCOME_UNKNOWN operation's error
   * (e.g. DOWNSTREAM_REJECTED), or UNSPECIFIED.
   */
  public static Reason operationErrorReason(dev.opledger.v1.Operation op) {
    if (!op.hasError()) {
      return Reason.UNSPECIFIED;
    }
    for (Any d : op.getError().getDetailsList()) {
      try {
        if (d.is(ErrorInfo.class)) {
          ErrorInfo info = d.unpack(ErrorInfo.class);
          if (DOMAIN.equals(info.getDomain())) {
            return Reason.of(info.getReason());
          }
        }
      } catch (InvalidProtocolBufferException ignored) {
        // A malformed detail is ignored like an unknown one.
      }
    }
    return Reason.UNSPECIFIED;
  }
}
