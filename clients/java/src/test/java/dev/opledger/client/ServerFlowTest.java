package dev.opledger.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.Struct;
import com.google.protobuf.Value;
import dev.opledger.v1.ApproveResponse;
import dev.opledger.v1.CancelResponse;
import dev.opledger.v1.Decision;
import dev.opledger.v1.ExecuteResponse;
import dev.opledger.v1.Effect;
import dev.opledger.v1.GetResponse;
import dev.opledger.v1.ListOperationsResponse;
import dev.opledger.v1.Operation;
import dev.opledger.v1.PrepareResponse;
import dev.opledger.v1.State;
import dev.opledger.v1.Tool;
import io.grpc.Status;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * ServerFlowTest runs against a real server described by the environment that
 * clients/run-server.sh writes (OPLEDGER_ADDR, AGENT_KEY, APPROVER_KEY, OTHER_AGENT_KEY,
 * FAKEPAY_URL). Without it the tests are skipped, unless OPLEDGER_REQUIRE_SERVER=1 (as in
 * clients/test.sh) makes that a failure.
 */
class ServerFlowTest {
  private static OpledgerClient agent;
  private static OpledgerClient approver;
  private static OpledgerClient other;
  private static String fakepay;

  @BeforeAll
  static void connect() {
    String addr = System.getenv("OPLEDGER_ADDR");
    boolean present =
        addr != null
            && System.getenv("AGENT_KEY") != null
            && System.getenv("APPROVER_KEY") != null
            && System.getenv("OTHER_AGENT_KEY") != null
            && System.getenv("FAKEPAY_URL") != null;
    if (!present && "1".equals(System.getenv("OPLEDGER_REQUIRE_SERVER"))) {
      throw new IllegalStateException(
          "OPLEDGER_REQUIRE_SERVER=1 but OPLEDGER_ADDR, AGENT_KEY, APPROVER_KEY, OTHER_AGENT_KEY"
              + " or FAKEPAY_URL is missing (source the env file of clients/run-server.sh)");
    }
    if (!present) {
      return; // every test is skipped by requireServer
    }
    agent = OpledgerClient.builder(addr, System.getenv("AGENT_KEY")).usePlaintext().build();
    approver = agent.withApiKey(System.getenv("APPROVER_KEY"));
    other = agent.withApiKey(System.getenv("OTHER_AGENT_KEY"));
    fakepay = System.getenv("FAKEPAY_URL");
  }

  @BeforeEach
  void requireServer() {
    Assumptions.assumeTrue(agent != null, "no server in the environment (clients/run-server.sh)");
  }

  @AfterAll
  static void close() {
    if (agent != null) {
      agent.close();
    }
  }

  private static String invoiceId() {
    return "INV-java-" + UUID.randomUUID();
  }

  private static Struct invoice(String id, long amount) {
    return Args.of(Map.of("invoice_id", id, "amount_minor", amount, "currency", "EUR"));
  }

  private static String key(String call) {
    return IdempotencyKeys.derive(
        KeyParts.builder()
            .conversation("java-" + UUID.randomUUID())
            .round(1)
            .toolCall(call)
            .tool("pay_invoice")
            .build());
  }

  @Test
  void prepareTwiceReplaysTheSameOperation() {
    String inv = invoiceId();
    String k = key("call_1");
    PrepareResponse first = agent.prepare("pay_invoice", invoice(inv, 4900), k);
    assertFalse(first.getReplayed());
    assertEquals(State.STATE_AWAITING_APPROVAL, first.getOperation().getState());
    // The same call with the args spelled differently: the same fingerprint.
    String json = "{\"currency\":\"EUR\",\"amount_minor\":4.9e3,\"invoice_id\":\"" + inv + "\"}";
    PrepareResponse second = agent.prepare("pay_invoice", Args.fromJson(json), k);
    assertTrue(second.getReplayed());
    assertEquals(first.getOperation().getId(), second.getOperation().getId());
    assertEquals(first.getOperation().getFingerprint(), second.getOperation().getFingerprint());
  }

  @Test
  void changedArgsUnderTheSameKeyIsKeyReused() {
    String inv = invoiceId();
    String k = key("call_1");
    PrepareResponse first = agent.prepare("pay_invoice", invoice(inv, 4900), k);
    OpledgerException e =
        assertThrows(
            OpledgerException.class, () -> agent.prepare("pay_invoice", invoice(inv, 49000), k));
    assertEquals(Status.Code.ALREADY_EXISTS, e.getCode());
    assertEquals(Reason.IDEMPOTENCY_KEY_REUSED, e.getReason());
    assertFalse(e.isRetryable());
    assertEquals(first.getOperation().getId(), e.getMetadata().get("operation_id"));
  }

  @Test
  void approveExecuteMakesOneChargeAndRepeatsReplay() throws Exception {
    String inv = invoiceId();
    Operation op = agent.prepare("pay_invoice", invoice(inv, 4900), key("call_1")).getOperation();

    OpledgerException early = assertThrows(OpledgerException.class, () -> agent.execute(op.getId()));
    assertTrue(early.is(Reason.APPROVAL_REQUIRED));

    // The approver checks that what it shows is what it approves.
    assertTrue(Fingerprint.matches(op));
    assertEquals(
        op.getFingerprint(),
        Fingerprint.ofPrepare(op.getTenant(), "pay_invoice", op.getToolVersion(), invoice(inv, 4900)));

    OpledgerException self =
        assertThrows(
            OpledgerException.class,
            () -> agent.approve(op.getId(), op.getFingerprint(), Decision.DECISION_APPROVE, "me"));
    assertTrue(self.is(Reason.ROLE_REQUIRED));
    ApproveResponse ap =
        approver.approve(op.getId(), op.getFingerprint(), Decision.DECISION_APPROVE, "confirmed");
    assertEquals(State.STATE_READY, ap.getOperation().getState());

    ExecuteResponse ex = agent.execute(op.getId(), Duration.ofSeconds(5));
    assertFalse(ex.getReplayed());
    assertEquals(State.STATE_SUCCEEDED, ex.getOperation().getState());
    assertFalse(ex.getOperation().getExternalRef().isEmpty());
    assertEquals(1, charges(inv));

    // The answer was lost: execute again.
    ExecuteResponse again = agent.execute(op.getId());
    assertTrue(again.getReplayed());
    assertEquals(ex.getOperation().getExternalRef(), again.getOperation().getExternalRef());
    assertEquals(1, charges(inv));

    GetResponse got = approver.get(op.getId(), true);
    assertEquals(State.STATE_SUCCEEDED, got.getOperation().getState());
    assertTrue(got.getEventsCount() >= 3);
    assertEquals(State.STATE_SUCCEEDED, agent.reconcile(op.getId()).getOperation().getState());
  }

  @Test
  void anotherTenantGetsNotFound() {
    Operation op =
        agent.prepare("pay_invoice", invoice(invoiceId(), 4900), key("call_1")).getOperation();
    for (Runnable call :
        new Runnable[] {() -> other.get(op.getId()), () -> other.execute(op.getId())}) {
      OpledgerException e = assertThrows(OpledgerException.class, call::run);
      assertEquals(Status.Code.NOT_FOUND, e.getCode());
      assertEquals(Reason.OPERATION_NOT_FOUND, e.getReason());
    }
  }

  @Test
  void validationErrorsAreTyped() {
    OpledgerException bad =
        assertThrows(
            OpledgerException.class,
            () -> agent.prepare("pay_invoice", invoice(invoiceId(), -1), key("c")));
    assertTrue(bad.is(Reason.ARGS_INVALID));
    OpledgerException unknown =
        assertThrows(OpledgerException.class, () -> agent.prepare("no_such_tool", null, key("c")));
    assertTrue(unknown.is(Reason.TOOL_UNKNOWN));
    OpledgerClient wrong = agent.withApiKey("opl_not-a-real-key");
    OpledgerException auth =
        assertThrows(OpledgerException.class, () -> wrong.get("op_00000000000000000000000000"));
    assertEquals(Status.Code.UNAUTHENTICATED, auth.getCode());
    assertTrue(auth.is(Reason.API_KEY_INVALID));
  }

  @Test
  void listToolsOperationsAndCancel() {
    Tool pay =
        approver.listTools().getToolsList().stream()
            .filter(t -> t.getName().equals("pay_invoice"))
            .findFirst()
            .orElseThrow();
    assertTrue(pay.getApprovalRequired());
    assertTrue(pay.getCurrent());
    assertEquals(Effect.EFFECT_SIDE_EFFECT, pay.getEffect());
    assertTrue(
        pay.getArgsSchema().getFieldsOrThrow("properties").getStructValue().containsFields("amount_minor"));

    List<String> ids = new ArrayList<>(); // oldest first
    for (int i = 0; i < 3; i++) {
      ids.add(agent.prepare("pay_invoice", invoice(invoiceId(), 4900), key("c" + i)).getOperation().getId());
    }
    List<State> pending = List.of(State.STATE_AWAITING_APPROVAL);
    ListOperationsResponse page1 = approver.listOperations(pending, "pay_invoice", 2, "");
    assertEquals(List.of(ids.get(2), ids.get(1)), idsOf(page1));
    assertFalse(page1.getNextPageToken().isEmpty());
    ListOperationsResponse page2 =
        approver.listOperations(pending, "pay_invoice", 2, page1.getNextPageToken());
    assertEquals(ids.get(0), page2.getOperations(0).getId());

    // The token is bound to its filters; another tenant never sees these operations.
    OpledgerException e =
        assertThrows(
            OpledgerException.class,
            () -> approver.listOperations(List.of(), null, 0, page1.getNextPageToken()));
    assertEquals(Status.Code.INVALID_ARGUMENT, e.getCode());
    assertEquals(Reason.FIELD_INVALID, e.getReason());
    assertTrue(idsOf(other.listOperations(List.of(), null, 200, null)).stream().noneMatch(ids::contains));

    CancelResponse cancelled = agent.cancel(ids.get(1), "not needed");
    assertEquals(State.STATE_CANCELLED, cancelled.getOperation().getState());
    assertTrue(agent.cancel(ids.get(1), "not needed").getReplayed());
    assertEquals(
        List.of(ids.get(2), ids.get(0)), idsOf(approver.listOperations(pending, "pay_invoice", 2, "")));
  }

  private static List<String> idsOf(ListOperationsResponse page) {
    return page.getOperationsList().stream().map(Operation::getId).toList();
  }

  @Test
  void toolRunnerModelToolsAreTheCurrentTools() {
    List<ModelTool> tools = ToolRunner.builder(agent).build().modelTools();
    ModelTool pay = tools.stream().filter(t -> t.name().equals("pay_invoice")).findFirst().orElseThrow();
    assertEquals("1", pay.version());
    assertTrue(pay.approvalRequired());
    assertEquals("side_effect", pay.effect());
    assertFalse(pay.description().isEmpty());
    assertEquals("object", pay.argsSchema().getFieldsOrThrow("type").getStringValue());
    assertTrue(tools.stream().anyMatch(t -> t.name().equals("send_email")));
  }

  @Test
  void toolRunnerResumesAfterApproval() throws Exception {
    ToolRunner runner = ToolRunner.builder(agent).build();
    String inv = invoiceId();
    String k = key("call_1");
    String args = "{\"invoice_id\":\"" + inv + "\",\"amount_minor\":4900,\"currency\":\"EUR\"}";
    ToolOutcome first = runner.run("pay_invoice", args, k);
    ToolOutcome.AwaitingApproval waiting = assertInstanceOf(ToolOutcome.AwaitingApproval.class, first);
    assertEquals(
        "{\"message\":\"" + ToolOutcome.MESSAGE_AWAITING_APPROVAL + "\",\"operation_id\":\""
            + first.operationId() + "\",\"status\":\"awaiting_approval\"}",
        first.forModel());
    Operation op = waiting.operation();
    assertTrue(Fingerprint.matches(op));
    approver.approve(op.getId(), op.getFingerprint(), Decision.DECISION_APPROVE, "ok");
    ToolOutcome.Succeeded done =
        assertInstanceOf(ToolOutcome.Succeeded.class, runner.run("pay_invoice", args, k));
    assertEquals(inv, done.result().getFieldsOrThrow("invoice_id").getStringValue());
    assertEquals(done.operation().getExternalRef(), done.result().getFieldsOrThrow("id").getStringValue());
    assertEquals(done.forModel(), runner.run("pay_invoice", invoice(inv, 4900), k).forModel());
    assertEquals(1, charges(inv));
  }

  /**
   * The model is told to call check_operation after awaiting_approval: a new call of the tool in a
   * later round would carry another key and be a second request.
   */
  @Test
  void toolRunnerCheckOperationRunsAnApprovedCallOnce() throws Exception {
    ToolRunner runner = ToolRunner.builder(agent).build();
    List<ModelTool> tools = runner.modelTools();
    assertEquals(ToolRunner.CHECK_OPERATION_TOOL, tools.get(tools.size() - 1).name());
    String inv = invoiceId();
    String args = "{\"invoice_id\":\"" + inv + "\",\"amount_minor\":4900,\"currency\":\"EUR\"}";
    ToolOutcome first = runner.run("pay_invoice", args, key("call_chk"));
    Operation op = assertInstanceOf(ToolOutcome.AwaitingApproval.class, first).operation();
    assertTrue(first.forModel().contains("check_operation"));
    approver.approve(op.getId(), op.getFingerprint(), Decision.DECISION_APPROVE, "ok");
    for (int i = 0; i < 2; i++) {
      ToolOutcome done =
          runner.run(ToolRunner.CHECK_OPERATION_TOOL, "{\"operation_id\":\"" + op.getId() + "\"}", "");
      assertInstanceOf(ToolOutcome.Succeeded.class, done);
      assertEquals(op.getId(), done.operationId());
    }
    assertEquals(1, charges(inv));
    ToolOutcome.Failed missing =
        assertInstanceOf(ToolOutcome.Failed.class, runner.check("op_00000000000000000000000000"));
    assertEquals(ToolRunner.MESSAGE_CHECK_UNKNOWN_OPERATION, missing.message());
  }

  @Test
  void toolRunnerWaitsForAnInProcessApproval() throws Exception {
    ToolRunner runner =
        ToolRunner.builder(agent)
            .approvalWait(Duration.ofSeconds(20))
            .onApprovalRequired(
                op ->
                    new Thread(
                            () -> {
                              try {
                                Thread.sleep(300);
                              } catch (InterruptedException e) {
                                return;
                              }
                              approver.approve(
                                  op.getId(), op.getFingerprint(), Decision.DECISION_APPROVE, "ok");
                            })
                        .start())
            .build();
    String inv = invoiceId();
    assertInstanceOf(ToolOutcome.Succeeded.class, runner.run("pay_invoice", invoice(inv, 4900), key("c")));
    assertEquals(1, charges(inv));
  }

  @Test
  void toolRunnerRefusalsAreFailed() {
    ToolRunner runner =
        ToolRunner.builder(agent)
            .approvalWait(Duration.ofSeconds(20))
            .onApprovalRequired(
                op -> approver.approve(op.getId(), op.getFingerprint(), Decision.DECISION_DENY, "no"))
            .build();
    String inv = invoiceId();
    ToolOutcome.Failed bad =
        assertInstanceOf(ToolOutcome.Failed.class, runner.run("pay_invoice", invoice(inv, -1), key("bad")));
    assertEquals(Reason.ARGS_INVALID, bad.reasonCode());
    assertEquals(null, bad.operation());
    ToolOutcome.Failed denied =
        assertInstanceOf(ToolOutcome.Failed.class, runner.run("pay_invoice", invoice(inv, 4900), key("d")));
    assertEquals("OPERATION_REJECTED", denied.reason());
    assertFalse(denied.operationId().isEmpty());
  }

  @Test
  void toolRunnerRunsAToolWithoutApprovalInOneRun() throws Exception {
    String to = "java-" + UUID.randomUUID().toString().substring(0, 10) + "@example.com";
    Struct args = Args.of(Map.of("to", to, "subject", "receipt", "body", "paid"));
    String k = KeyParts.builder().conversation(to).round(1).toolCall("call_1").tool("send_email").derive();
    ToolRunner runner = ToolRunner.builder(agent).build();
    ToolOutcome.Succeeded out = assertInstanceOf(ToolOutcome.Succeeded.class, runner.run("send_email", args, k));
    assertEquals(out.operation().getExternalRef(), out.result().getFieldsOrThrow("id").getStringValue());
    assertEquals(out.forModel(), runner.run("send_email", args, k).forModel());
    assertEquals(1, emails(to));
  }

  @Test
  void toolRunnerOutcomeUnknownIsItsOwnAnswer() throws Exception {
    faults("{\"fail_after_commit\":{\"next\":1}}");
    try {
      String to = "java-" + UUID.randomUUID().toString().substring(0, 10) + "@example.com";
      Struct args = Args.of(Map.of("to", to, "subject", "receipt", "body", "paid"));
      String k =
          IdempotencyKeys.derive(KeyParts.builder().conversation(to).round(1).tool("send_email").build());
      ToolRunner runner = ToolRunner.builder(agent).build();
      ToolOutcome out = runner.run("send_email", args, k);
      assertInstanceOf(ToolOutcome.OutcomeUnknown.class, out);
      assertFalse(out instanceof ToolOutcome.Failed);
      ToolOutcome again = runner.run("send_email", args, k);
      assertInstanceOf(ToolOutcome.OutcomeUnknown.class, again);
      assertEquals(out.operationId(), again.operationId());
      assertEquals(1, emails(to));
    } finally {
      faults(null);
    }
  }

  /** Faults replaces the fake processor's faults (null clears them). */
  static void faults(String json) throws IOException, InterruptedException {
    HttpRequest.Builder b = HttpRequest.newBuilder(URI.create(fakepay + "/admin/faults"));
    b = json == null ? b.DELETE() : b.PUT(HttpRequest.BodyPublishers.ofString(json));
    HttpResponse<String> resp = HttpClient.newHttpClient().send(b.build(), HttpResponse.BodyHandlers.ofString());
    assertEquals(200, resp.statusCode(), resp.body());
  }

  /** Emails counts the fake processor's mails to one address. */
  static int emails(String to) throws IOException, InterruptedException {
    HttpResponse<String> resp =
        HttpClient.newHttpClient()
            .send(
                HttpRequest.newBuilder(URI.create(fakepay + "/emails")).GET().build(),
                HttpResponse.BodyHandlers.ofString());
    int n = 0;
    for (Value c : Args.fromJson(resp.body()).getFieldsOrThrow("data").getListValue().getValuesList()) {
      if (to.equals(c.getStructValue().getFieldsOrThrow("to").getStringValue())) {
        n++;
      }
    }
    return n;
  }

  /** Charges counts the fake processor's charges for one invoice. */
  static int charges(String invoiceId) throws IOException, InterruptedException {
    HttpResponse<String> resp =
        HttpClient.newHttpClient()
            .send(
                HttpRequest.newBuilder(URI.create(fakepay + "/charges")).GET().build(),
                HttpResponse.BodyHandlers.ofString());
    assertEquals(200, resp.statusCode());
    int n = 0;
    for (Value c : Args.fromJson(resp.body()).getFieldsOrThrow("data").getListValue().getValuesList()) {
      if (invoiceId.equals(c.getStructValue().getFieldsOrThrow("invoice_id").getStringValue())) {
        n++;
      }
    }
    return n;
  }

  // The policy flows, on the refund tool clients/run-server.sh adds
  // (clients/testdata/policy_tools.yaml): EUR only, every call approved, two approvers above
  // 1,000.00, amount_minor editable by an approver.

  private static String refundKey(String invoiceId) {
    return IdempotencyKeys.derive(
        KeyParts.builder().conversation("java-" + invoiceId).round(1).toolCall("call_1").tool("refund").build());
  }

  /** Amounts lists the fake processor's charges of one invoice by amount. */
  static List<Long> amounts(String invoiceId) throws IOException, InterruptedException {
    HttpResponse<String> resp =
        HttpClient.newHttpClient()
            .send(
                HttpRequest.newBuilder(URI.create(fakepay + "/charges")).GET().build(),
                HttpResponse.BodyHandlers.ofString());
    assertEquals(200, resp.statusCode());
    List<Long> out = new ArrayList<>();
    for (Value c : Args.fromJson(resp.body()).getFieldsOrThrow("data").getListValue().getValuesList()) {
      Struct ch = c.getStructValue();
      if (invoiceId.equals(ch.getFieldsOrThrow("invoice_id").getStringValue())) {
        out.add((long) ch.getFieldsOrThrow("amount_minor").getNumberValue());
      }
    }
    return out;
  }

  /**
   * EditingApprover approves the call as made with amount_minor changed, as a person at a prompt
   * would, and leaves an edited operation alone.
   */
  private static java.util.function.Consumer<Operation> editingApprover(long amount) {
    return op -> {
      if (!op.getSupersedes().isEmpty()) {
        return;
      }
      Struct edited = op.getArgs().toBuilder().putFields("amount_minor", Args.value(amount)).build();
      ApproveResponse resp = approver.approveEdited(op.getId(), op.getFingerprint(), edited, "less is enough");
      assertEquals(State.STATE_REJECTED, resp.getOperation().getState());
      assertEquals(resp.getEdited().getId(), resp.getOperation().getSupersededBy());
    };
  }

  /**
   * The runner follows an approver's edit ("the same, but 40.00 instead of 49.00") to the edited
   * operation, runs it once, and tells the model what ran, never the original; the same call again
   * and a check of the original's id answer the same.
   */
  @Test
  void toolRunnerFollowsAnApproverEdit() throws Exception {
    String inv = invoiceId();
    String key = refundKey(inv);
    ToolRunner runner =
        ToolRunner.builder(agent).approvalWait(Duration.ofSeconds(30)).onApprovalRequired(editingApprover(4000)).build();
    ToolOutcome out = runner.run("refund", invoice(inv, 4900), key);
    ToolOutcome.Succeeded done = assertInstanceOf(ToolOutcome.Succeeded.class, out, out.forModel());
    Edit edit = done.edit();
    assertTrue(edit != null);
    assertFalse(edit.supersedes().equals(done.operationId()), "the answer is the edited operation's");
    assertEquals(edit.supersedes(), done.operation().getSupersedes());
    assertEquals(4000.0, edit.args().getFieldsOrThrow("amount_minor").getNumberValue());
    assertEquals(1, edit.changes().size());
    assertEquals("amount_minor", edit.changes().get(0).field());
    assertEquals(List.of(4000L), amounts(inv), "the edited amount ran, once");
    Struct text = Args.fromJson(out.forModel());
    assertEquals(done.operationId(), text.getFieldsOrThrow("operation_id").getStringValue());
    String message =
        text.getFieldsOrThrow("edited").getStructValue().getFieldsOrThrow("message").getStringValue();
    assertTrue(message.startsWith("An approver changed amount_minor from 4900 to 4000; this ran: {"), message);

    // The same call again (the ledger replays the original, whose Execute answers
    // OPERATION_SUPERSEDED), and a check of the original's id: the same answer, no second charge.
    assertEquals(out.forModel(), runner.run("refund", invoice(inv, 4900), key).forModel());
    assertEquals(out.forModel(), runner.check(edit.supersedes()).forModel());
    assertEquals(List.of(4000L), amounts(inv));
    OpledgerException e = assertThrows(OpledgerException.class, () -> agent.execute(edit.supersedes()));
    assertTrue(e.is(Reason.OPERATION_SUPERSEDED));
    assertEquals(done.operationId(), e.getMetadata().get("superseded_by"));
  }

  /** An edit into a quorum is approved by the editor and still awaits a second approver. */
  @Test
  void toolRunnerEditIntoAQuorumAwaitsTheSecondApprover() throws Exception {
    String inv = invoiceId();
    ToolRunner runner =
        ToolRunner.builder(agent).approvalWait(Duration.ofSeconds(1)).onApprovalRequired(editingApprover(150000)).build();
    ToolOutcome out = runner.run("refund", invoice(inv, 4900), refundKey(inv));
    ToolOutcome.AwaitingApproval waiting = assertInstanceOf(ToolOutcome.AwaitingApproval.class, out, out.forModel());
    assertTrue(waiting.edit() != null);
    assertEquals(waiting.edit().supersedes(), waiting.operation().getSupersedes());
    assertEquals(2, waiting.operation().getApproval().getApprovalsNeeded());
    assertEquals(1, waiting.operation().getApproval().getApprovalsCount(), "the editor's approval counts");
    assertTrue(out.forModel().contains("An approver changed amount_minor from 4900 to 150000; this awaits approval: {"));
    assertEquals(List.of(), amounts(inv));
  }

  /** A deny rule's refusal says its message and that the same call is refused again. */
  @Test
  void toolRunnerPolicyDeniedSaysItWillBeRefusedAgain() throws Exception {
    String inv = invoiceId();
    Struct args = Args.of(Map.of("invoice_id", inv, "amount_minor", 4900L, "currency", "USD"));
    ToolRunner runner = ToolRunner.builder(agent).build();
    for (int i = 0; i < 2; i++) {
      ToolOutcome out = runner.run("refund", args, refundKey(inv));
      ToolOutcome.Failed failed = assertInstanceOf(ToolOutcome.Failed.class, out, out.forModel());
      assertEquals("POLICY_DENIED", failed.reason());
      assertEquals(null, failed.operation(), "nothing was recorded");
      assertTrue(failed.message().contains("refunds are paid in EUR only"), failed.message());
      assertTrue(failed.message().contains("will be refused again"), failed.message());
    }
    ModelTool refund =
        runner.modelTools().stream().filter(t -> t.name().equals("refund")).findFirst().orElseThrow();
    assertTrue(refund.description().contains("\n\nPolicy: refused when"), refund.description());
    assertTrue(refund.description().contains("an approver may edit amount_minor"));
    assertEquals(List.of(), amounts(inv));
  }
}
