// Package executor is how opledger calls downstreams: it sends one approved operation to the
// system that performs the side effect, and classifies what happened truthfully enough for the
// ledger to promise at most one side effect per operation.
//
// The central distinction is whether the request may have reached the downstream. An outcome of
// OutcomeNotSubmitted promises that nothing was sent, so the ledger may submit again later;
// OutcomeUnknown admits that something was sent and no definitive answer came back, so only a
// lookup (Looker) or a retry under the same key at a downstream that dedupes keys can resolve it.
//
// The built-in executor is HTTP; Go users add their own through a Registry.
package executor

import (
	"context"
	"encoding/json"
	"fmt"
)

// Outcome classifies what happened downstream.
type Outcome int

// The outcomes of an execution.
const (
	// OutcomeSucceeded means the downstream confirmed the side effect.
	OutcomeSucceeded Outcome = iota + 1
	// OutcomeFailed means the downstream definitively refused (e.g. a 4xx): no side effect, and
	// sending the same request again would be refused again.
	OutcomeFailed
	// OutcomeUnknown means the request may have reached the downstream and no definitive answer
	// came back (timeout, reset, 5xx, 409, 429…).
	OutcomeUnknown
	// OutcomeNotSubmitted means nothing was sent: it is safe to submit later.
	OutcomeNotSubmitted
)

// String returns the outcome's name, such as "succeeded".
func (o Outcome) String() string {
	switch o {
	case OutcomeSucceeded:
		return "succeeded"
	case OutcomeFailed:
		return "failed"
	case OutcomeUnknown:
		return "unknown"
	case OutcomeNotSubmitted:
		return "not_submitted"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Call is one operation to perform downstream.
type Call struct {
	Tenant      string
	Tool        string
	ToolVersion string
	OperationID string
	// DownstreamKey is the idempotency key the downstream sees; the same on every attempt of
	// the operation. Executors must never log it raw.
	DownstreamKey string
	// Args is the JSON object sent downstream.
	Args json.RawMessage
}

// Result is what an execution produced.
type Result struct {
	Outcome Outcome
	// ExternalRef is the downstream's identifier of the side effect (e.g. a charge id), if any.
	ExternalRef string
	// Body is the downstream's JSON answer, bounded in size; a body that is not JSON (or too
	// large) is wrapped as {"raw": "...", "truncated": bool}.
	Body json.RawMessage
	// HTTPStatus is the status of the last answer received; 0 when none came.
	HTTPStatus int
	// Detail is a human-readable reason, free of secrets and keys.
	Detail string
	// Attempts counts the requests sent (possibly) to the downstream; 0 when nothing was sent.
	Attempts int
}

// Executor performs calls. Implementations must be safe for concurrent use and must respect
// ctx: a call cancelled before anything was sent reports OutcomeNotSubmitted.
type Executor interface {
	Execute(ctx context.Context, c Call) Result
}

// LookupStatus is what a lookup by downstream key established.
type LookupStatus int

// The statuses of a lookup.
const (
	// LookupFound means the downstream has a side effect under the key; Result says which.
	LookupFound LookupStatus = iota + 1
	// LookupNotFound means the downstream trustworthily has nothing under the key: submitting
	// again with the same key is safe.
	LookupNotFound
	// LookupInconclusive means the lookup proves nothing either way.
	LookupInconclusive
)

// String returns the status's name, such as "found".
func (s LookupStatus) String() string {
	switch s {
	case LookupFound:
		return "found"
	case LookupNotFound:
		return "not_found"
	case LookupInconclusive:
		return "inconclusive"
	}
	return fmt.Sprintf("LookupStatus(%d)", int(s))
}

// LookupResult is what a lookup found.
type LookupResult struct {
	Status LookupStatus
	// Result is set when Status is LookupFound: Outcome is OutcomeSucceeded, or OutcomeFailed
	// when the downstream reports the side effect as failed; ExternalRef and Body as for Execute.
	Result Result
	// Detail is a human-readable reason, free of secrets and keys.
	Detail string
}

// Looker is the optional capability of looking a call up by its downstream key, used to
// reconcile an unknown outcome.
type Looker interface {
	Lookup(ctx context.Context, c Call) LookupResult
}

// Capabilities describe what a downstream guarantees; the ledger's safety decisions (retrying,
// taking over an expired lease, trusting a not-found) depend on them.
type Capabilities struct {
	// DedupesKeys: a second request with the same key never causes a second side effect.
	DedupesKeys bool
	// HasLookup: the executor implements Looker.
	HasLookup bool
	// LookupConsistent: a lookup's not-found is trustworthy (no replication lag).
	LookupConsistent bool
}

// CapabilityReporter is implemented by executors that know their downstream's capabilities.
type CapabilityReporter interface {
	Capabilities() Capabilities
}

// CapabilitiesOf returns e's capabilities. An executor that does not report them is assumed to
// dedupe nothing and to have an inconsistent lookup if it has one at all: the safe assumptions.
func CapabilitiesOf(e Executor) Capabilities {
	if r, ok := e.(CapabilityReporter); ok {
		return r.Capabilities()
	}
	_, hasLookup := e.(Looker)
	return Capabilities{HasLookup: hasLookup}
}
