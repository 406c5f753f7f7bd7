package main

import (
	"encoding/json"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/proof/fakepay"
)

// TestProbeCLI runs `opledger probe` as a real process against the demo
// tools file (examples/tools.yaml) and a fake processor on real HTTP: it
// refuses without --yes, passes an honest processor (exit 0), catches one
// that ignores keys (exit 1), and gives no verdict (exit 2) for an unknown
// tool or version and for a processor that is down.
func TestProbeCLI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	args := file("args.json", `{"invoice_id":"PROBE-1","amount_minor":100,"currency":"EUR"}`)
	invalid := file("invalid.json", `{"invoice_id":"PROBE-1","amount_minor":-1,"currency":"EUR"}`)
	email := file("email.json", `{"to":"probe@example.com","subject":"probe","body":"probe"}`)
	tools, err := filepath.Abs("../../examples/tools.yaml")
	require.NoError(t, err)
	processor := func(f fakepay.Faults) (*fakepay.Server, []string) {
		srv := fakepay.New(fakepay.Options{})
		srv.SetFaults(f)
		ts := httptest.NewServer(srv)
		t.Cleanup(ts.Close)
		return srv, []string{"OPLEDGER_FAKEPAY_URL=" + ts.URL}
	}
	probeArgs := func(more ...string) []string {
		return append([]string{"probe", "--tools", tools, "--args", args, "--invalid-args", invalid}, more...)
	}

	t.Run("refuses without --yes", func(t *testing.T) {
		t.Parallel()
		srv, env := processor(fakepay.Faults{})
		r := runCLI(t, env, probeArgs("--tool", "pay_invoice")...)
		require.Equal(t, 2, r.code, r.stderr)
		require.Contains(t, r.stderr, "refusing to start without --yes")
		require.Empty(t, srv.Charges(), "nothing was sent")
	})
	t.Run("honest processor", func(t *testing.T) {
		t.Parallel()
		srv, env := processor(fakepay.Faults{})
		r := runCLI(t, env, probeArgs("--tool", "pay_invoice", "--yes")...)
		require.Equal(t, 0, r.code, r.stdout+r.stderr)
		require.Contains(t, r.stdout, "summary: 10 ok, 0 CONTRADICTED, 3 not verifiable here, 0 not declared")
		require.Contains(t, r.stdout, "effects made: 2 (")
		require.Len(t, srv.Charges(), 2)
		for _, c := range srv.Charges() {
			require.Contains(t, r.stdout, c.ID, "every effect is listed with its reference")
		}
	})
	t.Run("json", func(t *testing.T) {
		t.Parallel()
		srv, env := processor(fakepay.Faults{})
		r := runCLI(t, env, probeArgs("--tool", "pay_invoice", "--yes", "--json")...)
		require.Equal(t, 0, r.code, r.stdout+r.stderr)
		var rep struct {
			Tool    string `json:"tool"`
			Version string `json:"version"`
			Checks  []struct {
				Declaration, Verdict string
			} `json:"checks"`
			Effects []struct{ Key, Ref string } `json:"effects"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
		require.Equal(t, "pay_invoice", rep.Tool)
		require.Equal(t, "1", rep.Version, "the current version")
		require.Len(t, rep.Checks, 13)
		require.Len(t, rep.Effects, len(srv.Charges()))
	})
	t.Run("processor without key support", func(t *testing.T) {
		t.Parallel()
		srv, env := processor(fakepay.Faults{NoKeySupport: true})
		r := runCLI(t, env, probeArgs("--tool", "pay_invoice", "--yes")...)
		require.Equal(t, 1, r.code, r.stdout+r.stderr)
		require.Regexp(t, `(?m)^CONTRADICTED +dedupes_keys: true: same key twice: two effects under one key`, r.stdout)
		require.Contains(t, r.stderr, "checks CONTRADICTED")
		require.Contains(t, r.stdout, "effects made: "+strconv.Itoa(len(srv.Charges()))+" (")
	})
	t.Run("tool without lookup or dedupe", func(t *testing.T) {
		t.Parallel()
		srv, env := processor(fakepay.Faults{})
		r := runCLI(t, env, "probe", "--tools", tools, "--tool", "send_email", "--args", email, "--yes")
		require.Equal(t, 0, r.code, r.stdout+r.stderr)
		require.Regexp(t, `(?m)^not declared +lookup_url: \(none\)`, r.stdout)
		require.Regexp(t, `(?m)^not declared +dedupes_keys: false: same key twice`, r.stdout)
		require.Len(t, srv.Emails(), 1)
	})
	t.Run("unknown tool or version", func(t *testing.T) {
		t.Parallel()
		srv, env := processor(fakepay.Faults{})
		r := runCLI(t, env, probeArgs("--tool", "refund", "--yes")...)
		require.Equal(t, 2, r.code)
		require.Contains(t, r.stderr, `unknown tool "refund" (declared: pay_invoice, send_email)`)
		r = runCLI(t, env, probeArgs("--tool", "pay_invoice", "--version", "2", "--yes", "--json")...)
		require.Equal(t, 2, r.code)
		require.Contains(t, r.stderr, `has no version "2" (declared: 1)`)
		var rep struct{ Error string }
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), "--json answers JSON even without a verdict")
		require.Contains(t, rep.Error, "no version")
		r = runCLI(t, env, "probe", "--tools", tools, "--tool", "pay_invoice", "--yes")
		require.Equal(t, 2, r.code)
		require.Contains(t, r.stderr, "--args are required")
		require.Empty(t, srv.Charges())
	})
	t.Run("processor down", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		url := "http://" + ln.Addr().String()
		require.NoError(t, ln.Close())
		r := runCLI(t, []string{"OPLEDGER_FAKEPAY_URL=" + url}, probeArgs("--tool", "pay_invoice", "--yes")...)
		require.Equal(t, 2, r.code, r.stdout+r.stderr)
		require.Contains(t, r.stderr, "no verdict: the downstream did not answer POST "+url+"/charges")
		require.Contains(t, r.stdout, "ABORTED")
		require.NotRegexp(t, `(?m)^ok `, r.stdout, "no check is presented as a pass")
	})
}
