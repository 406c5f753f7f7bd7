package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/harness"
	"github.com/opledger/opledger/store"
)

// auditWorld is a server with operations written through the RPCs: an
// approved pay_invoice executed against the fake processor, and a
// one-call send_email.
type auditWorld struct {
	env    *harness.Env
	srv    *harness.Server
	db     []string
	paid   string // the pay_invoice operation's id
	emails []string
}

func newAuditWorld(t *testing.T) *auditWorld {
	t.Helper()
	env := harness.New(t, harness.Options{})
	srv := env.StartServer(harness.ServerOptions{})
	agent, approver := env.Key("acme", "agent"), env.Key("acme", "approver")
	args, err := structpb.NewStruct(map[string]any{"invoice_id": "INV-1", "amount_minor": 1250, "currency": "EUR"})
	require.NoError(t, err)
	p, err := srv.Client.Prepare(harness.Ctx(agent, "audit-pay-1"), &opledgerv1.PrepareRequest{Tool: "pay_invoice", ToolVersion: "1", Args: args})
	require.NoError(t, err)
	op := p.GetOperation()
	_, err = srv.Client.Approve(harness.Ctx(approver, ""), &opledgerv1.ApproveRequest{OperationId: op.GetId(), Fingerprint: op.GetFingerprint(),
		Decision: opledgerv1.Decision_DECISION_APPROVE, Reason: "invoice checked"})
	require.NoError(t, err)
	x, err := srv.Client.Execute(harness.Ctx(agent, ""), &opledgerv1.ExecuteRequest{OperationId: op.GetId(), Wait: durationpb.New(10 * time.Second)})
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, x.GetOperation().GetState())
	w := &auditWorld{env: env, srv: srv, db: []string{"DATABASE_URL=" + env.DBURL}, paid: op.GetId()}
	for i := range 3 {
		args, err := structpb.NewStruct(map[string]any{"to": "ap@example.com", "subject": "s", "body": fmt.Sprintf("body \"%d\"\n", i)})
		require.NoError(t, err)
		p, err := srv.Client.Prepare(harness.Ctx(agent, fmt.Sprintf("audit-mail-%d", i)), &opledgerv1.PrepareRequest{Tool: "send_email", ToolVersion: "1", Args: args})
		require.NoError(t, err)
		_, err = srv.Client.Execute(harness.Ctx(agent, ""), &opledgerv1.ExecuteRequest{OperationId: p.GetOperation().GetId(), Wait: durationpb.New(10 * time.Second)})
		require.NoError(t, err)
		w.emails = append(w.emails, p.GetOperation().GetId())
	}
	return w
}

// TestAuditVerifyDatabase: `audit verify --database` walks every chain the
// server wrote and finds no break; after an operation's amount is changed
// in the table it names that operation and exits 1.
func TestAuditVerifyDatabase(t *testing.T) {
	t.Parallel()
	w := newAuditWorld(t)
	r := runCLI(t, w.db, "audit", "verify", "--database")
	require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, "database: checked 4 operations")
	require.Contains(t, r.stdout, ": 0 breaks")
	t.Log(r.stdout)

	require.NoError(t, store.AdminExec(t.Context(), w.env.DBURL,
		fmt.Sprintf(`UPDATE operation SET args = jsonb_set(args, '{amount_minor}', '125000') WHERE id = '%s'`, w.paid),
		fmt.Sprintf(`UPDATE operation_event SET detail = 'sent twice' WHERE operation_id = '%s' AND seq = 2`, w.emails[1])))
	r = runCLI(t, w.db, "audit", "verify", "--database")
	require.Equal(t, 1, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	t.Log(r.stdout)
	require.Contains(t, r.stdout, "BREAK operation "+w.paid+" event 1: the operation's args_digest")
	require.Contains(t, r.stdout, "BREAK operation "+w.emails[1]+" event 2: hash ")
	require.Contains(t, r.stdout, ": 2 breaks")
	require.Equal(t, 2, strings.Count(r.stdout, "BREAK "))
	require.Contains(t, r.stderr, "audit verify: 2 break(s)")
}
