package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/fakepay"
	opserver "github.com/opledger/opledger/server"
)

const (
	numServers = 3
	tenant     = "chaos"
	// approverName is the approver's principal: every APPROVED event must
	// name it.
	approverName = "chaos-approver"
	// toolTimeout is every tool's per-attempt timeout. With two attempts
	// for the deduping tools the servers' lease is 5s (2 × 1s + 2s backoff
	// allowance + 1s), which SIGSTOP must outlast.
	toolTimeout = time.Second
	// lease is the claim lease the servers compute from the tools file.
	lease = 5 * time.Second
	// keyRetention is how long the "ret" processor remembers keys, for the
	// whole run, as pay_retained declares. The ledger trusts a key for 90%
	// of it, so the margin (6s) must exceed how long the network can hold
	// a request (proc blackholes last at most 5s).
	keyRetention = time.Minute
	// approvalTTL is pay_invoice's and pay_retained's approval TTL, as in
	// the demo; directTTL is pay_direct's, short enough to lapse across
	// releases (net-proc-refuse lasts 2–8s), stops and stalls.
	approvalTTL = 15 * time.Minute
	directTTL   = 3 * time.Second
	// sourceHeader carries each server's number to the processors, which
	// record it with every request: the checker then knows which server
	// sent a request, and which of the nemesis's faults could have held it.
	sourceHeader = "X-Chaos-Server"
)

// The chaos tools. Their argument schemas are the demo tools'.
const (
	// ToolPay is pay_invoice as in the demo: approval, a processor that
	// dedupes keys with a consistent lookup, two attempts.
	ToolPay = "pay_invoice"
	// ToolPayRetained is the same on a processor that forgets keys after
	// key_retention (declared, so the ledger stops trusting it in time).
	ToolPayRetained = "pay_retained"
	// ToolPayNoKey charges a processor that may ignore idempotency keys
	// (no_key_support) and is declared accordingly: no dedupe, no lookup.
	ToolPayNoKey = "pay_nokey"
	// ToolEmail is send_email as in the demo: no dedupe, no lookup.
	ToolEmail = "send_email"
	// ToolPayDirect charges a processor that never dedupes keys, declared
	// so (no dedupe, no lookup, one attempt), with an approval whose TTL
	// (directTTL) lapses across releases, stops and stalls: every send is
	// counted, and the first must fall within the approval.
	ToolPayDirect = "pay_direct"
	// ToolPayPolicy charges the "pay" processor like pay_invoice, under a
	// policy that changes mid-run (Runner.rollPolicy): first no approval;
	// then, server by server, every call needs an approver and a deny rule
	// refuses amounts ending in 7 (policyDenies).
	ToolPayPolicy = "pay_policy"
	// ToolPayCapped charges the "pay" processor like pay_invoice without an
	// approval, under one limit per customer (limitCustomer, a count and a
	// sum), which its insert reserves (OperationInsertReserving): the
	// workload sends bursts of concurrent calls for one new customer, each
	// under its own key (worker.runBurst).
	ToolPayCapped = "pay_capped"
	// ToolPayMetered is the same under two tenant-wide limits
	// (limitTenantCount and limitTenantSum), every call on one budget.
	ToolPayMetered = "pay_metered"
	// ToolPayPooled is the same under one tenant-wide limit
	// (limitPooledCount): each server sends the shares that wait on its
	// budget together, in one statement (BudgetReserveEach).
	ToolPayPooled = "pay_pooled"
	// ToolPayOnce is the same with a business identity (its invoice): the
	// workload sends bursts of agents paying one invoice concurrently, each
	// under its own key.
	ToolPayOnce = "pay_once"
)

// The chaos limits (docs/reliability.md). Their windows and the identity's
// outlast any run (budgetWindow), so each budget's window holds the whole
// run and the checker's count per budget is exact whatever the timing of
// the Prepares' transactions under the faults.
const (
	limitCustomer = "chaos_customer"
	// limitTenantCount sorts before limitTenantSum: the ledger reserves a
	// tool's budgets in the order of their names, and the first one's row
	// lock serialises the others, so only the first can be overspent by a
	// check done as a read (the budget-read control).
	limitTenantCount = "chaos_tenant_count"
	limitTenantSum   = "chaos_tenant_sum"
	limitPooledCount = "chaos_pooled_count"
	budgetWindow     = time.Hour
	// customerCount and customerMax bound each customer's pay_capped
	// operations; tenantCount and tenantMax the tenant's pay_metered ones,
	// pooledCount its pay_pooled ones.
	customerCount = 2
	customerMax   = 10000
	tenantCount   = 30
	tenantMax     = 150000
	pooledCount   = 30
)

// limitsYAML is the tools file's top-level limits.
func limitsYAML() string {
	return fmt.Sprintf(`limits:
  - {name: %s, tools: [%s], per: args.customer_id, window: %s, count: %d, sum: args.amount_minor, max: %d}
  - {name: %s, tools: [%s], window: %s, count: %d}
  - {name: %s, tools: [%s], window: %s, sum: args.amount_minor, max: %d}
  - {name: %s, tools: [%s], window: %s, count: %d}
`, limitCustomer, ToolPayCapped, budgetWindow, customerCount, customerMax,
		limitTenantCount, ToolPayMetered, budgetWindow, tenantCount, limitTenantSum, ToolPayMetered, budgetWindow, tenantMax,
		limitPooledCount, ToolPayPooled, budgetWindow, pooledCount)
}

// chargeArgs is what the checker reads of a charge's prepared arguments.
type chargeArgs struct {
	InvoiceID  string  `json:"invoice_id"`
	Amount     float64 `json:"amount_minor"`
	CustomerID string  `json:"customer_id"`
}

func readCharge(args json.RawMessage) chargeArgs {
	var a chargeArgs
	_ = json.Unmarshal(args, &a)
	return a
}

// limitSpecs are the limits as the checker counts them: what limitsYAML
// declares, with its expressions in Go.
func limitSpecs() []LimitSpec {
	customer := func(a json.RawMessage) string { return readCharge(a).CustomerID }
	amount := func(a json.RawMessage) float64 { return readCharge(a).Amount }
	return []LimitSpec{
		{Name: limitCustomer, Tools: []string{ToolPayCapped}, Window: budgetWindow, Count: customerCount, Max: customerMax, Amount: amount, Scope: customer},
		{Name: limitTenantCount, Tools: []string{ToolPayMetered}, Window: budgetWindow, Count: tenantCount},
		{Name: limitTenantSum, Tools: []string{ToolPayMetered}, Window: budgetWindow, Max: tenantMax, Amount: amount},
		{Name: limitPooledCount, Tools: []string{ToolPayPooled}, Window: budgetWindow, Count: pooledCount},
	}
}

// identitySpecs are the business identities as the checker counts them.
func identitySpecs() []IdentitySpec {
	return []IdentitySpec{{Tool: ToolPayOnce, Window: budgetWindow, Key: func(a json.RawMessage) string { return readCharge(a).InvoiceID }}}
}

// policyDeny is pay_policy's deny rule under the tightened policy, and
// policyDenies the same in Go, for the checker.
const policyDeny = "args.amount_minor % 10 == 7"

func policyDenies(amount int64) bool { return amount%10 == 7 }

// policies is what the checker may expect of each tool, as the tools file
// declares it.
func policies() map[string]ToolPolicy {
	return map[string]ToolPolicy{
		ToolPay:         {AllowUnknown: false, Dedupes: true, ApprovalTTL: approvalTTL},
		ToolPayRetained: {AllowUnknown: true, Dedupes: true, ApprovalTTL: approvalTTL},
		ToolPayNoKey:    {AllowUnknown: true},
		ToolEmail:       {AllowUnknown: true},
		ToolPayDirect:   {AllowUnknown: true, ApprovalTTL: directTTL},
		// What the tightened policy demands is the checker's
		// unapproved_by_policy rule (checkPolicy), not ApprovalTTL: the
		// operations prepared before the change need no approval.
		ToolPayPolicy:  {AllowUnknown: false, Dedupes: true},
		ToolPayCapped:  {AllowUnknown: false, Dedupes: true},
		ToolPayMetered: {AllowUnknown: false, Dedupes: true},
		ToolPayPooled:  {AllowUnknown: false, Dedupes: true},
		ToolPayOnce:    {AllowUnknown: false, Dedupes: true},
	}
}

// needsApproval reports the tools declared with approval required.
func needsApproval(tool string) bool { return policies()[tool].ApprovalTTL > 0 }

// failpointNames are the points that kill a server at random during the
// run (--failpoint-rate) and the fp-* crash kinds.
var failpointNames = []string{"after-prepare", "before-downstream", "after-downstream", "after-commit"}

// stallPoint is where fp-stall-first-send stops a server: after a claim of
// a pay_direct operation, before its first send, which its approval (of a
// short TTL) bounds.
const stallPoint = "before-first-send/" + ToolPayDirect

const chargeSchema = `    args_schema:
      type: object
      properties:
        invoice_id: {type: string, minLength: 1, maxLength: 64}
        amount_minor: {type: integer, exclusiveMinimum: 0}
        currency: {type: string, pattern: "^[A-Z]{3}$"}
      required: [invoice_id, amount_minor, currency]
      additionalProperties: false
`

// customerChargeSchema is chargeSchema with the customer pay_capped's
// limits are per.
var customerChargeSchema = strings.Replace(strings.Replace(chargeSchema,
	"        currency:", "        customer_id: {type: string, minLength: 1, maxLength: 64}\n        currency:", 1),
	"required: [invoice_id, amount_minor, currency]", "required: [invoice_id, amount_minor, currency, customer_id]", 1)

const emailSchema = `    args_schema:
      type: object
      properties:
        to: {type: string, format: email, minLength: 3, maxLength: 320}
        subject: {type: string, maxLength: 998}
        body: {type: string, maxLength: 100000}
      required: [to, subject, body]
      additionalProperties: false
`

// toolsYAML is one server's tools file; base is its processor proxy, and
// every request carries the server's number in sourceHeader. tight is the
// tightened policy of pay_policy (see ToolPayPolicy).
func toolsYAML(base string, server int, tight bool) string {
	var b strings.Builder
	b.WriteString("tools:\n")
	tool := func(name string, ttl time.Duration, schema, url, extra string) {
		fmt.Fprintf(&b, "  - name: %s\n    version: \"1\"\n    effect: side_effect\n", name)
		if name == ToolPayPolicy && tight {
			fmt.Fprintf(&b, "    deny:\n      - {name: amount_ends_in_7, when: %q, message: the tightened policy refuses it}\n", policyDeny)
			ttl = approvalTTL
		}
		if ttl > 0 {
			fmt.Fprintf(&b, "    approval: {required: true, ttl: %s}\n", ttl)
		}
		if name == ToolPayOnce {
			fmt.Fprintf(&b, "    identity: {key: args.invoice_id, window: %s}\n", budgetWindow)
		}
		b.WriteString(schema)
		fmt.Fprintf(&b, "    executor:\n      type: http\n      url: %s\n      timeout: %s\n      external_ref_field: id\n      headers: {%s: \"%d\"}\n%s",
			url, toolTimeout, sourceHeader, server, extra)
	}
	deduping := func(path string, retention string) string {
		s := fmt.Sprintf("      dedupes_keys: true\n      max_attempts: 2\n      lookup_url: %s%s?idempotency_key={key}\n      lookup_consistent: true\n", base, path)
		if retention != "" {
			s += "      key_retention: " + retention + "\n"
		}
		return s
	}
	tool(ToolPay, approvalTTL, chargeSchema, base+"/pay/charges", deduping("/pay/charges", ""))
	tool(ToolPayRetained, approvalTTL, chargeSchema, base+"/ret/charges", deduping("/ret/charges", keyRetention.String()))
	tool(ToolPayNoKey, 0, chargeSchema, base+"/mail/charges", "      dedupes_keys: false\n      max_attempts: 1\n")
	tool(ToolEmail, 0, emailSchema, base+"/mail/emails", "      dedupes_keys: false\n      max_attempts: 1\n")
	tool(ToolPayDirect, directTTL, chargeSchema, base+"/direct/charges", "      dedupes_keys: false\n      max_attempts: 1\n")
	tool(ToolPayPolicy, 0, chargeSchema, base+"/pay/charges", deduping("/pay/charges", ""))
	tool(ToolPayCapped, 0, customerChargeSchema, base+"/pay/charges", deduping("/pay/charges", ""))
	tool(ToolPayMetered, 0, chargeSchema, base+"/pay/charges", deduping("/pay/charges", ""))
	tool(ToolPayPooled, 0, chargeSchema, base+"/pay/charges", deduping("/pay/charges", ""))
	tool(ToolPayOnce, 0, chargeSchema, base+"/pay/charges", deduping("/pay/charges", ""))
	b.WriteString(limitsYAML())
	return b.String()
}

// processors are the fake payment processors, in this process (so that
// they outlive every server crash and the checker reads their records
// directly), on one HTTP listener: /pay/ for pay_invoice, /ret/ for
// pay_retained, /mail/ for pay_nokey and send_email, /direct/ for
// pay_direct. Faults are per processor, so no_key_support and
// key_retention hit only the tools declared for them. Each records every
// request it receives, deduplicated or not.
type processors struct {
	pay, ret, mail, direct *fakepay.Server
	addr                   string
	hs                     *http.Server

	mu     sync.Mutex
	faults map[*fakepay.Server]*fakepay.Faults
	// base are the faults each processor keeps for the whole run: the
	// "ret" processor forgets keys, as its tool declares.
	base map[*fakepay.Server]fakepay.Faults
}

// startProcessors starts the processors with their faults for the whole
// run: "ret" forgets keys after keyRetention, "direct" never dedupes, and a
// control run adds its own (see Control).
func startProcessors(seed uint64, control *Control) (*processors, error) {
	opts := func(n uint64) fakepay.Options {
		return fakepay.Options{Seed: seed + n, RecordRequests: true, SourceHeader: sourceHeader}
	}
	p := &processors{pay: fakepay.New(opts(1)), ret: fakepay.New(opts(2)), mail: fakepay.New(opts(3)), direct: fakepay.New(opts(4))}
	p.faults = map[*fakepay.Server]*fakepay.Faults{p.pay: {}, p.ret: {}, p.mail: {}, p.direct: {}}
	p.base = map[*fakepay.Server]fakepay.Faults{p.ret: {KeyRetention: keyRetention}, p.direct: {NoKeySupport: true}}
	if control != nil && control.Faults != nil {
		for _, s := range p.all() {
			f := p.base[s]
			control.Faults(p.name(s), &f)
			p.base[s] = f
		}
	}
	p.clear()
	mux := http.NewServeMux()
	mux.Handle("/pay/", http.StripPrefix("/pay", p.pay))
	mux.Handle("/ret/", http.StripPrefix("/ret", p.ret))
	mux.Handle("/mail/", http.StripPrefix("/mail", p.mail))
	mux.Handle("/direct/", http.StripPrefix("/direct", p.direct))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p.addr = ln.Addr().String()
	p.hs = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.hs.Serve(ln) }()
	return p, nil
}

// all lists the processors.
func (p *processors) all() []*fakepay.Server {
	return []*fakepay.Server{p.pay, p.ret, p.mail, p.direct}
}

// name is a processor's name, as the history and the controls say it.
func (p *processors) name(s *fakepay.Server) string {
	switch s {
	case p.pay:
		return "pay"
	case p.ret:
		return "ret"
	case p.mail:
		return "mail"
	}
	return "direct"
}

// update changes one processor's faults.
func (p *processors) update(s *fakepay.Server, change func(*fakepay.Faults)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.faults[s]
	change(f)
	s.SetFaults(*f)
}

// baseOf is the faults a processor started the run with.
func (p *processors) baseOf(s *fakepay.Server) fakepay.Faults {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.base[s]
}

func (p *processors) clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for s, f := range p.faults {
		*f = p.base[s]
		s.SetFaults(*f)
	}
}

func (p *processors) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.hs.Shutdown(ctx); err != nil {
		_ = p.hs.Close()
	}
}

// server is one `opledger serve` process, restarted on the same port with
// the same proxies as often as the nemesis likes.
type server struct {
	r         *Runner
	idx       int
	addr      string
	dbProxy   *Proxy
	procProxy *Proxy
	toolsPath string
	logPath   string
	conn      *grpc.ClientConn
	client    opledgerv1.LedgerServiceClient

	// standbyProxies lead to the other PostgreSQL nodes in failover mode,
	// after dbProxy in the multi-host DATABASE_URL.
	standbyProxies []*Proxy

	// opMu serialises what changes the process (start, stop, kill,
	// pause): nemesis actions, the crash supervisor and the final heal.
	opMu sync.Mutex

	mu          sync.Mutex
	cmd         *exec.Cmd
	done        chan struct{}
	incarnation int
	expectExit  bool
	paused      bool
	logFile     *os.File
	// armed is the failpoint armFailpoint scheduled to kill the server
	// once, until it fires: an incarnation that exits before its hit (a
	// start that met a read-only node during a failover, say) passes it to
	// the next, or the forced fault would vanish with it.
	armed string
}

// restartSpec is the failpoint spec of s's next incarnation: the run's
// rates, plus the scheduled kill while it has not fired.
func (s *server) restartSpec() string {
	s.mu.Lock()
	armed := s.armed
	s.mu.Unlock()
	if armed == "" {
		return s.r.failpointSpec()
	}
	return s.r.failpointSpecAction(armed, "kill")
}

// arm schedules point to kill s once; see armed.
func (s *server) arm(point string) {
	s.mu.Lock()
	s.armed = point
	s.mu.Unlock()
}

func newServer(r *Runner, idx int, pgAddr, procAddr string) (*server, error) {
	dbp, err := NewProxy(pgAddr)
	if err != nil {
		return nil, err
	}
	pp, err := NewProxy(procAddr)
	if err != nil {
		dbp.Close()
		return nil, err
	}
	port, err := stablePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	s := &server{r: r, idx: idx, addr: addr, dbProxy: dbp, procProxy: pp,
		toolsPath: filepath.Join(r.opts.Dir, fmt.Sprintf("tools-%d.yaml", idx)),
		logPath:   filepath.Join(r.opts.Dir, fmt.Sprintf("server-%d.log", idx))}
	if err := s.writeTools(false); err != nil {
		return nil, err
	}
	s.conn, err = grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: time.Second,
			Backoff: backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond}}))
	if err != nil {
		return nil, err
	}
	s.client = opledgerv1.NewLedgerServiceClient(s.conn)
	return s, nil
}

// writeTools writes s's tools file, with the tightened policy or not: the
// next incarnation reads it.
func (s *server) writeTools(tight bool) error {
	return os.WriteFile(s.toolsPath, []byte(toolsYAML("http://"+s.procProxy.Addr(), s.idx, tight)), 0o600)
}

func (s *server) env(failpoints string) []string {
	r := s.r
	_, dbPort, _ := net.SplitHostPort(s.dbProxy.Addr())
	// The servers' settings are the suite's alone: nothing OPLEDGER_* (TLS,
	// rate limits, quotas) leaks in from the caller's environment.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OPLEDGER_") && !strings.HasPrefix(kv, "DATABASE_URL=") {
			env = append(env, kv)
		}
	}
	env = append(env,
		"DATABASE_URL="+s.databaseURL(dbPort),
		"OPLEDGER_LISTEN="+s.addr,
		"OPLEDGER_TOOLS="+s.toolsPath,
		"OPLEDGER_DOWNSTREAM_SECRET="+r.secret,
		"OPLEDGER_MIGRATE=false",
		"OPLEDGER_MIN_LEASE=2s",
		"OPLEDGER_MAX_WAIT=5s",
		"OPLEDGER_RECONCILE_INTERVAL=200ms",
		"OPLEDGER_RECONCILE_BACKOFF=200ms",
		"OPLEDGER_DB_MAX_CONNS=12",
		"OPLEDGER_DRAIN=2s",
		"OPLEDGER_LOG_LEVEL=warn",
		fmt.Sprintf("OPLEDGER_SERVER_ID=s%d-%d", s.idx, s.incarnation),
		"OPLEDGER_FAILPOINTS="+failpoints,
	)
	if c := r.control; c != nil {
		if c.FreshKeys && !r.opts.WithoutDefect {
			env = append(env, "OPLEDGER_UNSAFE_FRESH_DOWNSTREAM_KEY=1")
		}
		if c.Defect != "" && !r.opts.WithoutDefect {
			env = append(env, "OPLEDGER_UNSAFE_DEFECTS="+c.Defect)
		}
		env = append(env, c.Env...) // the last value of a variable counts
	}
	return env
}

// startRetrying starts s with the failpoints spec, up to five times a
// second apart (a restart can find its port still held for a moment),
// logging each failure as what. The caller holds s.opMu.
func (s *server) startRetrying(failpoints, what string) {
	for attempt := 0; attempt < 5; attempt++ {
		err := s.start(context.Background(), failpoints)
		if err == nil {
			return
		}
		s.r.logf("server %d: %s failed: %v", s.idx, what, err)
		time.Sleep(time.Second)
	}
}

// start starts a new incarnation and waits until it serves health checks.
// The caller holds opMu.
func (s *server) start(ctx context.Context, failpoints string) error {
	s.mu.Lock()
	s.incarnation++
	inc := s.incarnation
	if s.logFile == nil {
		f, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			s.mu.Unlock()
			return err
		}
		s.logFile = f
	}
	fmt.Fprintf(s.logFile, "=== chaos: incarnation %d, OPLEDGER_FAILPOINTS=%q\n", inc, failpoints)
	cmd := exec.Command(s.r.opts.Binary, "serve")
	cmd.Env = s.env(failpoints)
	cmd.Stdout, cmd.Stderr = s.logFile, s.logFile
	// The servers must not outlive the run, whatever happens to it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("chaos: start server %d: %w", s.idx, err)
	}
	done := make(chan struct{})
	s.cmd, s.done, s.expectExit, s.paused = cmd, done, false, false
	s.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		close(done)
		s.exited(inc)
	}()
	s.r.record(Event{Type: EventInfo, Process: fmt.Sprintf("s%d", s.idx), F: "started", Server: s.idx,
		Detail: fmt.Sprintf("incarnation %d pid %d failpoints %q", inc, cmd.Process.Pid, failpoints)})
	err := s.waitHealthy(ctx, cmd.Process.Pid, done)
	if err != nil {
		// Never leave an incarnation behind: it would keep the port, and a
		// stopped one would keep it for good.
		s.mu.Lock()
		if s.cmd == cmd {
			s.expectExit = true
		}
		s.mu.Unlock()
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
	}
	return err
}

// waitHealthy waits until the incarnation with pid serves health checks,
// exits (killed at a failpoint during start-up traffic: the supervisor
// restarts it) or stops itself at a failpoint (its stall has begun).
func (s *server) waitHealthy(ctx context.Context, pid int, done chan struct{}) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var stopped atomic.Bool
	go func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
				if procStopped(pid) {
					stopped.Store(true)
					cancel()
					return
				}
			}
		}
	}()
	err := opserver.WaitServing(wctx, s.conn, done, 60*time.Second)
	switch {
	case stopped.Load(), errors.Is(err, opserver.ErrExited):
		return nil
	case errors.Is(err, opserver.ErrNotServing):
		return fmt.Errorf("chaos: server %d did not become healthy within 60s; see %s", s.idx, s.logPath)
	}
	return err
}

// stop ends the current incarnation, by SIGKILL or by SIGTERM (graceful,
// bounded by the drain), and waits for the exit. The caller holds opMu.
func (s *server) stop(kill bool) {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.expectExit = true
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	_ = cmd.Process.Signal(sig)
	// A process stopped at a failpoint acts on SIGTERM only once continued.
	_ = cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// running reports whether the current incarnation is alive.
func (s *server) running() bool {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// pause sends SIGSTOP; resume SIGCONT. The caller holds opMu.
func (s *server) pause() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && !s.paused {
		_ = s.cmd.Process.Signal(syscall.SIGSTOP)
		s.paused = true
	}
}

func (s *server) resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && s.paused {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
		s.paused = false
	}
}

// stoppedItself reports whether the current incarnation is stopped
// (SIGSTOP) without the nemesis having paused it: a failpoint's "stop".
func (s *server) stoppedItself() bool {
	s.mu.Lock()
	cmd, paused := s.cmd, s.paused
	s.mu.Unlock()
	if cmd == nil || paused || !s.running() {
		return false
	}
	return procStopped(cmd.Process.Pid)
}

// procStopped reports whether process pid is stopped (SIGSTOP), from
// /proc/PID/stat.
func procStopped(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state …: the state follows the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't')
}

// markPaused records that the current incarnation is stopped, so that
// resume (and the final heal) sends it SIGCONT. The caller holds opMu.
func (s *server) markPaused() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		s.paused = true
	}
}

// exited handles an exit nobody asked for: a crash at a failpoint. It is
// recorded and the server restarted.
func (s *server) exited(inc int) {
	s.mu.Lock()
	expected := s.expectExit || inc != s.incarnation
	s.mu.Unlock()
	if expected {
		return
	}
	if point, last := s.lastFailpoint(); point != "" {
		s.mu.Lock()
		if s.armed == point {
			s.armed = ""
		}
		s.mu.Unlock()
		s.r.nem.failpointCrash(s.idx, point)
	} else {
		// Not a failpoint: typically a start while PostgreSQL was down
		// (serve exits when it cannot reach the database).
		s.r.record(Event{Type: EventInfo, Process: fmt.Sprintf("s%d", s.idx), F: "exited", Server: s.idx, Detail: last})
	}
	go func() {
		time.Sleep(200 * time.Millisecond)
		s.opMu.Lock()
		defer s.opMu.Unlock()
		s.mu.Lock()
		stale := inc != s.incarnation
		s.mu.Unlock()
		if stale { // someone restarted it meanwhile
			return
		}
		s.startRetrying(s.restartSpec(), "restart after crash")
	}()
}

// lastFailpoint finds the failpoint named in the current incarnation's
// log, or returns "" and the log's last line.
func (s *server) lastFailpoint() (point, last string) {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return "", err.Error()
	}
	if len(b) > 64<<10 {
		b = b[len(b)-64<<10:]
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "=== chaos: incarnation") {
			break
		}
		if name, ok := strings.CutPrefix(lines[i], "failpoint "); ok {
			if n, _, ok := strings.Cut(name, ":"); ok {
				return n, lines[i]
			}
		}
	}
	last = lines[len(lines)-1]
	if len(last) > 300 {
		last = last[:300]
	}
	return "", last
}

func (s *server) close() {
	_ = s.conn.Close()
	for _, p := range s.dbProxies() {
		p.Close()
	}
	s.procProxy.Close()
	s.mu.Lock()
	if s.logFile != nil {
		_ = s.logFile.Close()
		s.logFile = nil
	}
	s.mu.Unlock()
}

// stablePort returns a free TCP port of 127.0.0.1 below the kernel's
// ephemeral range. A server is restarted on its port many times a run, and
// while it is down any outgoing connection on the machine may be given an
// ephemeral port as its local port: one below that range stays free for it.
func stablePort() (int, error) {
	lo := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				lo = n
			}
		}
	}
	if lo > 11000 {
		for i := 0; i < 100; i++ {
			port := lo - 10000 + mrand.IntN(10000)
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
			if err == nil {
				_ = ln.Close()
				return port, nil
			}
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
