package dev.opledger.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.Any;
import com.google.rpc.Code;
import com.google.rpc.ErrorInfo;
import com.google.rpc.RetryInfo;
import dev.opledger.v1.ExecuteRequest;
import dev.opledger.v1.ExecuteResponse;
import dev.opledger.v1.LedgerServiceGrpc;
import dev.opledger.v1.Operation;
import dev.opledger.v1.PrepareRequest;
import dev.opledger.v1.PrepareResponse;
import dev.opledger.v1.State;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.Server;
import io.grpc.ServerCall;
import io.grpc.ServerCallHandler;
import io.grpc.ServerInterceptor;
import io.grpc.ServerInterceptors;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.inprocess.InProcessChannelBuilder;
import io.grpc.inprocess.InProcessServerBuilder;
import io.grpc.protobuf.StatusProto;
import io.grpc.stub.StreamObserver;
import java.io.IOException;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Deque;
import java.util.List;
import java.util.Random;
import java.util.logging.Level;
import java.util.logging.Logger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/** RetryTest drives the retry owner against an in-process server that fails on purpose. */
class RetryTest {
  private static final Metadata.Key<String> IDEM =
      Metadata.Key.of("idempotency-key", Metadata.ASCII_STRING_MARSHALLER);
  /** Held so that its level sticks (java.util.logging keeps loggers weakly). */
  private static final Logger NETTY_TRANSPORT_LOG =
      Logger.getLogger("io.grpc.netty.shaded.io.grpc.netty.NettyServerTransport");

  private static final RetryPolicy FAST =
      new RetryPolicy(4, Duration.ofMillis(1), Duration.ofMillis(5));

  /** Flaky fails with the queued errors first and records each attempt's idempotency key. */
  static final class Flaky extends LedgerServiceGrpc.LedgerServiceImplBase {
    final Deque<StatusRuntimeException> failures = new ArrayDeque<>();
    final List<String> keys = Collections.synchronizedList(new ArrayList<>());

    @Override
    public void prepare(PrepareRequest req, StreamObserver<PrepareResponse> out) {
      StatusRuntimeException f = failures.poll();
      if (f != null) {
        out.onError(f);
        return;
      }
      out.onNext(
          PrepareResponse.newBuilder()
              .setOperation(Operation.newBuilder().setId("op_1").setTool(req.getTool()))
              .build());
      out.onCompleted();
    }

    @Override
    public void execute(ExecuteRequest req, StreamObserver<ExecuteResponse> out) {
      StatusRuntimeException f = failures.poll();
      if (f != null) {
        out.onError(f);
        return;
      }
      out.onNext(
          ExecuteResponse.newBuilder()
              .setOperation(
                  Operation.newBuilder().setId(req.getOperationId()).setState(State.STATE_SUCCEEDED))
              .build());
      out.onCompleted();
    }
  }

  private final List<AutoCloseable> cleanup = new ArrayList<>();

  @AfterEach
  void tearDown() throws Exception {
    for (AutoCloseable c : cleanup) {
      c.close();
    }
  }

  private OpledgerClient start(Flaky flaky, RetryPolicy policy) throws IOException {
    String name = InProcessServerBuilder.generateName();
    ServerInterceptor record =
        new ServerInterceptor() {
          @Override
          public <Q, R> ServerCall.Listener<Q> interceptCall(
              ServerCall<Q, R> call, Metadata headers, ServerCallHandler<Q, R> next) {
            flaky.keys.add(String.valueOf(headers.get(IDEM)));
            return next.startCall(call, headers);
          }
        };
    Server server =
        InProcessServerBuilder.forName(name)
            .directExecutor()
            .addService(ServerInterceptors.intercept(flaky, record))
            .build()
            .start();
    ManagedChannel channel =
        InProcessChannelBuilder.forName(name).directExecutor().disableRetry().build();
    cleanup.add(() -> server.shutdownNow());
    cleanup.add(() -> channel.shutdownNow());
    return OpledgerClient.builder("unused", "opl_test").channel(channel).retryPolicy(policy).build();
  }

  static StatusRuntimeException failure(Code code, String reason, Duration retryDelay) {
    com.google.rpc.Status.Builder st =
        com.google.rpc.Status.newBuilder()
            .setCode(code.getNumber())
            .setMessage("test failure")
            .addDetails(
                Any.pack(
                    ErrorInfo.newBuilder()
                        .setDomain(OpledgerException.DOMAIN)
                        .setReason(reason)
                        .build()));
    if (retryDelay != null) {
      st.addDetails(
          Any.pack(
              RetryInfo.newBuilder()
                  .setRetryDelay(
                      com.google.protobuf.Duration.newBuilder()
                          .setSeconds(retryDelay.getSeconds())
                          .setNanos(retryDelay.getNano()))
                  .build()));
    }
    return StatusProto.toStatusRuntimeException(st.build());
  }

  @Test
  void retriesUnavailableWithTheSameKey() throws IOException {
    Flaky f = new Flaky();
    f.failures.add(failure(Code.UNAVAILABLE, "LEDGER_UNAVAILABLE", null));
    f.failures.add(Status.UNAVAILABLE.withDescription("connection reset").asRuntimeException());
    OpledgerClient c = start(f, FAST);
    PrepareResponse r = c.prepare("pay_invoice", Args.of(java.util.Map.of()), "opk1-same-key");
    assertEquals("op_1", r.getOperation().getId());
    assertEquals(List.of("opk1-same-key", "opk1-same-key", "opk1-same-key"), f.keys);
  }

  @Test
  void retriesUnavailableOnAnyMethod() throws IOException {
    Flaky f = new Flaky();
    f.failures.add(failure(Code.UNAVAILABLE, "DOWNSTREAM_UNAVAILABLE", Duration.ofMillis(1)));
    OpledgerClient c = start(f, FAST);
    assertEquals(State.STATE_SUCCEEDED, c.execute("op_1").getOperation().getState());
    assertEquals(List.of("null", "null"), f.keys, "Execute sends no idempotency key");
  }

  @Test
  void doesNotRetryInvalidArgument() throws IOException {
    Flaky f = new Flaky();
    f.failures.add(failure(Code.INVALID_ARGUMENT, "ARGS_INVALID", null));
    OpledgerClient c = start(f, FAST);
    OpledgerException e =
        assertThrows(OpledgerException.class, () -> c.prepare("pay_invoice", null, "opk1-k"));
    assertEquals(Status.Code.INVALID_ARGUMENT, e.getCode());
    assertEquals(Reason.ARGS_INVALID, e.getReason());
    assertEquals("ARGS_INVALID", e.getReasonName());
    assertEquals(1, f.keys.size());
  }

  @Test
  void retriesAbortedOnlyWithRetryInfo() throws IOException {
    Flaky f = new Flaky();
    f.failures.add(failure(Code.ABORTED, "OPERATION_IN_PROGRESS", Duration.ofMillis(1)));
    OpledgerClient c = start(f, FAST);
    c.prepare("pay_invoice", null, "opk1-k");
    assertEquals(List.of("opk1-k", "opk1-k"), f.keys);

    Flaky g = new Flaky();
    g.failures.add(failure(Code.ABORTED, "OPERATION_IN_PROGRESS", null));
    OpledgerClient d = start(g, FAST);
    OpledgerException e =
        assertThrows(OpledgerException.class, () -> d.prepare("pay_invoice", null, "opk1-k"));
    assertTrue(e.is(Reason.OPERATION_IN_PROGRESS));
    assertEquals(1, g.keys.size());
  }

  @Test
  void attemptsAreBounded() throws IOException {
    Flaky f = new Flaky();
    for (int i = 0; i < 6; i++) {
      f.failures.add(failure(Code.UNAVAILABLE, "LEDGER_UNAVAILABLE", null));
    }
    OpledgerClient c = start(f, FAST);
    OpledgerException e =
        assertThrows(OpledgerException.class, () -> c.prepare("pay_invoice", null, "opk1-k"));
    assertTrue(e.is(Reason.LEDGER_UNAVAILABLE));
    assertEquals(4, f.keys.size(), "the default budget is 4 attempts");

    Flaky g = new Flaky();
    g.failures.add(failure(Code.UNAVAILABLE, "LEDGER_UNAVAILABLE", null));
    OpledgerClient d = start(g, RetryPolicy.noRetries());
    assertThrows(OpledgerException.class, () -> d.prepare("pay_invoice", null, "opk1-k"));
    assertEquals(1, g.keys.size());
  }

  @Test
  void doesNotSleepPastTheDeadline() throws IOException {
    Flaky f = new Flaky();
    f.failures.add(failure(Code.UNAVAILABLE, "LEDGER_UNAVAILABLE", Duration.ofHours(1)));
    OpledgerClient c = start(f, FAST);
    OpledgerException e =
        assertThrows(OpledgerException.class, () -> c.prepare("pay_invoice", null, "opk1-k"));
    assertEquals(Duration.ofHours(1), e.getRetryDelay().orElseThrow());
    assertEquals(1, f.keys.size(), "a RetryInfo delay beyond the deadline is not slept");
  }

  @Test
  void backoffIsFullJitterCappedWithRetryInfoFloor() {
    RetryPolicy p = RetryPolicy.defaults();
    Random top =
        new Random() {
          private static final long serialVersionUID = 1L;

          @Override
          public long nextLong(long bound) {
            return bound - 1;
          }
        };
    Random zero =
        new Random() {
          private static final long serialVersionUID = 1L;

          @Override
          public long nextLong(long bound) {
            return 0;
          }
        };
    assertEquals(Duration.ofMillis(100), p.backoff(1, Duration.ZERO, top));
    assertEquals(Duration.ofMillis(200), p.backoff(2, Duration.ZERO, top));
    assertEquals(Duration.ofMillis(400), p.backoff(3, Duration.ZERO, top));
    assertEquals(Duration.ofSeconds(2), p.backoff(10, Duration.ZERO, top));
    assertEquals(Duration.ofSeconds(2), p.backoff(1000, Duration.ZERO, top));
    assertEquals(Duration.ZERO, p.backoff(3, Duration.ZERO, zero));
    assertEquals(Duration.ofMillis(750), p.backoff(1, Duration.ofMillis(750), zero));
    assertEquals(Duration.ofSeconds(5), p.backoff(1, Duration.ofSeconds(5), top));
  }

  /** Without usePlaintext the client speaks TLS, so a plaintext server never sees the call. */
  @Test
  void tlsIsTheDefault() throws Exception {
    Flaky flaky = new Flaky();
    java.util.concurrent.atomic.AtomicInteger calls = new java.util.concurrent.atomic.AtomicInteger();
    ServerInterceptor count =
        new ServerInterceptor() {
          @Override
          public <Q, R> ServerCall.Listener<Q> interceptCall(
              ServerCall<Q, R> call, Metadata headers, ServerCallHandler<Q, R> next) {
            calls.incrementAndGet();
            return next.startCall(call, headers);
          }
        };
    // The server logs the TLS hello it cannot read as a failed transport: expected here.
    Level was = NETTY_TRANSPORT_LOG.getLevel();
    NETTY_TRANSPORT_LOG.setLevel(Level.WARNING);
    Server server =
        io.grpc.ServerBuilder.forPort(0).addService(ServerInterceptors.intercept(flaky, count)).build().start();
    cleanup.add(() -> server.shutdownNow().awaitTermination(5, java.util.concurrent.TimeUnit.SECONDS));
    cleanup.add(() -> NETTY_TRANSPORT_LOG.setLevel(was));
    try (OpledgerClient c =
        OpledgerClient.builder("127.0.0.1:" + server.getPort(), "opl_test")
            .retryPolicy(RetryPolicy.noRetries())
            .timeout(Duration.ofSeconds(5))
            .build()) {
      OpledgerException e = assertThrows(OpledgerException.class, () -> c.get("op_1"));
      assertEquals(Status.Code.UNAVAILABLE, e.getCode());
    }
    assertEquals(0, calls.get());
  }
}
