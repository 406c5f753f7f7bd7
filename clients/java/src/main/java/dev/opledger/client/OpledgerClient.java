package dev.opledger.client;

import com.google.protobuf.Struct;
import dev.opledger.v1.ApproveRequest;
import dev.opledger.v1.ApproveResponse;
import dev.opledger.v1.CancelRequest;
import dev.opledger.v1.CancelResponse;
import dev.opledger.v1.Decision;
import dev.opledger.v1.ExecuteRequest;
import dev.opledger.v1.ExecuteResponse;
import dev.opledger.v1.GetRequest;
import dev.opledger.v1.GetResponse;
import dev.opledger.v1.LedgerServiceGrpc;
import dev.opledger.v1.LedgerServiceGrpc.LedgerServiceBlockingStub;
import dev.opledger.v1.ListOperationsRequest;
import dev.opledger.v1.ListOperationsResponse;
import dev.opledger.v1.ListToolsRequest;
import dev.opledger.v1.ListToolsResponse;
import dev.opledger.v1.PrepareRequest;
import dev.opledger.v1.PrepareResponse;
import dev.opledger.v1.ReconcileRequest;
import dev.opledger.v1.ReconcileResponse;
import dev.opledger.v1.Resolution;
import dev.opledger.v1.State;
import io.grpc.Channel;
import io.grpc.Deadline;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.Metadata;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.MetadataUtils;
import java.time.Duration;
import java.util.Collection;
import java.util.Objects;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;

/**
 * OpledgerClient calls opledger's LedgerService with one API key. Methods block, return the
 * generated response messages and throw {@link OpledgerException}. Retries follow {@link
 * RetryPolicy}: UNAVAILABLE and ABORTED-with-RetryInfo only, with the same idempotency key on
 * every attempt. Thread-safe; one client (and one channel) per process is enough, and {@link
 * #withApiKey} adds principals (an approver, say) on the same channel.
 *
 * <pre>{@code
 * try (OpledgerClient agent = OpledgerClient.builder("127.0.0.1:50051", agentKey).usePlaintext().build()) {
 *   String key = IdempotencyKeys.derive(KeyParts.builder().conversation(conversationId).round(round).tool("pay_invoice").build());
 *   PrepareResponse p = agent.prepare("pay_invoice", Args.fromJson(argsJson), key);
 * }
 * }</pre>
 */
public final class OpledgerClient implements AutoCloseable {
  private static final Metadata.Key<String> AUTHORIZATION =
      Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);
  private static final Metadata.Key<String> IDEMPOTENCY_KEY =
      Metadata.Key.of("idempotency-key", Metadata.ASCII_STRING_MARSHALLER);

  private final ManagedChannel ownedChannel; // null when the channel is not ours to close
  private final LedgerServiceBlockingStub stub;
  private final String apiKey;
  private final RetryPolicy retry;
  private final Duration timeout;

  private OpledgerClient(
      ManagedChannel owned, Channel channel, String apiKey, RetryPolicy retry, Duration timeout) {
    this.ownedChannel = owned;
    this.stub = LedgerServiceGrpc.newBlockingStub(channel);
    this.apiKey = apiKey;
    this.retry = retry;
    this.timeout = timeout;
  }

  /** Builder starts a client for target ("host:port" or a gRPC target URI) and an API key. */
  public static Builder builder(String target, String apiKey) {
    return new Builder(target, apiKey);
  }

  /** Builder configures an {@link OpledgerClient}. TLS is on unless {@link #usePlaintext()}. */
  public static final class Builder {
    private final String target;
    private final String apiKey;
    private boolean plaintext;
    private Channel channel;
    private RetryPolicy retry = RetryPolicy.defaults();
    private Duration timeout = Duration.ofSeconds(30);

    private Builder(String target, String apiKey) {
      this.target = target;
      this.apiKey = apiKey;
    }

    /** UsePlaintext disables TLS, for a server on loopback or behind a TLS-terminating proxy. */
    public Builder usePlaintext() {
      this.plaintext = true;
      return this;
    }

    /**
     * Channel uses a channel the caller owns and configures (custom TLS, interceptors); close()
     * leaves it open. Build it with {@code disableRetry()} so the client stays the only retry
     * owner. The target given to {@link OpledgerClient#builder} is then ignored.
     */
    public Builder channel(Channel channel) {
      this.channel = channel;
      return this;
    }

    /** RetryPolicy replaces {@link RetryPolicy#defaults()}. */
    public Builder retryPolicy(RetryPolicy retry) {
      this.retry = Objects.requireNonNull(retry);
      return this;
    }

    /**
     * Timeout bounds each method call, all its attempts and backoff sleeps included (default 30
     * s); an Execute's wait is added to it.
     */
    public Builder timeout(Duration timeout) {
      if (timeout.isNegative() || timeout.isZero()) {
        throw new IllegalArgumentException("timeout must be positive");
      }
      this.timeout = timeout;
      return this;
    }

    /** Build creates the client (and its channel, unless one was given). */
    public OpledgerClient build() {
      if (apiKey == null || apiKey.isEmpty()) {
        throw new IllegalArgumentException("opledger: empty API key");
      }
      if (channel != null) {
        return new OpledgerClient(null, channel, apiKey, retry, timeout);
      }
      ManagedChannelBuilder<?> b = ManagedChannelBuilder.forTarget(target).disableRetry();
      if (plaintext) {
        b.usePlaintext();
      } else {
        b.useTransportSecurity();
      }
      ManagedChannel ch = b.build();
      return new OpledgerClient(ch, ch, apiKey, retry, timeout);
    }
  }

  /**
   * WithApiKey returns a client on the same channel, policy and timeout that authenticates as
   * another principal. Closing it leaves the channel open; close this client.
   */
  public OpledgerClient withApiKey(String otherKey) {
    if (otherKey == null || otherKey.isEmpty()) {
      throw new IllegalArgumentException("opledger: empty API key");
    }
    return new OpledgerClient(null, stub.getChannel(), otherKey, retry, timeout);
  }

  /**
   * Prepare records a tool call under idempotencyKey, in the tool's current version. Build args
   * with {@link Args#of} or {@link Args#fromJson}; null means {}.
   */
  public PrepareResponse prepare(String tool, Struct args, String idempotencyKey) {
    return prepare(tool, args, idempotencyKey, "");
  }

  /**
   * Prepare records a proposed tool call under idempotencyKey (see {@link IdempotencyKeys}), or
   * returns the operation already recorded under it with {@code replayed = true}. The same key
   * with other args throws ALREADY_EXISTS / IDEMPOTENCY_KEY_REUSED. toolVersion "" means the
   * tool's current version.
   */
  public PrepareResponse prepare(
      String tool, Struct args, String idempotencyKey, String toolVersion) {
    if (idempotencyKey == null || idempotencyKey.isEmpty()) {
      throw new IllegalArgumentException("opledger: Prepare needs an idempotency key");
    }
    PrepareRequest req =
        PrepareRequest.newBuilder()
            .setTool(tool)
            .setToolVersion(toolVersion == null ? "" : toolVersion)
            .setArgs(args == null ? Struct.getDefaultInstance() : args)
            .build();
    return call(idempotencyKey, Duration.ZERO, s -> s.prepare(req));
  }

  /**
   * PrepareAndExecute is Prepare that also executes the operation in the same call, as an Execute
   * right after it would (the one-call path for tools that need no approval): the answer is the
   * operation as the execution left it, and {@code execution_replayed} says that no downstream
   * request was made. wait is as for {@link #execute(String, Duration)}. An operation that awaits
   * approval comes back as from Prepare (no exception): approve it, then Execute.
   */
  public PrepareResponse prepareAndExecute(
      String tool, Struct args, String idempotencyKey, String toolVersion, Duration wait) {
    if (idempotencyKey == null || idempotencyKey.isEmpty()) {
      throw new IllegalArgumentException("opledger: Prepare needs an idempotency key");
    }
    PrepareRequest.Builder req =
        PrepareRequest.newBuilder()
            .setTool(tool)
            .setToolVersion(toolVersion == null ? "" : toolVersion)
            .setArgs(args == null ? Struct.getDefaultInstance() : args)
            .setExecute(true);
    Duration w = wait == null ? Duration.ZERO : wait;
    if (!w.isZero()) {
      req.setWait(
          com.google.protobuf.Duration.newBuilder().setSeconds(w.getSeconds()).setNanos(w.getNano()).build());
    }
    PrepareRequest r = req.build();
    return call(idempotencyKey, w, s -> s.prepare(r));
  }

  /**
   * Approve records a decision bound to the fingerprint the approver was shown (check it first
   * with {@link Fingerprint#matches}).
   */
  public ApproveResponse approve(
      String operationId, String fingerprint, Decision decision, String reason) {
    ApproveRequest req =
        ApproveRequest.newBuilder()
            .setOperationId(operationId)
            .setFingerprint(fingerprint)
            .setDecision(decision)
            .setReason(reason == null ? "" : reason)
            .build();
    return call(null, Duration.ZERO, s -> s.approve(req));
  }

  /**
   * ApproveEdited approves the operation "the same, but with these arguments" (approve-with-edit,
   * docs/policy.md): editedArgs may differ from the operation's only in the fields its tool's
   * policy lists as editable. The ledger records a new operation with them, which this approval
   * approves (it may still need another approver) and the policy judges again, and rejects the
   * original (Operation.superseded_by): the answer's edited is the new one, its operation the
   * original. fingerprint is the original's, as the approver was shown it. The same edit again is
   * replayed; another edit of the same operation is APPROVAL_CONFLICT.
   */
  public ApproveResponse approveEdited(
      String operationId, String fingerprint, Struct editedArgs, String reason) {
    ApproveRequest req =
        ApproveRequest.newBuilder()
            .setOperationId(operationId)
            .setFingerprint(fingerprint)
            .setDecision(Decision.DECISION_APPROVE)
            .setReason(reason == null ? "" : reason)
            .setEditedArgs(editedArgs == null ? Struct.getDefaultInstance() : editedArgs)
            .build();
    return call(null, Duration.ZERO, s -> s.approve(req));
  }

  /**
   * Execute performs the operation's effect at most once; a repeat returns the stored outcome with
   * {@code replayed = true}. Check the operation's state: SUCCEEDED, FAILED, OUTCOME_UNKNOWN (call
   * reconcile; never prepare again) or EXECUTING (pending).
   */
  public ExecuteResponse execute(String operationId) {
    return execute(operationId, Duration.ZERO);
  }

  /** Execute, waiting up to wait (server-capped) when another caller is executing it. */
  public ExecuteResponse execute(String operationId, Duration wait) {
    ExecuteRequest.Builder req = ExecuteRequest.newBuilder().setOperationId(operationId);
    if (!wait.isZero()) {
      req.setWait(
          com.google.protobuf.Duration.newBuilder()
              .setSeconds(wait.getSeconds())
              .setNanos(wait.getNano())
              .build());
    }
    ExecuteRequest r = req.build();
    return call(null, wait, s -> s.execute(r));
  }

  /** Get reads an operation. */
  public GetResponse get(String operationId) {
    return get(operationId, false);
  }

  /** Get reads an operation and, when includeEvents, its event log. */
  public GetResponse get(String operationId, boolean includeEvents) {
    GetRequest req =
        GetRequest.newBuilder().setOperationId(operationId).setIncludeEvents(includeEvents).build();
    return call(null, Duration.ZERO, s -> s.get(req));
  }

  /** Reconcile resolves an OUTCOME_UNKNOWN or abandoned operation by a downstream lookup. */
  public ReconcileResponse reconcile(String operationId) {
    return reconcile(operationId, null);
  }

  /** Reconcile with an operator's manual resolution (null: a downstream lookup). */
  public ReconcileResponse reconcile(String operationId, Resolution resolution) {
    ReconcileRequest.Builder req = ReconcileRequest.newBuilder().setOperationId(operationId);
    if (resolution != null) {
      req.setResolution(resolution);
    }
    ReconcileRequest r = req.build();
    return call(null, Duration.ZERO, s -> s.reconcile(r));
  }

  /**
   * Cancel withdraws an operation nobody has executed yet (AWAITING_APPROVAL or READY); repeating
   * it returns replayed. The reason is kept in the event log.
   */
  public CancelResponse cancel(String operationId, String reason) {
    CancelRequest r =
        CancelRequest.newBuilder().setOperationId(operationId).setReason(reason == null ? "" : reason).build();
    return call(null, Duration.ZERO, s -> s.cancel(r));
  }

  /**
   * ListTools returns the tools the server is configured with (every version; {@code current}
   * marks the one prepare uses without a version), with their descriptions, effects, approval
   * policies and argument JSON Schemas.
   */
  public ListToolsResponse listTools() {
    return call(null, Duration.ZERO, s -> s.listTools(ListToolsRequest.getDefaultInstance()));
  }

  /**
   * ListOperations returns one page of the tenant's operations, newest first: only those in states
   * (empty: all) and of tool ("" or null: all), at most pageSize (0: the server's default, 50; at
   * most 200). Pass the previous page's {@code nextPageToken} as pageToken ("" or null for the
   * first page) with the same states and tool; it is empty on the last page.
   */
  public ListOperationsResponse listOperations(
      Collection<State> states, String tool, int pageSize, String pageToken) {
    ListOperationsRequest r =
        ListOperationsRequest.newBuilder()
            .addAllStates(states == null ? java.util.List.of() : states)
            .setTool(tool == null ? "" : tool)
            .setPageSize(pageSize)
            .setPageToken(pageToken == null ? "" : pageToken)
            .build();
    return call(null, Duration.ZERO, s -> s.listOperations(r));
  }

  /** Close shuts down the channel this client created. */
  @Override
  public void close() {
    if (ownedChannel == null) {
      return;
    }
    ownedChannel.shutdown();
    try {
      if (!ownedChannel.awaitTermination(5, TimeUnit.SECONDS)) {
        ownedChannel.shutdownNow();
      }
    } catch (InterruptedException e) {
      ownedChannel.shutdownNow();
      Thread.currentThread().interrupt();
    }
  }

  /**
   * Call runs rpc under the retry policy. The headers, and so the idempotency key, are built once:
   * every attempt sends the same ones. One deadline covers all attempts.
   */
  private <T> T call(
      String idempotencyKey, Duration extra, Function<LedgerServiceBlockingStub, T> rpc) {
    Metadata md = new Metadata();
    md.put(AUTHORIZATION, "Bearer " + apiKey);
    if (idempotencyKey != null) {
      md.put(IDEMPOTENCY_KEY, idempotencyKey);
    }
    Deadline deadline = Deadline.after(timeout.plus(extra).toNanos(), TimeUnit.NANOSECONDS);
    LedgerServiceBlockingStub s =
        stub.withInterceptors(MetadataUtils.newAttachHeadersInterceptor(md)).withDeadline(deadline);
    for (int attempt = 1; ; attempt++) {
      OpledgerException err;
      try {
        return rpc.apply(s);
      } catch (StatusRuntimeException e) {
        err = OpledgerException.from(e);
      }
      if (attempt >= retry.maxAttempts() || !err.isRetryable()) {
        throw err;
      }
      Duration wait =
          retry.backoff(attempt, err.getRetryDelay().orElse(Duration.ZERO), ThreadLocalRandom.current());
      if (deadline.timeRemaining(TimeUnit.NANOSECONDS) <= wait.toNanos()) {
        throw err;
      }
      try {
        Thread.sleep(wait.toMillis(), wait.toNanosPart() % 1_000_000);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw err;
      }
    }
  }
}
