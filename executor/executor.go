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
	"slices"
	"strings"
	"time"
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
	// SendBy, when set, is the last instant (on this process's clock) at
	// which a request of this call may start while nothing has been sent
	// yet: an approval bounds when the first send may start. Past it, an
	// executor reports OutcomeNotSubmitted without sending. The HTTP
	// executor checks it before it asks for a connection and, with the
	// built-in transport (Direct), again once it holds one, just before it
	// writes, since setting a connection up can outlast the approval; a
	// custom http.Client's transport, or a proxy (Direct's Fallback), is
	// checked only before.
	SendBy time.Time
}

// Result is what an execution produced.
type Result struct {
	Outcome Outcome
	// ExternalRef is the downstream's identifier of the side effect (e.g. a charge id), if any.
	ExternalRef string
	// Body is the downstream's answer as a JSON object, bounded in size (see Object for how an
	// answer that is not an object becomes one); nil when the answer was empty.
	Body json.RawMessage
	// HTTPStatus is the status of the last answer received; 0 when none came.
	HTTPStatus int
	// Detail is a human-readable reason, free of secrets and keys.
	Detail string
	// Attempts counts the requests sent (possibly) to the downstream; 0 when nothing was sent.
	Attempts int
	// ApprovalEnded: nothing was sent because Call.SendBy passed first (OutcomeNotSubmitted).
	ApprovalEnded bool
}

// Executor performs calls. Implementations must be safe for concurrent use and must respect
// ctx and SendBy: a call cancelled, past its deadline or past SendBy before anything was sent
// reports OutcomeNotSubmitted and sends nothing, with ApprovalEnded set when SendBy was the
// reason (the ledger then refuses the lapsed approval instead of calling the downstream
// unreachable).
type Executor interface {
	Send(ctx context.Context, c Call) Result
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
	// when the downstream reports the side effect as failed; ExternalRef and Body as for Send.
	// Any other Outcome (found, no outcome yet) is read as LookupInconclusive.
	Result Result
	// Detail is a human-readable reason, free of secrets and keys.
	Detail string
	// HTTPStatus is the status of the lookup's answer; 0 when none came (or the executor is not
	// HTTP). What a status proves is in Status: this is for diagnosis and for `opledger probe`,
	// which checks what the downstream answers against what its tool declares.
	HTTPStatus int
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

// Classification says which of a downstream's answers are definitive. Anything it does not
// declare is an unknown outcome (for a send) or inconclusive (for a lookup): a status or a body
// the executor does not understand never counts as success, and never as a refusal.
type Classification struct {
	// DefinitiveStatuses lists the HTTP statuses (400–599) that prove the downstream refused the
	// request and performed nothing. Nil means every 4xx except 408, 409, 425 and 429; an empty
	// list (a tools file's "definitive_statuses: []") means none: every refusal is then an
	// unknown outcome. A 3xx is never definitive: the request may already have been acted on.
	DefinitiveStatuses []int
	// LookupStatusField is the dot path of the status in a lookup's 200 answer; "status" when
	// empty.
	LookupStatusField string
	// LookupSucceeded, LookupFailed and LookupPending list the values of that field that mean
	// the side effect happened, was refused, or is not final yet (matched case-insensitively).
	// Defaults when all three are empty: succeeded; failed, canceled, cancelled, declined,
	// rejected; pending, processing, requires_action. Any other value is inconclusive.
	LookupSucceeded, LookupFailed, LookupPending []string
}

// withDefaults returns c with the documented defaults filled in.
func (c Classification) withDefaults() Classification {
	if c.LookupStatusField == "" {
		c.LookupStatusField = "status"
	}
	if len(c.LookupSucceeded)+len(c.LookupFailed)+len(c.LookupPending) == 0 {
		c.LookupSucceeded = []string{"succeeded"}
		c.LookupFailed = []string{"failed", "canceled", "cancelled", "declined", "rejected"}
		c.LookupPending = []string{"pending", "processing", "requires_action"}
	}
	return c
}

// Definitive reports whether an answer with HTTP status code proves that the downstream
// refused the request and performed nothing.
func (c Classification) Definitive(code int) bool {
	if c.DefinitiveStatuses != nil {
		return slices.Contains(c.DefinitiveStatuses, code)
	}
	switch code {
	case 408, 409, 425, 429:
		return false
	}
	return code >= 400 && code < 500
}

// Validate checks the declared statuses and values.
func (c Classification) Validate() error {
	for _, code := range c.DefinitiveStatuses {
		if code < 400 || code > 599 {
			return fmt.Errorf("definitive_statuses: %d is not a 4xx or 5xx status (a 2xx is a success, and a 3xx may follow an effect)", code)
		}
	}
	seen := map[string]string{}
	for _, l := range []struct {
		name string
		vals []string
	}{{"lookup_succeeded", c.LookupSucceeded}, {"lookup_failed", c.LookupFailed}, {"lookup_pending", c.LookupPending}} {
		name := l.name
		for _, v := range l.vals {
			k := strings.ToLower(v)
			if k == "" {
				return fmt.Errorf("%s: empty value", name)
			}
			if prev, dup := seen[k]; dup && prev != name {
				return fmt.Errorf("%s: %q is also listed in %s", name, v, prev)
			}
			seen[k] = name
		}
	}
	return nil
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
