package chaos

import (
	"fmt"
	"sort"
	"strings"
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
	// ViolationLost: the ledger's truth lost the processor's: SUCCEEDED
	// with no effect, or an effect under an operation the ledger says had
	// none (FAILED, READY, REJECTED, AWAITING_APPROVAL, CANCELLED).
	ViolationLost = "lost"
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

// ToolPolicy is what the checker may expect of one tool's operations.
type ToolPolicy struct {
	// AllowUnknown: the downstream can make an outcome undecidable (it does
	// not dedupe keys, has no lookup, or forgets keys), so OUTCOME_UNKNOWN
	// is a truthful final state. Otherwise the operation must be resolved.
	AllowUnknown bool
}

// FinalOp is an operation as the ledger holds it after the run.
type FinalOp struct {
	ID, Tool, State, ExternalRef, DownstreamKey string
	// Unreadable: Get failed for good; State is empty.
	Unreadable bool
	// Missing: Get answered NOT_FOUND (with Unreadable): the ledger lost
	// the operation, as an asynchronously replicated failover can.
	Missing bool
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

// CheckInput is everything the checker looks at. It never consults the
// servers' own view beyond the final state of each operation.
type CheckInput struct {
	// Observations are the completed client calls that named an operation
	// (History.Observations).
	Observations []Event
	// Ops are the final operations, by id.
	Ops map[string]FinalOp
	// Effects are every charge and e-mail of every processor.
	Effects []Effect
	// Policies are by tool name; a tool without one is strict.
	Policies map[string]ToolPolicy
}

// Violation is one thing the checker found wrong.
type Violation struct {
	Kind   string `json:"kind"`
	Op     string `json:"op,omitempty"`
	Detail string `json:"detail"`
}

// CheckResult counts what the checker found.
type CheckResult struct {
	Ops, Effects                                    int
	Duplicates, Lost, Stuck, Unknown, Inconsistent  int
	Succeeded, Failed, Ready, Rejected, AwaitingOps int
	Violations                                      []Violation
}

// OK reports a run without violations.
func (r CheckResult) OK() bool { return len(r.Violations) == 0 }

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
		}
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
		switch op.State {
		case StateSucceeded:
			r.Succeeded++
			switch {
			case len(got) == 0:
				flag(ViolationLost, id, "%s SUCCEEDED with external ref %q, but the processor has no effect for it", op.Tool, op.ExternalRef)
			case len(got) == 1 && got[0].ID != op.ExternalRef:
				flag(ViolationInconsistent, id, "%s SUCCEEDED with external ref %q, but the processor's record is %s", op.Tool, op.ExternalRef, got[0].ID)
			}
		case StateFailed, StateReady, StateRejected, StateAwaitingApproval, StateCancelled:
			switch op.State {
			case StateFailed:
				r.Failed++
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
