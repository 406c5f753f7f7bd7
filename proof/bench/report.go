package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// row is one line of the comparison table: opledger at one scenario and
// concurrency against one baseline (or alone when it has none).
type row struct {
	o    Result
	b    *Result
	name string
}

func (r *Report) rows() []row {
	var out []row
	find := func(sc, sys string, c int) *Result {
		for i := range r.Results {
			x := &r.Results[i]
			if x.Scenario == sc && x.System == sys && x.Concurrency == c {
				return x
			}
		}
		return nil
	}
	for _, sc := range r.Options.Scenarios {
		levels, _ := r.Options.levels(sc)
		for _, c := range levels {
			o := find(sc, SystemOpledger, c)
			if o == nil {
				continue
			}
			n := 0
			for _, sys := range slices.Concat(baselines[sc], companions[sc]) {
				if b := find(sc, sys, c); b != nil {
					out = append(out, row{o: *o, b: b, name: sys})
					n++
				}
			}
			if n == 0 {
				out = append(out, row{o: *o})
			}
		}
	}
	return out
}

// cpuRows are the results whose CPU was accounted, in run order, the
// in-process (profiled) runs last.
func (r *Report) cpuRows() []Result {
	var out []Result
	for _, x := range slices.Concat(r.Results, r.InProcess) {
		if x.CPU != nil {
			out = append(out, x)
		}
	}
	return out
}

// cpuCells formats a result's CPU cost: µs per op of the server, of
// PostgreSQL, of the benchmark's process, their total, and how busy the
// machine was.
func cpuCells(x Result) []string {
	c := x.CPU
	us := func(d time.Duration) string {
		if d == 0 {
			return "-"
		}
		return fmt.Sprintf("%d", d.Microseconds())
	}
	db := "-"
	if x.DBCallsPerOp > 0 {
		db = fmt.Sprintf("%.2f", x.DBCallsPerOp)
	}
	return []string{x.Scenario, x.System, fmt.Sprint(x.Concurrency), fmt.Sprintf("%.0f", x.OpsPerSec), db,
		us(c.Server), us(c.Postgres), us(c.Bench), us(c.Total()), fmt.Sprintf("%.0f %%", 100*c.Busy)}
}

// cpuTitle introduces the CPU table, in both formats.
const cpuTitle = "CPU time per op in the measured window (server: the process answering; bench process: load generator, fake processor, in-process servers, pgbench):"

// cpuHeader names cpuCells' columns.
var cpuHeader = []string{"scenario", "system", "conc", "ops/s", "db calls/op", "server µs/op", "postgres µs/op", "bench process µs/op", "total µs/op", "machine busy"}

func ratio(a, b float64) string {
	if b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// WriteTable prints the comparison table, the targets and the growth test
// as plain text.
func (r *Report) WriteTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tconc\topledger ops/s\tp50\tp99\tp99.9\tdb calls/op\tbaseline\tbaseline ops/s\tratio\tbaseline p99\t")
	for _, x := range r.rows() {
		base, bops, rat, bp99 := "-", "-", "-", "-"
		if x.b != nil {
			base, bops, rat, bp99 = x.name, fmt.Sprintf("%.0f", x.b.OpsPerSec), ratio(x.o.OpsPerSec, x.b.OpsPerSec), fmtDur(x.b.P99)
		}
		db := "-"
		if x.o.DBCallsPerOp > 0 {
			db = fmt.Sprintf("%.2f", x.o.DBCallsPerOp)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", x.o.Scenario, x.o.Concurrency, x.o.OpsPerSec,
			fmtDur(x.o.P50), fmtDur(x.o.P99), fmtDur(x.o.P999), db, base, bops, rat, bp99)
	}
	tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(w, "targets (informational: times are never a failure):")
	for _, t := range r.Targets() {
		fmt.Fprintf(w, "  %-4s %s\n", t.Verdict(), t.Text)
	}
	if rows := r.cpuRows(); len(rows) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, cpuTitle)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, strings.Join(cpuHeader, "\t")+"\t")
		for _, x := range rows {
			fmt.Fprintln(tw, strings.Join(cpuCells(x), "\t")+"\t")
		}
		tw.Flush()
	}
	if len(r.Grow) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "execute-replay as the table grows:")
		for _, g := range r.Grow {
			fmt.Fprintf(w, "  %11d stored (%.2f GiB)  replaying %-12s c=%d  %8.0f ops/s  p50 %-9s p99 %-9s p99.9 %-9s load %s\n", g.Stored,
				float64(g.TableBytes)/(1<<30), g.Replayed, g.Concurrency, g.OpsPerSec, fmtDur(g.P50), fmtDur(g.P99), fmtDur(g.P999), g.Load.Round(time.Second))
		}
		if r.GrowNote != "" {
			fmt.Fprintln(w, "  "+r.GrowNote)
		}
	}
	if len(r.InProcess) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "in-process runs (profiled):")
		for _, x := range r.InProcess {
			fmt.Fprintf(w, "  %-15s c=%-3d %s\n", x.Scenario, x.Concurrency, x.brief())
		}
	}
}

// Target is one of the performance goals, evaluated on this report.
type Target struct {
	Text string
	// Met is nil when the report lacks what the target needs.
	Met *bool
}

// Verdict is "ok", "MISS" or "n/a".
func (t Target) Verdict() string {
	switch {
	case t.Met == nil:
		return "n/a"
	case *t.Met:
		return "ok"
	}
	return "MISS"
}

func (r *Report) at(sc, sys string, c int) (Result, bool) {
	for _, x := range r.Results {
		if x.Scenario == sc && x.System == sys && x.Concurrency == c && x.Ops > 0 {
			return x, true
		}
	}
	return Result{}, false
}

func met(b bool) *bool { return &b }

// byRound is "; by round q1, q2, …": f of each round of o and the round of
// b run beside it, when both ran the same number of rounds (more than
// one) and f has a value for every pair; empty otherwise.
func byRound(o, b Result, format string, f func(o, b Round) (float64, bool)) string {
	if len(o.Rounds) < 2 || len(o.Rounds) != len(b.Rounds) {
		return ""
	}
	qs := make([]string, len(o.Rounds))
	for i := range o.Rounds {
		q, ok := f(o.Rounds[i], b.Rounds[i])
		if !ok {
			return ""
		}
		qs[i] = fmt.Sprintf(format, q)
	}
	return "; by round " + strings.Join(qs, ", ")
}

// ratioOf is a target's throughput ratio of o to b, measured in one point
// where the two took turns, and its text. With the same rounds on both
// sides (more than one) it is the median of each round's ratio to the round
// run beside it: a round's pair shares the machine's speed of the moment,
// which drifts from one round to the next by more than a target's margin
// (docs/performance.md, finding 45), while the two sides' medians are often
// rounds apart. Otherwise it is the ratio of the two.
func ratioOf(o, b Result) (float64, string) {
	var qs []float64
	if len(o.Rounds) > 1 && len(o.Rounds) == len(b.Rounds) {
		for i := range o.Rounds {
			if q, ok := opsRatio(o.Rounds[i], b.Rounds[i]); ok {
				qs = append(qs, q)
			}
		}
	}
	if len(qs) < 2 || len(qs) != len(o.Rounds) {
		q := o.OpsPerSec / b.OpsPerSec
		return q, fmt.Sprintf("%.0f vs %.0f ops/s = %.2f", o.OpsPerSec, b.OpsPerSec, q)
	}
	m := median(qs)
	return m, fmt.Sprintf("%.0f vs %.0f ops/s (medians), %.2f (the median of the %d rounds' ratios)", o.OpsPerSec, b.OpsPerSec, m, len(qs))
}

// opsRatio and cpuRatio compare one round of each side.
func opsRatio(o, b Round) (float64, bool) { return o.OpsPerSec / b.OpsPerSec, b.OpsPerSec > 0 }

func cpuRatio(o, b Round) (float64, bool) {
	if o.CPU == nil || b.CPU == nil || b.CPU.Total() == 0 {
		return 0, false
	}
	return float64(o.CPU.Total()) / float64(b.CPU.Total()), true
}

// serverCPU is one round's server CPU per op in µs.
func serverCPU(r, _ Round) (float64, bool) {
	if r.CPU == nil || r.CPU.Server == 0 {
		return 0, false
	}
	return float64(r.CPU.Server.Microseconds()), true
}

// TargetConcurrency is the client count at which the targets compare
// systems (issue 13's figures are at 16 clients); a sweep without it uses
// its highest level.
const TargetConcurrency = 16

// targetConc is the level the targets are evaluated at in this report.
func (r *Report) targetConc() int { return r.Options.targetConc() }

// targetConc is the level the targets are evaluated at: TargetConcurrency,
// or the sweep's highest when it lacks it.
func (o *Options) targetConc() int {
	if slices.Contains(o.Concurrency, TargetConcurrency) || len(o.Concurrency) == 0 {
		return TargetConcurrency
	}
	return slices.Max(o.Concurrency)
}

// targetLevel reports whether scenario sc's point at c is one a target is
// read at (TargetRepeat).
func (o *Options) targetLevel(sc string, c int) bool {
	return c == o.targetConc() || sc == ScenarioOneCallTenantLimit && c == tenantLimitConcurrency
}

// Targets evaluates the goals docs/performance.md states (issue 13), at
// TargetConcurrency, each side measured in the same run: throughput ratios
// and CPU time per op by process. A target whose measurements are missing
// (not run, or CPU not accounted) is n/a.
func (r *Report) Targets() []Target {
	c := r.targetConc()
	var ts []Target
	missing := func(text string) { ts = append(ts, Target{Text: text + ": not measured in this run"}) }
	us := func(d time.Duration) string { return fmt.Sprintf("%d µs", d.Microseconds()) }
	dbos, okD := r.at(ScenarioExecuteNew, SystemDBOS, c)
	for _, x := range []struct {
		sc  string
		min float64
	}{{ScenarioExecuteNew, 1.0}, {ScenarioOneCall, 1.3}} {
		text := fmt.Sprintf("%s ≥ %.1f × DBOS's throughput (c=%d)", x.sc, x.min, c)
		o, ok := r.at(x.sc, SystemOpledger, c)
		if !ok || !okD {
			missing(text)
			continue
		}
		q := o.OpsPerSec / dbos.OpsPerSec
		ts = append(ts, Target{Met: met(q >= x.min), Text: fmt.Sprintf("%s: %.0f vs %.0f ops/s = %.2f%s", text, o.OpsPerSec, dbos.OpsPerSec, q,
			byRound(o, dbos, "%.2f", opsRatio))})
	}
	// The policy's cost: the one-call job for a tool with a three-rule
	// policy against the plain one, the two taking turns at each point.
	{
		text := fmt.Sprintf("%s with a three-rule policy ≥ 0.9 × without (c=%d)", ScenarioOneCall, c)
		o, ok := r.at(ScenarioOneCall, SystemOpledger, c)
		p, okP := r.at(ScenarioOneCall, SystemOpledgerPolicy, c)
		if !ok || !okP {
			missing(text)
		} else {
			q, qt := ratioOf(p, o)
			cpu := ""
			if o.CPU != nil && p.CPU != nil && o.CPU.Server > 0 {
				cpu = fmt.Sprintf("; server CPU %s vs %s per op", us(p.CPU.Server), us(o.CPU.Server))
			}
			ts = append(ts, Target{Met: met(q >= 0.9), Text: fmt.Sprintf("%s: %s%s%s", text, qt, cpu,
				byRound(p, o, "%.2f", opsRatio))})
		}
	}
	// CPU per new operation: the whole machine's (every process), then
	// PostgreSQL's, then the server's alone.
	for _, sc := range []string{ScenarioExecuteNew, ScenarioOneCall} {
		o, ok := r.at(sc, SystemOpledger, c)
		haveCPU := ok && okD && o.CPU != nil && dbos.CPU != nil
		if sc == ScenarioExecuteNew {
			text := fmt.Sprintf("%s total CPU per op ≤ DBOS's (c=%d)", sc, c)
			if !haveCPU {
				missing(text)
			} else {
				ts = append(ts, Target{Met: met(o.CPU.Total() <= dbos.CPU.Total()), Text: fmt.Sprintf("%s: %s vs %s (server %s + PostgreSQL %s + clients %s)%s",
					text, us(o.CPU.Total()), us(dbos.CPU.Total()), us(o.CPU.Server), us(o.CPU.Postgres), us(o.CPU.Bench),
					byRound(o, dbos, "%.2f ×", cpuRatio))})
			}
		}
		text := fmt.Sprintf("%s PostgreSQL CPU per op ≤ DBOS's (c=%d)", sc, c)
		if !haveCPU {
			missing(text)
		} else {
			ts = append(ts, Target{Met: met(o.CPU.Postgres <= dbos.CPU.Postgres), Text: fmt.Sprintf("%s: %s vs %s", text, us(o.CPU.Postgres), us(dbos.CPU.Postgres))})
		}
		text = fmt.Sprintf("%s server CPU per op ≤ %s (c=%d)", sc, us(ServerCPUTarget), c)
		if !ok || o.CPU == nil || o.CPU.Server == 0 {
			// In-process runs charge the server to the bench process.
			missing(text + " [needs the server in its own process]")
		} else {
			ts = append(ts, Target{Met: met(o.CPU.Server <= ServerCPUTarget), Text: fmt.Sprintf("%s: %s%s", text, us(o.CPU.Server),
				byRound(o, o, "%.0f µs", serverCPU))})
		}
	}
	replay, okR := r.at(ScenarioExecuteReplay, SystemOpledger, c)
	for _, x := range []struct {
		sys string
		min float64
	}{{SystemGRPCFloor, 0.8}, {SystemDBOS, 2.5}} {
		text := fmt.Sprintf("execute-replay ≥ %.1f × %s (c=%d)", x.min, x.sys, c)
		b, ok := r.at(ScenarioExecuteReplay, x.sys, c)
		if !okR || !ok {
			missing(text)
			continue
		}
		q := replay.OpsPerSec / b.OpsPerSec
		ts = append(ts, Target{Met: met(q >= x.min), Text: fmt.Sprintf("%s: %.0f vs %.0f ops/s = %.2f%s", text, replay.OpsPerSec, b.OpsPerSec, q,
			byRound(replay, b, "%.2f", opsRatio))})
	}
	{
		text := fmt.Sprintf("interceptor chain ≤ 10%% over the bare floor on get (c=%d)", c)
		f, okF := r.at(ScenarioGet, SystemGRPCFloor, c)
		ch, okC := r.at(ScenarioGet, SystemGRPCChain, c)
		if !okF || !okC {
			missing(text)
		} else {
			over := f.OpsPerSec/ch.OpsPerSec - 1
			cpu := ""
			if f.CPU != nil && ch.CPU != nil && f.CPU.Server > 0 {
				cpu = fmt.Sprintf("; server CPU %s vs %s per call", us(ch.CPU.Server), us(f.CPU.Server))
			}
			rounds := byRound(f, ch, "%+.0f%%", func(f, ch Round) (float64, bool) {
				return 100 * (f.OpsPerSec/ch.OpsPerSec - 1), ch.OpsPerSec > 0
			})
			ts = append(ts, Target{Met: met(over <= 0.10), Text: fmt.Sprintf("%s: floor %.0f, chain %.0f ops/s: %+.0f%% per call%s%s", text, f.OpsPerSec, ch.OpsPerSec, 100*over, cpu, rounds)})
		}
	}
	if len(r.Grow) >= 2 && r.Grow[0].P99 > 0 {
		a := r.Grow[0]
		for _, b := range r.Grow[1:] {
			// Flat means it does not grow: a p99 lower at the large end
			// than at the small one is the small end's noise.
			q := float64(b.P99) / float64(a.P99)
			ts = append(ts, Target{Met: met(q <= 1.2), Text: fmt.Sprintf("execute-replay p99 flat (at most +20%%) from %d to %d stored, replaying %s: %s vs %s = %.2f",
				a.Stored, b.Stored, b.Replayed, fmtDur(a.P99), fmtDur(b.P99), q)})
		}
	} else if r.Options.Grow > 0 {
		missing("execute-replay p99 flat (±20%) as operations grow")
	}
	ts = append(ts, r.BudgetTargets()...)
	return append(ts, r.ReceiptsTargets()...)
}

// ServerCPUTarget is the server's CPU budget per new operation (issue 13).
const ServerCPUTarget = 350 * time.Microsecond

// WriteMarkdown writes the report as Markdown, for docs/performance.md.
func (r *Report) WriteMarkdown(w io.Writer) {
	m := r.Machine
	fmt.Fprintf(w, "Measured %s, %s total.\n\n", r.Started.UTC().Format(time.RFC3339), r.Elapsed.Round(time.Second))
	fmt.Fprintf(w, "| machine | |\n| --- | --- |\n")
	fmt.Fprintf(w, "| CPUs | %d (%s) |\n| memory | %.1f GiB |\n| Go | %s |\n| PostgreSQL | %s (durable: fsync on, synchronous_commit on) |\n",
		m.CPUs, m.CPUModel, float64(m.MemoryBytes)/(1<<30), m.GoVersion, m.Postgres)
	var set []string
	for k, v := range m.PGSettings {
		set = append(set, k+"="+v)
	}
	slices.Sort(set)
	fmt.Fprintf(w, "| PostgreSQL settings | defaults, plus %s |\n", strings.Join(set, ", "))
	fmt.Fprintf(w, "| server under test | %s, pool %d connections |\n", m.ServerProcess, r.Options.DBConns)
	fmt.Fprintf(w, "| load generator | one process; %d gRPC connection(s) per server, its workers taking them in turn |\n", r.Options.GRPCConns)
	fmt.Fprintf(w, "| load average (1, 5, 15 min) | before %s, after %s |\n", m.LoadBefore, m.LoadAfter)
	fmt.Fprintf(w, "| measurement | %s per point after a %s warm-up; median of %d run(s) by throughput |\n\n", r.Options.Duration, r.Options.warmup(), r.Options.Repeat)
	fmt.Fprintln(w, "| scenario | conc | opledger ops/s | p50 | p99 | p99.9 | db calls/op | baseline | baseline ops/s | ratio | baseline p99 |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |")
	for _, x := range r.rows() {
		base, bops, rat, bp99 := "-", "-", "-", "-"
		if x.b != nil {
			base, bops, rat, bp99 = x.name, fmt.Sprintf("%.0f", x.b.OpsPerSec), ratio(x.o.OpsPerSec, x.b.OpsPerSec), fmtDur(x.b.P99)
		}
		db := "-"
		if x.o.DBCallsPerOp > 0 {
			db = fmt.Sprintf("%.2f", x.o.DBCallsPerOp)
		}
		fmt.Fprintf(w, "| %s | %d | %.0f | %s | %s | %s | %s | %s | %s | %s | %s |\n", x.o.Scenario, x.o.Concurrency, x.o.OpsPerSec,
			fmtDur(x.o.P50), fmtDur(x.o.P99), fmtDur(x.o.P999), db, base, bops, rat, bp99)
	}
	fmt.Fprintln(w, "\nTargets:")
	fmt.Fprintln(w)
	for _, t := range r.Targets() {
		fmt.Fprintf(w, "- **%s** %s\n", t.Verdict(), t.Text)
	}
	if rows := r.cpuRows(); len(rows) > 0 {
		fmt.Fprintln(w, "\n"+cpuTitle)
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| "+strings.Join(cpuHeader, " | ")+" |")
		fmt.Fprintln(w, "| --- | --- |"+strings.Repeat(" ---: |", len(cpuHeader)-2))
		for _, x := range rows {
			fmt.Fprintln(w, "| "+strings.Join(cpuCells(x), " | ")+" |")
		}
	}
	if len(r.Grow) > 0 {
		fmt.Fprintln(w, "\nexecute-replay as the table grows:")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| stored operations | table + indexes | replaying | conc | ops/s | p50 | p99 | p99.9 | load time |")
		fmt.Fprintln(w, "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
		for _, g := range r.Grow {
			fmt.Fprintf(w, "| %d | %.2f GiB | %s | %d | %.0f | %s | %s | %s | %s |\n", g.Stored, float64(g.TableBytes)/(1<<30), g.Replayed, g.Concurrency,
				g.OpsPerSec, fmtDur(g.P50), fmtDur(g.P99), fmtDur(g.P999), g.Load.Round(time.Second))
		}
		if r.GrowNote != "" {
			fmt.Fprintln(w, "\n"+r.GrowNote)
		}
	}
	if len(r.Statements) > 0 {
		fmt.Fprintf(w, "\nStatements per op (pg_stat_statements, in-process run at c=%d):\n", r.Options.ProfileConcurrency)
		for _, sc := range append(slices.Clone(r.Options.Scenarios), StatementsDBOS) {
			st := r.Statements[sc]
			if len(st) == 0 {
				continue
			}
			fmt.Fprintf(w, "\n%s:\n\n| calls/op | mean ms | statement |\n| ---: | ---: | --- |\n", sc)
			for _, s := range st {
				if s.CallsPerOp < 0.005 {
					continue
				}
				fmt.Fprintf(w, "| %.2f | %.3f | `%s` |\n", s.CallsPerOp, s.MeanMillis, strings.ReplaceAll(s.Query, "|", "\\|"))
			}
		}
	}
	if len(r.InProcess) > 0 {
		fmt.Fprintln(w, "\nIn-process (profiled) runs:")
		fmt.Fprintln(w)
		for _, x := range r.InProcess {
			fmt.Fprintf(w, "- %s c=%d: %s\n", x.Scenario, x.Concurrency, strings.TrimSpace(x.brief()))
		}
	}
}

// WriteJSON writes the report as JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
