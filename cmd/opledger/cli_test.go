package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/fakepay"
	"github.com/opledger/opledger/proof/harness"
	"github.com/opledger/opledger/proof/pgtest"
)

// cliResult is what one run of the opledger binary printed and how it
// ended.
type cliResult struct {
	stdout, stderr string
	code           int
}

// runCLI runs the real opledger binary with args and env (KEY=VALUE entries
// added to a clean environment: nothing OPLEDGER_* or DATABASE_URL leaks in
// from the test's own) and waits for it, up to a minute.
func runCLI(t *testing.T, env []string, args ...string) cliResult {
	t.Helper()
	bin := harness.Binary(t) // built once per test binary, before the command's clock starts
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(cleanEnv(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("opledger %s: %v", strings.Join(args, " "), err)
	}
	return cliResult{stdout: stdout.String(), stderr: stderr.String(), code: code}
}

// cleanEnv is the test's environment without opledger's own settings.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OPLEDGER_") && !strings.HasPrefix(kv, "DATABASE_URL=") && !strings.HasPrefix(kv, "FAKEPAY_URL=") {
			env = append(env, kv)
		}
	}
	return env
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

// flagLine matches a flag's first line in -h output: "  -name type".
var flagLine = regexp.MustCompile(`(?m)^  -([a-z][a-z0-9-]*)(?: (\S.*))?\n((?:    \t.*\n?)+)`)

// numberLike is a default that a string-typed flag should not have: it
// would be a duration, a number or a boolean in disguise.
var numberLike = regexp.MustCompile(`\(default "(-?[0-9.]+(ns|us|µs|ms|s|m|h)?|true|false)"\)`)

// TestHelpOnEveryCommand: -h and --help on every command exit 0, print on
// standard output what the command does and its flags with their real
// types, and never print a secret taken from the environment.
func TestHelpOnEveryCommand(t *testing.T) {
	t.Parallel()
	secretEnv := []string{"DATABASE_URL=postgres://app:hunter2@db.internal/opledger",
		"OPLEDGER_DOWNSTREAM_SECRET=00112233445566778899aabbccddeeff00112233",
		"OPLEDGER_API_KEY=hunter2-agent-key", "OPLEDGER_MCP_TOKEN=hunter2-mcp-token"}
	commands := []struct {
		args  []string
		about string // a phrase of what the command does
	}{
		{nil, "execution ledger"},
		{[]string{"serve"}, "Runs the gRPC ledger service"},
		{[]string{"dev"}, "Starts everything a first try needs"},
		{[]string{"migrate"}, "Applies the pending database migrations"},
		{[]string{"keys"}, "Manages the API keys"},
		{[]string{"keys", "create"}, "prints its new API"},
		{[]string{"keys", "list"}, "Lists a tenant's principals"},
		{[]string{"keys", "revoke"}, "Revokes a principal's API key"},
		{[]string{"fakepay"}, "Runs the fake payment processor"},
		{[]string{"probe"}, "Checks what the tools file declares"},
		{[]string{"chaos"}, "Runs the fault-injection suite"},
		{[]string{"bench"}, "Measures opledger's throughput"},
		{[]string{"mcp"}, "Runs the MCP gateway"},
		{[]string{"audit"}, "every event of an operation is hash-chained"},
		{[]string{"audit", "keygen"}, "Makes an Ed25519 key"},
		{[]string{"audit", "export"}, "Writes a tenant's receipts as JSON Lines"},
		{[]string{"audit", "verify"}, "Checks the receipts"},
	}
	for _, c := range commands {
		name := strings.Join(c.args, " ")
		for _, h := range []string{"-h", "--help"} {
			r := runCLI(t, secretEnv, append(append([]string(nil), c.args...), h)...)
			require.Equal(t, 0, r.code, "opledger %s %s exits 0; stderr:\n%s", name, h, r.stderr)
			require.Empty(t, r.stderr, "opledger %s %s: help goes to standard output", name, h)
			require.True(t, strings.HasPrefix(r.stdout, strings.TrimSpace("usage: opledger "+name)), "opledger %s %s:\n%s", name, h, r.stdout)
			require.Contains(t, strings.Join(strings.Fields(r.stdout), " "), c.about, "opledger %s %s says what it does", name, h)
			require.NotContains(t, r.stdout, "help requested")
			require.NotContains(t, r.stdout, "hunter2", "no secret from the environment in help")
			require.NotContains(t, r.stdout, "00112233445566778899", "no secret from the environment in help")
			for _, m := range flagLine.FindAllStringSubmatch(r.stdout, -1) {
				if m[2] == "string" {
					require.NotRegexp(t, numberLike, m[3], "opledger %s: --%s is typed string but its default is not", name, m[1])
				}
			}
		}
	}

	// `opledger help CMD` is `opledger CMD -h`.
	r := runCLI(t, nil, "help", "keys", "revoke")
	require.Equal(t, 0, r.code)
	require.True(t, strings.HasPrefix(r.stdout, "usage: opledger keys revoke"), r.stdout)

	// The serve flags carry their types.
	r = runCLI(t, nil, "serve", "-h")
	for _, want := range []string{"  -min-lease duration\n", "  -auth-cache-ttl duration\n", "  -db-max-conns int\n",
		"  -rate-limit float\n", "  -downstream-secret hex\n", "  -tools FILE\n", "  -listen HOST:PORT\n", "  -reflection\n",
		"(env OPLEDGER_MIN_LEASE)", "(default 30s)"} {
		require.Contains(t, r.stdout, want)
	}
	r = runCLI(t, nil, "keys", "create", "-h")
	require.Contains(t, r.stdout, "  -role roles\n")

	// A bad flag is still an error, on standard error.
	r = runCLI(t, nil, "migrate", "--nope")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "flag provided but not defined: -nope")
	require.Contains(t, r.stderr, "usage: opledger migrate")
	r = runCLI(t, nil, "serve", "stray")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, `unexpected argument "stray"`)
}

// TestServeRequiresTools: serve without --tools refuses to start, and says
// why and what to do, instead of serving the demo tools against whatever
// listens on 127.0.0.1:7070.
func TestServeRequiresTools(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{})
	r := runCLI(t, []string{"DATABASE_URL=" + env.DBURL, "OPLEDGER_DOWNSTREAM_SECRET=00112233445566778899aabbccddeeff",
		"OPLEDGER_LISTEN=127.0.0.1:0"}, "serve")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "--tools FILE (env OPLEDGER_TOOLS) is required")
	require.Contains(t, r.stderr, "opledger dev")
	require.NotContains(t, r.stderr, `"msg":"serving"`, "it never served")
	// With the file (given by its variable, as the harness does) it serves:
	// every process test starts serve that way.
	p := env.StartProcess(harness.ProcessOptions{})
	require.NotEmpty(t, p.Addr)
}

// TestGitIgnoresDevFiles: the dev directory (plaintext keys, the secret)
// and the README session's prepared.json never end up in a commit.
func TestGitIgnoresDevFiles(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	if out, err := exec.Command("git", "-C", root, "rev-parse", "--is-inside-work-tree").Output(); err != nil || strings.TrimSpace(string(out)) != "true" {
		t.Skip("not a git work tree")
	}
	for _, p := range []string{".opledger-dev/env", ".opledger-dev/downstream-secret", ".opledger-dev/dev.lock",
		"clients/python/.opledger-dev/env", "prepared.json"} {
		out, err := exec.Command("git", "-C", root, "check-ignore", "--no-index", "-q", p).CombinedOutput()
		require.NoError(t, err, "%s must be git-ignored %s", p, out)
	}
}

// syncBuffer is a bytes.Buffer safe for a process's writer and the test's
// readers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestKeysCreateListRevoke drives the keys commands as a real operator
// would, against a real serve process: roles with spaces and repeated
// flags, a list that shows everything but the key, and a revocation that
// the server honours within its auth cache TTL.
func TestKeysCreateListRevoke(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{})
	db := []string{"DATABASE_URL=" + env.DBURL}
	p := env.StartProcess(harness.ProcessOptions{Env: []string{"OPLEDGER_AUTH_CACHE_TTL=1s"}})

	r := runCLI(t, db, "keys", "create", "--tenant", "acme", "--role", "agent, approver", "--name", "both")
	require.Equal(t, 0, r.code, r.stderr)
	both := lastLine(r.stdout)
	require.Regexp(t, `^opl_[A-Za-z0-9_-]{43}$`, both, "the key is the last line of stdout")
	require.Contains(t, r.stdout, "with roles agent,approver")
	r = runCLI(t, db, "keys", "create", "--tenant", "acme", "--role", "agent", "--role", " operator ", "--name", "ops")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "with roles agent,operator")
	ops := lastLine(r.stdout)
	r = runCLI(t, db, "keys", "create", "--tenant", "acme", "--role", "agent,auditor")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, `unknown role "auditor"`)

	r = runCLI(t, db, "keys", "list", "--tenant", "acme")
	require.Equal(t, 0, r.code, r.stderr)
	t.Logf("keys list:\n%s", r.stdout)
	require.Regexp(t, `(?m)^ID\s+NAME\s+ROLES\s+KEY PREFIX\s+CREATED\s+REVOKED$`, r.stdout)
	require.Regexp(t, `(?m)^pr_\S+\s+both\s+agent,approver\s+`+regexp.QuoteMeta(both[:12])+`…\s+\d{4}-\d\d-\d\dT\S+Z\s+-$`, r.stdout)
	require.NotContains(t, r.stdout, both, "never the key")
	require.NotContains(t, r.stdout, ops, "never the key")
	r = runCLI(t, db, "keys", "list", "--tenant", "nobody")
	require.Equal(t, 0, r.code)
	require.Contains(t, r.stdout, "tenant nobody has no principals")

	// The key works, then is revoked, then stops working within the TTL.
	requireAuthenticated(t, p, both)
	r = runCLI(t, db, "keys", "revoke", "--tenant", "acme", "--name", "both")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "revoked principal ")
	require.Contains(t, r.stdout, "auth cache TTL (--auth-cache-ttl, default 30s)")
	requireRevokedSoon(t, p, both, 10*time.Second)
	requireAuthenticated(t, p, ops)

	r = runCLI(t, db, "keys", "list", "--tenant", "acme")
	require.Regexp(t, `(?m)^pr_\S+\s+both\s+agent,approver\s+\S+\s+\S+Z\s+\d{4}-\d\d-\d\dT\S+Z$`, r.stdout, "the revocation time is listed")

	// Again: nothing changes, and it says so.
	r = runCLI(t, db, "keys", "revoke", "--tenant", "acme", "--name", "both")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "was already revoked at")
	// Another tenant's principal by the same name does not exist for acme.
	r = runCLI(t, db, "keys", "revoke", "--tenant", "other", "--name", "ops")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, `tenant "other" has no principal named "ops"`)
	requireAuthenticated(t, p, ops)
	r = runCLI(t, db, "keys", "revoke", "--tenant", "acme")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "exactly one of --name and --id")

	// By id, as keys list shows it.
	r = runCLI(t, db, "keys", "list", "--tenant", "acme")
	id := regexp.MustCompile(`(?m)^(pr_\S+)\s+ops\s`).FindStringSubmatch(r.stdout)
	require.NotNil(t, id, r.stdout)
	r = runCLI(t, db, "keys", "revoke", "--tenant", "acme", "--id", id[1])
	require.Equal(t, 0, r.code, r.stderr)
	requireRevokedSoon(t, p, ops, 10*time.Second)
}

// requireAuthenticated checks that key passes authentication at p: a Get
// of an operation that does not exist is NOT_FOUND, not UNAUTHENTICATED.
func requireAuthenticated(t *testing.T, p *harness.Process, key string) {
	t.Helper()
	_, err := p.Client.Get(harness.Ctx(key, ""), &opledgerv1.GetRequest{OperationId: "op_none"})
	require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
}

// requireRevokedSoon waits until p refuses key as invalid.
func requireRevokedSoon(t *testing.T, p *harness.Process, key string, within time.Duration) {
	t.Helper()
	var last error
	require.Eventually(t, func() bool {
		_, last = p.Client.Get(harness.Ctx(key, ""), &opledgerv1.GetRequest{OperationId: "op_none"})
		return status.Code(last) == codes.Unauthenticated
	}, within, 50*time.Millisecond, "the revoked key still works: %v", last)
	st, _ := status.FromError(last)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			require.Equal(t, "API_KEY_INVALID", info.GetReason())
			return
		}
	}
	t.Fatalf("no ErrorInfo in %v", last)
}

// devProcess is a real `opledger dev` process.
type devProcess struct {
	cmd    *exec.Cmd
	out    *syncBuffer
	done   chan struct{}
	env    map[string]string // DIR/env, once ready
	stdout string
}

// startDev starts `opledger dev --dir dir` on free ports and, when ready
// is true, waits until it is ready and has written its env file.
func startDev(t *testing.T, dir string, ready bool) *devProcess {
	t.Helper()
	cmd := exec.Command(harness.Binary(t), "dev", "--dir", dir, "--listen", "127.0.0.1:0", "--fakepay-listen", "127.0.0.1:0",
		"--log-level", "warn")
	cmd.Env = cleanEnv()
	d := &devProcess{cmd: cmd, out: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = d.out, d.out
	require.NoError(t, cmd.Start())
	go func() { _ = cmd.Wait(); close(d.done) }()
	t.Cleanup(func() { d.signal(os.Interrupt) })
	if !ready {
		return d
	}
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(d.out.String(), "opledger dev is ready") {
		select {
		case <-d.done:
			t.Fatalf("opledger dev exited before it was ready:\n%s", d.out.String())
		case <-time.After(50 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "opledger dev not ready in 2 min:\n%s", d.out.String())
	}
	d.env = readEnvFile(t, filepath.Join(dir, "env"))
	return d
}

// signal sends sig and waits for the exit (SIGKILL after 60 s).
func (d *devProcess) signal(sig os.Signal) {
	select {
	case <-d.done:
		return
	default:
	}
	_ = d.cmd.Process.Signal(sig)
	select {
	case <-d.done:
	case <-time.After(60 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}

// exited waits up to d for the process to exit on its own.
func (d *devProcess) exited(within time.Duration) bool {
	select {
	case <-d.done:
		return true
	case <-time.After(within):
		return false
	}
}

func readEnvFile(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	env := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "="); ok {
			env[k] = v
		}
	}
	return env
}

// chargesAt counts the charges the fake processor at base holds.
func chargesAt(t *testing.T, base string) int {
	t.Helper()
	n, err := (&fakepay.Client{BaseURL: base}).Charges(context.Background())
	require.NoError(t, err)
	return len(n)
}

// devDir is a directory for `opledger dev` that PostgreSQL, running as the
// postgres user when the tests run as root, can enter.
func devDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "opledger-devtest-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() {
		// A postmaster orphaned by a failed test (its dev was SIGKILLed):
		// stop it hard before removing its files.
		if b, err := os.ReadFile(filepath.Join(dir, "dev", "pg", "data", "postmaster.pid")); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])); err == nil {
				_ = syscall.Kill(pid, syscall.SIGQUIT)
			}
		}
		_ = os.RemoveAll(dir)
	})
	return filepath.Join(dir, "dev")
}

// TestDevOneInstancePerDirectory: a second `opledger dev` in the same
// directory refuses while the first is alive, says who holds it, and
// leaves the first one working; once the first has crashed (SIGKILL, no
// cleanup) the next one starts. It also checks what the README says about
// a restart: the database and the keys survive, the processor's charges
// do not; and that the env file names the processor's real URL.
func TestDevOneInstancePerDirectory(t *testing.T) {
	t.Parallel()
	dir := devDir(t)
	first := startDev(t, dir, true)
	require.Regexp(t, `^http://127\.0\.0\.1:\d+$`, first.env["FAKEPAY_URL"])
	require.NotEqual(t, "http://127.0.0.1:0", first.env["FAKEPAY_URL"], "the env file has the port the processor bound")
	require.Equal(t, first.env["FAKEPAY_URL"], first.env["OPLEDGER_FAKEPAY_URL"])
	require.Contains(t, first.out.String(), "fake processor "+first.env["FAKEPAY_URL"])
	require.NotContains(t, first.env["OPLEDGER_ADDR"], ":0")

	// One payment through the first instance, counted at the processor the
	// env file names.
	c := harness.Dial(t, first.env["OPLEDGER_ADDR"])
	op := prepareApproved(t, c, first.env["AGENT_KEY"], first.env["APPROVER_KEY"])
	_, err := c.Execute(harness.Ctx(first.env["AGENT_KEY"], ""), &opledgerv1.ExecuteRequest{OperationId: op.GetId()})
	require.NoError(t, err)
	require.Equal(t, 1, chargesAt(t, first.env["FAKEPAY_URL"]))

	second := startDev(t, dir, false)
	require.True(t, second.exited(time.Minute), "a second dev in the same directory must give up:\n%s", second.out.String())
	require.Equal(t, 1, second.cmd.ProcessState.ExitCode())
	msg := second.out.String()
	require.Contains(t, msg, "another opledger dev is running in")
	require.Contains(t, msg, "pid "+strconv.Itoa(first.cmd.Process.Pid))
	require.Contains(t, msg, "gRPC "+first.env["OPLEDGER_ADDR"])
	require.Contains(t, msg, "fake processor "+first.env["FAKEPAY_URL"])
	require.NotContains(t, msg, "starting a private PostgreSQL", "it gave up before touching the database")

	// The first one still answers, database included.
	got, err := c.Get(harness.Ctx(first.env["AGENT_KEY"], ""), &opledgerv1.GetRequest{OperationId: op.GetId()})
	require.NoError(t, err, "the first instance must keep working")
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, got.GetOperation().GetState())

	// A crash leaves the lock file but not the lock.
	first.signal(syscall.SIGKILL)
	third := startDev(t, dir, true)
	c3 := harness.Dial(t, third.env["OPLEDGER_ADDR"])
	require.NotEqual(t, first.env["AGENT_KEY"], third.env["AGENT_KEY"], "every start issues new keys")
	got, err = c3.Get(harness.Ctx(first.env["AGENT_KEY"], ""), &opledgerv1.GetRequest{OperationId: op.GetId()})
	require.NoError(t, err, "the earlier keys stay valid across a restart")
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, got.GetOperation().GetState(), "the database survives a restart")
	require.Equal(t, 0, chargesAt(t, third.env["FAKEPAY_URL"]), "the fake processor's charges do not")

	third.signal(os.Interrupt)
	require.Equal(t, 0, third.cmd.ProcessState.ExitCode(), third.out.String())
}

// TestKeysNeverMigrate: the keys commands work on the schema as it is.
// Against a database not yet migrated they say to run migrate and change
// nothing; silently applying migrations from an operator's shell could
// move the schema under running replicas mid-upgrade.
func TestKeysNeverMigrate(t *testing.T) {
	t.Parallel()
	db := []string{"DATABASE_URL=" + pgtest.NewEmptyDatabase(t)}
	for _, args := range [][]string{
		{"keys", "create", "--tenant", "acme", "--role", "agent"},
		{"keys", "list", "--tenant", "acme"},
		{"keys", "revoke", "--tenant", "acme", "--name", "x"},
	} {
		r := runCLI(t, db, args...)
		require.Equal(t, 1, r.code, "%v: %s", args, r.stdout)
		require.Contains(t, r.stderr, "run opledger migrate", args)
	}
	r := runCLI(t, db, "migrate")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "migrations applied: [1 2 ", "the keys commands applied nothing")
	r = runCLI(t, db, "keys", "create", "--tenant", "acme", "--role", "agent")
	require.Equal(t, 0, r.code, r.stderr)
}
