// Command agent_loop is a simulated agent loop (no real model) that pays an
// invoice through opledger with client.ToolRunner: the model's tool list
// comes from the ledger (ListTools), the model asks for the same pay_invoice
// call twice (round 1's answer, then that answer regenerated after a timeout,
// which names the call with a new provider id), a person approves the first
// one, and the fake processor still holds one charge: the key comes from the
// runtime's conversation and round, not from the provider's tool-call id.
//
// It reads OPLEDGER_ADDR, AGENT_KEY, APPROVER_KEY and FAKEPAY_URL (as written
// by `opledger dev` to .opledger-dev/env, or by clients/run-server.sh):
//
//	. ./.opledger-dev/env && (cd clients/go && go run ./examples/agent_loop)
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"time"

	client "github.com/opledger/opledger/clients/go"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
)

// toolCall is what a model's tool-use message carries.
type toolCall struct {
	ID, Name  string
	Arguments string // JSON text, as the model wrote it
}

// fakeModel stands in for an LLM: it is given the tool list and answers
// round 1 with the same payment each time it is asked (a regenerated answer
// after a timeout). Like a real model, each answer names its tool calls with
// new provider ids: call_pay_1 in the first answer, call_pay_1b in the second.
func fakeModel(tools []client.ModelTool, invoice string, attempt int) []toolCall {
	id := "call_pay_1"
	if attempt > 1 {
		id = "call_pay_1b"
	}
	for _, t := range tools {
		if t.Name == "pay_invoice" {
			return []toolCall{{ID: id, Name: t.Name, Arguments: fmt.Sprintf(`{"invoice_id":%q,"amount_minor":4900,"currency":"EUR"}`, invoice)}}
		}
	}
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "agent_loop:", err)
		os.Exit(1)
	}
}

func run() error {
	addr, agentKey, approverKey, fakepay := os.Getenv("OPLEDGER_ADDR"), os.Getenv("AGENT_KEY"), os.Getenv("APPROVER_KEY"), os.Getenv("FAKEPAY_URL")
	if addr == "" || agentKey == "" || approverKey == "" || fakepay == "" {
		return fmt.Errorf("set OPLEDGER_ADDR, AGENT_KEY, APPROVER_KEY and FAKEPAY_URL: source the env file of `opledger dev` (. ./.opledger-dev/env) or of clients/run-server.sh")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	agent, err := client.New(addr, agentKey, client.WithPlaintext())
	if err != nil {
		return err
	}
	defer agent.Close()
	approver := agent.WithAPIKey(approverKey) // same connection, another principal

	// The person at the approval screen: checks that the fingerprint is the
	// one of the arguments shown, then approves exactly that.
	approve := func(ctx context.Context, op *opledgerv1.Operation) error {
		args, _ := json.Marshal(op.GetArgs().AsMap())
		fmt.Printf("approval needed: %s %s %s\n", op.GetId(), op.GetTool(), args)
		if err := client.CheckFingerprint(op); err != nil {
			return err
		}
		_, err := approver.Approve(ctx, op.GetId(), op.GetFingerprint(), opledgerv1.Decision_DECISION_APPROVE, "customer confirmed")
		return err
	}

	conversation, invoice, round := "conv-"+randomID(), "INV-"+randomID(), int64(1)
	var answers []string
	// --- the agent loop: the lines that wrap the ledger's tools ---
	runner := client.NewToolRunner(agent, client.RunnerOptions{ApprovalWait: 30 * time.Second, OnApprovalRequired: approve})
	tools, err := runner.ModelTools(ctx) // name, description, JSON Schema: what the model may call
	if err != nil {
		return err
	}
	for attempt := 1; attempt <= 2; attempt++ { // round 1's answer, regenerated after a timeout
		for _, call := range fakeModel(tools, invoice, attempt) {
			// ToolCall "", not call.ID: this loop does not store the model's answer
			// before running its calls, and the regenerated answer names the same
			// payment call_pay_1b, so a key with the id would pay twice. A runtime
			// that pins each answer first may include call.ID.
			key, _ := client.DeriveKey(client.KeyParts{Conversation: conversation, Round: round, ToolCall: "", Tool: call.Name})
			out, err := runner.Run(ctx, call.Name, json.RawMessage(call.Arguments), key)
			if err != nil {
				return err
			}
			answers = append(answers, out.ForModel()) // the tool result the model reads
		}
	}
	// --- end of the agent loop ---
	for i, a := range answers {
		fmt.Printf("answer %d, tool result for the model: %s\n", i+1, a)
	}
	if len(answers) != 2 || answers[0] != answers[1] {
		return fmt.Errorf("expected the same answer twice, got %q", answers)
	}

	n, err := countCharges(ctx, fakepay, invoice)
	if err != nil {
		return err
	}
	fmt.Printf("charges at the fake processor for %s: %d\n", invoice, n)
	if n != 1 {
		return fmt.Errorf("expected exactly one charge, found %d", n)
	}
	return nil
}

func randomID() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func countCharges(ctx context.Context, base, invoice string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/charges", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			InvoiceID string `json:"invoice_id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return 0, fmt.Errorf("fake processor: %w", err)
	}
	n := 0
	for _, c := range list.Data {
		if c.InvoiceID == invoice {
			n++
		}
	}
	return n, nil
}
