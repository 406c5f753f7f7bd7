// Command agent_loop is a simulated agent loop (no real model) that pays an
// invoice through opledger: the model asks for the same pay_invoice call
// twice, a person approves it, the agent executes it, the answer is "lost"
// and Execute is retried, and the fake processor still holds one charge.
//
// It reads OPLEDGER_ADDR, AGENT_KEY, APPROVER_KEY and FAKEPAY_URL (as written
// by `opledger dev` to .opledger-dev/env, or by clients/run-server.sh):
//
//	. ./.opledger-dev/env && go run ./clients/go/examples/agent_loop
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	client "github.com/opledger/opledger/clients/go"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
)

// toolCall is what a model's tool-use message carries.
type toolCall struct {
	ID        string
	Name      string
	Arguments string // JSON text, as the model wrote it
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

	agent, err := client.New(addr, agentKey, client.WithInsecure())
	if err != nil {
		return err
	}
	defer agent.Close()
	approver := agent.WithAPIKey(approverKey)

	// The conversation id is the agent runtime's own durable id for this
	// unit of work; the provider's tool-call id alone is not enough.
	conversation := "conv-" + rand.Text()[:12]
	invoice := "INV-" + rand.Text()[:8]
	round := int64(1)
	call := toolCall{
		ID:        "call_pay_1",
		Name:      "pay_invoice",
		Arguments: fmt.Sprintf(`{"invoice_id":%q,"amount_minor":4900,"currency":"EUR"}`, invoice),
	}

	// The model emits the call, the runtime times out and the model emits
	// it again: both derive the same key, so there is one operation.
	var op *opledgerv1.Operation
	for i := 1; i <= 2; i++ {
		key, err := client.DeriveKey(client.KeyParts{Conversation: conversation, Round: round, ToolCall: call.ID, Tool: call.Name, ToolVersion: "1"})
		if err != nil {
			return err
		}
		resp, err := agent.Prepare(ctx, call.Name, json.RawMessage(call.Arguments), key, client.WithToolVersion("1"))
		if err != nil {
			return fmt.Errorf("prepare: %w", err)
		}
		op = resp.GetOperation()
		fmt.Printf("prepare #%d: operation %s, state %s, replayed %t\n", i, op.GetId(), op.GetState(), resp.GetReplayed())
	}

	// A person approves exactly what they were shown: the approver checks
	// the fingerprint against the args on screen before approving.
	if err := client.CheckFingerprint(op); err != nil {
		return err
	}
	appr, err := approver.Approve(ctx, op.GetId(), op.GetFingerprint(), opledgerv1.Decision_DECISION_APPROVE, "customer confirmed")
	if err != nil {
		return fmt.Errorf("approve: %w", err)
	}
	fmt.Printf("approve: state %s\n", appr.GetOperation().GetState())

	first, err := agent.Execute(ctx, op.GetId(), client.WithWait(10*time.Second))
	if err != nil {
		return fmt.Errorf("execute: %w", err)
	}
	fmt.Printf("execute: state %s, external ref %s, replayed %t\n", first.GetOperation().GetState(), first.GetOperation().GetExternalRef(), first.GetReplayed())
	fmt.Println("(the answer is lost on its way to the model; the runtime executes again)")

	again, err := agent.Execute(ctx, op.GetId(), client.WithWait(10*time.Second))
	if err != nil {
		return fmt.Errorf("execute again: %w", err)
	}
	result, _ := protojson.Marshal(again.GetOperation().GetResult())
	fmt.Printf("execute again: state %s, external ref %s, replayed %t\n", again.GetOperation().GetState(), again.GetOperation().GetExternalRef(), again.GetReplayed())
	fmt.Printf("tool result for the model: %s\n", result)

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
