package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/proof/fakepay"
	"github.com/opledger/opledger/proof/pgcluster"
	"github.com/opledger/opledger/server"
	"github.com/opledger/opledger/store"
)

// Names of the bench's databases, tenant and tool.
const (
	dbMain      = "opledger"
	dbCeiling   = "ceiling"
	dbGrow      = "opledger_grow"
	dbGrowSmall = "opledger_grow_small"
	dbDBOS      = "dbos"
	tenant      = "bench"
	toolName    = "bench_charge"
	// policyToolName is toolName with a three-rule policy (toolsYAML).
	policyToolName = "bench_charge_policy"
)

// env is one run's world: the cluster, the fake processor, the servers and
// the clients of every system.
type env struct {
	opts       *Options
	dir        string
	cluster    *pgcluster.Cluster
	binDir     string
	pgVersion  string
	pgSettings map[string]string
	fakepay    *fakepay.Server
	fakepayURL string
	toolsYAML  []byte
	toolsFile  string
	secret     string
	apiKey     string
	principal  string

	stack   *stack // in-process server (always: profiles and the chain floor use it)
	procs   []*serveProcess
	clients *clients // opledger under test (the processes, or the stack)
	// noReceipts is opledger with receipts off (SystemOpledgerNoReceipts).
	noReceipts *clients
	// noReceiptsAA is a second set of them, the duet's control.
	noReceiptsAA *clients
	bare         *floorServer
	chain        *floorServer
	dbos         *dbosPeer
	// dbosDone holds workflow ids that completed, for DBOS replays.
	dbosDone []string

	closers []func()
}

// pgSettings are the cluster's settings beyond pgcluster's: room for every
// client, statement statistics, and WAL room for the bulk load (so that the
// bulk load does not checkpoint every few seconds). Everything else keeps
// PostgreSQL's defaults, fsync and synchronous_commit included.
var pgSettings = map[string]string{
	"max_connections":          "400",
	"shared_preload_libraries": "pg_stat_statements",
	"pg_stat_statements.max":   "1000",
	"max_wal_size":             "4GB",
}

func newEnv(ctx context.Context, dir string, opts *Options) (_ *env, err error) {
	e := &env{opts: opts, dir: dir, pgSettings: pgSettings, secret: randomHex(32)}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	if e.binDir, err = pgcluster.FindBinDir(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(e.binDir, "pgbench")); err != nil && opts.wants(SystemPgbench) {
		return nil, fmt.Errorf("bench: pgbench not found next to the PostgreSQL server binaries (%s)", e.binDir)
	}
	e.progress("starting PostgreSQL (durable: fsync on) in %s", dir)
	e.cluster, err = pgcluster.Start(ctx, pgcluster.Options{Dir: filepath.Join(dir, "pg"), Durable: true, Settings: pgSettings})
	if err != nil {
		return nil, err
	}
	e.closers = append(e.closers, func() { _ = e.cluster.Stop(context.Background()) })
	if e.pgVersion, err = e.psql(ctx, "postgres", "SHOW server_version"); err != nil {
		return nil, err
	}
	if _, err := e.psql(ctx, "postgres", "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		return nil, err
	}
	for _, name := range []string{dbMain, dbCeiling, dbDBOS} {
		if err := e.cluster.CreateDatabase(ctx, name, ""); err != nil {
			return nil, err
		}
	}
	for _, name := range []string{dbMain, dbCeiling} {
		if _, err := store.Migrate(ctx, e.cluster.URL(name)); err != nil {
			return nil, err
		}
	}

	// The fake processor, in this process, with no injected delay.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e.fakepay = fakepay.New(fakepay.Options{})
	fctx, cancelFakepay := context.WithCancel(context.WithoutCancel(ctx))
	go func() { _ = e.fakepay.Serve(fctx, lis) }()
	e.closers = append(e.closers, cancelFakepay)
	e.fakepayURL = "http://" + lis.Addr().String()
	e.toolsYAML = toolsYAML(e.fakepayURL)
	e.toolsFile = filepath.Join(dir, "tools.yaml")
	if err := os.WriteFile(e.toolsFile, e.toolsYAML, 0o644); err != nil {
		return nil, err
	}

	if err := e.seedPrincipal(ctx, dbMain); err != nil {
		return nil, err
	}
	if err := e.seedSynthetic(ctx, dbMain, 1, opts.Seed); err != nil {
		return nil, err
	}
	if err := e.seedSynthetic(ctx, dbCeiling, 1, opts.Seed); err != nil {
		return nil, err
	}

	if e.stack, err = startStack(ctx, e.cluster.URL(dbMain), e.toolsYAML, e.secret, opts.DBConns, 0, filepath.Join(dir, "inprocess.log")); err != nil {
		return nil, err
	}
	e.closers = append(e.closers, e.stack.stop)
	var addrs []string
	if opts.Binary == "" {
		addrs = []string{e.stack.addr}
	} else {
		for i := range opts.Processes {
			p, err := e.startServe(ctx, i, dbMain, true)
			if err != nil {
				return nil, err
			}
			e.procs = append(e.procs, p)
			addrs = append(addrs, p.addr)
		}
	}
	if e.clients, err = dialClients(addrs, e.apiKey, e.opts.GRPCConns); err != nil {
		return nil, err
	}
	e.clients.pids = e.serverPids()
	e.closers = append(e.closers, e.clients.close)

	if opts.wants(SystemGRPCFloor) || opts.wants(SystemGRPCChain) {
		canned, err := e.cannedResponses(ctx)
		if err != nil {
			return nil, err
		}
		if opts.Binary != "" {
			if err := canned.write(dir); err != nil {
				return nil, err
			}
		}
		// Each floor sits where the server under test sits: in a child
		// process when opledger runs as `opledger serve` children, in this
		// process with --in-process.
		start := func(chain bool) (*floorServer, error) {
			if opts.Binary != "" {
				return e.startFloorChild(ctx, chain)
			}
			var st *stack
			if chain {
				st = e.stack
			}
			return startFloor(canned, st, e.apiKey, e.opts.GRPCConns)
		}
		if opts.wants(SystemGRPCFloor) {
			if e.bare, err = start(false); err != nil {
				return nil, err
			}
			e.closers = append(e.closers, e.bare.stop)
		}
		if opts.wants(SystemGRPCChain) {
			if e.chain, err = start(true); err != nil {
				return nil, err
			}
			e.closers = append(e.closers, e.chain.stop)
		}
	}
	if opts.wants(SystemOpledgerNoReceipts) {
		if err := e.startNoReceipts(ctx); err != nil {
			return nil, err
		}
	}
	if opts.wants(SystemDBOS) {
		e.progress("launching DBOS Transact (system database %q on the same server)", dbDBOS)
		if e.dbos, err = startDBOS(ctx, e.cluster.URL(dbDBOS)+"&pool_max_conns="+strconv.Itoa(opts.DBConns), e.fakepayURL); err != nil {
			return nil, err
		}
		e.closers = append(e.closers, e.dbos.stop)
	}
	return e, nil
}

func (e *env) close() {
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
	e.closers = nil
}

// toolsYAML is the bench's tools: bench_charge, a charge through the fake
// processor, no approval, one attempt, keys deduped, so that every op is
// one charge; the same under a policy (policyToolName); and the budget
// scenarios' tools (budgetToolsYAML).
func toolsYAML(fakepayURL string) []byte {
	// The policy tool's three rules hold for none of the bench's calls
	// (4900 EUR cents): each call is judged, and then runs as the plain one.
	return []byte("tools:\n" + chargeToolYAML(fakepayURL, toolName, noApproval, "") + chargeToolYAML(fakepayURL, policyToolName, `    deny:
      - name: eur_only
        when: args.currency != "EUR"
        message: charges are made in EUR only
      - name: too_large
        when: args.amount_minor > 10000000
        message: more than 100,000 EUR is paid another way
    approval:
      when: args.amount_minor > 1000000
      ttl: 15m
`, "") + budgetToolsYAML(fakepayURL))
}

// noApproval is a bench tool's policy: none.
const noApproval = "    approval:\n      required: false\n"

// chargeToolYAML is one charge tool of the bench's tools file: policy (its
// approval, deny rules, identity) goes before its schema, whose properties
// gain extraProps.
func chargeToolYAML(fakepayURL, name, policy, extraProps string) string {
	required := "invoice_id, amount_minor, currency"
	if extraProps != "" {
		required += ", " + strings.TrimSpace(strings.SplitN(extraProps, ":", 2)[0])
	}
	return `  - name: ` + name + `
    version: "1"
    effect: side_effect
` + policy + `    args_schema:
      type: object
      properties:
        invoice_id: {type: string, minLength: 1, maxLength: 64}
        amount_minor: {type: integer, exclusiveMinimum: 0}
        currency: {type: string, pattern: "^[A-Z]{3}$"}
` + extraProps + `      required: [` + required + `]
      additionalProperties: false
    executor:
      type: http
      url: ` + fakepayURL + `/charges
      timeout: 10s
      dedupes_keys: true
      lookup_url: ` + fakepayURL + `/charges?idempotency_key={key}
      lookup_consistent: true
      external_ref_field: id
      max_attempts: 1
`
}

// seedPrincipal creates the agent the clients authenticate as.
func (e *env) seedPrincipal(ctx context.Context, db string) error {
	st, err := store.Open(ctx, store.Config{URL: e.cluster.URL(db), MaxConns: 2})
	if err != nil {
		return err
	}
	defer st.Close()
	key, p, err := ledger.CreatePrincipal(ctx, st, tenant, "", []string{ledger.RoleAgent})
	if err != nil {
		return err
	}
	if e.apiKey == "" {
		e.apiKey, e.principal = key, p.ID
		return nil
	}
	// Another database gets the same key, so that one client works against
	// both: copy the hash over.
	_, err = e.psql(ctx, db, fmt.Sprintf("UPDATE principal SET id = '%s', key_hash = decode('%x', 'hex') WHERE id = '%s'",
		e.principal, ledger.HashAPIKey(e.apiKey), p.ID))
	return err
}

// psql runs sql on database db with psql from the cluster's bin directory
// and returns its unaligned, tuples-only output. bench may not import pgx
// (only store does), and psql reads results that store does not expose.
func (e *env) psql(ctx context.Context, db, sql string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(e.binDir, "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
		"-h", "127.0.0.1", "-p", strconv.Itoa(e.cluster.Port()), "-U", "postgres", "-d", db, "-c", sql)
	cmd.Env = cleanEnv()
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("psql: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

// cleanEnv is our environment without PG* variables, which would redirect
// psql and pgbench.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			env = append(env, kv)
		}
	}
	return append(env, "PGAPPNAME=opledger-bench")
}

// serveProcess is one `opledger serve` child.
type serveProcess struct {
	addr string
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

// startServe starts `opledger serve` against database db and waits until its
// health check serves. Its logs (JSON at info level, as in production) go to
// a file in the run's directory.
func (e *env) startServe(ctx context.Context, i int, db string, finishedCache bool, extraEnv ...string) (*serveProcess, error) {
	name := fmt.Sprintf("serve-%s-%d", db, i)
	if len(extraEnv) > 0 {
		name += "-b" // a baseline's server, beside the one under test
	}
	env := []string{
		"DATABASE_URL=" + e.cluster.URL(db),
		"OPLEDGER_TOOLS=" + e.toolsFile,
		"OPLEDGER_DOWNSTREAM_SECRET=" + e.secret,
		"OPLEDGER_DB_MAX_CONNS=" + strconv.Itoa(e.opts.DBConns),
		"OPLEDGER_SERVER_ID=" + fmt.Sprintf("bench-%s-%d", db, i),
		"OPLEDGER_LOG_LEVEL=info",
		"OPLEDGER_METRICS_LISTEN=",
	}
	if !finishedCache {
		env = append(env, "OPLEDGER_FINISHED_CACHE=0")
	}
	env = append(env, extraEnv...)
	return e.startChild(ctx, name, env, func(addr string) []string {
		return []string{"serve", "--listen", addr}
	})
}

// startChild runs this binary with the arguments args(addr) and the extra
// environment env, serving gRPC on a free loopback port, logging to
// name.log in the run's directory, and waits until its health check
// serves. The bench stops it when it closes.
func (e *env) startChild(ctx context.Context, name string, env []string, args func(addr string) []string) (*serveProcess, error) {
	port, err := pgcluster.FreePort()
	if err != nil {
		return nil, err
	}
	p := &serveProcess{addr: fmt.Sprintf("127.0.0.1:%d", port), done: make(chan struct{}),
		log: filepath.Join(e.dir, name+".log")}
	logf, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(e.opts.Binary, args(p.addr)...)
	cmd.Env = append(cleanEnv(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group: a Ctrl-C meant for the bench reaches the
	// bench, which then stops the child itself.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	p.cmd = cmd
	go func() { _ = cmd.Wait(); logf.Close(); close(p.done) }()
	e.closers = append(e.closers, p.stop)
	if err := p.waitHealthy(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *serveProcess) waitHealthy(ctx context.Context) error {
	conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	err = server.WaitServing(ctx, conn, p.done, 60*time.Second)
	switch {
	case errors.Is(err, server.ErrExited):
		return fmt.Errorf("bench: %s exited during start:\n%s", p.cmd.Args[1], tail(p.log))
	case errors.Is(err, server.ErrNotServing):
		return fmt.Errorf("bench: %s did not become healthy:\n%s", p.cmd.Args[1], tail(p.log))
	}
	return err
}

// stop sends SIGTERM (graceful shutdown) and, should that hang, SIGKILL.
func (p *serveProcess) stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return string(b)
}

// pgStatReset clears pg_stat_statements.
func (e *env) pgStatReset(ctx context.Context) error {
	_, err := e.psql(ctx, "postgres", "SELECT pg_stat_statements_reset()")
	return err
}

// pgStatCalls returns how many statements database db executed since the
// last reset.
func (e *env) pgStatCalls(ctx context.Context, db string) (int64, error) {
	out, err := e.psql(ctx, "postgres", "SELECT coalesce(sum(s.calls), 0) FROM pg_stat_statements s "+
		"JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = '"+db+"'")
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(out, 10, 64)
}

// pgStatTop returns database db's statements since the last reset, most
// called first, per op.
func (e *env) pgStatTop(ctx context.Context, db string, ops int) ([]Statement, error) {
	out, err := e.psql(ctx, "postgres", "SELECT s.calls, round(s.mean_exec_time::numeric, 4), "+
		"left(regexp_replace(s.query, '\\s+', ' ', 'g'), 110) FROM pg_stat_statements s "+
		"JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = '"+db+"' ORDER BY s.calls DESC LIMIT 10")
	if err != nil {
		return nil, err
	}
	var st []Statement
	for _, line := range strings.Split(out, "\n") {
		f := strings.SplitN(line, "|", 3)
		if len(f) != 3 {
			continue
		}
		calls, _ := strconv.ParseFloat(f[0], 64)
		mean, _ := strconv.ParseFloat(f[1], 64)
		if ops > 0 {
			calls /= float64(ops)
		}
		st = append(st, Statement{CallsPerOp: calls, MeanMillis: mean, Query: f[2]})
	}
	return st, nil
}

// serveLogger writes the in-process server's logs like serve does (JSON at
// info level) to a file.
func serveLogger(path string) (*slog.Logger, func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, err
	}
	return slog.New(slog.NewJSONHandler(f, &slog.HandlerOptions{Level: slog.LevelInfo})), func() { f.Close() }, nil
}
