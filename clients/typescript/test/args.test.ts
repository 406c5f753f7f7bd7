// ToolRunner.run: model argument text that cannot travel as written (a member given twice, which
// JSON.parse resolves silently to the last; an unpaired surrogate escape, which protobuf's UTF-8
// strings carry as U+FFFD) is refused before anything is sent, as every client refuses it; and an
// Execute refused on an approved call is pending in run, as check answers it, not "failed".

import assert from "node:assert/strict";
import { test } from "node:test";
import { create, fromBinary, toBinary, type JsonObject } from "@bufbuild/protobuf";
import { Code, OpledgerError, OperationSchema, OutcomeUnknown, PrepareRequestSchema, State, ToolRunner, type OpledgerClient, type Operation } from "../src/index";

function fake(prepareState: State, getState: State, executeErr?: OpledgerError) {
  const sent: (JsonObject | undefined)[] = [];
  let executes = 0;
  const op = (id: string, state: State): Operation => create(OperationSchema, { id, state });
  const client = {
    prepare: async (_tool: string, args: JsonObject | undefined) => {
      sent.push(args);
      return { operation: op("op_1", prepareState), replayed: false };
    },
    get: async (id: string) => ({ operation: op(id, getState), events: [] }),
    execute: async () => {
      executes++;
      if (executeErr) throw executeErr;
      return { operation: op("op_1", State.SUCCEEDED), replayed: false };
    },
  };
  return { client: client as unknown as OpledgerClient, sent, executes: () => executes };
}

test("a duplicate member in the model's text is refused before anything is sent", async () => {
  const f = fake(State.SUCCEEDED, State.SUCCEEDED);
  const text = '{"invoice_id":"INV-1","amount_minor":100,"amount_minor":100000,"currency":"EUR"}';
  await assert.rejects(new ToolRunner(f.client).run("pay_invoice", text, "k"), () => true, `sent ${JSON.stringify(f.sent)}`);
  assert.deepEqual(f.sent, []);
});

test("an unpaired surrogate escape in the model's text is refused before anything is sent", async () => {
  const f = fake(State.SUCCEEDED, State.SUCCEEDED);
  const text = '{"to":"a@example.com","subject":"Refund \\ud83d","body":"x"}';
  let sent = "";
  try {
    await new ToolRunner(f.client).run("send_email", text, "k");
    // What the wire carries: protobuf strings are UTF-8, the encoder replaces the lone surrogate.
    const wire = fromBinary(PrepareRequestSchema, toBinary(PrepareRequestSchema, create(PrepareRequestSchema, { args: f.sent[0] })));
    sent = JSON.stringify(wire.args);
  } catch {
    // refused: nothing sent
  }
  assert.deepEqual(f.sent, [], `sent on the wire: ${sent}`);
});

test("run: an Execute refused on an approved call is pending, as check answers it", async () => {
  const refused = new OpledgerError(Code.InvalidArgument, "tool pay_invoice version 1 is no longer configured on this server", "TOOL_VERSION_UNKNOWN");
  const f = fake(State.AWAITING_APPROVAL, State.READY, refused);
  const runner = new ToolRunner(f.client, { approvalWaitMs: 5000 });
  const checked = await runner.check("op_1");
  assert.ok(checked instanceof OutcomeUnknown, checked.forModel());
  const out = await runner.run("pay_invoice", { invoice_id: "INV-1", amount_minor: 4900, currency: "EUR" }, "k");
  assert.equal(f.executes(), 2);
  assert.ok(out instanceof OutcomeUnknown && out.pending, out.forModel());
});
