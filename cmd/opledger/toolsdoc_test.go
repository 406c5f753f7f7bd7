package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/structpb"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/harness"
	"github.com/opledger/opledger/proof/pgcluster"
)

// docBlock returns the first ```lang block after heading in a Markdown
// file.
func docBlock(t *testing.T, doc, heading, lang string) string {
	t.Helper()
	i := strings.Index(doc, "\n"+heading+"\n")
	require.GreaterOrEqual(t, i, 0, "no heading %q", heading)
	m := regexp.MustCompile("(?s)\n```" + lang + "\n(.*?)\n```\n").FindStringSubmatch(doc[i:])
	require.NotNil(t, m, "no %s block after %q", lang, heading)
	return m[1] + "\n"
}

// TestToolsDocWorkedExample runs docs/tools.md's worked example as written:
// the refunds service built from its Go block, the tool from its YAML block
// served by a real `opledger serve`. One approved refund is made once, a
// repeated Execute replays it, and the service keeps the contract the page
// describes (the first answer for a retry, a refusal for another body,
// lookup by key), which `opledger probe` confirms.
func TestToolsDocWorkedExample(t *testing.T) {
	t.Parallel()
	_, file, _, _ := runtime.Caller(0)
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "docs", "tools.md"))
	require.NoError(t, err)
	doc := string(raw)
	goSrc := docBlock(t, doc, "## Worked example: a refunds service", "go")
	toolsYAML := docBlock(t, doc, "## Worked example: a refunds service", "yaml")

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "refunds.go"), []byte(goSrc), 0o600))
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "refunds"), "refunds.go")
	build.Dir = dir
	build.Env = append(os.Environ(), "GO111MODULE=on", "GOFLAGS=-buildvcs=false")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "the worked example must build:\n%s", out)

	port, err := pgcluster.FreePort()
	require.NoError(t, err)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	svc := exec.Command(filepath.Join(dir, "refunds"))
	svc.Env = append(cleanEnv(), fmt.Sprintf("REFUNDS_LISTEN=127.0.0.1:%d", port), "REFUNDS_TOKEN=s3cr3t")
	var svcOut syncBuffer
	svc.Stdout, svc.Stderr = &svcOut, &svcOut
	require.NoError(t, svc.Start())
	t.Cleanup(func() { _ = svc.Process.Kill(); _, _ = svc.Process.Wait() })
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/refunds?idempotency_key=x")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	}, 30*time.Second, 50*time.Millisecond, "the refunds service did not start: %s", svcOut.String())

	env := harness.New(t, harness.Options{ToolsYAML: []byte(toolsYAML)})
	p := env.StartProcess(harness.ProcessOptions{Env: []string{"REFUNDS_URL=" + base, "REFUNDS_TOKEN=s3cr3t"}})
	agent, approver := env.Key("acme", "agent"), env.Key("acme", "approver")
	args, err := structpb.NewStruct(map[string]any{"charge_id": "ch_1", "amount_minor": 500})
	require.NoError(t, err)
	prep, err := p.Client.Prepare(harness.Ctx(agent, "refund-ch_1"), &opledgerv1.PrepareRequest{Tool: "refund_charge", Args: args})
	require.NoError(t, err)
	op := prep.GetOperation()
	_, err = p.Client.Approve(harness.Ctx(approver, ""), &opledgerv1.ApproveRequest{OperationId: op.GetId(),
		Fingerprint: op.GetFingerprint(), Decision: opledgerv1.Decision_DECISION_APPROVE})
	require.NoError(t, err)
	done, err := p.Client.Execute(harness.Ctx(agent, ""), &opledgerv1.ExecuteRequest{OperationId: op.GetId()})
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, done.GetOperation().GetState(), "%v", done.GetOperation().GetError())
	ref := done.GetOperation().GetExternalRef()
	require.Regexp(t, `^re_`, ref)
	again, err := p.Client.Execute(harness.Ctx(agent, ""), &opledgerv1.ExecuteRequest{OperationId: op.GetId()})
	require.NoError(t, err)
	require.True(t, again.GetReplayed())
	require.Equal(t, ref, again.GetOperation().GetExternalRef())

	// The service's side of the contract, under the operation's own key.
	key := done.GetOperation().GetDownstreamKey()
	call := func(method, path, token, idem, body string) (int, map[string]any) {
		req, err := http.NewRequestWithContext(context.Background(), method, base+path, bytes.NewBufferString(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		if idem != "" {
			req.Header.Set("Idempotency-Key", idem)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var v map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
		return resp.StatusCode, v
	}
	code, v := call(http.MethodGet, "/refunds?idempotency_key="+key, "s3cr3t", "", "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, ref, v["id"], "lookup by key finds the refund")
	code, v = call(http.MethodPost, "/refunds", "s3cr3t", key, `{"amount_minor":500,"charge_id":"ch_1"}`)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, ref, v["id"], "a retry (other key order, same JSON) gets the first refund, not a second")
	code, _ = call(http.MethodPost, "/refunds", "s3cr3t", key, `{"amount_minor":900,"charge_id":"ch_1"}`)
	require.Equal(t, http.StatusUnprocessableEntity, code)
	code, _ = call(http.MethodGet, "/refunds?idempotency_key=opk_unknown", "s3cr3t", "", "")
	require.Equal(t, http.StatusNotFound, code)
	code, _ = call(http.MethodPost, "/refunds", "wrong", "k2", `{"amount_minor":500,"charge_id":"ch_2"}`)
	require.Equal(t, http.StatusUnauthorized, code)

	// The page's service keeps what its tool declares: `opledger probe` contradicts nothing.
	for name, body := range map[string]string{"refunds.yaml": toolsYAML, "args.json": `{"charge_id":"ch_9","amount_minor":500}`,
		"invalid.json": `{"charge_id":"ch_9","amount_minor":0}`} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600))
	}
	r := runCLI(t, []string{"REFUNDS_URL=" + base, "REFUNDS_TOKEN=s3cr3t"}, "probe", "--tools", filepath.Join(dir, "refunds.yaml"),
		"--tool", "refund_charge", "--args", filepath.Join(dir, "args.json"), "--invalid-args", filepath.Join(dir, "invalid.json"), "--yes")
	require.Equal(t, 0, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stdout, "summary: 10 ok, 0 CONTRADICTED, 3 not verifiable here, 0 not declared")
}
