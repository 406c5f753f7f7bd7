// Package chaos is opledger's proof under failure, modelled on Jepsen: a
// workload of concurrent agents records a history of every call it makes
// to three real `opledger serve` processes sharing one PostgreSQL, a
// nemesis injects faults (SIGKILL, SIGSTOP past the lease and the approval,
// PostgreSQL crashes and clock steps, network latency, resets, partitions
// and refusals, every fault of the fake processor, crashes and stalls at
// named failpoints), and a checker then counts the effects and the
// requests at the processors and compares them, and every answer a client
// received, with the ledger's final state and event log. `opledger chaos`
// runs it; see docs/reliability.md.
package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/proof/fakepay"
	"github.com/opledger/opledger/proof/pgcluster"
	"github.com/opledger/opledger/store"
)

// Options configures Run. Zero values take the defaults noted.
type Options struct {
	// Binary is the opledger executable started as `Binary serve` three
	// times. It must be built with `-tags failpoints` when Failpoints or
	// Control is set.
	Binary string
	// Duration is how long the workload and the nemesis run (default 60s).
	Duration time.Duration
	// Ops is a floor on the operations: the workload goes on past Duration
	// until this many were started, up to MaxDuration. 0: no floor.
	Ops int
	// MaxDuration caps the workload when Ops is not reached (default 4 ×
	// Duration).
	MaxDuration time.Duration
	// Workers is the number of concurrent agents (default 16).
	Workers int
	// Seed seeds every random choice of the workload and the nemesis; 0
	// picks one (it is printed, so a run can be repeated as far as timing
	// allows).
	Seed uint64
	// Control names a control run (Controls): a defect re-introduced in the
	// servers (honoured by failpoints builds only), which the checker must
	// then report. "" is a normal run.
	Control string
	// WithoutDefect runs Control's staging (its processor faults, focus,
	// clock offset, failpoint rates and environment) with its defect left
	// out, and then requires a clean check: the control's violations must
	// come from its defect, never from its staging alone.
	WithoutDefect bool
	// Failpoints: Binary has failpoints compiled in, so crash points are
	// injected. Without it the failpoint fault kinds are skipped.
	Failpoints bool
	// FailpointRate is the probability that each named failpoint kills a
	// server on each hit during the run (default 0.0005; negative: only the
	// scheduled crashes).
	FailpointRate float64
	// RequireAllFaults makes Run fail when some fault kind was never
	// injected.
	RequireAllFaults bool
	// History receives the JSON-lines history; nil discards it.
	History io.Writer
	// Dir holds the cluster, the tools files and the servers' logs; a
	// temporary directory (removed after a clean run) when empty.
	Dir string
	// Log receives progress lines; nil discards them.
	Log io.Writer
	// SettleTimeout bounds the wait for the ledger to resolve leftovers
	// after the faults stop (default 2m).
	SettleTimeout time.Duration
	// Failover runs PostgreSQL as a pg_auto_failover formation (a monitor,
	// a primary and a standby) instead of one server, and kills and
	// partitions the primary during the run (see failover.go):
	// FailoverSync or FailoverAsync; "" is a single PostgreSQL.
	Failover string
	// FailoverUnsafeWindows lets failovers hit the two windows in which
	// PostgreSQL and pg_auto_failover lose outcomes even with synchronous
	// replication. (1) A failover right after a crash of the primary's
	// PostgreSQL that its keeper restarted in place: commits that waited
	// for the standby at the crash are visible after recovery without it.
	// (2) A partition of the primary that heals after the standby was
	// promoted: pg_auto_failover 2.0's keeper does not fence a primary
	// whose standby vanished before its monitor did, so the old primary
	// serves again until its keeper hears it was demoted. Off, the nemesis
	// keeps the servers off a faulted node until the formation has settled
	// (its standby caught up, or the node a secondary again), waits for the
	// standby to catch up after a crash, and heals a partition's monitor
	// link first and its data links only once the old primary was demoted,
	// as a fencing HA setup would. See docs/reliability.md.
	FailoverUnsafeWindows bool
	// AuditVerify checks the receipts of every operation in the live tables
	// after the checker ran, before the cluster is torn down: the chains
	// must hold under the run's faults (Summary.Audit, 0 breaks).
	AuditVerify bool
	// AuditTamper is AuditVerify's control: one event is changed in the
	// tables first, and the verification must report it.
	AuditTamper bool
}

func (o *Options) defaults() {
	if o.Duration <= 0 {
		o.Duration = time.Minute
	}
	if o.MaxDuration <= 0 {
		o.MaxDuration = 4 * o.Duration
	}
	if o.Workers <= 0 {
		o.Workers = 16
	}
	if o.Seed == 0 {
		o.Seed = rand.Uint64()
	}
	if o.FailpointRate == 0 {
		o.FailpointRate = 0.0005
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.SettleTimeout <= 0 {
		o.SettleTimeout = 2 * time.Minute
	}
}

// Summary is the outcome of a run: what was injected and what the checker
// found.
type Summary struct {
	Ops, Kills, Stops, Stalls, PGCrashes, ClockSteps, NetFaults, ProcFaults, FailpointCrashes int
	Check                                                                                     CheckResult
	// Injected counts each fault kind (FaultKinds) actually injected.
	Injected map[string]int
	// NotInjected lists the fault kinds never injected.
	NotInjected []string
	// NotStaged lists the downstream answers and ledger paths the new
	// fault kinds exist for that the run never produced (see staged).
	NotStaged []string
	// Control is the control run's, nil for a normal run.
	Control *Control
	// WithoutDefect: Control's staging ran without its defect.
	WithoutDefect bool
	// ClockOffset is the database clock's offset from the servers' at the
	// end of the run.
	ClockOffset time.Duration
	Seed        uint64
	Elapsed     time.Duration
	// HA is the failover mode's report; nil without Options.Failover.
	HA *FailoverReport
	// LimitRefused and IdentityRefused count the Prepares the workload saw
	// refused LIMIT_EXCEEDED and OPERATION_DUPLICATE: the budgets and the
	// identity were reached, so their counts say something.
	LimitRefused, IdentityRefused int
	// Audit is the receipts' check (Options.AuditVerify); nil when not run.
	Audit *AuditReport
}

// Line is the one-line summary.
func (s Summary) Line() string {
	c := s.Check
	line := fmt.Sprintf("chaos: ops=%d kills=%d stops=%d stalls=%d pg_crashes=%d clock_steps=%d net_faults=%d proc_faults=%d failpoint_crashes=%d "+
		"duplicates=%d overspent=%d duplicate_intent=%d resent=%d lost=%d false_failed=%d unapproved=%d unapproved_by_policy=%d stuck=%d unknown=%d inconsistent=%d internal=%d",
		s.Ops, s.Kills, s.Stops, s.Stalls, s.PGCrashes, s.ClockSteps, s.NetFaults, s.ProcFaults, s.FailpointCrashes,
		c.Duplicates, c.Overspent, c.DuplicateIntent, c.Resent, c.Lost, c.FalseFailed, c.Unapproved, c.UnapprovedByPolicy, c.Stuck, c.Unknown, c.Inconsistent, c.Internal)
	if s.HA != nil {
		line += " " + s.HA.line()
	}
	if s.Audit != nil {
		line += " " + s.Audit.line()
	}
	return line
}

// StagedLine is the one-line account of what the processors received and
// answered and of the ledger paths the faults drove operations through.
func (s Summary) StagedLine() string {
	c := s.Check
	a := c.Answers
	return fmt.Sprintf("chaos: staged sends=%d resends=%d redirected=%d in_progress=%d refused_replay=%d failed_after_commit=%d dropped=%d released=%d approvals_lapsed=%d renewed=%d late_resubmissions=%d policy_changed=%d policy_checked=%d sent_under_tightened=%d sent_policy_unjudged=%d limit_refused=%d identity_refused=%d db_clock_offset=%s",
		c.Sends, c.Resends, a[fakepay.AnswerRedirected], a[fakepay.AnswerInProgress], a[fakepay.AnswerRefusedReplay], a[fakepay.AnswerFailedAfterCommit],
		a[fakepay.AnswerDropped], c.Released, c.Lapsed, c.Renewed, c.LateResubmissions, c.PolicyChanged, c.PolicyChecked, c.PolicyTight, c.PolicyUnjudged, s.LimitRefused, s.IdentityRefused, s.ClockOffset)
}

// staged lists what the new fault kinds exist to produce, and the count
// that proves each one happened: a downstream answer, or a ledger path.
func (s Summary) staged() map[string]int {
	a := s.Check.Answers
	return map[string]int{
		"a 303 after commit (proc-redirect)":                                                         a[fakepay.AnswerRedirected],
		"a 409 in progress (proc-in-progress)":                                                       a[fakepay.AnswerInProgress],
		"a refusal of a repeated request (proc-refuse-replay)":                                       a[fakepay.AnswerRefusedReplay],
		"a release, nothing sent (net-proc-refuse)":                                                  s.Check.Released,
		"an approval lapsed after a release (pay_direct, its short TTL)":                             s.Check.Lapsed,
		"an operation judged again by the tightened policy at its claim (the rolling policy change)": s.Check.PolicyChanged + s.Check.PolicyChecked,
		"a Prepare refused by a limit (LIMIT_EXCEEDED)":                                              s.LimitRefused,
		"a Prepare refused by a business identity (OPERATION_DUPLICATE)":                             s.IdentityRefused,
	}
}

// Err is the verdict: nil for a clean run; for a control run, nil only
// when the checker did find violations of the control's kind; for a
// control's staging without its defect, nil only for a clean run.
func (s Summary) Err(requireAll bool) error {
	var errs []error
	if c := s.Control; c != nil && s.WithoutDefect {
		if !s.Check.OK() {
			errs = append(errs, fmt.Errorf("control run %s without its defect: %d violation(s); the control's staging alone breaks a rule, so its count does not show that the checker catches %s", c.Name, len(s.Check.Violations), c.What))
		}
		// A clean check proves something only if the staging happened.
		for _, k := range c.Focus {
			if s.Injected[k] == 0 {
				errs = append(errs, fmt.Errorf("control run %s without its defect: its staging never injected %s", c.Name, k))
			}
		}
	} else if c := s.Control; c != nil {
		if c.count(s.Check) == 0 {
			errs = append(errs, fmt.Errorf("control run %s: with %s, the checker found no %s violation; the checker proves nothing", c.Name, c.What, c.Expect))
		}
	} else if s.HA != nil {
		errs = append(errs, s.HA.verdict(s.Check)...)
	} else if !s.Check.OK() {
		errs = append(errs, fmt.Errorf("%d violation(s)", len(s.Check.Violations)))
	}
	if s.Audit != nil {
		if err := s.Audit.verdict(); err != nil {
			errs = append(errs, err)
		}
	}
	if requireAll && len(s.NotInjected) > 0 {
		errs = append(errs, fmt.Errorf("fault kinds never injected: %s", strings.Join(s.NotInjected, ", ")))
	}
	if requireAll && len(s.NotStaged) > 0 {
		errs = append(errs, fmt.Errorf("never staged: %s", strings.Join(s.NotStaged, "; ")))
	}
	return errors.Join(errs...)
}

// Run starts PostgreSQL, the fake processors and three servers, runs the
// workload against the nemesis for opts.Duration, heals everything, lets
// the ledger settle and checks the outcome. The error is about the run
// itself (a server that would not start); violations are in the Summary
// (see Summary.Err).
func Run(ctx context.Context, opts Options) (Summary, error) {
	opts.defaults()
	if opts.Binary == "" {
		return Summary{}, errors.New("chaos: Options.Binary is required")
	}
	control, err := LookupControl(opts.Control)
	if err != nil {
		return Summary{}, err
	}
	if opts.WithoutDefect && control == nil {
		return Summary{}, errors.New("chaos: --without-defect needs --control")
	}
	if control != nil && !opts.Failpoints {
		return Summary{}, errors.New("chaos: --control needs a binary built with -tags failpoints (the switches that re-introduce defects exist only there)")
	}
	r := &Runner{opts: opts, control: control, start: time.Now(), runID: fmt.Sprintf("%x", opts.Seed&0xffffffff)}
	// A failover formation runs without libfaketime: its clock is the machine's.
	r.fakeClock = haveFaketime() && opts.Failover == ""
	if !r.fakeClock && control != nil && control.ClockOffset != 0 {
		return Summary{}, fmt.Errorf("chaos: control %s skews the database's clock, which needs libfaketime (apt-get install faketime) and no --failover", control.Name)
	}
	out := opts.History
	if out == nil {
		out = io.Discard
	}
	r.hist = NewHistory(out)
	r.tracked = map[string]*trackedOp{}
	r.rng = rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x5851f42d4c957f2d))
	defer r.hist.Flush()

	clean := false
	if r.opts.Dir == "" {
		dir, err := os.MkdirTemp("", "opledger-chaos-")
		if err != nil {
			return Summary{}, err
		}
		// The postgres user must traverse it when we run as root.
		if err := os.Chmod(dir, 0o755); err != nil {
			return Summary{}, err
		}
		r.opts.Dir = dir
		defer func() {
			if clean {
				_ = os.RemoveAll(dir)
			} else {
				r.logf("kept %s (server logs, PostgreSQL log) for debugging", dir)
			}
		}()
	}
	r.logf("seed %d, dir %s, %d workers, duration %s, control %q, failover %q", opts.Seed, r.opts.Dir, opts.Workers, opts.Duration, opts.Control, opts.Failover)
	r.nem = newNemesis(r)
	defer r.teardown()
	if err := r.setup(ctx); err != nil {
		return Summary{}, err
	}
	r.record(Event{Type: EventInfo, Process: "runner", F: "start", Detail: fmt.Sprintf("seed=%d control=%q workers=%d duration=%s", opts.Seed, opts.Control, opts.Workers, opts.Duration)})
	r.nem.event("proc-key-retention", 0, fmt.Sprintf("processor ret: key_retention %s for the whole run, as pay_retained declares", keyRetention))
	r.nem.injectedOne("proc-key-retention")

	r.phase.Store(phaseRun)
	workCtx, stopWork := context.WithCancel(ctx)
	nemCtx, stopNemesis := context.WithCancel(ctx)
	var nemDone sync.WaitGroup
	nemDone.Add(1)
	go func() { defer nemDone.Done(); r.nem.run(nemCtx) }()
	var rolled sync.WaitGroup
	if r.ha == nil {
		rolled.Add(1)
		go func() { defer rolled.Done(); r.rollPolicy(workCtx) }()
	}
	var workers sync.WaitGroup
	for i := 1; i <= opts.Workers; i++ {
		w := newWorker(r, i)
		workers.Add(1)
		go func() { defer workers.Done(); w.loop(workCtx, ctx) }()
	}
	go r.progress(workCtx)

	// The workload runs for Duration, and on until Ops operations were
	// started, but never past MaxDuration.
	deadline := time.NewTimer(opts.Duration)
	hardStop := time.NewTimer(opts.MaxDuration)
	func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hardStop.C:
				return
			case <-deadline.C:
				if int(r.opSeq.Load()) >= opts.Ops {
					return
				}
				deadline.Reset(200 * time.Millisecond)
			}
		}
	}()
	deadline.Stop()
	hardStop.Stop()
	r.logf("workload: stopping new operations after %d; nemesis: stopping and healing", r.opSeq.Load())
	r.record(Event{Type: EventInfo, Process: "runner", F: "stop-workload"})
	r.phase.Store(phaseSettle)
	stopWork()
	stopNemesis()
	nemDone.Wait()
	rolled.Wait()
	if r.ha != nil {
		r.ha.stopNemesis()
	}
	if err := r.healAll(ctx); err != nil {
		return Summary{}, err
	}
	r.record(Event{Type: EventInfo, Process: "runner", F: "healed"})
	workers.Wait()
	if ctx.Err() != nil {
		return Summary{}, ctx.Err()
	}
	r.logf("settling: every fault healed, servers restarted without failpoints")
	final, err := r.settle(ctx)
	if err != nil {
		return Summary{}, err
	}
	in := CheckInput{Observations: r.hist.Observations(), Internal: r.hist.Internal(), Ops: final, Effects: r.effects(), Sends: r.sends(),
		Prepared: r.prepared(), Approver: approverName, Timeline: r.nem.timeline(), Policies: policies(), PolicyChange: r.policyChange(),
		Limits: limitSpecs(), Identities: identitySpecs()}
	r.recordSends(in)
	res := Check(in)
	var receipts *AuditReport
	if opts.AuditVerify || opts.AuditTamper {
		if receipts, err = r.verifyReceipts(ctx); err != nil {
			return Summary{}, err
		}
	}
	var ha *FailoverReport
	if r.ha != nil {
		ha = r.ha.report(in, &res)
	}
	for _, v := range res.Violations {
		r.record(Event{Type: EventViolation, Process: "checker", F: v.Kind, Op: v.Op, Detail: v.Detail})
	}
	s := r.nem.summary()
	s.Ops = len(final)
	s.Check = res
	if r.ha != nil {
		s.HA = ha
		if r.opts.RequireAllFaults {
			s.NotInjected = append(s.NotInjected, r.ha.notInjected()...)
		}
	}
	s.Audit = receipts
	s.Control = control
	s.WithoutDefect = control != nil && opts.WithoutDefect
	s.LimitRefused, s.IdentityRefused = int(r.limitRefused.Load()), int(r.identityRefused.Load())
	s.Seed = opts.Seed
	s.Elapsed = time.Since(r.start)
	var kept []string
	for _, k := range s.NotInjected {
		switch {
		case strings.HasPrefix(k, "fp-") && !opts.Failpoints, trustKinds[k] && opts.Failover != "":
			// Not a kind of this run (see nemesis.kinds).
		case k == "db-clock-skew" && !r.fakeClock:
			kept = append(kept, k+" (needs libfaketime: apt-get install faketime)")
		default:
			kept = append(kept, k)
		}
	}
	s.NotInjected = kept
	// The failover mode's verdict is about failovers; what the other faults
	// staged is reported, not required, there.
	for what, n := range s.staged() {
		if n == 0 && opts.Failover == "" {
			s.NotStaged = append(s.NotStaged, what)
		}
	}
	sort.Strings(s.NotStaged)
	r.record(Event{Type: EventSummary, Process: "checker", Detail: s.Line()})
	r.record(Event{Type: EventSummary, Process: "checker", Detail: s.StagedLine()})
	clean = s.Err(opts.RequireAllFaults) == nil && control == nil
	return s, nil
}

const (
	phaseSetup int32 = iota
	phaseRun
	phaseSettle
)

// Runner is one chaos run's world.
type Runner struct {
	opts    Options
	control *Control
	start   time.Time
	// fakeClock: PostgreSQL runs under libfaketime, so the nemesis can step
	// its clock.
	fakeClock bool
	runID     string
	hist      *History
	phase     atomic.Int32

	rngMu sync.Mutex
	rng   *rand.Rand

	cluster  *pgcluster.Cluster
	ha       *failover // Options.Failover: the formation and its nemesis
	pgMu     sync.Mutex
	dbURL    string
	agent    string
	approver string
	secret   string
	procs    *processors
	servers  []*server
	nem      *nemesis

	opSeq atomic.Int64
	// limitRefused and identityRefused count the refusals by a budget and
	// by a business identity the workload saw.
	limitRefused, identityRefused atomic.Int64
	trackedMu                     sync.Mutex
	tracked                       map[string]*trackedOp // by idempotency key

	switchMu sync.Mutex
	switches []PolicySwitch // the rolling policy change, as it went
}

// policyRollAt is when the rolling policy change begins, as a share of the
// run's duration: early enough that most of the run is under the
// tightened policy, late enough that operations prepared before it are
// executed after.
const policyRollAt = 0.35

// rollPolicy is the rolling policy change: from policyRollAt on, each
// server in turn is restarted (gracefully, as an operator would) with a
// tools file in which pay_policy needs an approval and refuses amounts
// ending in 7. Every incarnation started after a server's switch reads
// the new file (a crash restart too: the switch writes it under the
// server's opMu), and the one before it has exited when the switch is
// recorded. Once begun it goes on to the last server whatever the
// workload does, so that the settle phase runs under one policy.
func (r *Runner) rollPolicy(ctx context.Context) {
	if !sleepCtx(ctx, time.Duration(float64(r.opts.Duration)*policyRollAt)) {
		return
	}
	for i, s := range r.servers {
		if i > 0 {
			time.Sleep(time.Second)
		}
		s.opMu.Lock()
		if err := s.writeTools(true); err != nil {
			s.opMu.Unlock()
			r.logf("server %d: writing the tightened tools file: %v", s.idx, err)
			continue
		}
		s.resume()
		s.stop(false)
		at := time.Now()
		r.switchMu.Lock()
		r.switches = append(r.switches, PolicySwitch{Server: s.idx, At: at})
		r.switchMu.Unlock()
		r.record(Event{Type: EventInfo, Process: fmt.Sprintf("s%d", s.idx), F: "policy-change", Server: s.idx,
			Detail: "restarted with the tightened tools file: " + ToolPayPolicy + " needs an approval and refuses " + policyDeny})
		s.startRetrying(s.restartSpec(), "restart with the tightened policy")
		s.opMu.Unlock()
	}
	r.logf("policy change: every server runs the tightened tools file")
}

// policyChange is the rolling change as the checker needs it.
func (r *Runner) policyChange() *PolicyChange {
	r.switchMu.Lock()
	defer r.switchMu.Unlock()
	return &PolicyChange{Tool: ToolPayPolicy, Servers: len(r.servers), Switches: append([]PolicySwitch(nil), r.switches...),
		Denied: func(args json.RawMessage) bool {
			var a struct {
				Amount int64 `json:"amount_minor"`
			}
			return json.Unmarshal(args, &a) == nil && policyDenies(a.Amount)
		}}
}

func (r *Runner) logf(format string, args ...any) {
	fmt.Fprintf(r.opts.Log, "chaos: %5.1fs "+format+"\n", append([]any{time.Since(r.start).Seconds()}, args...)...)
}

func (r *Runner) record(e Event) {
	r.hist.Record(e)
	if r.ha != nil {
		r.ha.observe(e)
	}
}

// rand returns a float in [0, 1) from the run's seeded generator.
func (r *Runner) rand() float64 {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return r.rng.Float64()
}

// between returns a duration uniformly in [lo, hi).
func (r *Runner) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.rand()*float64(hi-lo))
}

func (r *Runner) progress(ctx context.Context) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s := r.nem.summary()
			r.logf("ops=%d kills=%d stops=%d pg_crashes=%d net_faults=%d proc_faults=%d failpoint_crashes=%d",
				r.opSeq.Load(), s.Kills, s.Stops, s.PGCrashes, s.NetFaults, s.ProcFaults, s.FailpointCrashes)
			_ = r.hist.Flush()
		}
	}
}

func (r *Runner) setup(ctx context.Context) error {
	pgAddr, err := r.startDatabase(ctx)
	if err != nil {
		return err
	}
	if _, err := store.Migrate(ctx, r.dbURL); err != nil {
		return err
	}
	st, err := store.Open(ctx, store.Config{URL: r.dbURL, MaxConns: 2})
	if err != nil {
		return err
	}
	agent, _, err := ledger.CreatePrincipal(ctx, st, tenant, "chaos-agent", []string{ledger.RoleAgent})
	if err == nil {
		r.approver, _, err = ledger.CreatePrincipal(ctx, st, tenant, approverName, []string{ledger.RoleApprover})
	}
	st.Close()
	if err != nil {
		return err
	}
	r.agent = agent
	secret := make([]byte, 32)
	for i := range secret {
		secret[i] = byte(r.rand() * 256)
	}
	r.secret = fmt.Sprintf("%x", secret)

	r.procs, err = startProcessors(r.opts.Seed, r.control)
	if err != nil {
		return err
	}
	for i := 1; i <= numServers; i++ {
		s, err := newServer(r, i, pgAddr, r.procs.addr)
		if err != nil {
			return err
		}
		if r.ha != nil {
			if err := r.ha.addServer(s); err != nil {
				return err
			}
		}
		r.servers = append(r.servers, s)
	}
	if r.ha != nil {
		r.ha.startNemesis()
	}
	r.logf("starting %d opledger servers (%s serve)", numServers, r.opts.Binary)
	for _, s := range r.servers {
		s.opMu.Lock()
		err := s.start(ctx, r.failpointSpec())
		s.opMu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// startDatabase starts PostgreSQL (one server, or a failover formation),
// creates the chaos database and sets r.dbURL; pgAddr is where the servers'
// proxies lead (in failover mode: the first node).
func (r *Runner) startDatabase(ctx context.Context) (pgAddr string, err error) {
	if r.opts.Failover != "" {
		return r.startFailover(ctx)
	}
	offset := clockStart
	if r.control != nil && r.control.ClockOffset != 0 {
		offset = r.control.ClockOffset
	}
	if !r.fakeClock {
		offset = 0
	}
	r.logf("starting PostgreSQL (clock offset %s)", offset)
	pgPort, err := stablePort()
	if err != nil {
		return "", err
	}
	c, err := pgcluster.Start(ctx, pgcluster.Options{Dir: filepath.Join(r.opts.Dir, "pg"), Port: pgPort,
		Settings: map[string]string{"max_connections": "200"}, FakeClock: r.fakeClock, ClockOffset: offset})
	if err != nil {
		return "", err
	}
	r.nem.clockStarted(offset)
	r.cluster = c
	if err := c.CreateDatabase(ctx, "chaos", ""); err != nil {
		return "", err
	}
	r.dbURL = c.URL("chaos")
	return fmt.Sprintf("127.0.0.1:%d", c.Port()), nil
}

// failpointSpec is OPLEDGER_FAILPOINTS for a server started now: during
// the run, every named point at the configured rate; nothing once the run
// is over.
func (r *Runner) failpointSpec() string { return r.failpointSpecAction("", "") }

// failpointSpecAction is failpointSpec plus extra armed once with action
// (one scheduled crash or stall).
func (r *Runner) failpointSpecAction(extra, action string) string {
	if !r.opts.Failpoints || r.phase.Load() != phaseRun {
		return ""
	}
	var parts []string
	if extra != "" {
		parts = append(parts, extra+"=1*"+action)
	}
	for _, p := range failpointNames {
		rate := r.opts.FailpointRate
		if c := r.control; c != nil && c.FailpointRates[p] > 0 {
			rate = c.FailpointRates[p]
		}
		if p != extra && rate > 0 {
			parts = append(parts, fmt.Sprintf("%s=p%g*kill", p, rate))
		}
	}
	return strings.Join(parts, ",")
}

// healAll ends every fault: the processors' faults cleared, the proxies
// healed, PostgreSQL running, every server resumed and restarted without
// failpoints.
func (r *Runner) healAll(ctx context.Context) error {
	r.procs.clear()
	for _, s := range r.servers {
		for _, p := range s.dbProxies() {
			p.Heal()
		}
		s.procProxy.Heal()
	}
	r.pgMu.Lock()
	if r.ha != nil {
		if err := r.ha.heal(ctx); err != nil {
			r.pgMu.Unlock()
			return err
		}
	} else if _, err := r.cluster.PID(); err != nil {
		if err := r.restartPG(ctx); err != nil {
			r.pgMu.Unlock()
			return err
		}
	}
	r.pgMu.Unlock()
	for _, s := range r.servers {
		s.opMu.Lock()
		s.resume()
		s.stop(false)
		err := s.start(ctx, "")
		s.opMu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// restartPG starts PostgreSQL again after a crash, retrying: a restart
// right after an immediate stop can find the old postmaster still exiting.
func (r *Runner) restartPG(ctx context.Context) error {
	var err error
	for i := 0; i < 10; i++ {
		if err = r.cluster.Restart(context.WithoutCancel(ctx)); err == nil {
			return nil
		}
		time.Sleep(500 * time.Millisecond)
	}
	return fmt.Errorf("chaos: restarting PostgreSQL: %w", err)
}

func (r *Runner) teardown() {
	for _, s := range r.servers {
		s.opMu.Lock()
		s.resume()
		s.stop(true)
		s.opMu.Unlock()
		s.close()
	}
	if r.procs != nil {
		r.procs.close()
	}
	if r.cluster != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = r.cluster.Stop(ctx)
		cancel()
	}
	if r.ha != nil {
		r.ha.close()
	}
}

// effects reads every charge and e-mail from every processor.
func (r *Runner) effects() []Effect {
	var out []Effect
	for _, p := range r.procs.all() {
		name := r.procs.name(p)
		for _, c := range p.Charges() {
			out = append(out, Effect{Kind: "charge", ID: c.ID, Key: c.IdempotencyKey, Subject: name + ":" + c.InvoiceID})
		}
		for _, e := range p.Emails() {
			out = append(out, Effect{Kind: "email", ID: e.ID, Key: e.IdempotencyKey, Subject: name + ":" + e.To})
		}
	}
	return out
}

// sends reads every request every processor received.
func (r *Runner) sends() []Send {
	var out []Send
	for _, p := range r.procs.all() {
		for _, q := range p.Requests() {
			n, _ := strconv.Atoi(q.Source)
			out = append(out, Send{Processor: r.procs.name(p), Key: q.IdempotencyKey, Server: n, At: q.Received,
				Body: q.Body, Answer: q.Answer, Status: q.Status})
		}
	}
	return out
}

// prepared is what the workload prepared, by operation id.
func (r *Runner) prepared() map[string]PreparedOp {
	out := map[string]PreparedOp{}
	for _, t := range r.trackedOps() {
		if id := t.opID(); id != "" {
			args, _ := t.args.MarshalJSON()
			out[id] = PreparedOp{Tool: t.tool, Args: args, Intent: t.intent}
		}
	}
	return out
}

// recordSends writes every processor request into the history as a "send"
// event under its operation, in the order received, so that a finding can
// be followed from the client's calls to the processor.
func (r *Runner) recordSends(in CheckInput) {
	byKey := map[string]FinalOp{}
	for _, op := range in.Ops {
		if op.DownstreamKey != "" {
			byKey[op.DownstreamKey] = op
		}
	}
	sends := append([]Send(nil), in.Sends...)
	sort.SliceStable(sends, func(i, j int) bool { return sends[i].At.Before(sends[j].At) })
	for _, sd := range sends {
		op := byKey[opOfKey(sd.Key)]
		r.record(Event{Type: EventSend, Time: sd.At, Process: sd.Processor, Server: sd.Server, Tool: op.Tool, Op: op.ID,
			Code: strconv.Itoa(sd.Status), Detail: sd.Answer})
	}
}

// haveFaketime reports whether libfaketime is installed, so that PostgreSQL
// can run with a clock of its own.
func haveFaketime() bool {
	_, err := os.Stat(pgcluster.LibFaketime)
	return err == nil
}
