package dev.opledger.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.Any;
import com.google.protobuf.Struct;
import com.google.protobuf.Value;
import com.google.rpc.ErrorInfo;
import dev.opledger.v1.ExecuteRequest;
import dev.opledger.v1.ExecuteResponse;
import dev.opledger.v1.GetRequest;
import dev.opledger.v1.GetResponse;
import dev.opledger.v1.LedgerServiceGrpc;
import dev.opledger.v1.Operation;
import dev.opledger.v1.PrepareRequest;
import dev.opledger.v1.PrepareResponse;
import dev.opledger.v1.State;
import io.grpc.ManagedChannel;
import io.grpc.Server;
import io.grpc.inprocess.InProcessChannelBuilder;
import io.grpc.inprocess.InProcessServerBuilder;
import io.grpc.protobuf.StatusProto;
import io.grpc.stub.StreamObserver;
import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/** ToolRunnerTest: the shared model-answer vectors and the mapping of every final state. */
class ToolRunnerTest {
  /** The vectors every client checks: clients/testdata/tool_outcomes.json. */
  @TestFactory
  Stream<DynamicTest> forModelVectors() throws IOException {
    Struct root = TestData.shared("tool_outcomes.json");
    List<Value> vectors = root.getFieldsOrThrow("vectors").getListValue().getValuesList();
    assertTrue(vectors.size() >= 6);
    return vectors.stream()
        .map(
            v ->
                DynamicTest.dynamicTest(
                    TestData.str(v, "name"),
                    () -> {
                      Struct f = v.getStructValue();
                      Operation op =
                          f.containsFields("operation_id")
                              ? Operation.newBuilder().setId(TestData.str(v, "operation_id")).build()
                              : null;
                      Edit edit = null;
                      if (f.containsFields("edit")) {
                        Struct e = f.getFieldsOrThrow("edit").getStructValue();
                        edit =
                            Edit.of(
                                e.getFieldsOrThrow("supersedes").getStringValue(),
                                e.getFieldsOrThrow("original_args").getStructValue(),
                                e.getFieldsOrThrow("args").getStructValue());
                      }
                      ToolOutcome out =
                          switch (TestData.str(v, "status")) {
                            case "succeeded" -> new ToolOutcome.Succeeded(
                                op,
                                f.containsFields("result")
                                    ? f.getFieldsOrThrow("result").getStructValue()
                                    : Struct.getDefaultInstance(),
                                edit);
                            case "failed" -> new ToolOutcome.Failed(
                                TestData.str(v, "reason"), TestData.str(v, "message"), op, edit);
                            case "outcome_unknown" -> new ToolOutcome.OutcomeUnknown(op, false, edit);
                            case "awaiting_approval" -> new ToolOutcome.AwaitingApproval(op, edit);
                            default -> throw new IllegalStateException(TestData.str(v, "status"));
                          };
                      assertEquals(TestData.str(v, "for_model"), out.forModel());
                      assertEquals(
                          f.containsFields("operation_id") ? TestData.str(v, "operation_id") : "",
                          out.operationId());
                    }));
  }

  /**
   * Stub prepares into prepareState and executes into executeOp, counting the calls; prepareErr and
   * executeErr, when set, are what Prepare and Execute answer instead, and getState, when set, is
   * what Get answers (else prepareState).
   */
  static final class Stub extends LedgerServiceGrpc.LedgerServiceImplBase {
    final State prepareState;
    final Operation executeOp;
    com.google.rpc.Status prepareErr;
    com.google.rpc.Status executeErr;
    State getState;
    final AtomicInteger gets = new AtomicInteger();
    final List<Long> executeWaits = new ArrayList<>();
    final List<PrepareRequest> prepares = new ArrayList<>();

    Stub(State prepareState, Operation executeOp) {
      this.prepareState = prepareState;
      this.executeOp = executeOp;
    }

    @Override
    public synchronized void prepare(PrepareRequest req, StreamObserver<PrepareResponse> out) {
      prepares.add(req);
      if (prepareErr != null) {
        out.onError(StatusProto.toStatusRuntimeException(prepareErr));
        return;
      }
      out.onNext(
          PrepareResponse.newBuilder()
              .setOperation(Operation.newBuilder().setId("op_1").setState(prepareState))
              .build());
      out.onCompleted();
    }

    @Override
    public void get(GetRequest req, StreamObserver<GetResponse> out) {
      gets.incrementAndGet();
      out.onNext(
          GetResponse.newBuilder()
              .setOperation(
                  Operation.newBuilder()
                      .setId(req.getOperationId())
                      .setState(getState != null ? getState : prepareState))
              .build());
      out.onCompleted();
    }

    @Override
    public synchronized void execute(ExecuteRequest req, StreamObserver<ExecuteResponse> out) {
      executeWaits.add(req.getWait().getSeconds());
      if (executeErr != null) {
        out.onError(StatusProto.toStatusRuntimeException(executeErr));
        return;
      }
      out.onNext(ExecuteResponse.newBuilder().setOperation(executeOp).build());
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

  private OpledgerClient start(Stub stub) throws IOException {
    String name = InProcessServerBuilder.generateName();
    Server server = InProcessServerBuilder.forName(name).directExecutor().addService(stub).build().start();
    ManagedChannel channel = InProcessChannelBuilder.forName(name).directExecutor().disableRetry().build();
    cleanup.add(server::shutdownNow);
    cleanup.add(channel::shutdownNow);
    return OpledgerClient.builder("unused", "opl_test").channel(channel).build();
  }

  private static com.google.rpc.Status stored(String reason, String message) {
    return com.google.rpc.Status.newBuilder()
        .setCode(9)
        .setMessage(message)
        .addDetails(Any.pack(ErrorInfo.newBuilder().setReason(reason).setDomain("opledger.v1").build()))
        .build();
  }

  @Test
  void everyFinalStateMapsToItsOutcome() throws IOException {
    Stub failed =
        new Stub(
            State.STATE_READY,
            Operation.newBuilder()
                .setId("op_1")
                .setState(State.STATE_FAILED)
                .setError(stored("DOWNSTREAM_REJECTED", "card declined"))
                .build());
    ToolOutcome f =
        ToolRunner.builder(start(failed)).executeWait(Duration.ofSeconds(3)).build().run("pay_invoice", "{}", "k");
    ToolOutcome.Failed ff = assertInstanceOf(ToolOutcome.Failed.class, f);
    assertEquals("DOWNSTREAM_REJECTED", ff.reason());
    assertEquals(Reason.DOWNSTREAM_REJECTED, ff.reasonCode());
    assertEquals("card declined", ff.message());
    assertEquals("op_1", ff.operationId());
    assertEquals(List.of(3L), failed.executeWaits);
    // The one-call path is asked for; this stub ignores it (as a server without it would), so the
    // runner executes the READY operation itself.
    assertEquals(1, failed.prepares.size());
    assertTrue(failed.prepares.get(0).getExecute());
    assertEquals(3L, failed.prepares.get(0).getWait().getSeconds());

    ToolOutcome unknown =
        ToolRunner.builder(
                start(
                    new Stub(
                        State.STATE_READY,
                        Operation.newBuilder().setId("op_1").setState(State.STATE_OUTCOME_UNKNOWN).build())))
            .build()
            .run("pay_invoice", (Struct) null, "k");
    ToolOutcome.OutcomeUnknown u = assertInstanceOf(ToolOutcome.OutcomeUnknown.class, unknown);
    assertFalse(u.pending());
    assertFalse(unknown instanceof ToolOutcome.Failed);

    ToolOutcome pending =
        ToolRunner.builder(
                start(
                    new Stub(
                        State.STATE_EXECUTING,
                        Operation.newBuilder().setId("op_1").setState(State.STATE_EXECUTING).build())))
            .build()
            .run("pay_invoice", "{}", "k");
    assertTrue(assertInstanceOf(ToolOutcome.OutcomeUnknown.class, pending).pending());

    Stub oneCall = new Stub(State.STATE_SUCCEEDED, null); // the one-call path answered with the outcome
    ToolOutcome done = ToolRunner.builder(start(oneCall)).build().run("pay_invoice", "{}", "k");
    assertInstanceOf(ToolOutcome.Succeeded.class, done);
    assertTrue(oneCall.executeWaits.isEmpty());
    assertEquals("{\"operation_id\":\"op_1\",\"result\":{},\"status\":\"succeeded\"}", done.forModel());
  }

  /** The message for a refusal under a used key is every client's (the shared vectors). */
  @Test
  void keyNamesEarlierCallVectors() throws IOException {
    Struct root = TestData.shared("tool_outcomes.json");
    List<Value> vectors = root.getFieldsOrThrow("key_names_earlier_call").getListValue().getValuesList();
    assertTrue(vectors.size() > 0);
    for (Value v : vectors) {
      String name = TestData.str(v, "state");
      State state = name.matches("\\d+") ? State.UNRECOGNIZED : State.valueOf(name);
      assertEquals(TestData.str(v, "message"), ToolOutcome.keyNamesEarlierCall(state));
    }
  }

  /** The policy texts are every client's (the shared vectors). */
  @Test
  void policyTextVectors() throws IOException {
    Struct root = TestData.shared("tool_outcomes.json");
    List<Value> refusals = root.getFieldsOrThrow("refusal_messages").getListValue().getValuesList();
    assertTrue(refusals.size() > 0);
    for (Value v : refusals) {
      assertEquals(
          TestData.str(v, "for_model_message"),
          ToolOutcome.refusalMessage(TestData.str(v, "reason"), TestData.str(v, "message")));
    }
    List<Value> dups = root.getFieldsOrThrow("operation_duplicate").getListValue().getValuesList();
    assertTrue(dups.size() > 0);
    for (Value v : dups) {
      State state = State.valueOf(TestData.str(v, "state"));
      assertEquals(
          TestData.str(v, "message"),
          String.format(ToolOutcome.MESSAGE_OPERATION_DUPLICATE, ToolOutcome.stateWords(state)));
    }
    List<Value> descs = root.getFieldsOrThrow("model_descriptions").getListValue().getValuesList();
    assertTrue(descs.size() > 0);
    for (Value v : descs) {
      assertEquals(
          TestData.str(v, "model_description"),
          ModelTool.describe(TestData.str(v, "description"), TestData.str(v, "summary")));
    }
  }

  /** UsedKey is a refusal of the request under a key that names op_1, for reason. */
  private static com.google.rpc.Status usedKey(String reason, io.grpc.Status.Code code) {
    ErrorInfo info =
        ErrorInfo.newBuilder()
            .setReason(reason)
            .setDomain(OpledgerException.DOMAIN)
            .putAllMetadata(Map.of("operation_id", "op_1"))
            .build();
    return com.google.rpc.Status.newBuilder()
        .setCode(code.value())
        .setMessage("this idempotency key was already used; use a new key for a new operation")
        .addDetails(Any.pack(info))
        .build();
  }

  /**
   * A call refused because its key already names an earlier call (a reworded retry of a round, a
   * tools file whose version moved on) is not "nothing happened, use a new key": the earlier call
   * may have taken effect. The runner answers a Failed with that operation, and says so.
   */
  @TestFactory
  Stream<DynamicTest> refusalUnderAUsedKeyNamesTheEarlierCall() {
    String want = String.format(ToolOutcome.MESSAGE_KEY_NAMES_EARLIER_CALL, "outcome unknown");
    return Stream.of(
            Map.entry("IDEMPOTENCY_KEY_REUSED", io.grpc.Status.Code.ALREADY_EXISTS),
            Map.entry("TOOL_VERSION_UNKNOWN", io.grpc.Status.Code.INVALID_ARGUMENT),
            Map.entry("ARGS_INVALID", io.grpc.Status.Code.INVALID_ARGUMENT))
        .map(
            c ->
                DynamicTest.dynamicTest(
                    c.getKey(),
                    () -> {
                      Stub s = new Stub(State.STATE_UNSPECIFIED, null);
                      s.prepareErr = usedKey(c.getKey(), c.getValue());
                      s.getState = State.STATE_OUTCOME_UNKNOWN;
                      ToolOutcome out =
                          ToolRunner.builder(start(s)).build().run("send_email", (Struct) null, "k");
                      ToolOutcome.Failed f = assertInstanceOf(ToolOutcome.Failed.class, out);
                      assertEquals(c.getKey(), f.reason());
                      assertEquals("op_1", f.operationId());
                      assertEquals(want, f.message());
                      assertTrue(!f.forModel().contains("use a new key"), f.forModel());
                    }));
  }

  /** Expired is the ledger's APPROVAL_EXPIRED refusal, naming the operation when withId. */
  private static com.google.rpc.Status expired(boolean withId) {
    ErrorInfo.Builder info =
        ErrorInfo.newBuilder().setReason("APPROVAL_EXPIRED").setDomain(OpledgerException.DOMAIN);
    if (withId) {
      info.putAllMetadata(Map.of("operation_id", "op_1"));
    }
    return com.google.rpc.Status.newBuilder()
        .setCode(io.grpc.Status.Code.FAILED_PRECONDITION.value())
        .setMessage("the approval expired; it must be approved again")
        .addDetails(Any.pack(info.build()))
        .build();
  }

  /**
   * An approval that lapsed before the call ran puts the operation back to AWAITING_APPROVAL (the
   * ledger asks its approvers again), so the same call, under the same key, waits for a new decision.
   * Answering it as a Failed would have the agent make the call again under a new key: a second
   * operation for one intention.
   */
  @TestFactory
  Stream<DynamicTest> expiredApprovalIsAwaitingApproval() {
    Stub prepareRefuses = new Stub(State.STATE_UNSPECIFIED, null);
    prepareRefuses.prepareErr = expired(true);
    prepareRefuses.getState = State.STATE_AWAITING_APPROVAL;
    Stub executeRefuses = new Stub(State.STATE_READY, null);
    executeRefuses.executeErr = expired(false);
    executeRefuses.getState = State.STATE_AWAITING_APPROVAL;
    return Stream.of(
            Map.entry("the one-call path's Prepare", prepareRefuses),
            Map.entry("Execute after a READY prepare", executeRefuses))
        .map(
            c ->
                DynamicTest.dynamicTest(
                    c.getKey(),
                    () -> {
                      ToolOutcome out =
                          ToolRunner.builder(start(c.getValue())).build().run("pay_invoice", (Struct) null, "k");
                      ToolOutcome.AwaitingApproval a = assertInstanceOf(ToolOutcome.AwaitingApproval.class, out);
                      assertEquals("op_1", a.operationId());
                      assertEquals(State.STATE_AWAITING_APPROVAL, a.operation().getState());
                      assertTrue(a.forModel().contains("\"status\":\"awaiting_approval\""));
                      assertEquals(1, c.getValue().gets.get());
                    }));
  }

  @Test
  void awaitingApprovalWithoutWaitCallsNothingElseWithOneItPolls() throws IOException {
    Stub none = new Stub(State.STATE_AWAITING_APPROVAL, null);
    assertInstanceOf(
        ToolOutcome.AwaitingApproval.class,
        ToolRunner.builder(start(none)).build().run("pay_invoice", "{}", "k"));
    assertEquals(0, none.gets.get());
    assertTrue(none.executeWaits.isEmpty());

    Stub waited = new Stub(State.STATE_AWAITING_APPROVAL, null);
    List<String> hooked = new ArrayList<>();
    long start = System.nanoTime();
    ToolOutcome out =
        ToolRunner.builder(start(waited))
            .approvalWait(Duration.ofMillis(700))
            .onApprovalRequired(op -> hooked.add(op.getId()))
            .build()
            .run("pay_invoice", "{}", "k");
    assertInstanceOf(ToolOutcome.AwaitingApproval.class, out);
    assertEquals(List.of("op_1"), hooked);
    assertTrue(System.nanoTime() - start >= Duration.ofMillis(690).toNanos());
    assertTrue(waited.gets.get() >= 2);
    assertTrue(waited.executeWaits.isEmpty());
  }

  @Test
  void modelArgumentsMustBeAnObject() throws IOException {
    ToolRunner r = ToolRunner.builder(start(new Stub(State.STATE_READY, null))).build();
    assertThrows(IllegalArgumentException.class, () -> r.run("pay_invoice", "[1]", "k"));
  }

  /**
   * check_operation answers a rejected or cancelled operation as a refusal (never an exception),
   * and an executing one whose Execute is refused for another reason as pending, never as "failed"
   * (it may have taken effect); malformed argument text is an unknown operation, not an exception.
   */
  @Test
  void checkOperationAnswersEveryState() throws Exception {
    Object[][] cases = {
      {State.STATE_REJECTED, "OPERATION_REJECTED", ToolOutcome.Failed.class},
      {State.STATE_CANCELLED, "OPERATION_CANCELLED", ToolOutcome.Failed.class},
      {State.STATE_EXECUTING, "TOOL_VERSION_UNKNOWN", ToolOutcome.OutcomeUnknown.class},
    };
    for (Object[] c : cases) {
      Stub s = new Stub(State.STATE_UNSPECIFIED, null);
      s.getState = (State) c[0];
      s.executeErr = stored((String) c[1], "refused");
      ToolOutcome out =
          ToolRunner.builder(start(s)).build().run(ToolRunner.CHECK_OPERATION_TOOL, "{\"operation_id\":\"op_1\"}", "");
      assertInstanceOf((Class<?>) c[2], out, out.forModel());
    }
    Stub s = new Stub(State.STATE_UNSPECIFIED, null);
    s.getState = State.STATE_REJECTED;
    s.executeErr = stored("OPERATION_REJECTED", "refused");
    assertInstanceOf(
        ToolOutcome.Failed.class,
        ToolRunner.builder(start(s)).build().run(ToolRunner.CHECK_OPERATION_TOOL, "[1]", ""));
  }

  /**
   * A call approved while run waited, whose Execute a replica without the tool's version refuses,
   * is still READY: "failed" would tell the model nothing happened and a new key is safe. Pending,
   * as check answers the same server answer.
   */
  @Test
  void runExecuteRefusedOnAnApprovedCallIsPendingAsCheckAnswersIt() throws Exception {
    Stub stub = new Stub(State.STATE_AWAITING_APPROVAL, null);
    stub.getState = State.STATE_READY;
    stub.executeErr =
        com.google.rpc.Status.newBuilder()
            .setCode(3)
            .setMessage("tool pay_invoice version 1 is no longer configured on this server")
            .addDetails(Any.pack(ErrorInfo.newBuilder().setReason("TOOL_VERSION_UNKNOWN").setDomain("opledger.v1").build()))
            .build();
    String name = InProcessServerBuilder.generateName();
    Server server = InProcessServerBuilder.forName(name).directExecutor().addService(stub).build().start();
    ManagedChannel channel = InProcessChannelBuilder.forName(name).directExecutor().disableRetry().build();
    try {
      OpledgerClient c = OpledgerClient.builder("unused", "opl_test").channel(channel).build();
      ToolRunner r = ToolRunner.builder(c).approvalWait(Duration.ofSeconds(5)).build();
      ToolOutcome checked = r.check("op_1");
      assertInstanceOf(ToolOutcome.OutcomeUnknown.class, checked, checked.forModel());
      ToolOutcome out =
          r.run("pay_invoice", "{\"invoice_id\":\"INV-1\",\"amount_minor\":4900,\"currency\":\"EUR\"}", "k");
      assertEquals(2, stub.executeWaits.size());
      ToolOutcome.OutcomeUnknown u = assertInstanceOf(ToolOutcome.OutcomeUnknown.class, out, out.forModel());
      assertTrue(u.pending());
    } finally {
      channel.shutdownNow();
      server.shutdownNow();
    }
  }
}
