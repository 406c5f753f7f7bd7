package dev.opledger.examples;

import com.google.protobuf.Value;
import dev.opledger.client.Args;
import dev.opledger.client.Fingerprint;
import dev.opledger.client.IdempotencyKeys;
import dev.opledger.client.OpledgerClient;
import dev.opledger.v1.ApproveResponse;
import dev.opledger.v1.Decision;
import dev.opledger.v1.ExecuteResponse;
import dev.opledger.v1.Operation;
import dev.opledger.v1.PrepareResponse;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.UUID;

/**
 * AgentLoop is a simulated agent loop (no real model) that pays an invoice through opledger: the
 * model asks for the same pay_invoice call twice, a person approves it, the agent executes it, the
 * answer is "lost" and Execute is retried, and the fake processor still holds one charge.
 *
 * <p>It reads OPLEDGER_ADDR, AGENT_KEY, APPROVER_KEY and FAKEPAY_URL from the environment. From
 * clients/java: {@code mvn -q compile exec:java} (the pom names this class).
 */
public final class AgentLoop {
  /** ToolCall is what a model's tool-use message carries. */
  record ToolCall(String id, String name, String argumentsJson) {}

  private AgentLoop() {}

  /** Main runs the loop once and exits non-zero if anything is off. */
  public static void main(String[] argv) throws Exception {
    String addr = env("OPLEDGER_ADDR");
    String fakepay = env("FAKEPAY_URL");
    try (OpledgerClient agent =
        OpledgerClient.builder(addr, env("AGENT_KEY")).usePlaintext().build()) {
      OpledgerClient approver = agent.withApiKey(env("APPROVER_KEY"));

      // The conversation id is the agent runtime's own durable id for this unit of work; the
      // provider's tool-call id alone is not enough.
      String conversation = "conv-" + UUID.randomUUID();
      String invoice = "INV-" + UUID.randomUUID().toString().substring(0, 8);
      long round = 1;
      ToolCall call =
          new ToolCall(
              "call_pay_1",
              "pay_invoice",
              "{\"invoice_id\":\"" + invoice + "\",\"amount_minor\":4900,\"currency\":\"EUR\"}");

      // The model emits the call, the runtime times out and the model emits it again: both derive
      // the same key, so there is one operation.
      Operation op = null;
      for (int i = 1; i <= 2; i++) {
        String key = IdempotencyKeys.derive(conversation, round, call.id(), call.name(), "1");
        PrepareResponse p = agent.prepare(call.name(), Args.fromJson(call.argumentsJson()), key, "1");
        op = p.getOperation();
        System.out.printf(
            "prepare #%d: operation %s, state %s, replayed %b%n",
            i, op.getId(), op.getState(), p.getReplayed());
      }

      // A person approves exactly what they were shown: check the fingerprint first.
      if (!Fingerprint.matches(op)) {
        throw new IllegalStateException("the operation's fingerprint does not match its args");
      }
      ApproveResponse ap =
          approver.approve(
              op.getId(), op.getFingerprint(), Decision.DECISION_APPROVE, "customer confirmed");
      System.out.printf("approve: state %s%n", ap.getOperation().getState());

      ExecuteResponse first = agent.execute(op.getId(), Duration.ofSeconds(10));
      System.out.printf(
          "execute: state %s, external ref %s, replayed %b%n",
          first.getOperation().getState(),
          first.getOperation().getExternalRef(),
          first.getReplayed());
      System.out.println("(the answer is lost on its way to the model; the runtime executes again)");

      ExecuteResponse again = agent.execute(op.getId(), Duration.ofSeconds(10));
      System.out.printf(
          "execute again: state %s, external ref %s, replayed %b%n",
          again.getOperation().getState(),
          again.getOperation().getExternalRef(),
          again.getReplayed());
      System.out.println("tool result for the model: " + Args.toJson(again.getOperation().getResult()));

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
