package dev.opledger.examples;

import com.google.protobuf.Value;
import dev.opledger.client.Args;
import dev.opledger.client.Fingerprint;
import dev.opledger.client.KeyParts;
import dev.opledger.client.ModelTool;
import dev.opledger.client.OpledgerClient;
import dev.opledger.client.ToolOutcome;
import dev.opledger.client.ToolRunner;
import dev.opledger.v1.Decision;
import dev.opledger.v1.Operation;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.function.Consumer;

/**
 * AgentLoop is a simulated agent loop (no real model) that pays an invoice through opledger with
 * {@link ToolRunner}: the model's tool list comes from the ledger (ListTools), the model asks for
 * the same pay_invoice call twice (round 1's answer, then that answer regenerated after a timeout,
 * which names the call with a new provider id), a person approves the first one (the approval hook),
 * and the fake processor still holds one charge: the key comes from the runtime's conversation and
 * round, not from the provider's tool-call id.
 *
 * <p>It reads OPLEDGER_ADDR, AGENT_KEY, APPROVER_KEY and FAKEPAY_URL from the environment. From
 * clients/java: {@code mvn -q compile exec:java} (the pom names this class).
 */
public final class AgentLoop {
  /** ToolCall is what a model's tool-use message carries. */
  record ToolCall(String id, String name, String argumentsJson) {}

  private AgentLoop() {}

  /**
   * FakeModel stands in for an LLM: given the tool list, it asks to pay the invoice. Like a real
   * model, each answer names its calls with new provider ids: call_pay_1 in the first answer,
   * call_pay_1b in the regenerated one.
   */
  static List<ToolCall> fakeModel(List<ModelTool> tools, String invoice, int attempt) {
    if (tools.stream().noneMatch(t -> t.name().equals("pay_invoice"))) {
      throw new IllegalStateException("no pay_invoice tool");
    }
    String args = "{\"invoice_id\":\"" + invoice + "\",\"amount_minor\":4900,\"currency\":\"EUR\"}";
    return List.of(new ToolCall(attempt == 1 ? "call_pay_1" : "call_pay_1b", "pay_invoice", args));
  }

  /** Main runs the loop once and exits non-zero if anything is off. */
  public static void main(String[] argv) throws Exception {
    String addr = env("OPLEDGER_ADDR");
    String fakepay = env("FAKEPAY_URL");
    // TLS is the default; `opledger dev` listens on loopback without it.
    try (OpledgerClient agent = OpledgerClient.builder(addr, env("AGENT_KEY")).usePlaintext().build()) {
      OpledgerClient approver = agent.withApiKey(env("APPROVER_KEY")); // same channel

      // The person at the approval screen: checks the fingerprint against the args shown, approves.
      Consumer<Operation> personApproves =
          op -> {
            System.out.println("approval needed: " + op.getId() + " " + op.getTool() + " " + Args.toJson(op.getArgs()));
            if (!Fingerprint.matches(op)) {
              throw new IllegalStateException("the operation is not what the screen shows");
            }
            approver.approve(op.getId(), op.getFingerprint(), Decision.DECISION_APPROVE, "customer confirmed");
          };

      String conversation = "conv-" + UUID.randomUUID(); // the runtime's own durable state
      String invoice = "INV-" + UUID.randomUUID().toString().substring(0, 8);
      long round = 1;
      List<String> answers = new ArrayList<>();
      // --- the agent loop: the lines that wrap the ledger's tools ---
      ToolRunner runner = ToolRunner.builder(agent).approvalWait(Duration.ofSeconds(30)).onApprovalRequired(personApproves).build();
      List<ModelTool> tools = runner.modelTools(); // name, description, JSON Schema: what the model may call
      for (int attempt = 1; attempt <= 2; attempt++) { // round 1's answer, regenerated after a timeout
        for (ToolCall call : fakeModel(tools, invoice, attempt)) {
          // toolCall(""), not call.id(): this loop does not store the model's answer before running
          // its calls, and the regenerated answer names the same payment call_pay_1b, so a key with
          // the id would pay twice. A runtime that pins each answer first may include call.id().
          String key = KeyParts.builder().conversation(conversation).round(round).toolCall("").tool(call.name()).derive();
          ToolOutcome outcome = runner.run(call.name(), call.argumentsJson(), key);
          answers.add(outcome.forModel()); // the tool result the model reads
        }
      }
      // --- end of the agent loop ---
      for (int i = 0; i < answers.size(); i++) {
        System.out.printf("answer %d, tool result for the model: %s%n", i + 1, answers.get(i));
      }
      if (answers.size() != 2 || !answers.get(0).equals(answers.get(1)) || !answers.get(0).contains("\"status\":\"succeeded\"")) {
        throw new IllegalStateException("expected the same success twice, got " + answers);
      }
      int n = charges(fakepay, invoice);
      System.out.printf("charges at the fake processor for %s: %d%n", invoice, n);
      if (n != 1) {
        throw new IllegalStateException("expected exactly one charge, found " + n);
      }
    }
  }

  private static String env(String name) {
    String v = System.getenv(name);
    if (v == null || v.isEmpty()) {
      throw new IllegalStateException(
          "set OPLEDGER_ADDR, AGENT_KEY, APPROVER_KEY and FAKEPAY_URL: source the env file of"
              + " `opledger dev` (. ./.opledger-dev/env) or of clients/run-server.sh");
    }
    return v;
  }

  private static int charges(String fakepay, String invoice) throws Exception {
    HttpResponse<String> resp =
        HttpClient.newHttpClient()
            .send(
                HttpRequest.newBuilder(URI.create(fakepay + "/charges")).GET().build(),
                HttpResponse.BodyHandlers.ofString());
    int n = 0;
    for (Value c : Args.fromJson(resp.body()).getFieldsOrThrow("data").getListValue().getValuesList()) {
      if (invoice.equals(c.getStructValue().getFieldsOrThrow("invoice_id").getStringValue())) {
        n++;
      }
    }
    return n;
  }
}
