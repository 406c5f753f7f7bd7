package tool

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/executor"
)

const minimalTool = `
  - name: ping
    version: "1"
    effect: read_only
    args_schema:
      type: object
    executor:
      type: http
      url: http://127.0.0.1:1/ping
`

func TestParseDefaultsAndFields(t *testing.T) {
	t.Parallel()
	src := `tools:
  - name: charge
    version: "2024.1-b"
    description: Charge.
    effect: side_effect
    approval: {required: true, ttl: 90s}
    args_schema:
      type: object
      properties: {n: {type: integer}}
    executor:
      type: http
      url: ${BASE}/charges
      timeout: 3s
      dedupes_keys: true
      lookup_url: ${BASE}/charges?k={key}
      lookup_consistent: true
      external_ref_field: data.id
      max_attempts: 2
      headers: {X-Api-Version: "2"}
      definitive_statuses: [400, 402, 422]
      lookup_status_field: data.state
      lookup_succeeded: [paid]
      lookup_failed: [voided, refused]
      lookup_pending: [open]
` + minimalTool
	r, err := Parse([]byte(src), fakeEnv(map[string]string{"BASE": "https://pay.example"}))
	require.NoError(t, err)

	c, err := r.Lookup("charge", "2024.1-b")
	require.NoError(t, err)
	require.Equal(t, "Charge.", c.Description)
	require.Equal(t, EffectSideEffect, c.Effect)
	require.Equal(t, Approval{Required: true, Approvers: 1, TTL: 90 * time.Second}, c.Approval)
	require.JSONEq(t, `{"type":"object","properties":{"n":{"type":"integer"}}}`, string(c.ArgsSchema))
	require.Equal(t, ExecutorConfig{
		Tool: "charge", Type: "http", URL: "https://pay.example/charges", LookupURL: "https://pay.example/charges?k={key}",
		Timeout: 3 * time.Second, DedupesKeys: true, LookupConsistent: true, ExternalRefField: "data.id",
		MaxAttempts: 2, Headers: map[string]string{"X-Api-Version": "2"},
		Classification: executor.Classification{DefinitiveStatuses: []int{400, 402, 422}, LookupStatusField: "data.state",
			LookupSucceeded: []string{"paid"}, LookupFailed: []string{"voided", "refused"}, LookupPending: []string{"open"}},
	}, c.Executor)

	p, err := r.Lookup("ping", "")
	require.NoError(t, err)
	require.Equal(t, EffectReadOnly, p.Effect)
	require.Equal(t, Approval{}, p.Approval)
	require.Zero(t, p.Executor.Timeout, "zero stands for the default")
	require.Equal(t, 10*time.Second, p.Executor.WithDefaults().Timeout)
	require.Equal(t, 1, p.Executor.WithDefaults().MaxAttempts)
	require.False(t, p.Executor.DedupesKeys)
	require.NoError(t, p.ValidateArgs(nil))
}

func TestParseUnquotedVersionIsString(t *testing.T) {
	t.Parallel()
	r, err := Parse([]byte("tools:"+strings.Replace(minimalTool, `version: "1"`, "version: 1", 1)), fakeEnv(nil))
	require.NoError(t, err)
	_, err = r.Lookup("ping", "1")
	require.NoError(t, err)
}

func TestLookupAndList(t *testing.T) {
	t.Parallel()
	src := "tools:" +
		strings.ReplaceAll(minimalTool, "ping", "zeta") +
		strings.Replace(minimalTool, `version: "1"`, `version: "2"`, 1) +
		minimalTool +
		strings.ReplaceAll(minimalTool, "ping", "alpha")
	r, err := Parse([]byte(src), fakeEnv(nil))
	require.NoError(t, err)

	var got []string
	for _, tl := range r.List() {
		got = append(got, tl.Name+"@"+tl.Version)
	}
	require.Equal(t, []string{"alpha@1", "ping@1", "ping@2", "zeta@1"}, got)

	tests := []struct {
		name, version, want string
		wantErr             error
	}{
		{"ping", "", "1", nil}, // the last declared, not the highest
		{"ping", "2", "2", nil},
		{"ping", "1", "1", nil},
		{"ping", "3", "", ErrUnknownVersion},
		{"nope", "", "", ErrUnknownTool},
		{"nope", "1", "", ErrUnknownTool},
	}
	for _, tt := range tests {
		tl, err := r.Lookup(tt.name, tt.version)
		if tt.wantErr != nil {
			require.ErrorIs(t, err, tt.wantErr)
			require.Contains(t, err.Error(), tt.name)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tt.want, tl.Version)
	}

	// List returns a copy.
	r.List()[0] = nil
	require.NotNil(t, r.List()[0])
}

// TestNamesAndVersions: the lists an unknown-tool error shows name each
// tool once, keep versions in declaration order, and stay bounded.
func TestNamesAndVersions(t *testing.T) {
	t.Parallel()
	src := "tools:" + strings.ReplaceAll(minimalTool, "ping", "zeta") +
		strings.Replace(minimalTool, `version: "1"`, `version: "2"`, 1) + minimalTool
	r, err := Parse([]byte(src), fakeEnv(nil))
	require.NoError(t, err)
	require.Equal(t, "ping, zeta", r.Names(20))
	require.Equal(t, "2, 1", r.Versions("ping", 20), "declaration order: the last is the current one")
	require.Equal(t, "(none)", r.Versions("nope", 20))

	var many strings.Builder
	many.WriteString("tools:")
	for i := range 25 {
		many.WriteString(strings.ReplaceAll(minimalTool, "ping", fmt.Sprintf("tool_%02d", i)))
	}
	r, err = Parse([]byte(many.String()), fakeEnv(nil))
	require.NoError(t, err)
	got := r.Names(20)
	require.True(t, strings.HasPrefix(got, "tool_00, tool_01, "), got)
	require.True(t, strings.HasSuffix(got, "tool_19 and 5 more"), got)
	require.NotContains(t, got, "tool_20")
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	// with returns the minimal tool with one line replaced (or added when
	// old is "").
	with := func(old, new string) string {
		if old == "" {
			return "tools:" + minimalTool + new + "\n"
		}
		require.Contains(t, minimalTool, old)
		return "tools:" + strings.Replace(minimalTool, old, new, 1)
	}
	tests := []struct {
		name, src string
		want      []string
	}{
		{"empty file", "", []string{"no tools declared"}},
		{"no tools", "tools: []", []string{"no tools declared"}},
		{"two documents", "tools:" + minimalTool + "---\ntools: []\n", []string{"more than one YAML document"}},
		{"not yaml", "tools: [", []string{"yaml"}},
		{"unknown top-level key", "tool:" + minimalTool, []string{"field tool not found in the top level"}},
		{"unknown tool key", with("effect: read_only", "effect: read_only\n    colour: red"), []string{"field colour not found in tool"}},
		{"unknown executor key", with("type: http", "type: http\n      retries: 3"), []string{"field retries not found in executor"}},
		{"unknown approval key", with("effect: read_only", "effect: read_only\n    approval: {required: false, who: me}"), []string{"field who not found in approval"}},
		{"bad name", with("name: ping", "name: Ping"), []string{"tools[0]", "name:"}},
		{"name too long", with("name: ping", "name: "+strings.Repeat("a", 65)), []string{"name:"}},
		{"missing version", with(`version: "1"`, ""), []string{`"ping"`, "version:"}},
		{"bad version", with(`version: "1"`, `version: "1 0"`), []string{"version:"}},
		{"version too long", with(`version: "1"`, `version: "`+strings.Repeat("1", 33)+`"`), []string{"version:"}},
		{"missing effect", with("effect: read_only", ""), []string{`"ping" version "1"`, "effect: missing"}},
		{"bad effect", with("effect: read_only", "effect: writes"), []string{"effect:", `"writes"`}},
		{"ttl missing when required", with("effect: read_only", "effect: read_only\n    approval: {required: true}"), []string{"approval.ttl: required"}},
		{"ttl zero when required", with("effect: read_only", "effect: read_only\n    approval: {required: true, ttl: 0s}"), []string{"approval.ttl"}},
		{"ttl negative", with("effect: read_only", "effect: read_only\n    approval: {required: true, ttl: -1m}"), []string{"approval.ttl"}},
		{"ttl bad", with("effect: read_only", "effect: read_only\n    approval: {required: true, ttl: soon}"), []string{"approval.ttl"}},
		{"ttl without required", with("effect: read_only", "effect: read_only\n    approval: {ttl: 1m}"), []string{"approval.ttl: set but"}},
		{"missing schema", with("    args_schema:\n      type: object\n", ""), []string{"args_schema: missing"}},
		{"schema not object type", with("type: object", "type: array"), []string{"args_schema", "type must be object"}},
		{"schema without type", with("type: object", "properties: {}"), []string{"type must be object"}},
		{"schema not a mapping", with("args_schema:\n      type: object\n", "args_schema: [1]\n"), []string{"args_schema", "not a mapping"}},
		{"schema does not compile", with("type: object", "type: object\n      properties: {a: {type: strin}}"), []string{"args_schema"}},
		{"schema bad regex", with("type: object", "type: object\n      properties: {a: {pattern: \"(?=x)\"}}"), []string{"args_schema"}},
		{"schema remote ref", with("type: object", "type: object\n      properties: {a: {$ref: \"https://example.com/s.json\"}}"), []string{"args_schema"}},
		{"schema file ref", with("type: object", "type: object\n      properties: {a: {$ref: \"file:///etc/passwd\"}}"), []string{"args_schema"}},
		{"schema timestamp", with("type: object", "type: object\n      properties: {a: {const: 2024-01-02}}"), []string{"args_schema", "quote it"}},
		{"schema non-string key", with("type: object", "type: object\n      properties: {1: {type: string}, [a]: {}}"), []string{"args_schema"}},
		{"schema NaN", with("type: object", "type: object\n      properties: {a: {maximum: .nan}}"), []string{"args_schema", "not a JSON number"}},
		{"missing executor", with("executor:\n      type: http\n      url: http://127.0.0.1:1/ping\n", ""), []string{"executor: missing"}},
		{"missing executor type", with("type: http", "url2: x"), []string{"executor"}},
		{"empty executor type", with("type: http", `type: ""`), []string{"executor.type: missing"}},
		{"http without url", with("url: http://127.0.0.1:1/ping", ""), []string{"executor.url: missing"}},
		{"http bad scheme", with("url: http://127.0.0.1:1/ping", "url: ftp://x/y"), []string{"executor.url"}},
		{"http no host", with("url: http://127.0.0.1:1/ping", "url: http:///y"), []string{"executor.url", "no host"}},
		{"http unexpanded env", with("url: http://127.0.0.1:1/ping", "url: ${NOPE}/x"), []string{"executor.url"}},
		{"lookup without key", with("type: http", "type: http\n      lookup_url: http://x/lookup"), []string{"executor.lookup_url", "{key}"}},
		{"lookup bad url", with("type: http", "type: http\n      lookup_url: /lookup/{key}"), []string{"executor.lookup_url"}},
		{"lookup_consistent alone", with("type: http", "type: http\n      lookup_consistent: true"), []string{"executor.lookup_consistent"}},
		{"bad timeout", with("type: http", "type: http\n      timeout: 10"), []string{"executor.timeout"}},
		{"zero timeout", with("type: http", "type: http\n      timeout: 0s"), []string{"executor.timeout"}},
		{"zero attempts", with("type: http", "type: http\n      max_attempts: 0"), []string{"executor.max_attempts"}},
		{"too many attempts", with("type: http", "type: http\n      dedupes_keys: true\n      max_attempts: 11"), []string{"executor.max_attempts"}},
		{"retries without dedupe", with("type: http", "type: http\n      max_attempts: 2"), []string{"executor.max_attempts", "dedupes_keys"}},
		{"empty ref path segment", with("type: http", "type: http\n      external_ref_field: data..id"), []string{"executor.external_ref_field"}},
		{"bad header name", with("type: http", "type: http\n      headers: {\"X Bad\": v}"), []string{"executor.headers"}},
		{"reserved header", with("type: http", "type: http\n      headers: {idempotency-key: fixed}"), []string{"executor.headers", "set by the executor"}},
		{"redirect declared definitive", with("type: http", "type: http\n      definitive_statuses: [400, 302]"), []string{"executor.definitive_statuses", "302"}},
		{"success declared definitive", with("type: http", "type: http\n      definitive_statuses: [200]"), []string{"executor.definitive_statuses"}},
		{"lookup status in two lists", with("type: http", "type: http\n      lookup_url: http://x/l?k={key}\n      lookup_succeeded: [done]\n      lookup_pending: [Done]"), []string{"executor.lookup_pending", "lookup_succeeded"}},
		{"lookup statuses without lookup", with("type: http", "type: http\n      lookup_succeeded: [done]"), []string{"without lookup_url"}},
		{"header with newline", with("type: http", "type: http\n      headers: {X-A: \"a\\r\\nX-B: b\"}"), []string{"executor.headers"}},
		{"duplicate name and version", "tools:" + minimalTool + minimalTool, []string{"tools[1]", "duplicate"}},
		{"bad env reference", with("url: http://127.0.0.1:1/ping", "url: ${1}"), []string{"line 9", "bad variable reference"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := Parse([]byte(tt.src), fakeEnv(nil))
			require.Error(t, err)
			require.Nil(t, r)
			for _, w := range tt.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestParseCustomExecutor(t *testing.T) {
	t.Parallel()
	src := `tools:
  - name: deploy
    version: "7"
    effect: idempotent
    args_schema: {type: object}
    executor:
      type: k8s_rollout
      dedupes_keys: true
      max_attempts: 3
      headers: {X-Cluster: prod}
`
	r, err := Parse([]byte(src), fakeEnv(nil))
	require.NoError(t, err)
	d, err := r.Lookup("deploy", "7")
	require.NoError(t, err)
	require.Equal(t, "k8s_rollout", d.Executor.Type)
	require.Empty(t, d.Executor.URL) // URL is only required for http
	require.Equal(t, 3, d.Executor.MaxAttempts)
}

func TestLoad(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tools.yaml")
	require.NoError(t, os.WriteFile(path, []byte("tools:"+minimalTool), 0o600))
	r, err := Load(path, fakeEnv(nil))
	require.NoError(t, err)
	require.Len(t, r.List(), 1)

	_, err = Load(filepath.Join(t.TempDir(), "missing.yaml"), fakeEnv(nil))
	require.True(t, errors.Is(err, os.ErrNotExist))

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("tools: []"), 0o600))
	_, err = Load(bad, fakeEnv(nil))
	require.ErrorContains(t, err, bad)
}

// TestEmptyDeclarationsMeanWhatTheySay: "definitive_statuses: []" declares
// that no status proves nothing happened (every refusal is then unknown),
// where it read as "the defaults" and made 400, 403, 404 and 422 FAILED;
// empty lookup lists, which would read as the defaults too, are
// refused.
func TestEmptyDeclarationsMeanWhatTheySay(t *testing.T) {
	t.Parallel()
	src := func(extra string) []byte {
		return []byte(`tools:
  - name: pay
    version: "1"
    effect: side_effect
    args_schema: {type: object}
    executor:
      type: http
      url: http://127.0.0.1:9/charges
` + extra)
	}
	reg, err := Parse(src("      definitive_statuses: []\n"), func(string) string { return "" })
	require.NoError(t, err)
	tl, err := reg.Lookup("pay", "1")
	require.NoError(t, err)
	cl := tl.Executor.WithDefaults().Classification
	for _, code := range []int{400, 403, 404, 422} {
		require.False(t, cl.Definitive(code), "status %d", code)
	}
	reg, err = Parse(src(""), func(string) string { return "" })
	require.NoError(t, err)
	tl, err = reg.Lookup("pay", "1")
	require.NoError(t, err)
	require.True(t, tl.Executor.WithDefaults().Classification.Definitive(404), "absent: the default")

	_, err = Parse(src("      lookup_url: http://127.0.0.1:9/charges?key={key}\n      lookup_succeeded: []\n      lookup_failed: []\n      lookup_pending: []\n"),
		func(string) string { return "" })
	require.ErrorContains(t, err, "declared, and empty")
	_, err = Parse(src("      lookup_url: http://127.0.0.1:9/charges?key={key}\n      lookup_succeeded: []\n      lookup_failed: []\n"),
		func(string) string { return "" })
	require.ErrorContains(t, err, "declared, and empty", "two empty lists and the third left out read as the defaults too")
}
