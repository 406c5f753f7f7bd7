// Package bench measures opledger's throughput and latency against
// baselines on one machine and one PostgreSQL: the database ceiling
// (pgbench running the same statements), the RPC floor (a bare grpc-go
// server with no interceptors and no database) and a peer (DBOS Transact for
// Go doing the same job). It backs `opledger bench`; docs/performance.md
// holds a documented run and what the profiles say.
//
// Everything runs on the local machine: a throwaway PostgreSQL cluster with
// PostgreSQL's crash-safety defaults (fsync on, so commits cost what they
// cost in production), the fake payment processor with no injected delay,
// and either real `opledger serve` processes or, for profiling and tests,
// the same server wired in-process.
package bench

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// The scenarios, in the order they run and are reported.
const (
	// ScenarioPrepare prepares new operations (unique keys) of a tool that
	// needs no approval.
	ScenarioPrepare = "prepare"
	// ScenarioExecuteNew prepares and executes a new operation whose
	// downstream is the fake processor; one op is both RPCs.
	ScenarioExecuteNew = "execute-new"
	// ScenarioOneCall does execute-new's job in one RPC: a Prepare with
	// execute of a new operation (the one-call path).
	ScenarioOneCall = "execute-one-call"
	// ScenarioExecuteReplay executes an operation that already succeeded.
	ScenarioExecuteReplay = "execute-replay"
	// ScenarioGet reads an operation.
	ScenarioGet = "get"
	// ScenarioDuplicateStorm has every client execute one of a few fresh
	// operations at the same moment, round after round.
	ScenarioDuplicateStorm = "duplicate-storm"
)

// Scenarios lists every scenario in run order.
var Scenarios = []string{ScenarioPrepare, ScenarioExecuteNew, ScenarioOneCall, ScenarioOneCallBudgeted, ScenarioOneCallTenantLimit,
	ScenarioExecuteReplay, ScenarioGet, ScenarioDuplicateStorm}

// The systems a result can belong to.
const (
	// SystemOpledger is opledger itself, over gRPC.
	SystemOpledger = "opledger"
	// SystemPgbench is the database ceiling: pgbench running the scenario's
	// statements.
	SystemPgbench = "pgbench"
	// SystemGRPCFloor is a bare grpc-go server answering a canned response:
	// no interceptors, no database.
	SystemGRPCFloor = "grpc-floor"
	// SystemGRPCChain is the same canned handler behind opledger's
	// interceptor chain (auth, logging, metrics, validation…), no database.
	SystemGRPCChain = "grpc-chain"
	// SystemDBOS is DBOS Transact for Go doing the same job: a workflow
	// whose id is the idempotency key, running one step that calls the fake
	// processor.
	SystemDBOS = "dbos"
	// SystemOpledgerPolicy is opledger doing the one-call job for a tool
	// with a three-rule policy (policyToolName: two deny rules and an
	// approval.when that holds for none of the bench's calls, so every call
	// is judged and then runs as the plain one does): what the policy costs
	// a call, measured beside the plain one-call, taking turns with it.
	SystemOpledgerPolicy = "opledger-3-rules"
	// SystemOpledgerNoReceipts is opledger with receipts off
	// (--audit-no-receipts: events written without hash chains), as many
	// servers as the one under test on the same database, taking turns
	// with it: what the receipts cost (receiptsTargets).
	SystemOpledgerNoReceipts = "opledger-no-receipts"
	// SystemOpledgerOneCall is opledger doing execute-one-call's job (the
	// plain tool, no limit, no identity) in a budget scenario's point,
	// taking turns with it: the other side of the scenario's ratio
	// (budgetTargets), measured beside it rather than minutes before in
	// execute-one-call's own point. It always runs with the budget
	// scenarios, whatever --baselines says.
	SystemOpledgerOneCall = "opledger-one-call"
)

// companions lists, per scenario, the systems that run beside opledger in
// each of its points whatever --baselines asks for: the other side of its
// own targets.
var companions = map[string][]string{
	ScenarioOneCallBudgeted:    {SystemOpledgerOneCall},
	ScenarioOneCallTenantLimit: {SystemOpledgerOneCall},
}

// baselines lists, per scenario, the systems it is compared with.
var baselines = map[string][]string{
	ScenarioPrepare:    {SystemPgbench},
	ScenarioExecuteNew: {SystemPgbench, SystemDBOS, SystemOpledgerNoReceipts},
	ScenarioOneCall:    {SystemPgbench, SystemDBOS, SystemOpledgerPolicy, SystemOpledgerNoReceipts},
	// Compared with execute-one-call's job in the same point (companions,
	// budgetTargets).
	ScenarioOneCallBudgeted:    nil,
	ScenarioOneCallTenantLimit: nil,
	ScenarioExecuteReplay:      {SystemPgbench, SystemGRPCFloor, SystemDBOS},
	ScenarioGet:                {SystemPgbench, SystemGRPCFloor, SystemGRPCChain},
	ScenarioDuplicateStorm:     {SystemPgbench, SystemDBOS},
}

// Baselines lists every baseline system (--baselines chooses among them).
var Baselines = []string{SystemPgbench, SystemGRPCFloor, SystemGRPCChain, SystemDBOS, SystemOpledgerPolicy, SystemOpledgerNoReceipts}

// Options configures Run. The zero value runs the full benchmark with an
// in-process server; `opledger bench` sets Binary to itself.
type Options struct {
	// Quick runs fewer concurrency levels and shorter measurements, to show
	// that everything works (CI) rather than to publish numbers.
	Quick bool
	// Concurrency lists the client counts of the sweep; default 1, 4, 16,
	// 64 (quick: 1, 16).
	Concurrency []int
	// Duration is each measurement's length after a short warm-up; default
	// 5s (quick: 1s).
	Duration time.Duration
	// Grow, when positive, bulk-inserts operations up to Grow stored rows in
	// a database of its own and measures execute-replay at 10 thousand and
	// at Grow.
	Grow int
	// CPUProfileDir, when set, receives one CPU profile per scenario, taken
	// from a run against the server wired in-process (the serve process has
	// no profiling endpoint).
	CPUProfileDir string
	// ProfileConcurrency is the client count of the profiled runs; default
	// the sweep's highest level up to 16.
	ProfileConcurrency int
	// Binary is the opledger executable whose `serve` the clients call;
	// empty serves in-process (the same wiring as serve).
	Binary string
	// Processes is how many serve processes share the database; default 1.
	Processes int
	// DBConns is the connection pool size of each server and of DBOS;
	// default 16.
	DBConns int
	// GRPCConns is how many gRPC connections the load generator opens to
	// each server, its workers taking them in turn; default 1: the load
	// generator is one agent runtime, as DBOS's baseline is one process,
	// and an opledger client is one channel, which is one connection.
	GRPCConns int
	// Scenarios restricts the run to these scenarios; empty runs all.
	Scenarios []string
	// Baselines restricts the baselines to these systems; empty runs all.
	Baselines []string
	// Dir holds the cluster and logs; empty uses a temporary directory that
	// is removed at the end.
	Dir string
	// Seed is how many succeeded operations replay and get choose from;
	// default 10000.
	Seed int
	// Repeat measures every point this many times, the systems of a
	// point taking turns, and keeps each one's median by throughput, which
	// tames a machine shared with other work; default 1.
	Repeat int
	// TargetRepeat measures the points the targets are read at (each
	// scenario's at TargetConcurrency, the tenant-wide limit's at its own
	// level) at least this many times, the systems taking turns as with
	// Repeat: a single one-second round of each side does not resolve the
	// few percent a same-run ratio target asks for. Default 5 with Quick,
	// else Repeat.
	TargetRepeat int
	// Duet also measures the receipts targets' points both sides at once
	// (Duet), as many rounds as the point's, each with a control round:
	// informative, beside the targets' turns.
	Duet bool
	// Progress receives one line per measurement; nil discards them.
	Progress io.Writer `json:"-"`
}

func (o *Options) defaults() {
	if len(o.Concurrency) == 0 {
		o.Concurrency = []int{1, 4, 16, 64}
		if o.Quick {
			o.Concurrency = []int{1, 16}
		}
	}
	if o.Duration == 0 {
		o.Duration = 5 * time.Second
		if o.Quick {
			o.Duration = time.Second
		}
	}
	if o.ProfileConcurrency == 0 {
		o.ProfileConcurrency = min(16, slices.Max(o.Concurrency))
	}
	if o.Processes == 0 {
		o.Processes = 1
	}
	if o.DBConns == 0 {
		o.DBConns = 16
	}
	if o.GRPCConns == 0 {
		o.GRPCConns = 1
	}
	if len(o.Scenarios) == 0 {
		o.Scenarios = Scenarios
	}
	if len(o.Baselines) == 0 {
		o.Baselines = Baselines
	}
	if o.Seed == 0 {
		o.Seed = 10000
	}
	if o.Repeat == 0 {
		o.Repeat = 1
	}
	if o.TargetRepeat == 0 && o.Quick {
		o.TargetRepeat = 5
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

func (o *Options) validate() error {
	for _, s := range o.Scenarios {
		if !slices.Contains(Scenarios, s) {
			return fmt.Errorf("bench: unknown scenario %q (want one of %s)", s, strings.Join(Scenarios, ", "))
		}
	}
	for _, b := range o.Baselines {
		if !slices.Contains(Baselines, b) {
			return fmt.Errorf("bench: unknown baseline %q", b)
		}
	}
	for _, c := range o.Concurrency {
		if c < 1 || c > 1024 {
			return fmt.Errorf("bench: concurrency %d out of range 1..1024", c)
		}
	}
	if o.Duration < 100*time.Millisecond {
		return errors.New("bench: duration must be at least 100ms")
	}
	if o.GRPCConns < 0 || o.GRPCConns > 1024 {
		return errors.New("bench: --grpc-conns must be 1 to 1024")
	}
	if o.Duet && (!o.wants(SystemOpledgerNoReceipts) || !slices.ContainsFunc(o.Scenarios, isReceiptsScenario)) {
		return fmt.Errorf("bench: --duet measures the receipts targets: it needs the %s baseline and %s or %s",
			SystemOpledgerNoReceipts, ScenarioExecuteNew, ScenarioOneCall)
	}
	if o.Grow < 0 || o.Seed < 1 || o.Repeat < 1 || o.Repeat > maxRepeat || o.TargetRepeat < 0 || o.TargetRepeat > maxRepeat {
		return fmt.Errorf("bench: --grow must be positive, the seed at least 1 and --repeat and --target-repeat 1 to %d", maxRepeat)
	}
	return nil
}

// maxRepeat bounds --repeat and --target-repeat. A same-point target's
// verdict is the median of its rounds' ratios, and on a shared machine one
// round of each side can read ±15 %; even the median of 25 two-second
// rounds moves by ±3 % from run to run (docs/performance.md, finding 46).
// The bound leaves room for such long runs and stops a typo's hours.
const maxRepeat = 31

func (o *Options) wants(system string) bool { return slices.Contains(o.Baselines, system) }

func (o *Options) warmup() time.Duration { return min(time.Second, o.Duration/4) }

// Result is one measurement: one system running one scenario's workload at
// one concurrency.
type Result struct {
	Scenario    string
	System      string
	Concurrency int
	// Workload names what the system ran when it is not the scenario
	// itself, e.g. pgbench's script.
	Workload string
	// Ops completed inside the measured window, and their rate.
	Ops       int
	OpsPerSec float64
	// Latency percentiles of those ops.
	P50, P99, P999 time.Duration
	// Errors counts failed ops (warm-up included); FirstError is one of
	// them.
	Errors     int
	FirstError string
	// DBCallsPerOp is the statements PostgreSQL executed per op
	// (pg_stat_statements); 0 when not measured.
	DBCallsPerOp float64
	// CPU is the machine's CPU time per op in the measured window, by
	// process; nil when not measured (storms, the growth test).
	CPU *CPUCost `json:",omitempty"`
	// Rounds has every run of the point in the order they ran, when it ran
	// more than once (--repeat): the figures above are the median run's,
	// and the targets print the ratio of each round to its baseline's round
	// beside them, because on two shared cores one round's ratio moves by
	// more than most targets' margins.
	Rounds []Round `json:",omitempty"`
	// total counts every op, warm-up included.
	total int
}

// Round is one run of a point measured more than once.
type Round struct {
	OpsPerSec float64
	CPU       *CPUCost `json:",omitempty"`
}

// GrowPoint is execute-replay measured with Stored operations in the table.
type GrowPoint struct {
	Stored int
	// Replayed says which operations the ops chose among: "all" stored, or
	// the newest ones.
	Replayed       string
	Concurrency    int
	Ops            int
	OpsPerSec      float64
	P50, P99, P999 time.Duration
	Errors         int
	// Load is how long inserting the rows up to this point took.
	Load time.Duration
	// TableBytes is the operation table's size with its indexes.
	TableBytes int64
}

// Statement is one statement's share of a scenario's database work.
type Statement struct {
	CallsPerOp float64
	MeanMillis float64
	Query      string
}

// Machine describes where a report was measured.
type Machine struct {
	CPUs          int
	CPUModel      string
	MemoryBytes   int64
	GoVersion     string
	Postgres      string
	LoadBefore    string
	LoadAfter     string
	Durable       bool
	PGSettings    map[string]string
	ServerProcess string
}

// Report is everything a run measured.
type Report struct {
	Options  Options
	Machine  Machine
	Started  time.Time
	Elapsed  time.Duration
	Results  []Result
	Grow     []GrowPoint
	GrowNote string
	// Statements breaks each opledger scenario's database work down by
	// statement, measured at the profile concurrency.
	Statements map[string][]Statement
	// Profiles lists the CPU profile files written.
	Profiles []string
	// InProcess holds the in-process (profiled) runs.
	InProcess []Result
	// Duets are the receipts targets' points measured both sides at once
	// (Duet).
	Duets []Duet
	// Checkpoint is what one signed checkpoint of every chain head the run
	// changed cost (measured with SystemOpledgerNoReceipts); nil when not
	// measured.
	Checkpoint *CheckpointCost
}

// Failures lists what went wrong in a report: measurements with errors or
// without a single completed op. A report without failures may still show
// numbers that miss their targets; that is not a failure.
func (r *Report) Failures() []string {
	var out []string
	check := func(res Result) {
		if res.Errors > 0 {
			out = append(out, fmt.Sprintf("%s %s c=%d: %d errors, e.g. %s", res.System, res.Scenario, res.Concurrency, res.Errors, res.FirstError))
		} else if res.Ops == 0 {
			out = append(out, fmt.Sprintf("%s %s c=%d: no op completed", res.System, res.Scenario, res.Concurrency))
		}
	}
	for _, res := range r.Results {
		check(res)
	}
	for _, res := range r.InProcess {
		check(res)
	}
	for _, d := range r.Duets {
		for _, part := range []struct {
			name   string
			rounds []DuetRound
		}{{"receipts on against off", d.Rounds}, {"control", d.Control}} {
			errs, empty, first := 0, 0, ""
			for _, x := range part.rounds {
				errs += x.Errors
				if first == "" {
					first = x.FirstError
				}
				if x.A == 0 || x.B == 0 {
					empty++
				}
			}
			if errs > 0 {
				out = append(out, fmt.Sprintf("duet %s c=%d, %s: %d errors, e.g. %s", d.Scenario, d.Concurrency, part.name, errs, first))
			}
			if empty > 0 {
				out = append(out, fmt.Sprintf("duet %s c=%d, %s: a side completed no op in %d of %d rounds", d.Scenario, d.Concurrency, part.name, empty, len(part.rounds)))
			}
		}
	}
	for _, g := range r.Grow {
		if g.Errors > 0 || g.Ops == 0 {
			out = append(out, fmt.Sprintf("grow %d: %d errors, %d ops", g.Stored, g.Errors, g.Ops))
		}
	}
	return out
}

// Run runs the benchmark and returns its report. It fails only when the
// setup fails; errors of individual measurements are in the report (see
// Report.Failures).
func Run(ctx context.Context, opts Options) (*Report, error) {
	opts.defaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	rep := &Report{Options: opts, Started: time.Now(), Statements: map[string][]Statement{}}
	rep.Machine = describeMachine()
	rep.Machine.LoadBefore = loadAverage()
	dir := opts.Dir
	if dir == "" {
		// Under /tmp: pgcluster hands the directory to the postgres user
		// when we are root, and that user must reach it.
		d, err := os.MkdirTemp("", "opledger-bench-")
		if err != nil {
			return nil, err
		}
		if err := os.Chmod(d, 0o755); err != nil {
			return nil, err
		}
		dir = d
		defer os.RemoveAll(d)
	}
	e, err := newEnv(ctx, dir, &opts)
	if err != nil {
		return nil, err
	}
	defer e.close()
	rep.Machine.Postgres = e.pgVersion
	rep.Machine.Durable = true
	rep.Machine.PGSettings = e.pgSettings
	rep.Machine.ServerProcess = "in-process server"
	if opts.Binary != "" {
		rep.Machine.ServerProcess = fmt.Sprintf("%d `opledger serve` process(es)", opts.Processes)
	}
	if err := e.runAll(ctx, rep); err != nil {
		return rep, err
	}
	rep.Machine.LoadAfter = loadAverage()
	rep.Elapsed = time.Since(rep.Started)
	return rep, nil
}

func (e *env) progress(format string, args ...any) {
	fmt.Fprintf(e.opts.Progress, "bench: "+format+"\n", args...)
}

// runAll runs every measurement in a fixed order: the scenarios and their
// baselines level by level, then the profiles, then the growth test.
func (e *env) runAll(ctx context.Context, rep *Report) error {
	o := e.opts
	// Results already measured for another scenario: pgbench's read script
	// serves execute-replay and get, and DBOS's new workflow execute-new
	// and execute-one-call.
	shared := map[string]Result{}
	sharedKey := func(sc, sys string, c int) string {
		switch sys {
		case SystemPgbench:
			return fmt.Sprintf("%s/%s/%d", sys, pgbenchScript[sc], c)
		case SystemDBOS:
			return fmt.Sprintf("%s/%s/%d", sys, dbosWorkload(sc), c)
		}
		return ""
	}
	for _, sc := range o.Scenarios {
		levels, extra := o.levels(sc)
		for _, c := range levels {
			systems := []string{SystemOpledger}
			for _, sys := range baselines[sc] {
				if o.wants(sys) && !extra[c] {
					systems = append(systems, sys)
				}
			}
			systems = append(systems, companions[sc]...)
			// With --repeat, the systems take turns (opledger, its
			// baselines, opledger again…) rather than each running its
			// repeats in a block: on a shared machine a change of load then
			// falls on every system of the point alike. Each round starts
			// one system further on, so that no system is always the one
			// that runs first, after the previous point's writes (their
			// autovacuum, their dirty pages), or always the one after
			// another system's.
			runs := map[string][]Result{}
			rounds := o.Repeat
			if o.targetLevel(sc, c) {
				rounds = max(rounds, o.TargetRepeat)
			}
			for round := range rounds {
				for i := range systems {
					sys := systems[(i+round)%len(systems)]
					if err := ctx.Err(); err != nil {
						return err
					}
					if _, ok := shared[sharedKey(sc, sys, c)]; ok {
						continue
					}
					runs[sys] = append(runs[sys], e.measureSystem(ctx, sc, sys, c))
				}
			}
			if e.duetPoint(sc, c) && !extra[c] {
				d := e.runDuet(ctx, sc, c, rounds)
				if err := ctx.Err(); err != nil {
					return err
				}
				rep.Duets = append(rep.Duets, d)
				q, _, _ := duetMedian(d.Rounds)
				aa, _, _ := duetMedian(d.Control)
				e.progress("%-15s duet       c=%-3d receipts on ÷ off, both at once: %.2f (control %.2f)", sc, c, q, aa)
			}
			for _, sys := range systems {
				var r Result
				if prev, ok := shared[sharedKey(sc, sys, c)]; ok {
					r = prev
				} else {
					r = medianOf(runs[sys])
					if k := sharedKey(sc, sys, c); k != "" {
						shared[k] = r
					}
				}
				r.Scenario, r.System, r.Concurrency = sc, sys, c
				rep.Results = append(rep.Results, r)
				e.progress("%-15s %-10s c=%-3d %s", sc, sys, c, r.brief())
			}
		}
	}
	if o.wants(SystemOpledgerNoReceipts) {
		if err := e.measureCheckpoint(ctx, rep); err != nil {
			return err
		}
	}
	if o.CPUProfileDir != "" {
		if err := e.profile(ctx, rep); err != nil {
			return err
		}
	}
	if o.Grow > 0 {
		if err := e.grow(ctx, rep); err != nil {
			return err
		}
	}
	return nil
}

// measureSystem measures one run of system sys on scenario sc at
// concurrency c.
func (e *env) measureSystem(ctx context.Context, sc, sys string, c int) Result {
	switch sys {
	case SystemOpledger:
		return e.measureOpledger(ctx, e.clients, sc, c, true)
	case SystemPgbench:
		return e.pgbench(ctx, dbCeiling, pgbenchScript[sc], c)
	case SystemGRPCFloor:
		return e.floor(ctx, e.bare, sc, c)
	case SystemGRPCChain:
		return e.floor(ctx, e.chain, sc, c)
	case SystemDBOS:
		return e.dbosMeasure(ctx, sc, c)
	case SystemOpledgerPolicy:
		return e.measureOpledger(ctx, e.clients, scenarioOneCallPolicy, c, true)
	case SystemOpledgerNoReceipts:
		return e.measureOpledger(ctx, e.noReceipts, sc, c, true)
	case SystemOpledgerOneCall:
		return e.measureOpledger(ctx, e.clients, ScenarioOneCall, c, true)
	}
	return Result{Errors: 1, FirstError: "bench: unknown system " + sys}
}

// medianOf returns the run with the median throughput, with the errors of
// every run.
func medianOf(runs []Result) Result {
	errs, first := 0, ""
	for _, r := range runs {
		errs += r.Errors
		if first == "" {
			first = r.FirstError
		}
	}
	var rounds []Round
	if len(runs) > 1 {
		for _, r := range runs {
			rounds = append(rounds, Round{OpsPerSec: r.OpsPerSec, CPU: r.CPU})
		}
	}
	runs = slices.Clone(runs)
	slices.SortFunc(runs, func(a, b Result) int { return cmp.Compare(a.OpsPerSec, b.OpsPerSec) })
	m := runs[len(runs)/2]
	m.Errors, m.FirstError, m.Rounds = errs, first, rounds
	return m
}

func (r Result) brief() string {
	s := fmt.Sprintf("%9.0f ops/s  p50 %-9s p99 %-9s p99.9 %-9s", r.OpsPerSec, fmtDur(r.P50), fmtDur(r.P99), fmtDur(r.P999))
	if r.DBCallsPerOp > 0 {
		s += fmt.Sprintf(" db calls/op %.2f", r.DBCallsPerOp)
	}
	if r.Errors > 0 {
		s += fmt.Sprintf("  %d errors (%s)", r.Errors, r.FirstError)
	}
	return s
}

func describeMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			var kb int64
			if _, err := fmt.Sscanf(line, "MemTotal: %d kB", &kb); err == nil {
				m.MemoryBytes = kb * 1024
				break
			}
		}
	}
	return m
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// randomHex returns n random bytes in hex, for secrets and run ids.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%x", b)
}
