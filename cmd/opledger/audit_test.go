package main

import (
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/mod/sumdb/note"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opledger/opledger/audit"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/harness"
	"github.com/opledger/opledger/service"
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

// TestAuditExportVerifyOffline: a tenant's export, checked offline with the
// public key alone, verifies; each edit is reported by the check its
// control switches off (which then misses it): a checkpoint's signature
// altered, the export truncated, a chain rewritten consistently after its
// checkpoint (which verify --database cannot see). Bad input: the wrong
// public key, a malformed line, an export of another tenant.
func TestAuditExportVerifyOffline(t *testing.T) {
	t.Parallel()
	w := newAuditWorld(t)
	ctx := t.Context()
	dir := t.TempDir()
	r := runCLI(t, nil, "audit", "keygen", "--out", dir+"/key")
	require.Equal(t, 0, r.code, r.stderr)
	require.FileExists(t, dir+"/key.pub")
	signer, err := service.LoadAuditSigner(dir + "/key")
	require.NoError(t, err)
	cp, err := service.Checkpointer{Store: w.env.Store, Signer: signer, Log: slog.New(slog.DiscardHandler)}.Once(ctx)
	require.NoError(t, err)
	require.NotNil(t, cp, "the chain heads are signed")

	operator := append([]string{"OPLEDGER_API_KEY=" + w.env.Key("acme", "operator")}, w.db...)
	export := func(t *testing.T, name string) string {
		t.Helper()
		r := runCLI(t, operator, "audit", "export", "--tenant", "acme", "--out", dir+"/"+name)
		require.Equal(t, 0, r.code, r.stderr)
		return dir + "/" + name
	}
	file := export(t, "acme.jsonl")
	r = runCLI(t, nil, "audit", "verify", file, "--public-key", dir+"/key.pub")
	require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	t.Log(r.stdout)
	require.Contains(t, r.stdout, "checked 4 operations")
	require.Contains(t, r.stdout, "1 checkpoints (key opledger-audit), 4 inclusion proofs")
	require.Contains(t, r.stdout, ": 0 breaks")

	pub, err := os.ReadFile(dir + "/key.pub")
	require.NoError(t, err)
	verifier, err := note.NewVerifier(strings.TrimSpace(string(pub)))
	require.NoError(t, err)
	original, err := os.ReadFile(file)
	require.NoError(t, err)
	lines := strings.SplitAfter(strings.TrimSuffix(string(original), "\n"), "\n")
	tampered := func(t *testing.T, name string, edit func([]string) []string, check audit.Check, want string) {
		t.Helper()
		path := dir + "/" + name
		require.NoError(t, os.WriteFile(path, []byte(strings.Join(edit(slices.Clone(lines)), "")), 0o600))
		r := runCLI(t, nil, "audit", "verify", path, "--public-key", dir+"/key.pub")
		require.Equal(t, 1, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
		require.Contains(t, r.stdout, want)
		t.Logf("%s:\n%s", name, r.stdout)
		f, err := os.Open(path)
		require.NoError(t, err)
		defer f.Close()
		rep := audit.VerifyExport(f, verifier, audit.Off{check: true})
		require.Empty(t, rep.Breaks, "with %s off the edit is missed", check)
	}
	t.Run("a checkpoint's signature altered", func(t *testing.T) {
		tampered(t, "sig.jsonl", func(l []string) []string {
			for i, s := range l {
				if strings.HasPrefix(s, `{"type":"checkpoint"`) {
					// The signature line is "— name base64\n", escaped in JSON.
					j := strings.LastIndex(s, `\n"`) - 6
					c := "A"
					if s[j:j+1] == "A" {
						c = "B"
					}
					l[i] = s[:j] + c + s[j+1:]
				}
			}
			return l
		}, audit.CheckSignature, "BREAK export: checkpoint 1: audit: checkpoint signature")
	})
	t.Run("the export truncated", func(t *testing.T) {
		tampered(t, "short.jsonl", func(l []string) []string { return l[:len(l)-2] }, audit.CheckComplete, "truncated")
	})
	t.Run("a malformed line", func(t *testing.T) {
		tampered(t, "bad.jsonl", func(l []string) []string {
			return append(l[:3:3], append([]string{"{\"type\":\"event\",\"event\":\n"}, l[3:]...)...)
		}, audit.CheckComplete, "line 4 is not an export line")
	})

	// A chain rewritten after its checkpoint, every hash recomputed: the
	// live tables check out, the signed head does not.
	recs, err := w.env.Store.AuditPage(ctx, store.AuditQuery{Tenant: "acme", Limit: 10})
	require.NoError(t, err)
	var sqls []string
	for _, rec := range recs {
		if rec.Operation.ID != w.paid {
			continue
		}
		var prev []byte
		for i, e := range rec.Events {
			if e.Seq == 2 {
				e.Detail = "approved by mallory"
			}
			h, err := audit.EventHash(prev, e)
			require.NoError(t, err)
			rec.Events[i].Hash, prev = h, h
			sqls = append(sqls, fmt.Sprintf(`UPDATE operation_event SET detail = '%s', hash = decode('%x', 'hex') WHERE operation_id = '%s' AND seq = %d`,
				e.Detail, h, e.OperationID, e.Seq))
		}
		sqls = append(sqls, fmt.Sprintf(`UPDATE operation SET chain_head = decode('%x', 'hex') WHERE id = '%s'`, prev, w.paid))
	}
	require.NoError(t, store.AdminExec(ctx, w.env.DBURL, sqls...))
	r = runCLI(t, w.db, "audit", "verify", "--database")
	require.Equal(t, 0, r.code, "a consistent rewrite passes the tables' own check:\n%s", r.stdout)
	rewritten := export(t, "rewritten.jsonl")
	r = runCLI(t, nil, "audit", "verify", rewritten, "--public-key", dir+"/key.pub")
	require.Equal(t, 1, r.code, r.stdout)
	require.Contains(t, r.stdout, "BREAK operation "+w.paid+" event 4: checkpoint 1 signed the chain's head at event 4")
	f, err := os.Open(rewritten)
	require.NoError(t, err)
	defer f.Close()
	require.Empty(t, audit.VerifyExport(f, verifier, audit.Off{audit.CheckProof: true}).Breaks, "with the proofs off the rewrite is missed")

	// Bad input.
	r = runCLI(t, nil, "audit", "keygen", "--out", dir+"/other")
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLI(t, nil, "audit", "verify", file, "--public-key", dir+"/other.pub")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stdout, "BREAK export: checkpoint 1: audit: checkpoint signature")
	for _, key := range []string{w.env.Key("globex", "operator"), w.env.Key("acme", "agent")} {
		r = runCLI(t, append([]string{"OPLEDGER_API_KEY=" + key}, w.db...), "audit", "export", "--tenant", "acme", "--out", dir+"/refused.jsonl")
		require.Equal(t, 1, r.code)
		require.Contains(t, r.stderr, `refused: the key is not an operator key of tenant "acme"`)
		require.NoFileExists(t, dir+"/refused.jsonl")
	}
}

// TestServeSignsCheckpoints: two serve processes with the signing key, on
// one database, sign checkpoints of the heads the RPCs wrote (one at a
// time: consecutive, none conflicting); a serve without a key says so once
// at start and signs nothing.
func TestServeSignsCheckpoints(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{})
	ctx := t.Context()
	dir := t.TempDir()
	r := runCLI(t, nil, "audit", "keygen", "--out", dir+"/key")
	require.Equal(t, 0, r.code, r.stderr)
	keyed := harness.ProcessOptions{Env: []string{"OPLEDGER_LOG_LEVEL=info", "OPLEDGER_AUDIT_SIGNING_KEY=" + dir + "/key",
		"OPLEDGER_AUDIT_CHECKPOINT_INTERVAL=200ms"}}
	p1, p2 := env.StartProcess(keyed), env.StartProcess(keyed)
	plain := env.StartProcess(harness.ProcessOptions{Env: []string{"OPLEDGER_LOG_LEVEL=info"}})
	agent := env.Key("acme", "agent")
	var ids []string
	for i, p := range []*harness.Process{p1, p2, plain} {
		args, err := structpb.NewStruct(map[string]any{"to": "ap@example.com", "subject": "s", "body": fmt.Sprint(i)})
		require.NoError(t, err)
		pr, err := p.Client.Prepare(harness.Ctx(agent, fmt.Sprintf("serve-ckpt-%d", i)), &opledgerv1.PrepareRequest{Tool: "send_email", ToolVersion: "1", Args: args})
		require.NoError(t, err)
		_, err = p.Client.Execute(harness.Ctx(agent, ""), &opledgerv1.ExecuteRequest{OperationId: pr.GetOperation().GetId(), Wait: durationpb.New(10 * time.Second)})
		require.NoError(t, err)
		ids = append(ids, pr.GetOperation().GetId())
	}
	recs, err := env.Store.AuditPage(ctx, store.AuditQuery{Tenant: "acme", Limit: 10})
	require.NoError(t, err)
	heads := map[string]string{}
	for _, rec := range recs {
		heads[rec.Operation.ID] = rec.Operation.ChainHead.String()
	}
	require.Eventually(t, func() bool {
		leaves, err := env.Store.AuditLeaves(ctx, 0, ids)
		require.NoError(t, err)
		last := map[string]string{}
		for _, l := range leaves {
			last[l.OperationID] = l.Head.String()
		}
		for _, id := range ids {
			if last[id] != heads[id] {
				return false
			}
		}
		return true
	}, 20*time.Second, 100*time.Millisecond, "every final head is checkpointed")
	pub, err := os.ReadFile(dir + "/key.pub")
	require.NoError(t, err)
	verifier, err := note.NewVerifier(strings.TrimSpace(string(pub)))
	require.NoError(t, err)
	cps, err := env.Store.AuditCheckpoints(ctx)
	require.NoError(t, err)
	for i, cp := range cps {
		require.Equal(t, int64(i+1), cp.Seq)
		_, err := audit.OpenCheckpoint(cp.Note, verifier)
		require.NoError(t, err)
	}
	require.Contains(t, p1.Logs()+p2.Logs(), `"msg":"audit: signed checkpoint"`)
	require.NotContains(t, p1.Logs(), "no --audit-signing-key")
	require.Equal(t, 1, strings.Count(plain.Logs(), "audit: no --audit-signing-key"), plain.Logs())
	require.NotContains(t, plain.Logs(), "signed checkpoint")
	t.Logf("%d checkpoints", len(cps))
}
