package bench

import (
	"bytes"
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/store"
	"github.com/opledger/opledger/tool"
)

// TestTinyRun runs every scenario and every baseline for a second at two
// clients against an in-process server, and checks only that each completed
// ops without errors: times are the machine's business.
func TestTinyRun(t *testing.T) {
	t.Parallel()
	var progress bytes.Buffer
	rep, err := Run(context.Background(), Options{
		Concurrency:        []int{2},
		Duration:           time.Second,
		Seed:               200,
		CPUProfileDir:      t.TempDir(),
		ProfileConcurrency: 2,
		Duet:               true,
		Progress:           &progress,
	})
	require.NoError(t, err, progress.String())
	require.Empty(t, rep.Failures(), progress.String())
	for _, sc := range Scenarios {
		for _, sys := range slices.Concat([]string{SystemOpledger}, baselines[sc], companions[sc]) {
			found := false
			for _, r := range rep.Results {
				if r.Scenario == sc && r.System == sys {
					found = true
					require.Positive(t, r.Ops, "%s %s", sc, sys)
					require.Zero(t, r.Errors, "%s %s: %s", sc, sys, r.FirstError)
				}
			}
			require.True(t, found, "no result for %s %s", sc, sys)
		}
	}
	// CPU is accounted for every closed-loop run; the server is in this
	// process here, so its time is the bench process's.
	for _, r := range rep.Results {
		if r.Scenario == ScenarioDuplicateStorm || r.System == SystemGRPCFloor || r.System == SystemGRPCChain {
			continue
		}
		require.NotNil(t, r.CPU, "%s %s", r.Scenario, r.System)
		require.Positive(t, r.CPU.Bench+r.CPU.Postgres, "%s %s", r.Scenario, r.System)
		require.Zero(t, r.CPU.Server, "%s %s", r.Scenario, r.System)
		require.InDelta(t, 0.5, r.CPU.Busy, 0.5)
	}
	// The receipts targets' points ran their duet: both sides at once, and
	// the control.
	require.Len(t, rep.Duets, 2)
	for _, d := range rep.Duets {
		require.Len(t, d.Rounds, 1, d.Scenario)
		require.Len(t, d.Control, 1, d.Scenario)
		for _, x := range slices.Concat(d.Rounds, d.Control) {
			require.Positive(t, x.A, d.Scenario)
			require.Positive(t, x.B, d.Scenario)
			require.Zero(t, x.Errors, "%s: %s", d.Scenario, x.FirstError)
		}
	}
	require.Len(t, rep.InProcess, len(Scenarios))
	require.Len(t, rep.Profiles, len(Scenarios))
	var table, md bytes.Buffer
	rep.WriteTable(&table)
	rep.WriteMarkdown(&md)
	for _, sc := range Scenarios {
		require.Contains(t, table.String(), sc)
		require.Contains(t, md.String(), "| "+sc+" |")
	}
	require.Contains(t, md.String(), "| postgres µs/op |")
}

func TestProcTimes(t *testing.T) {
	t.Parallel()
	self, _, ppid, err := procTimes("self")
	require.NoError(t, err)
	require.Equal(t, os.Getppid(), ppid)
	// Spin until the kernel has charged this process another tick: the
	// counter must move with the CPU this process uses.
	x := 0
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		for i := range 1_000_000 {
			x += i
		}
		now, _, _, err := procTimes("self")
		require.NoError(t, err)
		if now > self {
			break
		}
	}
	now, _, _, err := procTimes("self")
	require.NoError(t, err)
	require.Greater(t, now, self, "spun %d", x)
	busy, all, err := machineTimes()
	require.NoError(t, err)
	require.Positive(t, busy)
	require.GreaterOrEqual(t, all, busy)
	_, _, _, err = procTimes("0")
	require.Error(t, err)
}

func TestCost(t *testing.T) {
	t.Parallel()
	a := cpuUse{server: time.Second, postgres: 2 * time.Second, bench: 3 * time.Second, busy: 10 * time.Second, all: 20 * time.Second}
	b := cpuUse{server: 2 * time.Second, postgres: 4 * time.Second, bench: 3500 * time.Millisecond, busy: 13 * time.Second, all: 24 * time.Second}
	c := cost(a, b, 1000)
	require.Equal(t, CPUCost{Server: time.Millisecond, Postgres: 2 * time.Millisecond, Bench: 500 * time.Microsecond, Busy: 0.75}, *c)
	require.Equal(t, 3500*time.Microsecond, c.Total())
	require.Nil(t, cost(a, b, 0))
}

func TestPercentiles(t *testing.T) {
	t.Parallel()
	var lat []time.Duration
	for i := 1000; i >= 1; i-- {
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	p50, p99, p999 := percentiles(lat)
	require.Equal(t, 500*time.Millisecond, p50)
	require.Equal(t, 990*time.Millisecond, p99)
	require.Equal(t, 999*time.Millisecond, p999)
	p50, _, _ = percentiles(nil)
	require.Zero(t, p50)
}

func TestPgbenchScriptsUseNoColonInLiterals(t *testing.T) {
	t.Parallel()
	// pgbench takes :name inside a string literal for a variable too; a
	// literal like 'server:x' breaks prepared mode.
	for _, name := range pgbenchScriptNames {
		s, _, err := pgbenchScripts(name)
		require.NoError(t, err)
		inLit := false
		for i, r := range s {
			if r == '\'' {
				inLit = !inLit
			}
			if inLit && r == ':' && i+1 < len(s) && (s[i+1] >= 'a' && s[i+1] <= 'z' || s[i+1] >= 'A' && s[i+1] <= 'Z') {
				t.Fatalf("script %s: %q inside a string literal", name, s[i:min(len(s), i+12)])
			}
		}
	}
}

// TestPgbenchScriptsAreTheStoresStatements: the ceiling's scripts are built
// from store/queries' text, every placeholder bound, so they run what
// opledger runs; a statement that gains an argument the ceiling does not
// bind, or loses one it binds, fails the build of the script.
func TestPgbenchScriptsAreTheStoresStatements(t *testing.T) {
	t.Parallel()
	for _, name := range pgbenchScriptNames {
		s, defs, err := pgbenchScripts(name)
		require.NoError(t, err, name)
		require.NotContains(t, s, "sqlc.", name)
		for k := range defs {
			require.Contains(t, s, ":"+k, name)
		}
	}
	sql, err := store.QueryText("OperationClaim")
	require.NoError(t, err)
	s, _, err := pgbenchScripts("execute")
	require.NoError(t, err)
	// The claim's guard on the approval, verbatim but for its placeholders.
	require.Contains(t, sql, "OR o.approval_expires_at > statement_timestamp() OR o.first_sent_fence IS NOT NULL")
	require.Contains(t, s, "OR o.approval_expires_at > statement_timestamp() OR o.first_sent_fence IS NOT NULL")

	_, err = pgbenchStatement("OperationClaim", "c_", map[string]bind{"id": pgbID}, map[string]string{})
	require.ErrorContains(t, err, "does not bind")
	b := pgbClaim(pgbID)
	b["gone"] = val("x")
	_, err = pgbenchStatement("OperationClaim", "c_", b, map[string]string{})
	require.ErrorContains(t, err, "no longer takes gone")
}

func TestMedianOf(t *testing.T) {
	t.Parallel()
	runs := []Result{{OpsPerSec: 30, Errors: 1, FirstError: "a"}, {OpsPerSec: 10}, {OpsPerSec: 20, Errors: 2, FirstError: "b"}}
	m := medianOf(runs)
	require.InDelta(t, 20, m.OpsPerSec, 0)
	require.Equal(t, 3, m.Errors, "the errors of every run")
	require.Equal(t, "a", m.FirstError)
	require.InDelta(t, 30, runs[0].OpsPerSec, 0, "the runs are left in their order")
	require.Equal(t, []Round{{OpsPerSec: 30}, {OpsPerSec: 10}, {OpsPerSec: 20}}, m.Rounds, "every round, in the order run")
	require.Empty(t, medianOf(runs[:1]).Rounds, "a point run once has no rounds")
}

// TestRepeatBounds checks that a long precise run (25 rounds of a target's
// point) is accepted and that the rounds stay bounded.
func TestRepeatBounds(t *testing.T) {
	t.Parallel()
	valid := func(repeat, target int) error {
		o := Options{Repeat: repeat, TargetRepeat: target, Duration: time.Second}
		o.defaults()
		return o.validate()
	}
	require.NoError(t, valid(25, 0))
	require.NoError(t, valid(1, 25))
	require.ErrorContains(t, valid(32, 0), "1 to 31")
	require.ErrorContains(t, valid(1, 32), "1 to 31")
	require.Error(t, valid(-1, 0))
}

// TestTargetsPrintEveryRound checks that a target measured over several
// rounds prints each round's ratio to the baseline's round run beside it,
// and that its verdict stays the medians'.
func TestTargetsPrintEveryRound(t *testing.T) {
	t.Parallel()
	cost := func(server, total time.Duration) *CPUCost {
		return &CPUCost{Server: server, Postgres: total - server}
	}
	rep := &Report{Options: Options{Concurrency: []int{16}}, Results: []Result{
		{Scenario: ScenarioExecuteNew, System: SystemOpledger, Concurrency: 16, Ops: 1, OpsPerSec: 100, CPU: cost(500*time.Microsecond, 1800*time.Microsecond),
			Rounds: []Round{{90, cost(520*time.Microsecond, 2000*time.Microsecond)}, {100, cost(500*time.Microsecond, 1800*time.Microsecond)}, {120, cost(480*time.Microsecond, 1500*time.Microsecond)}}},
		{Scenario: ScenarioExecuteNew, System: SystemDBOS, Concurrency: 16, Ops: 1, OpsPerSec: 100, CPU: cost(0, 1600*time.Microsecond),
			Rounds: []Round{{100, cost(0, 1600*time.Microsecond)}, {80, cost(0, 2000*time.Microsecond)}, {100, cost(0, 1500*time.Microsecond)}}},
		{Scenario: ScenarioGet, System: SystemGRPCFloor, Concurrency: 16, Ops: 1, OpsPerSec: 108, Rounds: []Round{{108, nil}, {100, nil}}},
		{Scenario: ScenarioGet, System: SystemGRPCChain, Concurrency: 16, Ops: 1, OpsPerSec: 100, Rounds: []Round{{100, nil}, {100, nil}}},
	}}
	texts := map[string]string{}
	for _, tg := range rep.Targets() {
		texts[tg.Text[:strings.Index(tg.Text, ":")]] = tg.Verdict() + " " + tg.Text
	}
	require.Equal(t, "ok execute-new ≥ 1.0 × DBOS's throughput (c=16): 100 vs 100 ops/s = 1.00; by round 0.90, 1.25, 1.20",
		texts["execute-new ≥ 1.0 × DBOS's throughput (c=16)"])
	require.Equal(t, "MISS execute-new total CPU per op ≤ DBOS's (c=16): 1800 µs vs 1600 µs (server 500 µs + PostgreSQL 1300 µs + clients 0 µs); by round 1.25 ×, 0.90 ×, 1.00 ×",
		texts["execute-new total CPU per op ≤ DBOS's (c=16)"])
	require.Equal(t, "MISS execute-new server CPU per op ≤ 350 µs (c=16): 500 µs; by round 520 µs, 500 µs, 480 µs",
		texts["execute-new server CPU per op ≤ 350 µs (c=16)"])
	require.Equal(t, "ok interceptor chain ≤ 10% over the bare floor on get (c=16): floor 108, chain 100 ops/s: +8% per call; by round +8%, +0%",
		texts["interceptor chain ≤ 10% over the bare floor on get (c=16)"])
	// A baseline run a different number of times prints no rounds, nor
	// does a round whose CPU was not accounted.
	rep.Results[1].Rounds = rep.Results[1].Rounds[:2]
	rep.Results[0].Rounds[1].CPU = nil
	for _, tg := range rep.Targets() {
		if strings.HasPrefix(tg.Text, "execute-new ") {
			require.NotContains(t, tg.Text, "by round")
		}
	}
}

// TestFloorAnswersTheSameOperation checks that the floors' answer, its args
// and result held as wire bytes, decodes to the operation it was read from.
func TestFloorAnswersTheSameOperation(t *testing.T) {
	t.Parallel()
	args, err := structpb.NewStruct(map[string]any{"amount_minor": 4900, "currency": "EUR", "tags": []any{"a", nil}})
	require.NoError(t, err)
	result, err := structpb.NewStruct(map[string]any{"id": "ch_1", "request": map[string]any{"ok": true}})
	require.NoError(t, err)
	for _, op := range []*opledgerv1.Operation{
		{Id: "op_1", State: opledgerv1.State_STATE_SUCCEEDED, Args: args, Result: result, ExternalRef: "ch_1"},
		{Id: "op_2", Args: args},
		{Id: "op_3"},
	} {
		want := proto.Clone(op).(*opledgerv1.Operation)
		require.NoError(t, asServed(op))
		require.Nil(t, op.GetArgs())
		require.Nil(t, op.GetResult())
		b, err := proto.Marshal(op)
		require.NoError(t, err)
		got := &opledgerv1.Operation{}
		require.NoError(t, proto.Unmarshal(b, got))
		require.True(t, proto.Equal(want, got), "%v\n%v", want, got)
	}
}

// TestBudgetTargets: each budget scenario is judged against execute-one-call's
// job measured in its own point (16 and 64), not against execute-one-call's
// point, with the CPU of both sides, and the tenant-wide level is measured
// even when the sweep lacks it.
func TestBudgetTargets(t *testing.T) {
	t.Parallel()
	cost := &CPUCost{Server: 400 * time.Microsecond, Postgres: 800 * time.Microsecond}
	rep := &Report{Options: Options{Concurrency: []int{1, 16}, Scenarios: Scenarios}, Results: []Result{
		{Scenario: ScenarioOneCall, System: SystemOpledger, Concurrency: 16, Ops: 1, OpsPerSec: 2000, CPU: cost},
		{Scenario: ScenarioOneCallBudgeted, System: SystemOpledger, Concurrency: 16, Ops: 1, OpsPerSec: 900, CPU: cost},
		{Scenario: ScenarioOneCallBudgeted, System: SystemOpledgerOneCall, Concurrency: 16, Ops: 1, OpsPerSec: 1000, CPU: cost},
		{Scenario: ScenarioOneCall, System: SystemOpledger, Concurrency: 64, Ops: 1, OpsPerSec: 2000, CPU: cost},
		{Scenario: ScenarioOneCallTenantLimit, System: SystemOpledger, Concurrency: 64, Ops: 1, OpsPerSec: 500},
		{Scenario: ScenarioOneCallTenantLimit, System: SystemOpledgerOneCall, Concurrency: 64, Ops: 1, OpsPerSec: 1000, CPU: cost},
	}}
	var got []string
	for _, tg := range rep.BudgetTargets() {
		got = append(got, tg.Verdict()+" "+tg.Text)
	}
	require.Equal(t, []string{
		"ok one-call-budgeted (a limit per customer and an identity) ≥ 0.85 × execute-one-call beside it (c=16): 900 vs 1000 ops/s = 0.90 (server 400 + PostgreSQL 800 µs/op vs server 400 + PostgreSQL 800 µs/op)",
		"MISS one-call-tenant-limit (one tenant-wide limit, every call on one budget) ≥ 0.70 × execute-one-call beside it (c=64): 500 vs 1000 ops/s = 0.50 (CPU not accounted vs server 400 + PostgreSQL 800 µs/op)",
	}, got)
	// Rounds taken in turns are judged round by round: here the machine
	// was fast for the plain side's third round, and the two sides'
	// medians (1100 of the budgeted side's second round, 1400 of the
	// plain side's third) read 0.79 where each round beside its pair
	// reads 0.90, 0.87 and 0.79.
	rounds := func(ops ...float64) []Round {
		var rs []Round
		for _, o := range ops {
			rs = append(rs, Round{OpsPerSec: o})
		}
		return rs
	}
	paired := &Report{Options: rep.Options, Results: []Result{
		{Scenario: ScenarioOneCallBudgeted, System: SystemOpledger, Concurrency: 16, Ops: 1, OpsPerSec: 1100, CPU: cost, Rounds: rounds(900, 1300, 1100)},
		{Scenario: ScenarioOneCallBudgeted, System: SystemOpledgerOneCall, Concurrency: 16, Ops: 1, OpsPerSec: 1400, CPU: cost, Rounds: rounds(1000, 1500, 1400)},
	}}
	tg := paired.BudgetTargets()[0]
	require.Equal(t, "ok one-call-budgeted (a limit per customer and an identity) ≥ 0.85 × execute-one-call beside it (c=16): "+
		"1100 vs 1400 ops/s (medians), 0.87 (the median of the 3 rounds' ratios) "+
		"(server 400 + PostgreSQL 800 µs/op vs server 400 + PostgreSQL 800 µs/op); by round 0.90, 0.87, 0.79", tg.Verdict()+" "+tg.Text)
	levels, extra := rep.Options.levels(ScenarioOneCallTenantLimit)
	require.Equal(t, []int{1, 16, 64}, levels)
	require.True(t, extra[64])
	levels, _ = rep.Options.levels(ScenarioOneCall)
	require.Equal(t, []int{1, 16}, levels)
	levels, _ = rep.Options.levels(ScenarioOneCallBudgeted)
	require.Equal(t, []int{1, 16}, levels)
}

// TestReceiptsDuetIsInformative: a receipts target is judged by its sides'
// turns; the duet (both sides at once) adds a line of its own, which reads
// n/a when its control is off by more than the slack.
func TestReceiptsDuetIsInformative(t *testing.T) {
	t.Parallel()
	cost := &CPUCost{Server: 300 * time.Microsecond, Postgres: 600 * time.Microsecond}
	turns := []Result{
		{Scenario: ScenarioExecuteNew, System: SystemOpledger, Concurrency: 16, Ops: 1, OpsPerSec: 900, CPU: cost},
		{Scenario: ScenarioExecuteNew, System: SystemOpledgerNoReceipts, Concurrency: 16, Ops: 1, OpsPerSec: 1000, CPU: cost},
	}
	round := func(a, b float64) DuetRound {
		return DuetRound{A: a, B: b, ServerA: 310 * time.Microsecond, ServerB: 300 * time.Microsecond}
	}
	duet := Duet{Scenario: ScenarioExecuteNew, Concurrency: 16,
		Rounds:  []DuetRound{round(970, 1000), round(500, 520), round(990, 1000)},
		Control: []DuetRound{round(1000, 1000), round(505, 500), round(990, 1000)}}
	lines := func(rep *Report) []string {
		var out []string
		for _, tg := range rep.ReceiptsTargets() {
			if strings.HasPrefix(tg.Text, ScenarioExecuteNew) {
				out = append(out, tg.Verdict()+" "+tg.Text)
			}
		}
		return out
	}
	opts := Options{Concurrency: []int{16}, Scenarios: Scenarios}
	verdict := "MISS execute-new with receipts ≥ 0.95 × receipts off (c=16): 900 vs 1000 ops/s = 0.90 " +
		"(server 300 + PostgreSQL 600 µs/op vs server 300 + PostgreSQL 600 µs/op)"
	informative := "execute-new receipts on ÷ off, both at once (informative: the receipts' own CPU; WAL, I/O and PostgreSQL's background work fall on both sides) (c=16 each)"
	require.Equal(t, []string{verdict,
		"ok " + informative + ": 0.97 (the median of 3 rounds' ratios; control, receipts off against receipts off: 1.00); server 310 vs 300 µs/op; by round 0.97, 0.96, 0.99"},
		lines(&Report{Options: opts, Results: turns, Duets: []Duet{duet}}))
	off := duet
	off.Control = []DuetRound{round(900, 1000), round(450, 500), round(1000, 1000)}
	require.Equal(t, []string{verdict,
		"n/a " + informative + ": its control, receipts off against receipts off, read 0.90, not 1 ± 0.03: 0.97 does not stand"},
		lines(&Report{Options: opts, Results: turns, Duets: []Duet{off}}))
	require.Equal(t, []string{verdict}, lines(&Report{Options: opts, Results: turns}))
	require.Empty(t, (&Report{Duets: []Duet{{Scenario: ScenarioExecuteNew, Concurrency: 16, Rounds: []DuetRound{round(1, 1)}, Control: []DuetRound{round(1, 1)}}}}).Failures())
	require.Equal(t, []string{"duet execute-new c=16, receipts on against off: 2 errors, e.g. x",
		"duet execute-new c=16, control: a side completed no op in 1 of 1 rounds"},
		(&Report{Duets: []Duet{{Scenario: ScenarioExecuteNew, Concurrency: 16, Rounds: []DuetRound{{A: 1, B: 1, Errors: 2, FirstError: "x"}}, Control: []DuetRound{{A: 1}}}}}).Failures(),
		"a duet's errors and a side without an op are failures")
	// A round where a side completed nothing, or whose CPU was not
	// accounted, stays out of the medians rather than reading 0.
	q, sa, sb := duetMedian([]DuetRound{round(970, 1000), {A: 900}, round(990, 1000), {A: 800, B: 1000}})
	require.InDelta(t, 0.97, q, 1e-9, "the median of 0.97, 0.99 and 0.80")
	require.Equal(t, 310*time.Microsecond, sa)
	require.Equal(t, 300*time.Microsecond, sb)
	// --duet needs what it measures.
	o := Options{Duet: true, Duration: time.Second, Scenarios: []string{ScenarioGet}}
	o.defaults()
	require.ErrorContains(t, o.validate(), "--duet measures the receipts targets")
	o = Options{Duet: true, Duration: time.Second, Scenarios: []string{ScenarioOneCall}, Baselines: []string{SystemPgbench}}
	o.defaults()
	require.ErrorContains(t, o.validate(), "--duet measures the receipts targets")
	o = Options{Duet: true, Duration: time.Second, Scenarios: []string{ScenarioOneCall}, Baselines: []string{SystemOpledgerNoReceipts}}
	o.defaults()
	require.NoError(t, o.validate())
}

// TestBenchToolsFileLoads: the bench's tools file, with its limits and
// identity, loads as the server loads it.
func TestBenchToolsFileLoads(t *testing.T) {
	t.Parallel()
	reg, err := tool.Parse(toolsYAML("http://127.0.0.1:1"), func(string) string { return "" })
	require.NoError(t, err)
	require.Len(t, reg.Limits(), 2)
}
