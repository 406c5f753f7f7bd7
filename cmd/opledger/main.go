// Command opledger is the execution ledger for AI agents' side-effecting
// tool calls: `serve` runs the gRPC service, `dev` a self-contained local
// setup, `migrate` applies the schema, `keys create` issues API keys,
// `fakepay` runs the fake payment processor and `probe` checks a tool's
// declarations against its downstream.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/opledger/opledger/examples"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/proof/fakepay"
	"github.com/opledger/opledger/service"
	"github.com/opledger/opledger/store"
	"github.com/opledger/opledger/tool"
)

const usage = `usage: opledger <command> [flags]

opledger is an execution ledger for AI agents' side-effecting tool calls:
Prepare, Approve, Execute, Get and Reconcile over gRPC, at most one
downstream effect per approved operation.

commands:
  serve        run the gRPC ledger service (DATABASE_URL, --tools FILE, --listen HOST:PORT)
  dev          a private PostgreSQL, the fake processor and the service, with demo keys
  migrate      apply pending database migrations (DATABASE_URL)
  keys create  create an API key: --tenant T --role agent|approver|operator [--name N]
  keys list    list a tenant's principals (never their keys): --tenant T
  keys revoke  revoke an API key: --tenant T --name N | --id ID
  fakepay      run the fake payment processor (--listen HOST:PORT)
  audit        the receipts: keygen, export a tenant's records, verify them (docs/audit.md)
  probe        check a tool's declarations against its real downstream (--tools FILE --tool NAME --args FILE --yes)
  mcp          the MCP gateway: the ledger's tools for MCP clients (stdio, or --listen HOST:PORT)
  chaos        run the fault-injection suite and check every effect (--duration D)
  bench        measure throughput and latency against baselines (--quick)

Run 'opledger <command> -h' for what a command does and its flags.
`

const keysUsage = `usage: opledger keys <create|list|revoke> [flags]

Manages the API keys of a tenant's principals, directly in the database
(DATABASE_URL). Keys are stored only as hashes: they are shown once, by
create, and never again.

  keys create  create a principal and print its new key (the last line of standard output)
  keys list    list a tenant's principals: id, name, roles, key prefix, created, revoked
  keys revoke  revoke a principal's key, by --name or --id

Run 'opledger keys <command> -h' for its flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "opledger:", err)
		code := 1
		if ee, ok := errors.AsType[*exitError](err); ok {
			code = ee.code
		}
		os.Exit(code)
	}
}

// exitError is an error that ends the process with its own exit status
// rather than 1: probe tells a contradiction (1) from no verdict (2).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

func (e *exitError) Unwrap() error { return e.err }

// run runs the command in args. A help request (-h, --help, help) is
// answered on stdout and is a success.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	err := dispatch(ctx, args, stdout, stderr, getenv)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	switch args[0] {
	case "serve":
		return cmdServe(ctx, args[1:], stdout, stderr, getenv)
	case "dev":
		return cmdDev(ctx, args[1:], stdout, stderr, getenv)
	case "migrate":
		return cmdMigrate(ctx, args[1:], stdout, stderr, getenv)
	case "keys":
		sub := ""
		if len(args) > 1 {
			sub = args[1]
		}
		switch sub {
		case "create":
			return cmdKeysCreate(ctx, args[2:], stdout, stderr, getenv)
		case "list":
			return cmdKeysList(ctx, args[2:], stdout, stderr, getenv)
		case "revoke":
			return cmdKeysRevoke(ctx, args[2:], stdout, stderr, getenv)
		case "-h", "-help", "--help", "help":
			fmt.Fprint(stdout, keysUsage)
			return flag.ErrHelp
		}
		fmt.Fprint(stderr, keysUsage)
		if sub == "" {
			return errors.New("keys: no subcommand given")
		}
		return fmt.Errorf("keys: unknown subcommand %q", sub)
	case "fakepay":
		return cmdFakepay(ctx, args[1:], stdout, stderr, getenv)
	case "audit":
		return cmdAudit(ctx, args[1:], stdout, stderr, getenv)
	case "probe":
		return cmdProbe(ctx, args[1:], stdout, stderr, getenv)
	case "mcp":
		return cmdMCP(ctx, args[1:], stdout, stderr, getenv)
	case "chaos":
		return cmdChaos(ctx, args[1:], stdout, stderr, getenv)
	case "bench":
		return cmdBench(ctx, args[1:], stdout, stderr, getenv)
	case "bench-floor":
		return cmdBenchFloor(ctx, args[1:], stdout, stderr, getenv)
	case "help":
		// `opledger help keys create` is `opledger keys create -h`.
		if len(args) > 1 {
			return dispatch(ctx, append(append([]string(nil), args[1:]...), "-h"), stdout, stderr, getenv)
		}
		fmt.Fprint(stdout, usage)
		return flag.ErrHelp
	case "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return flag.ErrHelp
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

// checkLogLevel refuses a --log-level that newLogger would not understand,
// rather than logging at info while the operator expects another level.
func checkLogLevel(level string) error {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return fmt.Errorf("--log-level (OPLEDGER_LOG_LEVEL): %q is not debug, info, warn or error", level)
	}
	return nil
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}

// errToolsRequired is serve's answer to a missing --tools: serving the
// built-in demo tools by default would point a production server's
// pay_invoice at whatever listens on 127.0.0.1:7070.
var errToolsRequired = errors.New(`serve: --tools FILE (env OPLEDGER_TOOLS) is required: the tools file declares every tool the ledger may run and where it sends them (docs/tools.md).
  To try opledger locally, run 'opledger dev' (it serves the demo tools against its own fake processor).
  To serve the demo tools yourself: --tools examples/tools.yaml, with OPLEDGER_FAKEPAY_URL set to your processor`)

func cmdServe(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := newFlagSet("serve", "--tools FILE [flags]", `
Runs the gRPC ledger service (opledger.v1.LedgerService, gRPC health and
reflection) against the PostgreSQL database in DATABASE_URL. The tools it
may run, and where each one sends its requests, come from the tools file
(--tools, required; docs/tools.md). Several serve processes may share one
database: all coordination is in PostgreSQL. Every flag may also be set by
the environment variable named with it; a flag beats its variable.`)
	var cfg Config
	finish := bindConfig(fs, &cfg, getenv)
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	if err := finish(); err != nil {
		return err
	}
	if cfg.Tools == "" {
		return errToolsRequired
	}
	logger := newLogger(stderr, cfg.LogLevel)
	return serve(ctx, cfg, logger, getenv, nil)
}

// defaultGCPercent is --gc-percent's default (docs/performance.md, finding
// 21).
const defaultGCPercent = 400

// gcPercent is the garbage collector target serve and dev set for their
// process, and whether to set it: not when GOGC is set, which the runtime
// has applied already (Config.GCPercent).
func gcPercent(cfg Config, getenv func(string) string) (int, bool) {
	if getenv("GOGC") != "" || cfg.GCPercent <= 0 {
		return 0, false
	}
	return cfg.GCPercent, true
}

// serve runs the service until ctx ends. ready, if set, learns where it
// answers once everything listens.
func serve(ctx context.Context, cfg Config, logger *slog.Logger, getenv func(string) string, ready func(service.Ready)) error {
	var reg *tool.Registry
	var err error
	if cfg.Tools == "" {
		// Only dev gets here (serve requires --tools): the demo tools, with
		// getenv pointing them at dev's own fake processor.
		reg, err = tool.Parse(examples.ToolsYAML, getenv)
	} else {
		reg, err = tool.Load(cfg.Tools, getenv)
	}
	if err != nil {
		return err
	}
	if percent, ok := gcPercent(cfg, getenv); ok {
		debug.SetGCPercent(percent)
	}
	shutdownTracing, tracing, err := setupTracing(ctx, getenv, os.Stderr)
	if err != nil {
		return err
	}
	defer func() { _ = shutdownTracing(context.WithoutCancel(ctx)) }()
	opts := service.Options{Logger: logger, Tools: reg, Tracing: tracing}
	installFaults(&opts)
	svc, err := service.New(ctx, cfg, opts)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		svc.Close()
		return err
	}
	return svc.Run(ctx, lis, ready)
}

func cmdMigrate(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := newFlagSet("migrate", "[flags]", `
Applies the pending database migrations to DATABASE_URL and prints the
versions it applied. Migrations run under an advisory lock, so replicas may
start together; serve also applies them at start unless --migrate=false.`)
	e := newEnvFlags(fs)
	var url string
	e.str(&url, "database-url", "DATABASE_URL", "", "PostgreSQL connection `URL`")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	if err := e.apply(getenv); err != nil {
		return err
	}
	if url == "" {
		return errors.New("DATABASE_URL is not set")
	}
	applied, err := store.Migrate(ctx, url)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "migrations applied: %v\n", applied)
	return nil
}

// keysStore opens the database for a keys subcommand and checks that its
// schema is the one this binary knows. It never migrates: applying
// migrations from an operator's shell could move the schema under running
// replicas in the middle of an upgrade; `opledger migrate` (or serve) does.
func keysStore(ctx context.Context, url string) (*store.Store, error) {
	if url == "" {
		return nil, errors.New("DATABASE_URL is not set")
	}
	st, err := store.Open(ctx, store.Config{URL: url, MaxConns: 2})
	if err != nil {
		return nil, err
	}
	if err := st.CheckSchema(ctx); err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

func cmdKeysCreate(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := newFlagSet("keys create", "--tenant T --role ROLES [--name N]", `
Creates a principal in a tenant with the given roles and prints its new API
key as the last line of standard output. The key is shown this once: only
its SHA-256 is stored. Roles: agent (Prepare, Execute, Get, Reconcile,
Cancel), approver (Approve, Get), operator (Get, Reconcile with a manual
resolution, Cancel). Several roles: --role 'agent, approver' or --role
agent --role approver. The keys commands never migrate: run opledger
migrate first.`)
	e := newEnvFlags(fs)
	var url, tenant, name string
	var roles roleList
	e.str(&url, "database-url", "DATABASE_URL", "", "PostgreSQL connection `URL`")
	fs.StringVar(&tenant, "tenant", "", "`tenant` the key belongs to (required; 1 to 64 bytes of printable UTF-8 text)")
	fs.Var(&roles, "role", "the key's `roles`: agent, approver, operator; comma-separated or repeated (required)")
	fs.StringVar(&name, "name", "", "a `name` for the principal, unique in the tenant, at most 128 bytes of printable UTF-8 text, nothing invisible and no space but U+0020 (default: its id)")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	if err := e.apply(getenv); err != nil {
		return err
	}
	if tenant == "" || len(roles) == 0 {
		return errors.New("keys create: --tenant and --role are required")
	}
	st, err := keysStore(ctx, url)
	if err != nil {
		return err
	}
	defer st.Close()
	key, p, err := ledger.CreatePrincipal(ctx, st, tenant, name, roles)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "principal %s (%s) in tenant %s with roles %s\n", p.ID, p.Name, p.Tenant, strings.Join(p.Roles, ","))
	fmt.Fprintln(stdout, "the key is shown once and only its hash is stored:")
	fmt.Fprintln(stdout, key)
	return nil
}

func cmdKeysList(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := newFlagSet("keys list", "--tenant T", `
Lists a tenant's principals, revoked ones included, oldest first: id, name,
roles, the key's prefix (its first characters, to recognise a key you hold),
when it was created and when it was revoked. Keys themselves are never
stored, so they cannot be listed.`)
	e := newEnvFlags(fs)
	var url, tenant string
	e.str(&url, "database-url", "DATABASE_URL", "", "PostgreSQL connection `URL`")
	fs.StringVar(&tenant, "tenant", "", "the `tenant` whose principals to list (required)")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	if err := e.apply(getenv); err != nil {
		return err
	}
	if tenant == "" {
		return errors.New("keys list: --tenant is required")
	}
	st, err := keysStore(ctx, url)
	if err != nil {
		return err
	}
	defer st.Close()
	ps, err := ledger.ListPrincipals(ctx, st, tenant)
	if err != nil {
		return err
	}
	if len(ps) == 0 {
		fmt.Fprintf(stdout, "tenant %s has no principals\n", tenant)
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tROLES\tKEY PREFIX\tCREATED\tREVOKED")
	for _, p := range ps {
		revoked := "-"
		if !p.RevokedAt.IsZero() {
			revoked = p.RevokedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s…\t%s\t%s\n", p.ID, p.Name, strings.Join(p.Roles, ","), p.KeyPrefix,
			p.CreatedAt.UTC().Format(time.RFC3339), revoked)
	}
	return tw.Flush()
}

func cmdKeysRevoke(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := newFlagSet("keys revoke", "--tenant T (--name N | --id ID)", `
Revokes a principal's API key, named by --name or by --id (see 'opledger
keys list'). Revocation is final: issue a new key with 'keys create'.
Running servers remember an authenticated key for their auth cache TTL
(serve --auth-cache-ttl, default `+ledger.DefaultAuthCacheTTL.String()+`), so the key stops working
everywhere within that time; calls with it then fail UNAUTHENTICATED with
reason API_KEY_INVALID. Revoking a revoked key changes nothing.`)
	e := newEnvFlags(fs)
	var url, tenant, name, id string
	e.str(&url, "database-url", "DATABASE_URL", "", "PostgreSQL connection `URL`")
	fs.StringVar(&tenant, "tenant", "", "the principal's `tenant` (required)")
	fs.StringVar(&name, "name", "", "the principal's `name`")
	fs.StringVar(&id, "id", "", "the principal's `id` (pr_…)")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	if err := e.apply(getenv); err != nil {
		return err
	}
	if tenant == "" || (name == "") == (id == "") {
		return errors.New("keys revoke: --tenant and exactly one of --name and --id are required")
	}
	st, err := keysStore(ctx, url)
	if err != nil {
		return err
	}
	defer st.Close()
	p, already, err := ledger.RevokePrincipal(ctx, st, tenant, store.PrincipalRef{ID: id, Name: name})
	if err != nil {
		return err
	}
	when := p.RevokedAt.UTC().Format(time.RFC3339)
	if already {
		fmt.Fprintf(stdout, "principal %s (%s) in tenant %s was already revoked at %s; nothing changed\n", p.ID, p.Name, p.Tenant, when)
		return nil
	}
	fmt.Fprintf(stdout, "revoked principal %s (%s) in tenant %s at %s\n", p.ID, p.Name, p.Tenant, when)
	fmt.Fprintf(stdout, "running servers may accept the key for up to their auth cache TTL (--auth-cache-ttl, default %s) after this\n",
		ledger.DefaultAuthCacheTTL)
	return nil
}

func cmdFakepay(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := newFlagSet("fakepay", "[--listen HOST:PORT]", `
Runs the fake payment processor of the demo and the tests, in memory:
POST /charges with a Stripe-like Idempotency-Key contract (the same key and
body replay the first answer; the same key with another body is refused
422; while the first request is in flight, 409; an amount_minor that is not a
positive integer, 400), GET
/charges?idempotency_key=K (lookup by key), GET /charges and /charges/{id},
POST and GET /emails (no deduplication), and /admin/faults to inject faults.
Everything is lost when it stops.`)
	e := newEnvFlags(fs)
	var listen string
	e.str(&listen, "listen", "OPLEDGER_FAKEPAY_LISTEN", "127.0.0.1:7070", "HTTP listen address `HOST:PORT`")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	if err := e.apply(getenv); err != nil {
		return err
	}
	return fakepay.ListenAndServe(ctx, listen, newLogger(stderr, "info"))
}
