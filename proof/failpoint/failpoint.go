// Package failpoint lets tests crash or stall an opledger process at named
// points ("after the downstream answered, before the ledger update"). It
// exists only in binaries built with `-tags failpoints`: in every other
// build Inject is an empty function the compiler removes.
//
// A failpoints build reads OPLEDGER_FAILPOINTS at start, a comma-separated
// list of NAME=ACTION, where ACTION is `kill` (SIGKILL this process),
// `sleep(DURATION)` or `panic`, optionally prefixed by `N*` to fire on the
// first N hits only, e.g. "after-downstream=1*kill", or by `pP*` to fire
// on each hit with probability P, e.g. "after-commit=p0.01*kill".
// OPLEDGER_UNSAFE_FRESH_DOWNSTREAM_KEY=1 switches deduplication off (see
// FreshDownstreamKeys).
package failpoint

// The named points.
const (
	// AfterPrepare: the operation row is committed, Prepare has not answered.
	AfterPrepare = "after-prepare"
	// BeforeDownstream: the claim is committed, no request was sent.
	BeforeDownstream = "before-downstream"
	// AfterDownstream: the downstream answered, the outcome is not recorded.
	AfterDownstream = "after-downstream"
	// AfterCommit: the outcome is recorded, Execute has not answered.
	AfterCommit = "after-commit"
)
