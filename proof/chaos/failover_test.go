package chaos

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSecondEffectsByBusinessIdentity: an operation lost with a failover
// and prepared again under the same idempotency key gets a new operation
// id; were its downstream key derived from that id, the processor would
// charge the same invoice twice under two keys. The key-based checker
// cannot pin that on one operation (it sees an effect nobody accounts
// for); counting effects per invoice does.
func TestSecondEffectsByBusinessIdentity(t *testing.T) {
	t.Parallel()
	in := world()
	// op_a was lost and prepared again as op_a2 with a key of its own.
	in.Ops["op_a2"] = FinalOp{ID: "op_a2", Tool: ToolPay, State: StateSucceeded, ExternalRef: "ch_1b", DownstreamKey: "opk_a2"}
	in.Effects = []Effect{
		{Kind: "charge", ID: "ch_1", Key: "opk_a", Subject: "pay:INV-1"},
		{Kind: "email", ID: "em_2", Key: "opk_b", Subject: "mail:customer-2@example.com"},
		{Kind: "charge", ID: "ch_3", Key: "opk_c", Subject: "pay:INV-3"},
		{Kind: "charge", ID: "ch_1b", Key: "opk_a2", Subject: "pay:INV-1"},
	}
	require.Zero(t, Check(in).Duplicates, "by keys, each operation has one effect")
	n, vs := secondEffects(in.Effects)
	require.Equal(t, 1, n)
	require.Contains(t, vs[0].Detail, "pay:INV-1 has 2 effects")

	// Two effects of one operation under one key are one second effect,
	// counted once by either checker.
	n, _ = secondEffects(append(in.Effects[:3:3], Effect{Kind: "charge", ID: "ch_3b", Key: "opk_c", Subject: "pay:INV-3"}))
	require.Equal(t, 1, n)
}

// TestLostAcknowledged counts final answers the ledger no longer gives and
// operations it no longer has.
func TestLostAcknowledged(t *testing.T) {
	t.Parallel()
	in := world()
	lost, gone := lostAcknowledged(in)
	require.Zero(t, lost+gone)

	in.Ops["op_a"] = FinalOp{ID: "op_a", Tool: ToolPay, State: StateReady, DownstreamKey: "opk_a"}
	lost, gone = lostAcknowledged(in)
	require.Equal(t, 1, lost, "told SUCCEEDED, now READY")
	require.Zero(t, gone)

	in = world()
	in.Ops["op_a"] = FinalOp{ID: "op_a", Tool: ToolPay, State: StateSucceeded, ExternalRef: "ch_other", DownstreamKey: "opk_a"}
	lost, _ = lostAcknowledged(in)
	require.Equal(t, 1, lost, "another external reference")

	in = world()
	in.Ops["op_a"] = FinalOp{ID: "op_a", Tool: ToolPay, Unreadable: true, Missing: true}
	in.Ops["op_b"] = FinalOp{ID: "op_b", Tool: ToolEmail, Unreadable: true, Missing: true}
	lost, gone = lostAcknowledged(in)
	require.Equal(t, 1, lost, "op_a's SUCCEEDED is gone with it; op_b was never final")
	require.Equal(t, 2, gone)
}

// TestLostAcknowledgedThenFoundAgain: an outcome the ledger says again
// only from a record written after the client was told it (the
// acknowledged commit lost in a failover, the same charge found again by
// a reconciler) was lost all the same.
func TestLostAcknowledgedThenFoundAgain(t *testing.T) {
	t.Parallel()
	told := t0.Add(time.Second)
	withEnd := func(typ string, at time.Time) CheckInput {
		in := world()
		in.Observations[1].Time = told
		op := in.Ops["op_a"]
		op.Events = append(approvedAndRun(), OpEvent{Seq: 4, Type: typ, Fence: 1, At: at})
		in.Ops["op_a"] = op
		return in
	}
	lost, _ := lostAcknowledged(withEnd("SUCCEEDED", t0.Add(500*time.Millisecond)))
	require.Zero(t, lost, "recorded before the answer")
	lost, _ = lostAcknowledged(withEnd("RECONCILED", t0.Add(20*time.Second)))
	require.Equal(t, 1, lost, "recorded again 19 s after the client was told")

	// On a database clock 90 s ahead of the runner's, the same record is
	// read with the offset in force.
	in := withEnd("SUCCEEDED", t0.Add(90*time.Second+500*time.Millisecond))
	in.Timeline = Timeline{Offsets: []ClockStep{{At: t0.Add(-time.Minute), Offset: 90 * time.Second}}}
	lost, _ = lostAcknowledged(in)
	require.Zero(t, lost)
	in.Ops["op_a"].Events[3].At = t0.Add(110 * time.Second)
	lost, _ = lostAcknowledged(in)
	require.Equal(t, 1, lost)
}

// TestOutageIgnoresCallsInFlight: a Prepare completing just after the
// fault (on the old primary) does not end the outage; the longest stretch
// without a new operation does, and the failures up to its end count.
func TestOutageIgnoresCallsInFlight(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	calls := []callMark{
		{at: at(-time.Second), ok: true},
		{at: at(50 * time.Millisecond), ok: true},
		{at: at(time.Second), code: "Unavailable", reason: "LEDGER_UNAVAILABLE"},
		{at: at(2 * time.Second), code: "Unavailable", reason: "LEDGER_UNAVAILABLE"},
		{at: at(5 * time.Second), code: "DeadlineExceeded"},
		{at: at(9 * time.Second), ok: true},
		{at: at(9500 * time.Millisecond), ok: true},
		{at: at(20 * time.Second), code: "Unavailable"},
	}
	w := outage(calls, faultMark{at: t0, kind: "ha-kill"}, at(time.Minute))
	require.Equal(t, 8950*time.Millisecond, w.Unavailable)
	require.Equal(t, map[string]int{"Unavailable/LEDGER_UNAVAILABLE": 2, "DeadlineExceeded": 1}, w.Failed)
}

// TestFailoverVerdict: synchronous replication fails on anything lost;
// asynchronous replication only on a second effect at a deduping
// downstream; both on INTERNAL and on a run without a failover.
func TestFailoverVerdict(t *testing.T) {
	t.Parallel()
	lostRun := CheckResult{Lost: 1, Violations: []Violation{{Kind: ViolationLost}}}
	require.Empty(t, (&FailoverReport{Mode: FailoverAsync, Failovers: 3, LostAcknowledged: 2}).verdict(lostRun))
	require.NotEmpty(t, (&FailoverReport{Mode: FailoverSync, Failovers: 3, LostAcknowledged: 2}).verdict(lostRun))
	require.NotEmpty(t, (&FailoverReport{Mode: FailoverSync, Failovers: 3, ForgottenOps: 1}).verdict(CheckResult{}))
	require.NotEmpty(t, (&FailoverReport{Mode: FailoverAsync, Failovers: 3, SecondEffects: 1}).verdict(CheckResult{Duplicates: 1}))
	require.NotEmpty(t, (&FailoverReport{Mode: FailoverAsync, Failovers: 3, Internal: []string{"x"}}).verdict(CheckResult{}))
	require.NotEmpty(t, (&FailoverReport{Mode: FailoverSync}).verdict(CheckResult{}))
	require.Empty(t, (&FailoverReport{Mode: FailoverSync, Failovers: 1}).verdict(CheckResult{}))
}

// TestOutageWithoutRecovery: no operation prepared after the fault (the run
// ended) is no measurement, and every failure after the fault counts.
func TestOutageWithoutRecovery(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	calls := []callMark{{at: t0.Add(-time.Second), ok: true}, {at: t0.Add(time.Second), code: "Unavailable"}}
	w := outage(calls, faultMark{at: t0}, t0.Add(time.Minute))
	require.Equal(t, time.Duration(-1), w.Unavailable)
	require.Equal(t, 1, w.Failed["Unavailable"])
}

// TestSecondEffectsByProcessor: a second e-mail (no dedupe downstream) is
// the price of asynchronous replication; a second charge at a deduping
// processor never is.
func TestSecondEffectsByProcessor(t *testing.T) {
	t.Parallel()
	f := &failover{mode: FailoverAsync}
	in := world()
	in.Effects = []Effect{
		{Kind: "charge", ID: "ch_1", Key: "opk_a", Subject: "pay:INV-1"},
		{Kind: "email", ID: "em_2", Key: "opk_b", Subject: "mail:customer-2@example.com"},
		{Kind: "email", ID: "em_2b", Key: "opk_b", Subject: "mail:customer-2@example.com"},
		{Kind: "charge", ID: "ch_3", Key: "opk_c", Subject: "pay:INV-3"},
	}
	res := Check(in)
	rep := f.report(in, &res)
	require.Equal(t, 0, rep.SecondEffects)
	require.Equal(t, 1, rep.SecondEffectsUnprotected)
	require.Equal(t, 1, res.Duplicates)
	rep.Failovers = 1
	require.Empty(t, rep.verdict(res), "asynchronous: a second e-mail is reported, not failed")
	rep.Mode = FailoverSync
	require.NotEmpty(t, rep.verdict(res))
}

// TestProtectedSubjects: only the processor that dedupes keys for ever can
// recognise every resend of a re-prepared operation.
func TestProtectedSubjects(t *testing.T) {
	t.Parallel()
	require.True(t, protectedSubject("pay:INV-1"))
	require.False(t, protectedSubject("ret:INV-2"), "forgets keys after its retention")
	require.False(t, protectedSubject("mail:INV-3"))
	require.False(t, protectedSubject("mail:customer-4@example.com"))
}
