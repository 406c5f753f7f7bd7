package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"
)

// The operation states as the API names them, without the STATE_ prefix.
const (
	StateAwaitingApproval = "AWAITING_APPROVAL"
	StateReady            = "READY"
	StateExecuting        = "EXECUTING"
	StateSucceeded        = "SUCCEEDED"
	StateFailed           = "FAILED"
	StateOutcomeUnknown   = "OUTCOME_UNKNOWN"
	StateRejected         = "REJECTED"
	StateCancelled        = "CANCELLED"
)

// The violation kinds, one per counter of the summary.
const (
	// ViolationDuplicate: an operation has more than one effect at the
	// processor.
	ViolationDuplicate = "duplicate"
	// ViolationResent: a downstream the tool declares without
	// deduplication received a second request for one operation. Each
	// extra request counts, whether or not the processor then made a
	// second effect of it.
	ViolationResent = "resent"
	// ViolationLost: the ledger's truth lost the processor's: SUCCEEDED
	// with no effect, or an effect under an operation the ledger says had
	// none (READY, REJECTED, AWAITING_APPROVAL, CANCELLED).
	ViolationLost = "lost"
	// ViolationFalseFailed: an operation is FAILED, which promises that
	// nothing happened, but the processor has an effect for its key.
	ViolationFalseFailed = "false_failed"
	// ViolationUnapproved: a first send of an operation that needs approval
	// not covered by the approval in force: no approval, an attempt claimed
	// after the approval's end while nothing had been sent, a first request
	// that reached the processor after the approval's end (see Tolerance),
	// other arguments than the ones approved, an approval for another
	// fingerprint, or a request during attempts the ledger recorded as
	// released (nothing sent).
	ViolationUnapproved = "unapproved"
	// ViolationUnapprovedByPolicy: an operation sent without what the
	// policy in force at its claim required (a rolling policy change,
	// PolicyChange): an approval, or not at all where a deny rule refuses
	// it, although it was prepared under a policy that required neither.
	ViolationUnapprovedByPolicy = "unapproved_by_policy"
	// ViolationInternal: a call was answered INTERNAL (the ErrorInfo reason
	// the ledger gives an error it did not expect): whatever the faults, a
	// server bug, not a truthful answer.
	ViolationInternal = "internal"
	// ViolationStuck: an operation left EXECUTING, unreadable, or
	// OUTCOME_UNKNOWN where its downstream makes the outcome decidable.
	ViolationStuck = "stuck"
	// ViolationInconsistent: an answer disagrees with the final truth: a
	// client told SUCCEEDED/FAILED/REJECTED that is not the final state, an
	// external reference a client saw or the ledger stored that is not the
	// processor's, two operations for one idempotency key, or an effect no
	// operation accounts for.
	ViolationInconsistent = "inconsistent"
)

// ToolPolicy is what the checker may expect of one tool's operations: what
// the tools file declares of it.
type ToolPolicy struct {
	// AllowUnknown: the downstream can make an outcome undecidable (it does
	// not dedupe keys, has no lookup, or forgets keys), so OUTCOME_UNKNOWN
	// is a truthful final state. Otherwise the operation must be resolved.
	AllowUnknown bool
	// Dedupes: the tool declares that its downstream dedupes keys, so the
	// ledger may send an operation again (a retry, a takeover, a
	// resubmission). Without it every operation may be sent once at most.
	Dedupes bool
	// ApprovalTTL is the tool's approval TTL; 0 when it needs no approval.
	ApprovalTTL time.Duration
}

// FinalOp is an operation as the ledger holds it after the run.
type FinalOp struct {
	ID, Tool, State, ExternalRef, DownstreamKey string
	// Fingerprint is the operation's; ApprovedFingerprint the one its last
	// approval was given for, with Decision ("APPROVE", "DENY" or "").
	Fingerprint, ApprovedFingerprint, Decision string
	// Events is the operation's event log.
	Events []OpEvent
	// Unreadable: Get failed for good; State is empty.
	Unreadable bool
	// Missing: Get answered NOT_FOUND (with Unreadable): the ledger lost
	// the operation, as an asynchronously replicated failover can.
	Missing bool
}

// OpEvent is one entry of an operation's event log. At is on the
// database's clock.
type OpEvent struct {
	Seq   int64     `json:"seq"`
	Type  string    `json:"type"` // without the EVENT_TYPE_ prefix: CLAIMED, RELEASED, …
	Fence int64     `json:"fence"`
	Actor string    `json:"actor"`
	At    time.Time `json:"at"`
}

// Effect is one side effect the processor recorded: a charge or an e-mail,
// with the idempotency key it was sent under.
type Effect struct {
	Kind, ID, Key string
	// Subject is the processor and the business identity the request named
	// ("pay:INV-12", "mail:customer-7@example.com"), unique per operation
	// of the workload: two effects with one subject are a second effect
	// whatever keys they were sent under.
	Subject string
}

// Send is one request a processor received, deduplicated or not.
type Send struct {
	// Processor is the processor's name (pay, ret, mail, direct).
	Processor string
	Key       string
	// Server is the server that sent it (its sourceHeader); 0 if unknown.
	Server int
	// At is when the processor had received it, on the real clock.
	At time.Time
	// Body is the request body; Answer and Status what the processor did
	// (fakepay.Answer*).
	Body   json.RawMessage
	Answer string
	Status int
}

// PreparedOp is what the workload prepared under one idempotency key: the
// arguments it sent (and the approver was shown, by fingerprint) and what
// it meant to do with the operation.
type PreparedOp struct {
	Tool string
	Args json.RawMessage
	// Intent is "run" (approve and execute), "deny" or "leave".
	Intent string
}

// ClockStep is the database clock's offset from the real clock from At on.
type ClockStep struct {
	At     time.Time     `json:"at"`
	Offset time.Duration `json:"offset"`
}

// Hold is a time during which requests from one server to the processors
// may have been held on their way by a fault outside the executor's
// control: its processor proxy's latency or blackhole, or a SIGSTOP of the
// whole server (which may land between the executor's last check and its
// write). A request started before From may arrive as late as To.
type Hold struct {
	Server   int
	From, To time.Time
	Kind     string
}

// Timeline is what the checker needs of the nemesis's schedule to judge
// time: the database clock's offsets and the holds.
type Timeline struct {
	// Offsets are in order; the first is in force from the start.
	Offsets []ClockStep
	// Pickup is how long after a step the database may still read the
	// previous offset (libfaketime re-reads its offset file once a second,
	// in each backend).
	Pickup time.Duration
	Holds  []Hold
}

// Tolerance is how much later than the approval's end (converted to real
// time with the database clock's offset in force) the processor may
// receive an operation's first request, besides the Holds: the executor
// checks the approval's end on its monotonic clock just before it writes,
// and the request then crosses loopback TCP and a proxy on a loaded 2-core
// machine.
const Tolerance = 2 * time.Second

// claimWindow bounds how long before a first send its claim was made: the
// lease, plus the longest hold (a processor blackhole, a SIGSTOP), plus
// margin (see Timeline.offsetsAt).
const claimWindow = 20 * time.Second

// CheckInput is everything the checker looks at. It never consults the
// servers' own view beyond each operation's final state and event log.
type CheckInput struct {
	// Observations are the completed client calls that named an operation
	// (History.Observations).
	Observations []Event
	// Internal are the calls answered INTERNAL (History.Internal).
	Internal []Event
	// Ops are the final operations, by id.
	Ops map[string]FinalOp
	// Effects are every charge and e-mail of every processor.
	Effects []Effect
	// Sends are every request every processor received.
	Sends []Send
	// Prepared are the workload's operations, by operation id.
	Prepared map[string]PreparedOp
	// Approver is the approver's principal name: every APPROVED event must
	// be its ("" skips that check).
	Approver string
	// Timeline is the nemesis's schedule of clock offsets and holds.
	Timeline Timeline
	// Policies are by tool name; a tool without one is strict.
	Policies map[string]ToolPolicy
	// PolicyChange is the run's rolling policy change; nil for none.
	PolicyChange *PolicyChange
}

// PolicyChange is a rolling change of one tool's policy during the run:
// each server restarted, one after another, with a tools file under which
// every call of the tool needs an approval and a deny rule refuses some.
type PolicyChange struct {
	Tool string
	// Servers is how many servers there are; Switches when each switched:
	// its last incarnation under the old policy had exited, and every later
	// one read the new file.
	Servers  int
	Switches []PolicySwitch
	// Denied reports whether the new policy's deny rule refuses a call with
	// these (prepared) arguments.
	Denied func(args json.RawMessage) bool
}

// PolicySwitch is one server's switch to the new policy.
type PolicySwitch struct {
	Server int       `json:"server"`
	At     time.Time `json:"at"`
}

// policyMargin is how close to a switch a claim (its database time
// converted to real time) is judged under neither policy: the event's
// timestamp is the claim statement's, taken while the claimant ran.
const policyMargin = time.Second

// Violation is one thing the checker found wrong.
type Violation struct {
	Kind   string `json:"kind"`
	Op     string `json:"op,omitempty"`
	Detail string `json:"detail"`
}

// CheckResult counts what the checker found.
type CheckResult struct {
	Ops, Effects, Sends                             int
	Duplicates, Lost, Stuck, Unknown, Inconsistent  int
	Resent, FalseFailed, Unapproved, Internal       int
	UnapprovedByPolicy                              int
	Succeeded, Failed, Ready, Rejected, AwaitingOps int
	// Resends counts the requests beyond the first that deduplicating
	// downstreams received (retries, takeovers, resubmissions): legitimate,
	// and reported so that a change in them shows.
	Resends int
	// Answers counts the processors' answers by kind (fakepay.Answer*).
	Answers map[string]int
	// Released counts the attempts the ledger released (nothing sent);
	// Lapsed the approvals that expired after a release with nothing sent
	// (APPROVAL_EXPIRED after RELEASED); Renewed the approvals given again.
	Released, Lapsed, Renewed int
	// LateResubmissions counts first requests after the approval's end
	// that a resubmission may have sent after an earlier send was lost on
	// the way (not a violation: see docs/design.md, the approval-expiry
	// rule).
	LateResubmissions int
	// PolicyChanged and PolicyChecked count the operations of the policy
	// change's tool the ledger judged again (POLICY_CHANGED: back to
	// awaiting approval, or refused; POLICY_CHECKED: nothing more needed);
	// PolicyTight those sent after a claim under the new policy, and
	// PolicyUnjudged those sent after a claim too close to a switch to say
	// which policy was in force there (not checked).
	PolicyChanged, PolicyChecked, PolicyTight, PolicyUnjudged int
	Violations                                                []Violation
}

// OK reports a run without violations.
func (r CheckResult) OK() bool { return len(r.Violations) == 0 }

// CountOf is how many violations of kind r holds.
func (r CheckResult) CountOf(kind string) int {
	n := 0
	for _, v := range r.Violations {
		if v.Kind == kind {
			n++
		}
	}
	return n
}

// opOfKey maps an effect's idempotency key to the downstream key of its
// operation. The ledger sends the operation's downstream key; the control
// run's unsafe switch appends ".FENCE" to it, which must still count
// against the same operation.
func opOfKey(key string) string {
	if i := strings.IndexByte(key, '.'); i >= 0 {
		return key[:i]
	}
	return key
}

// Check verifies every operation against the processor's record and every
// answer a client received against the final truth.
func Check(in CheckInput) CheckResult {
	var r CheckResult
	flag := func(kind, op, format string, args ...any) {
		r.Violations = append(r.Violations, Violation{Kind: kind, Op: op, Detail: fmt.Sprintf(format, args...)})
		switch kind {
		case ViolationDuplicate:
			r.Duplicates++
		case ViolationLost:
			r.Lost++
		case ViolationStuck:
			r.Stuck++
		case ViolationInconsistent:
			r.Inconsistent++
		case ViolationResent:
			r.Resent++
		case ViolationFalseFailed:
			r.FalseFailed++
		case ViolationUnapproved:
			r.Unapproved++
		case ViolationUnapprovedByPolicy:
			r.UnapprovedByPolicy++
		case ViolationInternal:
			r.Internal++
		}
	}
	for _, e := range in.Internal {
		flag(ViolationInternal, e.Op, "%s's %s (call %d, server %d) was answered INTERNAL: %s", e.Process, e.F, e.Call, e.Server, e.Detail)
	}

	ids := make([]string, 0, len(in.Ops))
	byDownstream := map[string]string{}
	for id, op := range in.Ops {
		ids = append(ids, id)
		if op.DownstreamKey != "" {
			byDownstream[op.DownstreamKey] = id
		}
	}
	sort.Strings(ids)
	r.Ops = len(ids)

	effects := map[string][]Effect{}
	r.Effects = len(in.Effects)
	for _, e := range in.Effects {
		id, ok := byDownstream[opOfKey(e.Key)]
		if !ok || e.Key == "" {
			flag(ViolationInconsistent, "", "%s %s was made under a key no operation accounts for", e.Kind, e.ID)
			continue
		}
		effects[id] = append(effects[id], e)
	}
	sends := map[string][]Send{}
	r.Sends = len(in.Sends)
	r.Answers = map[string]int{}
	for _, sd := range in.Sends {
		r.Answers[sd.Answer]++
		id, ok := byDownstream[opOfKey(sd.Key)]
		if !ok || sd.Key == "" {
			flag(ViolationInconsistent, "", "processor %s received a request (%s) under a key no operation accounts for", sd.Processor, sd.Answer)
			continue
		}
		sends[id] = append(sends[id], sd)
	}
	for id := range sends {
		sort.SliceStable(sends[id], func(i, j int) bool { return sends[id][i].At.Before(sends[id][j].At) })
	}

	for _, id := range ids {
		op := in.Ops[id]
		got := effects[id]
		if len(got) > 1 {
			refs := make([]string, len(got))
			for i, e := range got {
				refs[i] = e.ID
			}
			// Every extra effect counts: two extra charges are worse than one.
			for range got[1:] {
				flag(ViolationDuplicate, id, "%s (%s) has %d effects: %s", op.Tool, op.State, len(got), strings.Join(refs, ", "))
			}
		}
		if op.Unreadable {
			flag(ViolationStuck, id, "%s: the operation could not be read after the run", op.Tool)
			continue
		}
		pol := in.Policies[op.Tool]
		sent := sends[id]
		if len(sent) > 1 {
			if pol.Dedupes {
				r.Resends += len(sent) - 1
			} else {
				for i, sd := range sent[1:] {
					flag(ViolationResent, id, "%s (%s) does not dedupe keys, yet its processor received request %d of %d at %s from server %d (first at %s, from server %d; answered %s)",
						op.Tool, op.State, i+2, len(sent), clock(sd.At), sd.Server, clock(sent[0].At), sent[0].Server, sd.Answer)
				}
			}
		}
		for _, e := range op.Events {
			switch e.Type {
			case "RELEASED":
				r.Released++
			case "APPROVED":
				if e.Seq > 0 && hasEarlier(op.Events, e.Seq, "APPROVAL_EXPIRED") {
					r.Renewed++
				}
			case "APPROVAL_EXPIRED":
				if hasEarlier(op.Events, e.Seq, "RELEASED") {
					r.Lapsed++
				}
			}
		}
		prep, prepared := in.Prepared[id]
		// Every request, not only the first: a resubmission under the same
		// key must carry what was prepared and approved too.
		for _, s := range sent {
			if !prepared || len(prep.Args) == 0 || sameJSON(s.Body, prep.Args) {
				continue
			}
			kind := ViolationInconsistent
			if pol.ApprovalTTL > 0 {
				kind = ViolationUnapproved
			}
			flag(kind, id, "%s: the processor received other arguments (%s) than the ones prepared and approved (%s), at %s", op.Tool, s.Body, prep.Args, clock(s.At))
			break
		}
		if pol.ApprovalTTL > 0 {
			for _, v := range r.checkApproval(op, pol, sent, prep, prepared, in) {
				flag(ViolationUnapproved, id, "%s", v)
			}
		}
		if pc := in.PolicyChange; pc != nil && op.Tool == pc.Tool {
			for _, v := range r.checkPolicy(op, sent, prep, in) {
				flag(ViolationUnapprovedByPolicy, id, "%s", v)
			}
		}
		switch op.State {
		case StateSucceeded:
			r.Succeeded++
			switch {
			case len(got) == 0:
				flag(ViolationLost, id, "%s SUCCEEDED with external ref %q, but the processor has no effect for it", op.Tool, op.ExternalRef)
			case len(got) == 1 && got[0].ID != op.ExternalRef:
				flag(ViolationInconsistent, id, "%s SUCCEEDED with external ref %q, but the processor's record is %s", op.Tool, op.ExternalRef, got[0].ID)
			}
		case StateFailed:
			r.Failed++
			if len(got) > 0 {
				flag(ViolationFalseFailed, id, "%s is FAILED, but the processor has %d effect(s) for its key, first %s", op.Tool, len(got), got[0].ID)
			}
		case StateReady, StateRejected, StateAwaitingApproval, StateCancelled:
			switch op.State {
			case StateReady:
				r.Ready++
			case StateRejected:
				r.Rejected++
			case StateAwaitingApproval:
				r.AwaitingOps++
			}
			if len(got) > 0 {
				flag(ViolationLost, id, "%s is %s, but the processor has %d effect(s), first %s", op.Tool, op.State, len(got), got[0].ID)
			}
		case StateOutcomeUnknown:
			if in.Policies[op.Tool].AllowUnknown {
				r.Unknown++
			} else {
				flag(ViolationStuck, id, "%s is OUTCOME_UNKNOWN, but its downstream dedupes keys and has a consistent lookup (%d effect(s))", op.Tool, len(got))
			}
		case StateExecuting:
			flag(ViolationStuck, id, "%s is still EXECUTING after the run", op.Tool)
		default:
			flag(ViolationStuck, id, "%s has an unexpected state %q", op.Tool, op.State)
		}
	}

	// Every answer a client received must agree with the final truth. A
	// non-final answer (READY, EXECUTING, OUTCOME_UNKNOWN, …) promises
	// nothing; a final one is forever.
	opsOfKey := map[string]map[string]bool{}
	for _, e := range in.Observations {
		if e.F == "prepare" && e.Key != "" {
			if opsOfKey[e.Key] == nil {
				opsOfKey[e.Key] = map[string]bool{}
			}
			opsOfKey[e.Key][e.Op] = true
		}
		if e.F == "approve-mismatch" {
			flag(ViolationUnapproved, e.Op, "%s's approval with a fingerprint that is not the operation's was accepted (call %d, server %d)", e.Process, e.Call, e.Server)
		}
		final, ok := in.Ops[e.Op]
		if !ok {
			flag(ViolationStuck, e.Op, "a client was told about operation %s (call %d), which the checker could not read", e.Op, e.Call)
			continue
		}
		if final.Unreadable {
			continue
		}
		switch e.State {
		case StateSucceeded, StateFailed, StateRejected, StateCancelled:
			if final.State != e.State {
				flag(ViolationInconsistent, e.Op, "%s told %s (call %d, %s on server %d) but the operation ended %s", e.Process, e.State, e.Call, e.F, e.Server, final.State)
			} else if e.State == StateSucceeded && e.Ref != final.ExternalRef {
				flag(ViolationInconsistent, e.Op, "%s saw external ref %q (call %d) but the final one is %q", e.Process, e.Ref, e.Call, final.ExternalRef)
			}
		}
	}
	keys := make([]string, 0, len(opsOfKey))
	for k := range opsOfKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if len(opsOfKey[k]) > 1 {
			var list []string
			for id := range opsOfKey[k] {
				list = append(list, id)
			}
			sort.Strings(list)
			flag(ViolationInconsistent, list[0], "one idempotency key (digest %s) answered with %d operations: %s", k, len(list), strings.Join(list, ", "))
		}
	}
	return r
}

// checkApproval applies the approval-expiry rule to one operation of a tool
// that needs approval, and returns what it violates. The rule, as the
// checker can see it from the outside:
//
//   - Only an operation the workload meant to run was approved: any request
//     of one it denied or left undecided is unapproved.
//   - The attempt that could have made the first send is the first the
//     ledger did not release (RELEASED promises that nothing was sent). It
//     must have been claimed (its CLAIMED event, on the database's clock)
//     before the end of the approval in force then: the latest APPROVED
//     event before it, by the approver, plus the tool's TTL. Both times are
//     the database's, so this part is exact.
//   - The processor's first request must not come before that claim, and
//     must have arrived no later than the approval's end converted to real
//     time with the database clock's offset in force at the claim (the
//     executor measured what was left of the approval through it; of two
//     candidates around a step, the smaller, which gives the later time), plus
//     Tolerance, or the end of a Hold on the sending server that began by
//     then. For a tool whose downstream dedupes keys, a later attempt (a
//     takeover or a resubmission after a lookup miss) claimed before that
//     request arrived, and not released, may have sent it after the first
//     attempt's request was lost on the way; such a request is counted in
//     LateResubmissions when it comes late, not flagged: the ledger cannot
//     tell a lost request from one that landed. A tool that does not dedupe
//     is never sent again, so it has no such exception.
//   - The operation's last approval was given for its own fingerprint.
func (r *CheckResult) checkApproval(op FinalOp, pol ToolPolicy, sent []Send, prep PreparedOp, prepared bool, in CheckInput) []string {
	var out []string
	if prepared && prep.Intent != intentRun && len(sent) > 0 {
		out = append(out, fmt.Sprintf("%s was never approved (the workload meant to %s it), yet the processor received %d request(s), first at %s",
			op.Tool, prep.Intent, len(sent), clock(sent[0].At)))
	}
	if op.Decision == "APPROVE" && op.ApprovedFingerprint != op.Fingerprint {
		out = append(out, fmt.Sprintf("%s is approved for fingerprint %s, not its own %s", op.Tool, op.ApprovedFingerprint, op.Fingerprint))
	}
	first, released := firstSendingClaim(op.Events)
	if first == nil {
		if len(sent) > 0 {
			out = append(out, fmt.Sprintf("%s: the processor received %d request(s), first at %s from server %d, but the ledger released every attempt (nothing sent)",
				op.Tool, len(sent), clock(sent[0].At), sent[0].Server))
		}
		return out
	}
	var approved *OpEvent
	for i, e := range op.Events {
		if e.Seq < first.Seq && e.Type == "APPROVED" {
			approved = &op.Events[i]
		}
	}
	if approved == nil {
		return append(out, fmt.Sprintf("%s: attempt %d was claimed at %s (database clock) without an approval", op.Tool, first.Fence, clock(first.At)))
	}
	if in.Approver != "" && approved.Actor != in.Approver {
		out = append(out, fmt.Sprintf("%s: the approval in force at attempt %d was given by %q, not by the approver", op.Tool, first.Fence, approved.Actor))
	}
	end := approved.At.Add(pol.ApprovalTTL)
	if !first.At.Before(end) {
		out = append(out, fmt.Sprintf("%s: attempt %d, the first the ledger did not release, was claimed at %s, %s after its approval (given at %s) ended at %s (database clock)",
			op.Tool, first.Fence, clock(first.At), first.At.Sub(end).Round(time.Millisecond), clock(approved.At), clock(end)))
	}
	if len(sent) == 0 {
		return out
	}
	s1 := sent[0]
	tl := in.Timeline
	// The claim's instant, converted to real time with every offset that
	// can have been in force then: the executor turned what it read of the
	// approval into a deadline on its own clock through that offset.
	lo, hi := tl.offsetsAt(first.At, s1.At)
	if earliest := first.At.Add(-hi); s1.At.Before(earliest.Add(-Tolerance)) {
		out = append(out, fmt.Sprintf("%s: the processor received the first request at %s from server %d, before attempt %d was claimed (%s real time at the earliest); the ledger released every attempt before it",
			op.Tool, clock(s1.At), s1.Server, first.Fence, clock(earliest)))
	}
	endReal := end.Add(-lo)
	allowed := endReal.Add(Tolerance)
	for _, h := range tl.Holds {
		if h.Server == s1.Server && !h.From.After(endReal.Add(Tolerance)) && h.To.Add(Tolerance).After(allowed) {
			allowed = h.To.Add(Tolerance)
		}
	}
	if !s1.At.After(allowed) {
		return out
	}
	for _, e := range op.Events {
		// Only where the ledger may send again (the downstream dedupes
		// keys), and only an attempt that may have sent (not one released).
		if !pol.Dedupes || e.Type != "CLAIMED" && e.Type != "LEASE_TAKEN_OVER" || e.Fence <= first.Fence || released[e.Fence] {
			continue
		}
		if _, ehi := tl.offsetsAt(e.At, s1.At); !e.At.Add(-ehi).After(s1.At.Add(Tolerance)) {
			r.LateResubmissions++
			return out
		}
	}
	return append(out, fmt.Sprintf("%s: the processor received the first request at %s from server %d, %s after the approval's end (%s on the database's clock, %s real time with the offset %s)",
		op.Tool, clock(s1.At), s1.Server, s1.At.Sub(endReal).Round(time.Millisecond), clock(end), clock(endReal), lo))
}

// checkPolicy applies the policy change's rule to one operation of its
// tool: the attempt that could have made the first send (the first claim
// the ledger did not release) was claimed under the old policy, or under
// the new one, which then required an approval before that claim and
// refuses the arguments its deny rule holds for. Which policy a claim was
// made under is the claimant's: the claim's time (the database's,
// converted to real time with every offset that can have been in force)
// against its server's switch, where only one attempt ever ran (so the
// first request came from the claimant, whose number the processor
// recorded); otherwise against the switches of all servers: before the
// first, the old policy; after the last, the new one. A claim within
// policyMargin of the switch that decides is not judged (PolicyUnjudged).
func (r *CheckResult) checkPolicy(op FinalOp, sent []Send, prep PreparedOp, in CheckInput) []string {
	pc := in.PolicyChange
	var claims, takeovers int
	for _, e := range op.Events {
		switch e.Type {
		case "POLICY_CHANGED":
			r.PolicyChanged++
		case "POLICY_CHECKED":
			r.PolicyChecked++
		case "CLAIMED":
			claims++
		case "LEASE_TAKEN_OVER":
			takeovers++
		}
	}
	if len(sent) == 0 {
		return nil
	}
	first, _ := firstSendingClaim(op.Events)
	if first == nil {
		return nil // every attempt released: the approval rules' domain
	}
	lo, hi := in.Timeline.offsetsAt(first.At, sent[0].At)
	earliest, latest := first.At.Add(-hi), first.At.Add(-lo)
	var from, to time.Time // the switches that bound the old and the new policy
	if claims == 1 && takeovers == 0 && sent[0].Server > 0 {
		for _, sw := range pc.Switches {
			if sw.Server == sent[0].Server {
				from, to = sw.At, sw.At
			}
		}
	} else if len(pc.Switches) > 0 {
		from = pc.Switches[0].At
		if len(pc.Switches) == pc.Servers {
			to = pc.Switches[len(pc.Switches)-1].At
		}
	}
	switch {
	case from.IsZero() || latest.Before(from.Add(-policyMargin)):
		return nil // claimed under the old policy: nothing required
	case to.IsZero() || !earliest.After(to.Add(policyMargin)):
		r.PolicyUnjudged++
		return nil
	}
	r.PolicyTight++
	var out []string
	if len(prep.Args) > 0 && pc.Denied(prep.Args) {
		out = append(out, fmt.Sprintf("%s: attempt %d, claimed at %s (database clock) under the tightened policy, whose deny rule refuses its arguments %s, was sent (first request at %s from server %d)",
			op.Tool, first.Fence, clock(first.At), prep.Args, clock(sent[0].At), sent[0].Server))
	}
	if !hasEarlier(op.Events, first.Seq, "APPROVED") {
		out = append(out, fmt.Sprintf("%s: attempt %d, claimed at %s (database clock) under the tightened policy, which requires an approval, was sent without one (first request at %s from server %d)",
			op.Tool, first.Fence, clock(first.At), clock(sent[0].At), sent[0].Server))
	}
	return out
}

// offsetsAt returns the smallest and largest offsets of the database's
// clock that can have been in force when that clock read db: an offset
// counts if db minus it falls within the time it was in force (from its
// step until the next step was picked up). Without such an offset (a
// timeline that does not cover db) it falls back to every offset in force
// within claimWindow before near, a real instant close after db.
func (tl Timeline) offsetsAt(db, near time.Time) (lo, hi time.Duration) {
	found := false
	widen := func(off time.Duration) {
		if !found || off < lo {
			lo = off
		}
		if !found || off > hi {
			hi = off
		}
		found = true
	}
	for i, st := range tl.Offsets {
		real := db.Add(-st.Offset)
		if i > 0 && real.Before(st.At) {
			continue
		}
		if i+1 < len(tl.Offsets) && !real.Before(tl.Offsets[i+1].At.Add(tl.Pickup)) {
			continue
		}
		widen(st.Offset)
	}
	if found {
		return lo, hi
	}
	from := near.Add(-claimWindow)
	for i, st := range tl.Offsets {
		if i > 0 && st.At.After(near.Add(Tolerance)) {
			break
		}
		if i+1 < len(tl.Offsets) && tl.Offsets[i+1].At.Add(tl.Pickup).Before(from) {
			continue
		}
		widen(st.Offset)
	}
	return lo, hi
}

// firstSendingClaim returns the claim of the attempt that could have made
// an operation's first send: its first CLAIMED event whose attempt the
// ledger did not release (RELEASED promises that nothing was sent), nil if
// it released every one; and the fences it released.
func firstSendingClaim(evs []OpEvent) (*OpEvent, map[int64]bool) {
	released := map[int64]bool{}
	for _, e := range evs {
		if e.Type == "RELEASED" {
			released[e.Fence] = true
		}
	}
	for i, e := range evs {
		if e.Type == "CLAIMED" && !released[e.Fence] {
			return &evs[i], released
		}
	}
	return nil, released
}

// hasEarlier reports an event of type typ before seq.
func hasEarlier(evs []OpEvent, seq int64, typ string) bool {
	for _, e := range evs {
		if e.Seq < seq && e.Type == typ {
			return true
		}
	}
	return false
}

// sameJSON reports whether two JSON documents are equal as values.
func sameJSON(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// clock formats an instant for a violation's detail.
func clock(t time.Time) string { return t.UTC().Format("15:04:05.000") }
