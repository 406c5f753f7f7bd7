package chaos

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/opledger/opledger/proof/fakepay"
)

// FaultKinds are the faults the nemesis injects. Each is forced once, in a
// seeded random order, during the first 60% of the run; after that kinds are
// drawn at random. proc-key-retention is on for the whole run (the "ret"
// processor forgets keys after the retention its tool declares).
var FaultKinds = []string{
	"kill", "stop", "pg-crash",
	"net-db-latency", "net-db-reset", "net-db-blackhole",
	"net-proc-latency", "net-proc-reset", "net-proc-blackhole",
	"proc-fail-before-commit", "proc-fail-after-commit", "proc-drop-after-commit",
	"proc-delay", "proc-lookup-lag", "proc-no-key-support", "proc-key-retention",
	"fp-after-prepare", "fp-before-downstream", "fp-after-downstream", "fp-after-commit",
}

// maxBusyServers keeps one server out of the nemesis's hands at any time,
// so that the workload always has somewhere to go.
const maxBusyServers = numServers - 1

type nemesis struct {
	r  *Runner
	wg sync.WaitGroup

	mu         sync.Mutex
	busyServer map[int]bool
	busyProxy  map[*Proxy]bool
	busyKind   map[string]bool
	pgBusy     bool
	injected   map[string]int
	kills      int
	stops      int
	pgCrashes  int
	netFaults  int
	procFaults int
	fpCrashes  int
}

func newNemesis(r *Runner) *nemesis {
	return &nemesis{r: r, busyServer: map[int]bool{}, busyProxy: map[*Proxy]bool{}, busyKind: map[string]bool{},
		injected: map[string]int{}}
}

// kinds are the fault kinds this run can inject.
func (n *nemesis) kinds() []string {
	var out []string
	for _, k := range FaultKinds {
		if strings.HasPrefix(k, "fp-") && !n.r.opts.Failpoints || k == "proc-key-retention" {
			continue
		}
		out = append(out, k)
	}
	return out
}

func (n *nemesis) run(ctx context.Context) {
	defer n.wg.Wait()
	forced := n.kinds()
	for i := len(forced) - 1; i > 0; i-- {
		j := int(n.r.rand() * float64(i+1))
		forced[i], forced[j] = forced[j], forced[i]
	}
	gap := min(max(n.r.opts.Duration*6/10/time.Duration(len(forced)), 300*time.Millisecond), 4*time.Second)
	for len(forced) > 0 {
		if !sleepCtx(ctx, gap) {
			return
		}
		if n.try(ctx, forced[0]) {
			forced = forced[1:]
		} else {
			forced = append(forced[1:], forced[0]) // busy: try it again later
		}
	}
	all := n.kinds()
	for {
		if !sleepCtx(ctx, n.r.between(300*time.Millisecond, 1500*time.Millisecond)) {
			return
		}
		kind := all[int(n.r.rand()*float64(len(all)))]
		// A forced fault that did not take (a failpoint armed on a server
		// that then failed to start) is forced again, half of the time.
		if missing := n.missing(); len(missing) > 0 && n.r.rand() < 0.5 {
			kind = missing[int(n.r.rand()*float64(len(missing)))]
		}
		n.try(ctx, kind)
	}
}

// missing lists the kinds this run can inject that were not injected yet.
func (n *nemesis) missing() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, k := range n.kinds() {
		if n.injected[k] == 0 {
			out = append(out, k)
		}
	}
	return out
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
	case kind == "pg-crash":
		n.pgCrashes++
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
	s := Summary{Kills: n.kills, Stops: n.stops, PGCrashes: n.pgCrashes, NetFaults: n.netFaults,
		ProcFaults: n.procFaults, FailpointCrashes: n.fpCrashes, Injected: map[string]int{}}
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
			default:
				n.armFailpoint(ctx, s, strings.TrimPrefix(kind, "fp-"))
			}
		})
		return true
	case kind == "pg-crash":
		n.mu.Lock()
		if n.pgBusy {
			n.mu.Unlock()
			return false
		}
		n.pgBusy = true
		n.mu.Unlock()
		n.spawn(func() {
			defer func() { n.mu.Lock(); n.pgBusy = false; n.mu.Unlock() }()
			n.crashPG(ctx)
		})
		return true
	case strings.HasPrefix(kind, "net-"):
		s := n.r.servers[int(n.r.rand()*float64(len(n.r.servers)))]
		p := s.dbProxy
		if strings.HasPrefix(kind, "net-proc-") {
			p = s.procProxy
		}
		n.mu.Lock()
		if n.busyProxy[p] {
			n.mu.Unlock()
			return false
		}
		n.busyProxy[p] = true
		n.mu.Unlock()
		n.spawn(func() {
			defer func() { n.mu.Lock(); delete(n.busyProxy, p); n.mu.Unlock() }()
			n.netFault(ctx, kind, s, p)
		})
		return true
	case strings.HasPrefix(kind, "proc-"):
		n.mu.Lock()
		if n.busyKind[kind] {
			n.mu.Unlock()
			return false
		}
		n.busyKind[kind] = true
		n.mu.Unlock()
		n.spawn(func() {
			defer func() { n.mu.Lock(); delete(n.busyKind, kind); n.mu.Unlock() }()
			n.procFault(ctx, kind)
		})
		return true
	}
	return false
}

// restartAfter starts s again; during the run with the failpoint rate,
// once the run is over without failpoints. The caller holds s.opMu.
func (n *nemesis) restart(s *server) {
	for attempt := 0; attempt < 5; attempt++ {
		err := s.start(context.Background(), n.r.failpointSpec(""))
		if err == nil {
			return
		}
		n.r.logf("server %d: restart failed: %v", s.idx, err)
		time.Sleep(time.Second)
	}
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
	s.pause()
	n.injectedOne("stop")
	sleepCtx(ctx, d)
	s.resume()
	n.event("stop", s.idx, "SIGCONT")
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
	n.event(kind, s.idx, "healed")
}

func (n *nemesis) procFault(ctx context.Context, kind string) {
	r := n.r
	procs := r.procs
	all := []*fakepay.Server{procs.pay, procs.ret, procs.mail}
	name := map[*fakepay.Server]string{procs.pay: "pay", procs.ret: "ret", procs.mail: "mail"}
	target := all[int(r.rand()*float64(len(all)))]
	d := r.between(3*time.Second, 8*time.Second)
	rate := 0.2 + 0.4*r.rand()
	var set, unset func(*fakepay.Faults)
	var what string
	switch kind {
	case "proc-fail-before-commit":
		set = func(f *fakepay.Faults) { f.FailBeforeCommit = fakepay.Trigger{Rate: rate} }
		unset = func(f *fakepay.Faults) { f.FailBeforeCommit = fakepay.Trigger{} }
		what = fmt.Sprintf("fail_before_commit rate %.2f", rate)
	case "proc-fail-after-commit":
		set = func(f *fakepay.Faults) { f.FailAfterCommit = fakepay.Trigger{Rate: rate} }
		unset = func(f *fakepay.Faults) { f.FailAfterCommit = fakepay.Trigger{} }
		what = fmt.Sprintf("fail_after_commit rate %.2f", rate)
	case "proc-drop-after-commit":
		set = func(f *fakepay.Faults) { f.DropAfterCommit = fakepay.Trigger{Rate: rate} }
		unset = func(f *fakepay.Faults) { f.DropAfterCommit = fakepay.Trigger{} }
		what = fmt.Sprintf("drop_after_commit rate %.2f", rate)
	case "proc-delay":
		// Up to twice the tools' timeout: some calls time out while the
		// processor still commits.
		delay := r.between(200*time.Millisecond, toolTimeout*2)
		set = func(f *fakepay.Faults) { f.Delay = delay }
		unset = func(f *fakepay.Faults) { f.Delay = 0 }
		what = fmt.Sprintf("delay %s", delay.Round(time.Millisecond))
	case "proc-lookup-lag":
		// Only the processors with a lookup; pay_* declare it consistent,
		// and only a deduping downstream makes trusting it harmless.
		target = []*fakepay.Server{procs.pay, procs.ret}[int(r.rand()*2)]
		lag := r.between(500*time.Millisecond, 4*time.Second)
		d = r.between(4*time.Second, 10*time.Second)
		set = func(f *fakepay.Faults) { f.LookupLag = lag }
		unset = func(f *fakepay.Faults) { f.LookupLag = 0 }
		what = fmt.Sprintf("lookup_lag %s", lag.Round(time.Millisecond))
	case "proc-no-key-support":
		// Only where the tools declare no dedupe: pay_nokey and send_email.
		target = procs.mail
		d = r.between(3*time.Second, 8*time.Second)
		set = func(f *fakepay.Faults) { f.NoKeySupport = true }
		unset = func(f *fakepay.Faults) { f.NoKeySupport = false }
		what = "no_key_support"
	default:
		return
	}
	n.event(kind, 0, fmt.Sprintf("processor %s: %s for %s", name[target], what, d.Round(time.Millisecond)))
	procs.update(target, set)
	n.injectedOne(kind)
	sleepCtx(ctx, d)
	procs.update(target, unset)
	n.event(kind, 0, fmt.Sprintf("processor %s: %s cleared", name[target], what))
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
	spec := n.r.failpointSpec(point)
	for attempt := 0; attempt < 5; attempt++ {
		if err := s.start(context.Background(), spec); err == nil {
			break
		}
		time.Sleep(time.Second)
	}
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
