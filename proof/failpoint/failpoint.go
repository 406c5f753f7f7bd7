// Package failpoint lets tests crash or stall an opledger process at named
// points ("after the downstream answered, before the ledger update"). It
// exists only in binaries built with `-tags failpoints`: in every other
// build Inject is an empty function the compiler removes.
//
// A failpoints build reads OPLEDGER_FAILPOINTS at start, a comma-separated
// list of NAME=ACTION, where ACTION is `kill` (SIGKILL this process),
// `sleep(DURATION)`, `panic` or `stop` (SIGSTOP this process: it stays
// stopped until someone sends SIGCONT), optionally prefixed by `N*` to fire on the
// first N hits only, e.g. "after-downstream=1*kill", or by `pP*` to fire
// on each hit with probability P, e.g. "after-commit=p0.01*kill".
// OPLEDGER_UNSAFE_FRESH_DOWNSTREAM_KEY=1 switches deduplication off (see
// FreshDownstreamKeys), and OPLEDGER_UNSAFE_DEFECTS (a comma-separated list
// of the Defect* names) re-introduces fixed defects (see Defect): the chaos
// suite's control runs prove with them that its checker catches each one.
//
// The product imports none of this. Install puts the points and the
// switches into a service as decorators (the ledger's hooks and statements,
// the executor registry) when the chaos binary wires it (cmd/opledger's
// faults.go, built only with the tag) or the test harness does.
package failpoint

// The named points.
const (
	// AfterPrepare: the operation row is committed, Prepare has not answered.
	AfterPrepare = "after-prepare"
	// BeforeDownstream: the claim is committed, no request was sent.
	BeforeDownstream = "before-downstream"
	// AfterDownstream: the downstream answered, the outcome is not recorded.
	// Hit under this name, then under AfterDownstream + "/" + the tool's
	// name.
	AfterDownstream = "after-downstream"
	// AfterCommit: the outcome is recorded, Execute has not answered.
	AfterCommit = "after-commit"
	// BeforeFirstSend: the claim is committed and no request of the
	// operation was ever sent, so the approval bounds when this one may
	// start; the executor has not checked that bound yet. Hit only by such
	// first sends, under the name BeforeFirstSend + "/" + the tool's name
	// (e.g. "before-first-send/pay_invoice").
	BeforeFirstSend = "before-first-send"
)

// The defects Defect can re-introduce, each one fixed in issue 11 (the
// policy's in issue 33, the budgets' and
// the identity's in issue 34); the chaos suite's control runs name them.
const (
	// DefectRedirectFailed: the HTTP executor classifies a 3xx as a
	// definitive refusal (FAILED), although the downstream may have acted.
	DefectRedirectFailed = "redirect-failed"
	// DefectRefusalOverrides: a refusal after an earlier ambiguous send of
	// the same operation is FAILED (within one call and across calls).
	DefectRefusalOverrides = "refusal-overrides"
	// DefectApprovalClaim: the first claim consumes the approval, so an
	// operation claimed and released with nothing sent is claimed and sent
	// after its approval ended.
	DefectApprovalClaim = "approval-claim"
	// DefectServerClock: the executor judges the approval's end and its
	// lease by reading the database's timestamps on its own clock.
	DefectServerClock = "server-clock"
	// DefectTakeoverNoDedupe: an expired lease is taken over (and the
	// operation sent again) even where the downstream does not dedupe keys.
	DefectTakeoverNoDedupe = "takeover-nodedupe"
	// DefectPolicyClaim: the claim ignores the policy digest, as if the
	// policy decided only at Prepare (issue 33): an operation prepared
	// under a weaker policy is sent without what the one in force demands.
	DefectPolicyClaim = "policy-claim"
	// DefectBudgetRead: a budget's reservation done as a read in Go before
	// the insert (issue 34): the Prepare reads the budget's uses, decides
	// in Go whether its share fits, and then appends it unconditionally, so
	// concurrent Prepares that all read room before any commits are all
	// admitted.
	DefectBudgetRead = "budget-read"
	// DefectIdentitySelect: a business identity checked by a SELECT and then
	// taken unconditionally (issue 34), so concurrent Prepares of one
	// invoice under different keys that all find it free all take it.
	DefectIdentitySelect = "identity-select"
)
