package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/opledger/opledger/service"
)

type receiptsTarget struct {
	sc  string
	min float64
}

// receiptsTargets are issue 37's goal: with receipts on, execute-new and
// execute-one-call keep at least min × the throughput of the same servers
// with receipts off (SystemOpledgerNoReceipts), in the same run.
var receiptsTargets = []receiptsTarget{
	{ScenarioExecuteNew, 0.95},
	{ScenarioOneCall, 0.95},
}

// startNoReceipts starts SystemOpledgerNoReceipts: servers like the ones
// under test (serve children, or one in this process), on the same
// database, with receipts off; and with Options.Duet a second such set, the
// duet's control (Duet.Control), numbered after the first.
func (e *env) startNoReceipts(ctx context.Context) error {
	var err error
	if e.noReceipts, err = e.startReceiptsOff(ctx, 0); err != nil {
		return err
	}
	if e.opts.Duet {
		e.noReceiptsAA, err = e.startReceiptsOff(ctx, max(e.opts.Processes, 1))
	}
	return err
}

// isReceiptsScenario reports whether sc has a receipts target.
func isReceiptsScenario(sc string) bool {
	return slices.ContainsFunc(receiptsTargets, func(x receiptsTarget) bool { return x.sc == sc })
}

// startReceiptsOff starts one set of receipts-off servers, the children
// numbered from first.
func (e *env) startReceiptsOff(ctx context.Context, first int) (*clients, error) {
	var addrs []string
	var pids []int
	if e.opts.Binary == "" {
		st, err := startStack(ctx, e.cluster.URL(dbMain), e.toolsYAML, e.secret, e.opts.DBConns, 0,
			filepath.Join(e.dir, fmt.Sprintf("inprocess-no-receipts-%d.log", first)), func(c *service.Config) { c.AuditNoReceipts = true })
		if err != nil {
			return nil, err
		}
		e.closers = append(e.closers, st.stop)
		addrs = []string{st.addr}
	} else {
		for i := range e.opts.Processes {
			p, err := e.startServe(ctx, first+i, dbMain, true, "OPLEDGER_AUDIT_NO_RECEIPTS=true")
			if err != nil {
				return nil, err
			}
			addrs, pids = append(addrs, p.addr), append(pids, p.cmd.Process.Pid)
		}
	}
	cl, err := dialClients(addrs, e.apiKey, e.opts.GRPCConns)
	if err != nil {
		return nil, err
	}
	cl.pids = pids
	e.closers = append(e.closers, cl.close)
	return cl, nil
}

// Duet is a receipts target's point measured a second way (Options.Duet):
// both sides at once, each with the point's clients, round after round
// (duet benchmarking: whatever slows the machine in a round slows both
// sides alike, so a round's ratio is not the machine's drift between two
// runs seconds apart). It is informative, not the target's verdict: what
// the two sides share, the WAL's flushes, the page cache, PostgreSQL's
// background processes, is charged to both, so it reads the receipts' own
// CPU and misses their share of that work (docs/performance.md, finding 46).
// Its control is the same measurement of receipts-off servers against a
// second set of them, which must read 1.
type Duet struct {
	Scenario    string
	Concurrency int
	// Rounds are receipts on (A) against receipts off (B).
	Rounds []DuetRound
	// Control are receipts off (A) against the second receipts-off set (B).
	Control []DuetRound
}

// DuetRound is one window with both sides running: each side's ops per
// second and its servers' CPU per op (zero when they run in this process).
type DuetRound struct {
	A, B             float64
	ServerA, ServerB time.Duration
	Errors           int
	FirstError       string
}

// ratio is the round's A ÷ B.
func (d DuetRound) ratio() float64 {
	if d.B == 0 {
		return 0
	}
	return d.A / d.B
}

// duetControlSlack is how far from 1 the control's median may read for the
// duet's reading to stand; past it the line is n/a, the instrument off.
const duetControlSlack = 0.03

// duetPoint reports whether scenario sc's point at c gets a duet: a
// receipts target's, with the receipts-off servers running.
func (e *env) duetPoint(sc string, c int) bool {
	if !e.opts.Duet || !e.opts.wants(SystemOpledgerNoReceipts) || e.noReceiptsAA == nil || !e.opts.targetLevel(sc, c) {
		return false
	}
	return isReceiptsScenario(sc)
}

// runDuet measures the point's duet: rounds rounds of receipts on against
// off, each followed by one of the control.
func (e *env) runDuet(ctx context.Context, sc string, c, rounds int) Duet {
	d := Duet{Scenario: sc, Concurrency: c}
	// The second receipts-off set runs nothing but the control: one
	// unmeasured window first, so that its connections and cached plans
	// are as warm as the first set's, which took every turn of the point.
	runClosed(ctx, c, e.opts.warmup(), e.opts.Duration, opledgerOp(e.noReceiptsAA, sc, 1, e.opts.Seed))
	for range rounds {
		if ctx.Err() != nil {
			break
		}
		d.Rounds = append(d.Rounds, e.duetRound(ctx, sc, c, e.clients, e.noReceipts))
		d.Control = append(d.Control, e.duetRound(ctx, sc, c, e.noReceipts, e.noReceiptsAA))
	}
	return d
}

// duetRound runs sides a and b of scenario sc at once, c clients each, over
// one measured window.
func (e *env) duetRound(ctx context.Context, sc string, c int, a, b *clients) DuetRound {
	warmup, dur := e.opts.warmup(), e.opts.Duration
	cpuA := e.cpuWindow(ctx, cpuProcs{server: a.pids}, warmup, dur)
	cpuB := e.cpuWindow(ctx, cpuProcs{server: b.pids}, warmup, dur)
	var ma, mb measurement
	var wg sync.WaitGroup
	wg.Go(func() { ma = runClosed(ctx, c, warmup, dur, opledgerOp(a, sc, 1, e.opts.Seed)) })
	wg.Go(func() { mb = runClosed(ctx, c, warmup, dur, opledgerOp(b, sc, 1, e.opts.Seed)) })
	wg.Wait()
	ra, rb := ma.result(), mb.result()
	r := DuetRound{A: ra.OpsPerSec, B: rb.OpsPerSec, Errors: ra.Errors + rb.Errors, FirstError: ra.FirstError}
	if r.FirstError == "" {
		r.FirstError = rb.FirstError
	}
	if x := cpuA(ra.Ops); x != nil {
		r.ServerA = x.Server
	}
	if x := cpuB(rb.Ops); x != nil {
		r.ServerB = x.Server
	}
	return r
}

// duetMedian is the median of rounds' ratios, with the median of each
// side's server CPU per op; a round where a side completed nothing, or
// whose CPU was not accounted, is left out of that median (Failures
// reports the first).
func duetMedian(rounds []DuetRound) (q float64, serverA, serverB time.Duration) {
	var qs []float64
	var as, bs []time.Duration
	for _, r := range rounds {
		if r.A > 0 && r.B > 0 {
			qs = append(qs, r.ratio())
		}
		if r.ServerA > 0 && r.ServerB > 0 {
			as, bs = append(as, r.ServerA), append(bs, r.ServerB)
		}
	}
	return median(qs), median(as), median(bs)
}

// median is the middle of xs (the mean of the two middle ones for an even
// count), zero for none; xs is sorted in place.
func median[T float64 | time.Duration](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	m := len(xs) / 2
	if len(xs)%2 == 0 {
		return (xs[m-1] + xs[m]) / 2
	}
	return xs[m]
}

// ReceiptsTargets evaluates receiptsTargets on r at the targets' level
// (targetConc), with the CPU per op of both sides by
// process: where the receipts' cost goes.
func (r *Report) ReceiptsTargets() []Target {
	var ts []Target
	us := func(c *CPUCost) string {
		if c == nil {
			return "CPU not accounted"
		}
		return fmt.Sprintf("server %d + PostgreSQL %d µs/op", c.Server.Microseconds(), c.Postgres.Microseconds())
	}
	conc := r.targetConc()
	if c := r.Checkpoint; c != nil {
		ts = append(ts, Target{Met: met(true), Text: fmt.Sprintf("checkpoint task (informative): %d chain heads signed in %d checkpoints, %s wall; "+
			"CPU: checkpointer %d µs + PostgreSQL %d µs per head", c.Heads, c.Checkpoints, c.Wall.Round(time.Millisecond),
			c.Task.Microseconds()/int64(max(c.Heads, 1)), c.Postgres.Microseconds()/int64(max(c.Heads, 1)))})
	}
	for _, x := range receiptsTargets {
		text := fmt.Sprintf("%s with receipts ≥ %.2f × receipts off (c=%d)", x.sc, x.min, conc)
		o, okO := r.at(x.sc, SystemOpledger, conc)
		b, okB := r.at(x.sc, SystemOpledgerNoReceipts, conc)
		if !okO || !okB {
			ts = append(ts, Target{Text: text + ": not measured in this run"})
			continue
		}
		q, qt := ratioOf(o, b)
		ts = append(ts, Target{Met: met(q >= x.min), Text: fmt.Sprintf("%s: %s (%s vs %s)%s", text, qt,
			us(o.CPU), us(b.CPU), byRound(o, b, "%.2f", opsRatio))})
		if d, ok := r.duet(x.sc, conc); ok {
			ts = append(ts, d.target())
		}
	}
	return ts
}

// target is the duet's informative line: its median ratio when its control
// reads 1, n/a otherwise.
func (d Duet) target() Target {
	dq, sa, sb := duetMedian(d.Rounds)
	aa, _, _ := duetMedian(d.Control)
	text := fmt.Sprintf("%s receipts on ÷ off, both at once (informative: the receipts' own CPU; WAL, I/O and PostgreSQL's background work "+
		"fall on both sides) (c=%d each)", d.Scenario, d.Concurrency)
	if aa < 1-duetControlSlack || aa > 1+duetControlSlack {
		return Target{Text: fmt.Sprintf("%s: its control, receipts off against receipts off, read %.2f, not 1 ± %.2f: %.2f does not stand",
			text, aa, duetControlSlack, dq)}
	}
	var rounds []string
	for _, x := range d.Rounds {
		rounds = append(rounds, fmt.Sprintf("%.2f", x.ratio()))
	}
	server := ""
	if sb > 0 {
		server = fmt.Sprintf("; server %d vs %d µs/op", sa.Microseconds(), sb.Microseconds())
	}
	return Target{Met: met(true), Text: fmt.Sprintf("%s: %.2f (the median of %d rounds' ratios; control, receipts off against receipts off: %.2f)%s; by round %s",
		text, dq, len(d.Rounds), aa, server, strings.Join(rounds, ", "))}
}

// duet returns scenario sc's duet at c.
func (r *Report) duet(sc string, c int) (Duet, bool) {
	for _, d := range r.Duets {
		if d.Scenario == sc && d.Concurrency == c && len(d.Rounds) > 0 && len(d.Control) > 0 {
			return d, true
		}
	}
	return Duet{}, false
}

// CheckpointCost is what signing the checkpoints of every chain head a run
// changed cost: the checkpoint task's work for that many operations, which
// with a checkpoint a minute a server does once per head changed in the
// minute.
type CheckpointCost struct {
	Heads, Checkpoints int
	Wall               time.Duration
	// Task is the checkpointer's CPU (it runs in the bench's process, which
	// is idle meanwhile), Postgres every PostgreSQL process's.
	Task, Postgres time.Duration
}

// measureCheckpoint signs checkpoints of the main database's chain heads,
// every one the run wrote (no checkpoint ran before: the servers have no
// key), in this process with a throwaway key, and records their cost.
func (e *env) measureCheckpoint(ctx context.Context, rep *Report) error {
	skey, _, err := note.GenerateKey(rand.Reader, "bench")
	if err != nil {
		return err
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		return err
	}
	cp := service.Checkpointer{Store: e.stack.store, Signer: signer, Interval: time.Minute, Log: slog.New(slog.DiscardHandler)}
	a, err := e.cpuNow(cpuProcs{})
	if err != nil {
		return err
	}
	start := time.Now()
	c := CheckpointCost{}
	for {
		last, err := cp.Once(ctx)
		if err != nil {
			return fmt.Errorf("bench: checkpoint: %w", err)
		}
		if last == nil {
			break
		}
		// The first checkpoints of the database: their number is the last's
		// seq, their leaves its size.
		c.Checkpoints, c.Heads = int(last.Seq), int(last.Size)
	}
	c.Wall = time.Since(start)
	b, err := e.cpuNow(cpuProcs{})
	if err != nil {
		return err
	}
	c.Task, c.Postgres = b.bench-a.bench, b.postgres-a.postgres
	rep.Checkpoint = &c
	e.progress("checkpoint: %d heads in %d checkpoints, %s, CPU task %s + PostgreSQL %s", c.Heads, c.Checkpoints,
		c.Wall.Round(time.Millisecond), c.Task, c.Postgres)
	return nil
}
