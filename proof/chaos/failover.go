package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/pgcluster"
)

// The failover modes (Options.Failover).
const (
	// FailoverSync: pg_auto_failover's synchronous replication to the
	// standby. The promise: no acknowledged outcome is lost, no second
	// effect, nothing stuck.
	FailoverSync = "sync"
	// FailoverAsync: asynchronous replication. The weaker promise: outcomes
	// acknowledged just before a failover may be lost, but a downstream
	// that dedupes keys for ever never sees a second effect.
	FailoverAsync = "async"
)

// failoverNodes is the formation's PostgreSQL nodes: a primary and a
// standby.
const failoverNodes = 2

// failover is the failover mode: PostgreSQL is a pg_auto_failover formation
// (a monitor, a primary and a standby) and a second nemesis kills (SIGKILL
// of the node's keeper and PostgreSQL) or partitions (every connection to
// and from it held: the monitor's, the standby's, the servers') the primary
// again and again while the workload and the other faults go on. The
// monitor decides and promotes, the old primary's keeper rejoins it as a
// standby once it is back; opledger only follows through its multi-host
// DATABASE_URL.
//
// Every node is reached through a proxy on its own loopback address (node
// i is registered with the monitor as 127.0.0.1x:port, where a proxy to
// 127.0.0.1:port listens), and every keeper reaches the monitor through a
// proxy of its own, so a partition is the proxies of one node held. The
// servers reach a node through one more proxy, which the nemesis closes
// to them alone from a fault until the formation has settled again: see
// closeServers.
type failover struct {
	r    *Runner
	mode string
	af   *pgcluster.AutoFailover
	// nodeProxies[i] is everybody's way to node i; monProxies[i] node i's
	// keeper's way to the monitor; srvProxies[i] the servers' way to node
	// i, in front of nodeProxies[i].
	nodeProxies []*Proxy
	monProxies  []*Proxy
	srvProxies  []*Proxy

	cancel context.CancelFunc
	wg     sync.WaitGroup
	watch  chan struct{} // closed to stop the primary watcher
	watchW sync.WaitGroup

	mu         sync.Mutex
	kills      int
	partitions int
	redone     map[string]bool // idempotency keys prepared again by redo
	primary    int
	failovers  []failoverMark
	faults     []faultMark
	calls      []callMark
	internal   []string
}

// failoverMark is a change of primary as the monitor reported it.
type failoverMark struct {
	at       time.Time
	from, to int
}

// faultMark is a fault on the primary that may make the monitor fail over.
type faultMark struct {
	at   time.Time
	kind string
}

// callMark is a client call's completion that tells whether the ledger
// could write: a failure, or a Prepare that created an operation.
type callMark struct {
	at     time.Time
	ok     bool
	code   string
	reason string
}

// startFailover starts the formation behind its proxies and returns the
// address through which servers reach the first node.
func (r *Runner) startFailover(ctx context.Context) (string, error) {
	if r.opts.Failover != FailoverSync && r.opts.Failover != FailoverAsync {
		return "", fmt.Errorf("chaos: failover mode %q: want %q or %q", r.opts.Failover, FailoverSync, FailoverAsync)
	}
	f := &failover{r: r, mode: r.opts.Failover, primary: 0, watch: make(chan struct{}), redone: map[string]bool{}}
	r.ha = f
	monPort, err := pgcluster.FreePort()
	if err != nil {
		return "", err
	}
	var ports []int
	var hosts, monAddrs []string
	for i := range failoverNodes {
		port, err := pgcluster.FreePort()
		if err != nil {
			return "", err
		}
		host := fmt.Sprintf("127.0.0.%d", 11+i)
		np, err := NewProxyOn(net.JoinHostPort(host, fmt.Sprint(port)), fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			return "", fmt.Errorf("chaos: a proxy on %s for node %d (loopback addresses other than 127.0.0.1 are needed): %w", host, i+1, err)
		}
		f.nodeProxies = append(f.nodeProxies, np)
		mp, err := NewProxy(fmt.Sprintf("127.0.0.1:%d", monPort))
		if err != nil {
			return "", err
		}
		f.monProxies = append(f.monProxies, mp)
		sp, err := NewProxy(np.Addr())
		if err != nil {
			return "", err
		}
		f.srvProxies = append(f.srvProxies, sp)
		ports, hosts, monAddrs = append(ports, port), append(hosts, host), append(monAddrs, mp.Addr())
	}
	r.logf("starting a pg_auto_failover formation (%s replication): a monitor, a primary and a standby", f.mode)
	f.af, err = pgcluster.StartAutoFailover(ctx, pgcluster.AutoFailoverOptions{
		Dir: filepath.Join(r.opts.Dir, "ha"), Database: "chaos", Async: f.mode == FailoverAsync,
		MonitorPort: monPort, NodePorts: ports, NodeHosts: hosts, MonitorAddrs: monAddrs,
		Settings: map[string]string{"max_connections": "200"},
	})
	if err != nil {
		return "", err
	}
	r.dbURL = f.af.URL("chaos")
	f.watchW.Add(1)
	go f.watchPrimary()
	return f.srvProxies[0].Addr(), nil
}

// protectedSubject reports an effect subject of the processor that
// recognises a resend for sure: "pay" (pay_invoice) dedupes keys for ever.
// "mail" (pay_nokey, send_email) and "direct" (pay_direct) do not dedupe,
// and "ret" (pay_retained)
// forgets keys after its retention, which an operation prepared again after
// its row was lost cannot know the start of.
func protectedSubject(subject string) bool { return strings.HasPrefix(subject, "pay:") }

// addServer gives s a proxy to every other node, after its dbProxy to the
// first, for its multi-host DATABASE_URL.
func (f *failover) addServer(s *server) error {
	for _, sp := range f.srvProxies[1:] {
		p, err := NewProxy(sp.Addr())
		if err != nil {
			return err
		}
		s.standbyProxies = append(s.standbyProxies, p)
	}
	return nil
}

// dbProxies are s's ways to PostgreSQL: one, or one per node.
func (s *server) dbProxies() []*Proxy {
	return append([]*Proxy{s.dbProxy}, s.standbyProxies...)
}

// databaseURL is s's DATABASE_URL: its proxy to the one PostgreSQL, or in
// failover mode its proxies to every node, of which the client takes the
// read-write one.
func (s *server) databaseURL(dbPort string) string {
	if len(s.standbyProxies) == 0 {
		return fmt.Sprintf("postgres://postgres@127.0.0.1:%s/chaos?sslmode=disable&connect_timeout=3", dbPort)
	}
	var addrs []string
	for _, p := range s.dbProxies() {
		addrs = append(addrs, p.Addr())
	}
	return pgcluster.MultiHostURL(addrs, "chaos") + "&connect_timeout=3"
}

// observe keeps what the report needs of each history event.
func (f *failover) observe(e Event) {
	var m callMark
	switch {
	case e.Type == EventFail && e.Process != "settle":
		m = callMark{at: e.Time, code: e.Code, reason: e.Reason}
		if e.Code == "Internal" {
			f.mu.Lock()
			f.internal = append(f.internal, fmt.Sprintf("%s on server %d: %s", e.F, e.Server, e.Detail))
			f.mu.Unlock()
		}
	case e.Type == EventOK && e.F == "prepare" && !e.Replayed && e.Process != "settle":
		m = callMark{at: e.Time, ok: true}
	default:
		return
	}
	if m.at.IsZero() {
		m.at = time.Now()
	}
	f.mu.Lock()
	f.calls = append(f.calls, m)
	f.mu.Unlock()
}

// watchPrimary polls the monitor and records every change of primary.
func (f *failover) watchPrimary() {
	defer f.watchW.Done()
	for {
		select {
		case <-f.watch:
			return
		case <-time.After(500 * time.Millisecond):
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		p, err := f.af.Primary(ctx)
		cancel()
		if err != nil || p < 0 {
			continue
		}
		f.mu.Lock()
		from := f.primary
		if p != from {
			f.primary = p
			f.failovers = append(f.failovers, failoverMark{at: time.Now(), from: from, to: p})
		}
		f.mu.Unlock()
		if p != from {
			f.r.nem.event("failover", 0, fmt.Sprintf("the monitor made node%d the primary (was node%d)", p+1, from+1))
		}
	}
}

// startNemesis starts killing and partitioning primaries.
func (f *failover) startNemesis() {
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	f.wg.Add(1)
	go func() { defer f.wg.Done(); f.run(ctx) }()
}

// stopNemesis stops it and waits for the fault under way to be undone.
func (f *failover) stopNemesis() {
	if f.cancel != nil {
		f.cancel()
	}
	f.wg.Wait()
}

// run alternates SIGKILL and partition of the primary, each after the
// formation is stable again, while the run lasts. It holds the Runner's
// pgMu during each, so PostgreSQL crashes (pg-crash) never overlap.
func (f *failover) run(ctx context.Context) {
	r := f.r
	kinds := []string{"ha-kill", "ha-partition"}
	next := int(r.rand() * 2)
	gap := r.between(2*time.Second, 5*time.Second)
	for {
		if !sleepCtx(ctx, gap) {
			return
		}
		r.pgMu.Lock()
		f.inject(ctx, kinds[next%2])
		r.pgMu.Unlock()
		next++
		gap = r.between(1*time.Second, 5*time.Second)
	}
}

// inject kills or partitions the primary, waits for the monitor to promote
// the standby, leaves the old primary down a little longer, then brings it
// back and waits until it has rejoined as the standby.
func (f *failover) inject(ctx context.Context, kind string) {
	r := f.r
	if err := f.settled(ctx, true); err != nil {
		if ctx.Err() == nil {
			r.logf("failover: no %s now: %v", kind, err)
		}
		return
	}
	f.openServers()
	p, err := f.af.Primary(ctx)
	if err != nil || p < 0 {
		return
	}
	other := (p + 1) % failoverNodes
	begin := time.Now()
	f.mu.Lock()
	f.faults = append(f.faults, faultMark{at: begin, kind: kind})
	if kind == "ha-kill" {
		f.kills++
	} else {
		f.partitions++
	}
	f.mu.Unlock()
	switch kind {
	case "ha-kill":
		r.nem.event(kind, 0, fmt.Sprintf("SIGKILL of primary node%d (pg_autoctl and PostgreSQL)", p+1))
		f.af.KillNode(p)
	default:
		r.nem.event(kind, 0, fmt.Sprintf("network partition of primary node%d (monitor, standby and servers cut off)", p+1))
		f.nodeProxies[p].Set(NetBlackhole, 0)
		f.monProxies[p].Set(NetBlackhole, 0)
	}
	promoted := false
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; {
		if q, err := f.af.Primary(ctx); err == nil && q == other {
			promoted = true
			break
		}
		sleepCtx(ctx, 250*time.Millisecond)
	}
	if promoted {
		r.nem.event(kind, 0, fmt.Sprintf("the monitor promoted node%d after %s", other+1, time.Since(begin).Round(100*time.Millisecond)))
		sleepCtx(ctx, r.between(500*time.Millisecond, 3*time.Second))
	} else if ctx.Err() == nil {
		r.logf("failover: no promotion within 60s of %s of node%d", kind, p+1)
	}
	f.closeServers(p)
	if kind == "ha-partition" && promoted && !r.opts.FailoverUnsafeWindows {
		f.fence(p)
	}
	if err := f.restore(p); err != nil {
		r.logf("failover: bringing node%d back: %v", p+1, err)
	}
	r.nem.event(kind, 0, fmt.Sprintf("node%d back; waiting for it to rejoin", p+1))
	if err := f.settled(context.Background(), true); err != nil {
		r.logf("failover: node%d did not rejoin: %v", p+1, err)
		return
	}
	f.openServers()
	r.nem.event(kind, 0, fmt.Sprintf("stable again %s after the fault", time.Since(begin).Round(100*time.Millisecond)))
}

// closeServers closes node i to the servers alone (a refused connection,
// so they try the next host at once), and openServers opens every node to
// them again once the formation has settled: one primary whose standby
// has everything it flushed, and one secondary. In between, node i may be
// a primary that its keeper restarted, after a crash or a kill, with
// commits that were waiting for the standby and that a failover is about
// to discard by rewinding it; a server that read one would answer with an
// operation the ledger then forgets. A real deployment fences such a node
// (docs/operations.md); Options.FailoverUnsafeWindows leaves the window
// open to show it.
func (f *failover) closeServers(i int) {
	if f.r.opts.FailoverUnsafeWindows {
		return
	}
	f.srvProxies[i].Set(NetRefuse, 0)
}

func (f *failover) openServers() {
	for _, sp := range f.srvProxies {
		sp.Heal()
	}
}

// fence heals partitioned node i's link to the monitor alone and waits
// until its keeper has demoted it (stopped its PostgreSQL) before anyone
// else may reach it: an HA setup must fence an old primary, and
// pg_auto_failover 2.0's keeper does not fence itself when its standby's
// walsender ended before it lost the monitor (its last_secondary_contact
// stays unset, so it never counts itself partitioned).
func (f *failover) fence(i int) {
	f.monProxies[i].Heal()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		s, err := f.af.State(context.Background())
		if err == nil {
			for _, n := range s {
				if n.Port == f.af.NodePort(i) && n.Reported != "primary" && n.Reported != "wait_primary" && n.Reported != "single" {
					f.r.nem.event("ha-partition", 0, fmt.Sprintf("node%d fenced: its keeper reports %s", i+1, n.Reported))
					return
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	f.r.logf("failover: node%d was not demoted within 30s of reaching the monitor again", i+1)
}

// restore undoes a kill or partition of node i.
func (f *failover) restore(i int) error {
	f.nodeProxies[i].Heal()
	f.monProxies[i].Heal()
	if !f.af.NodeRunning(i) {
		return f.af.StartNode(i)
	}
	return nil
}

// crashPrimaryPostgres is pg-crash in failover mode: the primary's
// PostgreSQL stopped as a crash would, its keeper left running to restart
// it or to let the monitor fail over, whichever they decide. The caller
// holds pgMu.
func (f *failover) crashPrimaryPostgres(ctx context.Context) {
	r := f.r
	if err := f.af.WaitStable(ctx, 60*time.Second); err != nil {
		return
	}
	p, err := f.af.Primary(ctx)
	if err != nil || p < 0 {
		return
	}
	f.mu.Lock()
	f.faults = append(f.faults, faultMark{at: time.Now(), kind: "pg-crash"})
	f.mu.Unlock()
	r.nem.event("pg-crash", 0, fmt.Sprintf("immediate shutdown (SIGQUIT) of primary node%d's PostgreSQL; its keeper stays", p+1))
	f.closeServers(p)
	if err := f.af.CrashPostgres(p); err != nil {
		r.nem.event("pg-crash", 0, "crash failed: "+err.Error())
		f.openServers()
		return
	}
	r.nem.injectedOne("pg-crash")
	// The keeper may restart PostgreSQL in place, with commits that were
	// waiting for the standby at the crash visible again without it, or
	// the monitor may fail over and the node be rewound without them. The
	// servers reach the node again, and the next failover comes, only once
	// the standby has them, unless the run is to show that window
	// (Options.FailoverUnsafeWindows).
	if err := f.settled(context.Background(), !r.opts.FailoverUnsafeWindows); err != nil {
		r.logf("failover: after pg-crash: %v", err)
		return
	}
	f.openServers()
	r.nem.event("pg-crash", 0, "stable again")
}

// settled waits until the formation is stable (one primary, one
// secondary) and, when replicated is set, the standby streams and has
// everything the primary had flushed, up to 90s.
func (f *failover) settled(ctx context.Context, replicated bool) error {
	deadline := time.Now().Add(90 * time.Second)
	for {
		err := f.af.WaitStable(ctx, time.Until(deadline))
		if err == nil && replicated {
			err = f.af.WaitReplicated(ctx, 5*time.Second)
		}
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

// heal ends every fault of the formation and waits until it has settled;
// the servers reach every node again whatever the outcome.
// The caller holds pgMu.
func (f *failover) heal(ctx context.Context) error {
	defer f.openServers()
	for i := range f.nodeProxies {
		if err := f.restore(i); err != nil {
			return err
		}
	}
	if err := f.af.WaitStable(ctx, 2*time.Minute); err != nil {
		return err
	}
	return f.settled(ctx, true)
}

func (f *failover) close() {
	f.stopNemesis()
	select {
	case <-f.watch:
	default:
		close(f.watch)
	}
	f.watchW.Wait()
	if f.af != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_ = f.af.Stop(ctx)
		cancel()
	}
	for _, p := range append(append(f.nodeProxies, f.monProxies...), f.srvProxies...) {
		p.Close()
	}
}

// redo is what an agent does, once, when its operation is gone after a
// failover (NOT_FOUND): prepare it again under the same idempotency key and
// arguments, and approve the new operation if the workload meant to run
// it; the settle phase then executes it. Under the same key and arguments
// the new operation must reach the downstream with the same downstream
// key as the lost one, or a deduping processor charges twice (counted in
// second_effects). It reports whether t now names a new operation.
func (f *failover) redo(ctx context.Context, s *server, t *trackedOp) bool {
	r := f.r
	f.mu.Lock()
	done := f.redone[t.key]
	f.redone[t.key] = true
	f.mu.Unlock()
	if done {
		return false
	}
	var op *opledgerv1.Operation
	for attempt := 0; attempt < 10 && op == nil && ctx.Err() == nil; attempt++ {
		a := r.call(ctx, "settle", "prepare", s, t, "", r.agent, 0, prepareRPC(t))
		if a.err == nil {
			op = a.op
		} else {
			sleepCtx(ctx, 250*time.Millisecond)
		}
	}
	if op == nil {
		return false
	}
	t.mu.Lock()
	t.id, t.fingerprint = op.GetId(), op.GetFingerprint()
	t.mu.Unlock()
	if needsApproval(t.tool) && t.intent == intentRun && stateName(op) == StateAwaitingApproval {
		for attempt := 0; attempt < 10 && ctx.Err() == nil; attempt++ {
			a := r.call(ctx, "settle", "approve", s, t, op.GetId(), r.approver, 0,
				approveRPC(op.GetId(), op.GetFingerprint(), opledgerv1.Decision_DECISION_APPROVE))
			if a.err == nil {
				break
			}
			sleepCtx(ctx, 250*time.Millisecond)
		}
	}
	return true
}

// notInjected lists the failover faults the run never made.
func (f *failover) notInjected() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	if f.kills == 0 {
		out = append(out, "ha-kill")
	}
	if f.partitions == 0 {
		out = append(out, "ha-partition")
	}
	if len(f.failovers) == 0 {
		out = append(out, "failover")
	}
	return out
}

// FailoverReport is what the failover mode adds to a run's summary.
type FailoverReport struct {
	// Mode is FailoverSync or FailoverAsync.
	Mode string
	// Failovers counts the changes of primary the monitor made.
	Failovers int
	// Kills and Partitions count the faults on the primary.
	Kills, Partitions int
	// LostAcknowledged counts operations of which a client was told a final
	// outcome (SUCCEEDED with its external reference, FAILED, REJECTED,
	// CANCELLED) that the ledger no longer says.
	LostAcknowledged int
	// ForgottenOps counts operations a client was given that the ledger no
	// longer has at all.
	ForgottenOps int
	// Reprepared counts the forgotten operations the settle phase prepared
	// again under their idempotency key (and approved and executed), as
	// their agents would.
	Reprepared int
	// SecondEffects counts effects beyond the first per business operation
	// (by the invoice or recipient the request named), whatever keys they
	// were sent under, at the processor that dedupes keys for ever
	// (pay_invoice's): what a new downstream key for a re-prepared lost
	// operation would cause. It must be 0 with any replication.
	SecondEffects int
	// SecondEffectsUnprotected counts the same at the processors that cannot
	// recognise every resend: no dedupe (pay_nokey, send_email), or keys
	// forgotten after a retention (pay_retained). Synchronous replication
	// must keep it at 0. Asynchronous replication cannot: a claim
	// acknowledged by the old primary and lost with it makes the operation
	// READY again on the new one, and an operation lost outright is
	// prepared again with no memory of when its key was first sent.
	SecondEffectsUnprotected int
	// Internal lists the INTERNAL answers clients got (never expected).
	Internal []string
	// Windows are the faults on the primary, with what clients saw.
	Windows []FailoverWindow
}

// FailoverWindow is one fault on the primary as clients saw it.
type FailoverWindow struct {
	Kind string
	At   time.Time
	// Unavailable is the longest stretch after the fault in which no new
	// operation could be prepared (a call in flight at the fault may still
	// complete on the old primary); -1 when none was prepared after the
	// fault at all (the workload had stopped).
	Unavailable time.Duration
	// Failed counts the calls that failed meanwhile, by gRPC code and
	// reason.
	Failed map[string]int
}

func (rep *FailoverReport) line() string {
	var un []time.Duration
	failed := 0
	for _, w := range rep.Windows {
		if w.Unavailable >= 0 {
			un = append(un, w.Unavailable)
		}
		for _, n := range w.Failed {
			failed += n
		}
	}
	sort.Slice(un, func(i, j int) bool { return un[i] < un[j] })
	med, worst := time.Duration(0), time.Duration(0)
	if len(un) > 0 {
		med, worst = un[len(un)/2], un[len(un)-1]
	}
	return fmt.Sprintf("failover=%s failovers=%d ha_kills=%d ha_partitions=%d lost_acknowledged=%d forgotten_ops=%d reprepared=%d second_effects=%d second_effects_unprotected=%d client_unavailable_median=%s client_unavailable_max=%s calls_failed_in_failovers=%d",
		rep.Mode, rep.Failovers, rep.Kills, rep.Partitions, rep.LostAcknowledged, rep.ForgottenOps, rep.Reprepared, rep.SecondEffects, rep.SecondEffectsUnprotected,
		med.Round(100*time.Millisecond), worst.Round(100*time.Millisecond), failed)
}

// Details is a multi-line account of each window, for the command's output.
func (rep *FailoverReport) Details() string {
	var b strings.Builder
	for i, w := range rep.Windows {
		var codes []string
		for k, n := range w.Failed {
			codes = append(codes, fmt.Sprintf("%s=%d", k, n))
		}
		sort.Strings(codes)
		un := "none prepared after it"
		if w.Unavailable >= 0 {
			un = w.Unavailable.Round(100 * time.Millisecond).String()
		}
		fmt.Fprintf(&b, "chaos: failover window %d: %s at %s, longest stretch without a new operation %s, failed calls: %s\n",
			i+1, w.Kind, w.At.Format("15:04:05.0"), un, strings.Join(codes, " "))
	}
	for _, s := range rep.Internal {
		fmt.Fprintf(&b, "chaos: INTERNAL answer: %s\n", s)
	}
	return b.String()
}

// verdict is the failover mode's judgement. Synchronous replication
// promises everything a single PostgreSQL does, plus no acknowledged
// outcome lost; asynchronous replication promises only that no operation
// has a second effect at a downstream that dedupes keys for ever. Neither
// ever answers INTERNAL, and a run without a failover proves nothing.
func (rep *FailoverReport) verdict(c CheckResult) []error {
	var errs []error
	if rep.Failovers == 0 {
		errs = append(errs, errors.New("failover mode: the monitor never failed over"))
	}
	if len(rep.Internal) > 0 {
		errs = append(errs, fmt.Errorf("failover mode: %d INTERNAL answer(s); a failover must answer UNAVAILABLE", len(rep.Internal)))
	}
	if rep.Mode == FailoverAsync {
		if rep.SecondEffects > 0 {
			errs = append(errs, fmt.Errorf("%d second effect(s) at a downstream that dedupes keys for ever: asynchronous replication may lose outcomes but never duplicate one there", rep.SecondEffects))
		}
		return errs
	}
	if !c.OK() {
		errs = append(errs, fmt.Errorf("%d violation(s)", len(c.Violations)))
	}
	if rep.LostAcknowledged > 0 || rep.ForgottenOps > 0 {
		errs = append(errs, fmt.Errorf("synchronous replication lost %d acknowledged outcome(s) and %d operation(s)", rep.LostAcknowledged, rep.ForgottenOps))
	}
	return errs
}

// report checks the run's outcome for what failovers may break and
// measures what clients saw. It adds the second effects the key-based
// checker cannot see to res.
func (f *failover) report(in CheckInput, res *CheckResult) *FailoverReport {
	f.mu.Lock()
	defer f.mu.Unlock()
	rep := &FailoverReport{Mode: f.mode, Failovers: len(f.failovers), Kills: f.kills, Partitions: f.partitions,
		Reprepared: len(f.redone), Internal: append([]string(nil), f.internal...)}
	rep.LostAcknowledged, rep.ForgottenOps = lostAcknowledged(in)
	second, vs := secondEffects(in.Effects)
	for _, v := range vs {
		if protectedSubject(v.Op) {
			rep.SecondEffects++
		} else {
			rep.SecondEffectsUnprotected++
		}
	}
	if extra := second - res.Duplicates; extra > 0 {
		// Effects of one operation under different keys, which the
		// key-based count cannot attribute to one operation.
		res.Duplicates += extra
		for _, v := range vs {
			res.Violations = append(res.Violations, v)
		}
	}
	calls := append([]callMark(nil), f.calls...)
	sort.Slice(calls, func(i, j int) bool { return calls[i].at.Before(calls[j].at) })
	for k, fm := range f.faults {
		end := fm.at.Add(time.Minute)
		if k+1 < len(f.faults) && f.faults[k+1].at.Before(end) {
			end = f.faults[k+1].at
		}
		rep.Windows = append(rep.Windows, outage(calls, fm, end))
	}
	return rep
}

// outage is what clients saw of the fault fm, up to end: the longest
// stretch in which no new operation could be prepared (a call in flight at
// the fault may still complete on the old primary), and the calls that
// failed from the fault to the end of that stretch.
func outage(calls []callMark, fm faultMark, end time.Time) FailoverWindow {
	w := FailoverWindow{Kind: fm.kind, At: fm.at, Failed: map[string]int{}, Unavailable: -1}
	first := sort.Search(len(calls), func(i int) bool { return !calls[i].at.Before(fm.at) })
	prev, stretchEnd := fm.at, end
	for _, c := range calls[first:] {
		if c.at.After(end) {
			break
		}
		if c.ok {
			if gap := c.at.Sub(prev); gap > w.Unavailable {
				w.Unavailable, stretchEnd = gap, c.at
			}
			prev = c.at
		}
	}
	for _, c := range calls[first:] {
		if c.at.After(stretchEnd) {
			break
		}
		if !c.ok {
			key := c.code
			if c.reason != "" {
				key += "/" + c.reason
			}
			w.Failed[key]++
		}
	}
	return w
}

// lostAcknowledged counts the operations whose final outcome a client was
// told and the ledger no longer says, or says only from a later record (the
// acknowledged one lost, and the same outcome found again, by a reconciler
// or a resubmission the processor deduplicated), and the operations a
// client was given that the ledger no longer has.
func lostAcknowledged(in CheckInput) (lost, forgotten int) {
	lostOps, goneOps := map[string]bool{}, map[string]bool{}
	for _, e := range in.Observations {
		final, ok := in.Ops[e.Op]
		if !ok {
			continue
		}
		if final.Missing {
			goneOps[e.Op] = true
		}
		switch e.State {
		case StateSucceeded, StateFailed, StateRejected, StateCancelled:
			if final.Unreadable || final.State != e.State || e.State == StateSucceeded && e.Ref != final.ExternalRef ||
				recordedAfter(final.Events, e.Time, in.Timeline) {
				lostOps[e.Op] = true
			}
		}
	}
	return len(lostOps), len(goneOps)
}

// finalEvents are the event types that end an operation.
var finalEvents = map[string]bool{"SUCCEEDED": true, "FAILED": true, "DENIED": true, "CANCELLED": true, "RECONCILED": true, "RESOLVED_MANUALLY": true}

// recordedAfter reports whether the event that ended the operation (the
// last of finalEvents in its log) was written, by the database's clock
// converted with tl, more than Tolerance after told, when a client was
// told the outcome: a record written after the answer cannot be the one
// the answer came from. A log without such an event, or a call without a
// time, says nothing.
func recordedAfter(events []OpEvent, told time.Time, tl Timeline) bool {
	if told.IsZero() {
		return false
	}
	for i := len(events) - 1; i >= 0; i-- {
		if ev := events[i]; finalEvents[ev.Type] {
			_, hi := tl.offsetsAt(ev.At, told)
			return ev.At.Add(-hi).After(told.Add(Tolerance))
		}
	}
	return false
}

// secondEffects counts effects beyond the first per subject and describes
// them, one violation per extra effect, named by the subject.
func secondEffects(effects []Effect) (int, []Violation) {
	bySubject := map[string][]Effect{}
	for _, e := range effects {
		if e.Subject != "" {
			bySubject[e.Subject] = append(bySubject[e.Subject], e)
		}
	}
	subjects := make([]string, 0, len(bySubject))
	for s := range bySubject {
		subjects = append(subjects, s)
	}
	sort.Strings(subjects)
	n := 0
	var vs []Violation
	for _, s := range subjects {
		es := bySubject[s]
		if len(es) < 2 {
			continue
		}
		var list []string
		for _, e := range es {
			list = append(list, fmt.Sprintf("%s (key %s)", e.ID, e.Key))
		}
		for range es[1:] {
			n++
			vs = append(vs, Violation{Kind: ViolationDuplicate, Op: s, Detail: fmt.Sprintf("%s has %d effects: %s", s, len(es), strings.Join(list, ", "))})
		}
	}
	return n, vs
}
