package chaos

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/opledger/opledger/proof/fakepay"
)

// FaultKinds are the faults the nemesis injects. Each is forced once, in a
// seeded random order with the failpoints first (forcedOrder), during the
// first 60% of the run; after that kinds are drawn at random. proc-key-retention is on for the whole run (the "ret"
// processor forgets keys after the retention its tool declares).
var FaultKinds = []string{
	"kill", "stop", "pg-crash", "db-clock-skew",
	"net-db-latency", "net-db-reset", "net-db-blackhole",
	"net-proc-latency", "net-proc-reset", "net-proc-blackhole", "net-proc-refuse",
	"proc-fail-before-commit", "proc-fail-after-commit", "proc-drop-after-commit",
	"proc-delay", "proc-in-progress", "proc-redirect", "proc-refuse-replay",
	"proc-lookup-lag", "proc-no-key-support", "proc-key-retention",
	"fp-after-prepare", "fp-before-downstream", "fp-after-downstream", "fp-after-commit",
	"fp-stall-first-send",
}

// clockStart is where the database's clock starts, relative to the
// servers': behind them. db-clock-skew steps it forward only (see
// clockStep), so it ends ahead of them.
const clockStart = -90 * time.Second

// faketimePickup is how long after a step of the database's clock a
// PostgreSQL backend may still read the previous offset: libfaketime
// re-reads its offset file at most once a second (FAKETIME_CACHE_DURATION
// in pgcluster), each backend on its own schedule.
const faketimePickup = 1500 * time.Millisecond

// maxBusyServers keeps one server out of the nemesis's hands at any time,
// so that the workload always has somewhere to go.
const maxBusyServers = numServers - 1

type nemesis struct {
	r  *Runner
	wg sync.WaitGroup

	mu         sync.Mutex
	busyServer map[int]bool
	// busy holds what runs one fault at a time: a fault kind (string),
	// PostgreSQL (pgKey) or a proxy (*Proxy); see alone.
	busy       map[any]bool
	injected   map[string]int
	kills      int
	stops      int
	stalls     int
	pgCrashes  int
	clockSteps int
	netFaults  int
	procFaults int
	fpCrashes  int
	// offsets are the database clock's offsets over the run; holds the
	// times a server's requests to the processors may have been held.
	offsets []ClockStep
	holds   []Hold
}

// pgKey is the busy key of faults of the database itself.
type pgKey struct{}

// alone runs fault in the background unless a fault under the same key is
// running, and reports whether it started it.
func (n *nemesis) alone(key any, fault func()) bool {
	n.mu.Lock()
	if n.busy[key] {
		n.mu.Unlock()
		return false
	}
	n.busy[key] = true
	n.mu.Unlock()
	n.spawn(func() {
		defer func() { n.mu.Lock(); delete(n.busy, key); n.mu.Unlock() }()
		fault()
	})
	return true
}

func newNemesis(r *Runner) *nemesis {
	return &nemesis{r: r, busyServer: map[int]bool{}, busy: map[any]bool{},
		injected: map[string]int{}}
}

// kinds are the fault kinds this run can inject.
func (n *nemesis) kinds() []string {
	var out []string
	for _, k := range FaultKinds {
		if strings.HasPrefix(k, "fp-") && !n.r.opts.Failpoints || k == "proc-key-retention" || k == "db-clock-skew" && !n.r.fakeClock ||
			trustKinds[k] && n.r.opts.Failover != "" {
			continue
		}
		out = append(out, k)
	}
	return out
}

// trustKinds are the kinds that stage issue 11's faults (approvals, clocks,
// the FAILED rule). The failover mode leaves them to the normal runs: its
// short runs have room for the failovers and the kinds they had.
var trustKinds = map[string]bool{"db-clock-skew": true, "net-proc-refuse": true, "proc-in-progress": true,
	"proc-redirect": true, "proc-refuse-replay": true, "fp-stall-first-send": true}

func (n *nemesis) run(ctx context.Context) {
	defer n.wg.Wait()
	forced := forcedOrder(n.kinds(), n.r.rand)
	gap := min(max(n.r.opts.Duration*6/10/time.Duration(len(forced)), 300*time.Millisecond), 4*time.Second)
	var focus []string
	if c := n.r.control; c != nil {
		focus = c.Focus
	}
	for len(forced) > 0 {
		if !sleepCtx(ctx, gap) {
			return
		}
		if n.try(ctx, forced[0]) {
			forced = forced[1:]
		} else {
			forced = append(forced[1:], forced[0]) // busy: try it again later
		}
		// A control run stages its defect from the start.
		if len(focus) > 0 && n.r.rand() < 0.5 {
			n.try(ctx, focus[int(n.r.rand()*float64(len(focus)))])
		}
	}
	all := n.kinds()
	for {
		if !sleepCtx(ctx, n.r.between(300*time.Millisecond, 1500*time.Millisecond)) {
			return
		}
		kind := all[int(n.r.rand()*float64(len(all)))]
		// A forced fault that did not take (a failpoint armed on a server
		// no Execute reached in time, or a staged answer no request met) is
		// forced again, half of the time.
		if missing := n.missing(); len(missing) > 0 && n.r.rand() < 0.5 {
			kind = missing[int(n.r.rand()*float64(len(missing)))]
		} else if len(focus) > 0 && n.r.rand() < 0.5 {
			kind = focus[int(n.r.rand()*float64(len(focus)))]
		}
		n.try(ctx, kind)
	}
}

// forcedOrder is the order the nemesis first forces each kind in: at
// random, except that the failpoints come first. A failpoint takes only
// when a request reaches it, and a failover can leave no request for ten
// seconds; forced last, one could meet the end of a short run unhit.
func forcedOrder(kinds []string, rand func() float64) []string {
	out := slices.Clone(kinds)
	for i := len(out) - 1; i > 0; i-- {
		j := int(rand() * float64(i+1))
		out[i], out[j] = out[j], out[i]
	}
	slices.SortStableFunc(out, func(a, b string) int {
		return cmp.Compare(boolInt(!strings.HasPrefix(a, "fp-")), boolInt(!strings.HasPrefix(b, "fp-")))
	})
	return out
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// missing lists the kinds this run can inject that were not injected yet,
// or whose injections never produced what the kind exists for (a fault
// injected while no request came, say).
func (n *nemesis) missing() []string {
	staged := n.staged()
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, k := range n.kinds() {
		if ok, known := staged[k]; n.injected[k] == 0 || known && !ok {
			out = append(out, k)
		}
	}
	return out
}

// staged says, for the kinds that stage a downstream answer or a ledger
// path, whether the run has seen it yet: the processors' answers and the
// clients' refusals as they stand now.
func (n *nemesis) staged() map[string]bool {
	answers := map[string]int{}
	for _, p := range n.r.procs.all() {
		for a, c := range p.AnswerCounts() {
			answers[a] += c
		}
	}
	h := n.r.hist
	return map[string]bool{
		"proc-redirect":      answers[fakepay.AnswerRedirected] > 0,
		"proc-in-progress":   answers[fakepay.AnswerInProgress] > 0,
		"proc-refuse-replay": answers[fakepay.AnswerRefusedReplay] > 0,
		// A release (nothing sent), then the approval of the same operation
		// lapsed (pay_direct's short TTL): an APPROVAL_EXPIRED elsewhere (a
		// stall, a stop) does not stage it.
		"net-proc-refuse": h.LapsedAfterRelease() > 0,
	}
}

// sleepCtx sleeps d or until ctx ends; false if ctx ended.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (n *nemesis) event(kind string, server int, detail string) {
	n.r.record(Event{Type: EventNemesis, Process: "nemesis", F: kind, Server: server, Detail: detail})
}

// injectedOne counts a fault as injected.
func (n *nemesis) injectedOne(kind string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.injected[kind]++
	switch {
	case kind == "kill":
		n.kills++
	case kind == "stop":
		n.stops++
	case kind == "fp-stall-first-send":
		n.stalls++
	case kind == "pg-crash":
		n.pgCrashes++
	case kind == "db-clock-skew":
		n.clockSteps++
	case strings.HasPrefix(kind, "net-"):
		n.netFaults++
	case strings.HasPrefix(kind, "proc-"):
		n.procFaults++
	case strings.HasPrefix(kind, "fp-"):
		n.fpCrashes++
	}
}

// failpointCrash records a server that killed itself at a failpoint.
func (n *nemesis) failpointCrash(server int, point string) {
	n.injectedOne("fp-" + point)
	n.event("fp-"+point, server, "the server crashed at failpoint "+point+" (SIGKILL); restarting it")
}

func (n *nemesis) summary() Summary {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := Summary{Kills: n.kills, Stops: n.stops, Stalls: n.stalls, PGCrashes: n.pgCrashes, ClockSteps: n.clockSteps,
		NetFaults: n.netFaults, ProcFaults: n.procFaults, FailpointCrashes: n.fpCrashes, Injected: map[string]int{}}
	if len(n.offsets) > 0 {
		s.ClockOffset = n.offsets[len(n.offsets)-1].Offset
	}
	for k, v := range n.injected {
		s.Injected[k] = v
	}
	for _, k := range FaultKinds {
		if n.injected[k] == 0 {
			s.NotInjected = append(s.NotInjected, k)
		}
	}
	return s
}

// acquireServer picks a random server no other fault holds, or nil.
func (n *nemesis) acquireServer() *server {
	n.mu.Lock()
	defer n.mu.Unlock()
	busy := 0
	var free []*server
	for _, s := range n.r.servers {
		if n.busyServer[s.idx] {
			busy++
		} else {
			free = append(free, s)
		}
	}
	if busy >= maxBusyServers || len(free) == 0 {
		return nil
	}
	s := free[int(n.r.rand()*float64(len(free)))]
	n.busyServer[s.idx] = true
	return s
}

func (n *nemesis) releaseServer(s *server) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.busyServer, s.idx)
}

// spawn runs a fault in the background; run waits for every fault to heal
// before it returns.
func (n *nemesis) spawn(f func()) {
	n.wg.Add(1)
	go func() { defer n.wg.Done(); f() }()
}

// try starts one fault of kind; false when what it needs is busy.
func (n *nemesis) try(ctx context.Context, kind string) bool {
	switch {
	case kind == "kill" || kind == "stop" || strings.HasPrefix(kind, "fp-"):
		s := n.acquireServer()
		if s == nil {
			return false
		}
		n.spawn(func() {
			defer n.releaseServer(s)
			switch {
			case kind == "kill":
				n.kill(ctx, s)
			case kind == "stop":
				n.pause(ctx, s)
			case kind == "fp-stall-first-send":
				n.stall(ctx, s)
			default:
				n.armFailpoint(ctx, s, strings.TrimPrefix(kind, "fp-"))
			}
		})
		return true
	case kind == "db-clock-skew":
		return n.alone(kind, n.clockStep)
	case kind == "pg-crash":
		return n.alone(pgKey{}, func() { n.crashPG(ctx) })
	case strings.HasPrefix(kind, "net-"):
		s := n.r.servers[int(n.r.rand()*float64(len(n.r.servers)))]
		p := s.dbProxy
		if strings.HasPrefix(kind, "net-proc-") {
			p = s.procProxy
		}
		return n.alone(p, func() { n.netFault(ctx, kind, s, p) })
	case strings.HasPrefix(kind, "proc-"):
		return n.alone(kind, func() { n.procFault(ctx, kind) })
	}
	return false
}

// restart starts s again; during the run with the failpoint rate, once
// the run is over without failpoints. The caller holds s.opMu.
func (n *nemesis) restart(s *server) {
	s.startRetrying(s.restartSpec(), "restart")
}

func (n *nemesis) kill(ctx context.Context, s *server) {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	if !s.running() {
		return
	}
	down := n.r.between(300*time.Millisecond, 2*time.Second)
	n.event("kill", s.idx, fmt.Sprintf("SIGKILL; restart in %s", down.Round(time.Millisecond)))
	s.stop(true)
	n.injectedOne("kill")
	sleepCtx(ctx, down)
	n.restart(s)
	n.event("kill", s.idx, "restarted")
}

func (n *nemesis) pause(ctx context.Context, s *server) {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	if !s.running() {
		return
	}
	d := lease + n.r.between(time.Second, 3*time.Second)
	n.event("stop", s.idx, fmt.Sprintf("SIGSTOP for %s (lease %s)", d.Round(time.Millisecond), lease))
	from := time.Now()
	s.pause()
	n.injectedOne("stop")
	sleepCtx(ctx, d)
	s.resume()
	// Stopped anywhere, the server may have been between an executor's
	// last check and its write: a request it sends now was decided before.
	n.hold(Hold{Server: s.idx, From: from, To: time.Now(), Kind: "stop"})
	n.event("stop", s.idx, "SIGCONT")
}

// stall stops a server exactly where an executor has claimed an operation
// and is about to check whether its approval still allows the first send:
// it restarts the server gracefully with before-first-send=1*stop, waits
// for the server to stop itself there, keeps it stopped past the approval
// TTL of pay_direct and past the lease, and resumes it. The executor must
// then send nothing (its approval ended, its lease too). Unlike a stop,
// this is no Hold: the executor's check comes after the stall.
func (n *nemesis) stall(ctx context.Context, s *server) {
	s.opMu.Lock()
	if !s.running() {
		s.opMu.Unlock()
		return
	}
	point := stallPoint
	if c := n.r.control; c != nil && c.StallPoint != "" {
		point = c.StallPoint
	}
	n.event("fp-stall-first-send", s.idx, "graceful restart with "+point+"=1*stop")
	s.stop(false)
	s.startRetrying(n.r.failpointSpecAction(point, "stop"), "restart with "+point)
	s.opMu.Unlock()
	deadline := time.Now().Add(20 * time.Second)
	for !s.stoppedItself() {
		if time.Now().After(deadline) || !sleepCtx(ctx, 20*time.Millisecond) {
			// Nobody's first send came this way: disarm the point, so the
			// server cannot stop itself later with nobody to resume it.
			s.opMu.Lock()
			s.stop(false)
			n.restart(s)
			s.opMu.Unlock()
			n.event("fp-stall-first-send", s.idx, "not hit; restarted without it")
			return
		}
	}
	s.opMu.Lock()
	defer s.opMu.Unlock()
	s.markPaused()
	d := max(directTTL, lease) + n.r.between(time.Second, 3*time.Second)
	if c := n.r.control; c != nil {
		d += c.StallExtra
	}
	n.injectedOne("fp-stall-first-send")
	n.event("fp-stall-first-send", s.idx, fmt.Sprintf("stopped itself at %s; SIGCONT in %s (approval TTL %s, lease %s)",
		point, d.Round(time.Millisecond), directTTL, lease))
	sleepCtx(ctx, d)
	s.resume()
	n.event("fp-stall-first-send", s.idx, "SIGCONT")
}

// clockStart records the database clock's offset at the start of the run.
func (n *nemesis) clockStarted(offset time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.offsets = append(n.offsets, ClockStep{At: time.Now(), Offset: offset})
}

// clockStep steps the database's clock forward by 30–90 s. Only forward:
// a step back lengthens, in real time, every window measured on the
// database's clock, and for a downstream's key retention (measured on the
// downstream's own clock) that is unsafe however the ledger is written;
// see docs/reliability.md.
func (n *nemesis) clockStep() {
	r := n.r
	n.mu.Lock()
	cur := n.offsets[len(n.offsets)-1].Offset
	n.mu.Unlock()
	next := cur + r.between(30*time.Second, 90*time.Second).Round(time.Millisecond)
	// The step's time is taken before the offset file is written: a backend
	// may read the new offset at once, and never before.
	at := time.Now()
	if err := r.cluster.SetClockOffset(next); err != nil {
		n.event("db-clock-skew", 0, "failed: "+err.Error())
		return
	}
	n.mu.Lock()
	n.offsets = append(n.offsets, ClockStep{At: at, Offset: next})
	n.mu.Unlock()
	n.injectedOne("db-clock-skew")
	n.event("db-clock-skew", 0, fmt.Sprintf("PostgreSQL's clock stepped from %s to %s against the servers'", cur, next))
}

// hold records a time a server's requests may have been held.
func (n *nemesis) hold(h Hold) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.holds = append(n.holds, h)
}

// timeline is what the checker needs of the schedule.
func (n *nemesis) timeline() Timeline {
	n.mu.Lock()
	defer n.mu.Unlock()
	return Timeline{Offsets: append([]ClockStep(nil), n.offsets...), Pickup: faketimePickup, Holds: append([]Hold(nil), n.holds...)}
}

func (n *nemesis) crashPG(ctx context.Context) {
	r := n.r
	r.pgMu.Lock()
	defer r.pgMu.Unlock()
	if r.ha != nil {
		r.ha.crashPrimaryPostgres(ctx)
		return
	}
	down := r.between(200*time.Millisecond, 1500*time.Millisecond)
	n.event("pg-crash", 0, fmt.Sprintf("pg_ctl stop -m immediate; restart in %s", down.Round(time.Millisecond)))
	if err := r.cluster.Crash(context.Background()); err != nil {
		n.event("pg-crash", 0, "crash failed: "+err.Error())
	} else {
		n.injectedOne("pg-crash")
	}
	sleepCtx(ctx, down)
	if err := r.restartPG(context.Background()); err != nil {
		n.event("pg-crash", 0, err.Error())
		r.logf("%v", err)
		return
	}
	n.event("pg-crash", 0, "restarted")
}

func (n *nemesis) netFault(ctx context.Context, kind string, s *server, p *Proxy) {
	r := n.r
	d := r.between(time.Second, 4*time.Second)
	var f NetFault
	var lat time.Duration
	switch {
	case strings.HasSuffix(kind, "-latency"):
		f, lat = NetLatency, r.between(20*time.Millisecond, 250*time.Millisecond)
	case strings.HasSuffix(kind, "-reset"):
		f = NetReset
	case strings.HasSuffix(kind, "-refuse"):
		// Long enough, often, for pay_direct's approval to lapse while its
		// claims are released with nothing sent.
		f, d = NetRefuse, r.between(2*time.Second, 8*time.Second)
	default:
		// Long enough, sometimes, to outlast the lease: the partitioned
		// server's late commit must then be fenced out.
		f, d = NetBlackhole, r.between(time.Second, 7*time.Second)
		if p == s.procProxy {
			// A held request may reach the processor after its client gave
			// up; it must still arrive inside the margin of the key
			// retention (see keyRetention).
			d = r.between(time.Second, 5*time.Second)
		}
	}
	n.event(kind, s.idx, fmt.Sprintf("%s for %s (latency %s)", f, d.Round(time.Millisecond), lat.Round(time.Millisecond)))
	from := time.Now()
	link := []*Proxy{p}
	if p == s.dbProxy {
		link = s.dbProxies() // the server's way to every PostgreSQL node
	}
	for _, q := range link {
		q.Set(f, lat)
	}
	n.injectedOne(kind)
	sleepCtx(ctx, d)
	for _, q := range link {
		q.Heal()
	}
	if p == s.procProxy && (f == NetLatency || f == NetBlackhole) {
		// A request held by the proxy may reach the processor after the
		// heal; under latency, a few chunks late each.
		n.hold(Hold{Server: s.idx, From: from, To: time.Now().Add(4 * lat), Kind: kind})
	}
	n.event(kind, s.idx, "healed")
}

func (n *nemesis) procFault(ctx context.Context, kind string) {
	r := n.r
	procs := r.procs
	all := procs.all()
	target := all[int(r.rand()*float64(len(all)))]
	deduping := []*fakepay.Server{procs.pay, procs.ret}
	d := r.between(3*time.Second, 8*time.Second)
	rate := 0.2 + 0.4*r.rand()
	var set func(*fakepay.Faults)
	// unset gives a field back the value the run started with (a
	// control's own faults), not zero.
	var unset func(f *fakepay.Faults, base fakepay.Faults)
	var what string
	switch kind {
	case "proc-fail-before-commit":
		set = func(f *fakepay.Faults) { f.FailBeforeCommit = fakepay.Trigger{Rate: rate} }
		unset = func(f *fakepay.Faults, base fakepay.Faults) { f.FailBeforeCommit = base.FailBeforeCommit }
		what = fmt.Sprintf("fail_before_commit rate %.2f", rate)
	case "proc-fail-after-commit":
		set = func(f *fakepay.Faults) { f.FailAfterCommit = fakepay.Trigger{Rate: rate} }
		unset = func(f *fakepay.Faults, base fakepay.Faults) { f.FailAfterCommit = base.FailAfterCommit }
		what = fmt.Sprintf("fail_after_commit rate %.2f", rate)
	case "proc-drop-after-commit":
		set = func(f *fakepay.Faults) { f.DropAfterCommit = fakepay.Trigger{Rate: rate} }
		unset = func(f *fakepay.Faults, base fakepay.Faults) { f.DropAfterCommit = base.DropAfterCommit }
		what = fmt.Sprintf("drop_after_commit rate %.2f", rate)
	case "proc-delay":
		// Up to twice the tools' timeout: some calls time out while the
		// processor still commits.
		delay := r.between(200*time.Millisecond, toolTimeout*2)
		set = func(f *fakepay.Faults) { f.Delay = delay }
		unset = func(f *fakepay.Faults, base fakepay.Faults) { f.Delay = base.Delay }
		what = fmt.Sprintf("delay %s", delay.Round(time.Millisecond))
	case "proc-in-progress":
		// Slower than the tools' timeout, on a processor that dedupes: the
		// executor's retry with the same key finds the first request still
		// in flight and is answered 409.
		target = deduping[int(r.rand()*2)]
		delay := r.between(toolTimeout+200*time.Millisecond, 3*time.Second)
		set = func(f *fakepay.Faults) { f.Delay = delay }
		unset = func(f *fakepay.Faults, base fakepay.Faults) { f.Delay = base.Delay }
		what = fmt.Sprintf("delay %s (in progress: 409 to a retry)", delay.Round(time.Millisecond))
	case "proc-redirect":
		set = func(f *fakepay.Faults) { f.RedirectAfterCommit = fakepay.Trigger{Rate: rate} }
		unset = func(f *fakepay.Faults, base fakepay.Faults) { f.RedirectAfterCommit = base.RedirectAfterCommit }
		what = fmt.Sprintf("redirect_after_commit rate %.2f", rate)
	case "proc-refuse-replay":
		// An ambiguous first attempt (500 or a reset after the charge), then
		// a refusal of the retry: only a lookup may settle it.
		target = deduping[int(r.rand()*2)]
		drop := r.rand() < 0.5
		refuse := 0.5 + 0.5*r.rand()
		set = func(f *fakepay.Faults) {
			f.RefuseReplay = fakepay.Trigger{Rate: refuse}
			if drop {
				f.DropAfterCommit = fakepay.Trigger{Rate: rate}
			} else {
				f.FailAfterCommit = fakepay.Trigger{Rate: rate}
			}
		}
		unset = func(f *fakepay.Faults, base fakepay.Faults) {
			f.RefuseReplay = base.RefuseReplay
			if drop {
				f.DropAfterCommit = base.DropAfterCommit
			} else {
				f.FailAfterCommit = base.FailAfterCommit
			}
		}
		what = fmt.Sprintf("refuse_replay rate %.2f after %s rate %.2f", refuse, map[bool]string{true: "drop_after_commit", false: "fail_after_commit"}[drop], rate)
	case "proc-lookup-lag":
		// Only the processors with a lookup; pay_* declare it consistent,
		// and only a deduping downstream makes trusting it harmless.
		target = deduping[int(r.rand()*2)]
		lag := r.between(500*time.Millisecond, 4*time.Second)
		d = r.between(4*time.Second, 10*time.Second)
		set = func(f *fakepay.Faults) { f.LookupLag = lag }
		unset = func(f *fakepay.Faults, base fakepay.Faults) { f.LookupLag = base.LookupLag }
		what = fmt.Sprintf("lookup_lag %s", lag.Round(time.Millisecond))
	case "proc-no-key-support":
		// Only where the tools declare no dedupe: pay_nokey and send_email.
		target = procs.mail
		d = r.between(3*time.Second, 8*time.Second)
		set = func(f *fakepay.Faults) { f.NoKeySupport = true }
		unset = func(f *fakepay.Faults, base fakepay.Faults) { f.NoKeySupport = base.NoKeySupport }
		what = "no_key_support"
	default:
		return
	}
	n.event(kind, 0, fmt.Sprintf("processor %s: %s for %s", procs.name(target), what, d.Round(time.Millisecond)))
	procs.update(target, set)
	n.injectedOne(kind)
	sleepCtx(ctx, d)
	base := procs.baseOf(target) // outside update, which holds the same lock
	procs.update(target, func(f *fakepay.Faults) { unset(f, base) })
	n.event(kind, 0, fmt.Sprintf("processor %s: %s cleared", procs.name(target), what))
}

// armFailpoint restarts s gracefully (a rolling deploy, not a fault) with
// point armed to kill it on its next hit, and waits up to 20s for the
// crash, which the server's supervisor records and recovers from.
func (n *nemesis) armFailpoint(ctx context.Context, s *server, point string) {
	n.mu.Lock()
	before := n.injected["fp-"+point]
	n.mu.Unlock()
	s.opMu.Lock()
	if !s.running() {
		s.opMu.Unlock()
		return
	}
	n.event("fp-"+point, s.idx, "graceful restart with "+point+"=1*kill")
	s.stop(false)
	s.arm(point)
	s.startRetrying(s.restartSpec(), "restart with "+point)
	s.opMu.Unlock()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		n.mu.Lock()
		fired := n.injected["fp-"+point] > before
		n.mu.Unlock()
		if fired || !sleepCtx(ctx, 100*time.Millisecond) {
			return
		}
	}
}
