package chaos

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/opledger/opledger/proof/failpoint"
	"github.com/opledger/opledger/proof/fakepay"
)

// Control is one control run: a defect the ledger once had (or, for
// "dedupe", the deduplication it relies on) put back into the servers,
// with the faults that stage it, and the violation kind the checker must
// then report. A checker that finds nothing then proves nothing.
type Control struct {
	// Name is what --control names.
	Name string
	// Defect is OPLEDGER_UNSAFE_DEFECTS for the servers (failpoint.Defect*).
	Defect string
	// FreshKeys sets OPLEDGER_UNSAFE_FRESH_DOWNSTREAM_KEY=1: a new
	// downstream key per claim.
	FreshKeys bool
	// Faults adds to a processor's faults for the whole run.
	Faults func(processor string, f *fakepay.Faults)
	// Focus are fault kinds the nemesis draws half of the time after the
	// forced round, so that a short run stages the defect often.
	Focus []string
	// ClockOffset is where the database's clock starts, relative to the
	// servers' (default clockStart).
	ClockOffset time.Duration
	// FailpointRates override --failpoint-rate for some points.
	FailpointRates map[string]float64
	// StallPoint, when set, is where fp-stall-first-send stops a server in
	// this control, instead of stallPoint.
	StallPoint string
	// StallExtra lengthens each fp-stall-first-send stop by this much past
	// the lease's end, so that an Execute finds the expired lease while the
	// stopped server still holds its request (a takeover's window).
	StallExtra time.Duration
	// Env is added to the servers' environment.
	Env []string
	// BurstRate, when set, is the share of the workload's picks that start
	// a burst on a budget or an identity (default burstRate), so that a
	// short run stages the defect often.
	BurstRate float64
	// Expect is the violation kind the checker must report.
	Expect string
	// What says in a few words what the run re-introduces.
	What string
}

// Controls are the control runs, by name; DefaultControl is what a bare
// --control runs.
var Controls = map[string]Control{
	"dedupe": {
		// The processors keep deduplicating keys: a processor that ignored
		// them would make a correct ledger's resubmissions under the same
		// key duplicates too, and the control would pass without its
		// defect (--without-defect shows it does not).
		Name: "dedupe", FreshKeys: true,
		// A server killed after the charge leaves it for another claim,
		// whose new key the processor takes for a new charge.
		Focus:  []string{"fp-after-downstream", "kill"},
		Expect: ViolationDuplicate,
		What:   "a new downstream key per claim, so a takeover's or a retry's send is a new charge",
	},
	failpoint.DefectRedirectFailed: {
		Name: failpoint.DefectRedirectFailed, Defect: failpoint.DefectRedirectFailed,
		Faults: func(_ string, f *fakepay.Faults) { f.RedirectAfterCommit = fakepay.Trigger{Rate: 0.15} },
		Focus:  []string{"proc-redirect"},
		Expect: ViolationFalseFailed,
		What:   "a 3xx after the request was sent classified as a definitive refusal (FAILED)",
	},
	failpoint.DefectRefusalOverrides: {
		Name: failpoint.DefectRefusalOverrides, Defect: failpoint.DefectRefusalOverrides,
		Faults: func(p string, f *fakepay.Faults) {
			if p == "pay" || p == "ret" {
				f.FailAfterCommit = fakepay.Trigger{Rate: 0.15}
				f.RefuseReplay = fakepay.Trigger{Rate: 1}
			}
		},
		Focus:  []string{"proc-refuse-replay", "proc-lookup-lag"},
		Expect: ViolationFalseFailed,
		What:   "a refusal after an earlier ambiguous send of the same operation recorded as FAILED",
	},
	failpoint.DefectApprovalClaim: {
		Name: failpoint.DefectApprovalClaim, Defect: failpoint.DefectApprovalClaim,
		Focus:  []string{"net-proc-refuse"},
		Expect: ViolationUnapproved,
		What:   "the approval consumed by the first claim, not by the first send",
	},
	failpoint.DefectServerClock: {
		Name: failpoint.DefectServerClock, Defect: failpoint.DefectServerClock,
		// The database's clock ahead of the servers': its timestamps read on
		// a server's clock then allow a first send long after the approval
		// ended (with it behind, the same defect sends nothing at all).
		ClockOffset: 90 * time.Second,
		Focus:       []string{"fp-stall-first-send"},
		Expect:      ViolationUnapproved,
		What:        "the approval's end and the lease judged by reading the database's timestamps on the server's clock",
	},
	failpoint.DefectTakeoverNoDedupe: {
		Name: failpoint.DefectTakeoverNoDedupe, Defect: failpoint.DefectTakeoverNoDedupe,
		// A server stopped (or killed) right after the downstream answered
		// leaves its operation EXECUTING with a request sent, past its
		// lease: what a takeover then sends again. pay_direct's processor
		// never dedupes.
		StallPoint: "after-downstream/" + ToolPayDirect,
		// A stop of the lease plus 1–3 s left a window an agent's Execute
		// missed twice in one CI run (no resend at all); 4 s more widens it.
		StallExtra: 4 * time.Second,
		// The reconcilers would otherwise often find the expired lease
		// before an Execute does, and record OUTCOME_UNKNOWN.
		Env:            []string{"OPLEDGER_RECONCILE_INTERVAL=10s"},
		FailpointRates: map[string]float64{"after-downstream": 0.01},
		Focus:          []string{"fp-stall-first-send", "stop", "fp-after-downstream"},
		Expect:         ViolationResent,
		What:           "an expired lease taken over, and the operation sent again, where the downstream does not dedupe keys",
	},
	failpoint.DefectPolicyClaim: {
		// The rolling policy change of every run stages it: pay_policy
		// operations prepared under the old policy and executed under the
		// tightened one are sent without its approval, or despite its deny
		// rule.
		Name: failpoint.DefectPolicyClaim, Defect: failpoint.DefectPolicyClaim,
		Expect: ViolationUnapprovedByPolicy,
		What:   "the claim ignoring the policy digest (the policy decided at Prepare only)",
	},
	failpoint.DefectBudgetRead: {
		// The workload's bursts stage it: several concurrent Prepares for
		// one new customer (pay_capped) or on the tenant's budgets
		// (pay_metered, pay_pooled) that all read room before any of them
		// commits.
		Name: failpoint.DefectBudgetRead, Defect: failpoint.DefectBudgetRead,
		BurstRate: 0.3,
		Expect:    ViolationOverspent,
		What:      "the budget's reservation done as a read in Go before the insert (its uses read, the decision made in Go, the share appended unconditionally)",
	},
	failpoint.DefectIdentitySelect: {
		// The workload's pay_once bursts stage it: agents paying one
		// invoice at once under their own keys, who all find it free.
		Name: failpoint.DefectIdentitySelect, Defect: failpoint.DefectIdentitySelect,
		BurstRate: 0.3,
		Expect:    ViolationDuplicateIntent,
		What:      "the business identity checked by a SELECT, then taken unconditionally",
	},
}

// DefaultControl is the control a bare --control runs.
const DefaultControl = "dedupe"

// ControlNames lists the controls in order.
func ControlNames() []string {
	names := make([]string, 0, len(Controls))
	for n := range Controls {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// LookupControl returns the named control ("" for none).
func LookupControl(name string) (*Control, error) {
	if name == "" {
		return nil, nil
	}
	c, ok := Controls[name]
	if !ok {
		return nil, fmt.Errorf("chaos: unknown control %q (known: %s)", name, strings.Join(ControlNames(), ", "))
	}
	return &c, nil
}

// count is how many violations of the control's kind r holds.
func (c *Control) count(r CheckResult) int { return r.CountOf(c.Expect) }
