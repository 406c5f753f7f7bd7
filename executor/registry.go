package executor

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"
)

// TypeHTTP is the type name of the built-in HTTP executor.
const TypeHTTP = "http"

// Settings are a tool's executor settings, as its tools file declares them: the one shape the
// tools file, the ledger and every executor share. The HTTP executor reads them as HTTPConfig;
// custom executors read the fields that mean something to them and may carry anything else in
// Extra.
type Settings struct {
	// Tool is the name of the tool the executor serves, for errors and logs.
	Tool string
	// Type names the executor ("http" is built in; other names are registered in Go).
	Type string
	// URL receives the call's args as a JSON POST.
	URL string
	// LookupURL, optional, finds a side effect by downstream key with a GET; "{key}" in it is
	// replaced by the query-escaped key, e.g. "http://pay/charges?idempotency_key={key}".
	LookupURL string
	// Timeout bounds each attempt; DefaultTimeout when 0.
	Timeout time.Duration
	// DedupesKeys declares that the downstream never performs two side effects for one
	// Idempotency-Key. Only then does the executor retry, or the ledger take over an expired
	// lease or resubmit after a lookup found nothing.
	DedupesKeys bool
	// LookupConsistent declares that a 404 from LookupURL proves there is no side effect.
	LookupConsistent bool
	// ExternalRefField is the dot path ("id", "data.charge.id") of the external reference in a
	// success answer; none is extracted when empty.
	ExternalRefField string
	// MaxAttempts bounds the attempts of one Send when DedupesKeys (DefaultMaxAttempts when
	// 0); without DedupesKeys there is always exactly one.
	MaxAttempts int
	// KeyRetention is how long the downstream remembers an idempotency key (Stripe: 24h); zero
	// means it never forgets. Past it the same key no longer dedupes, so the ledger stops
	// trusting a lookup miss, a lease takeover or a resubmission for an operation first sent
	// that long ago.
	KeyRetention time.Duration
	// Headers are added to every request (e.g. Authorization). They cannot replace
	// Content-Type or Idempotency-Key. Their values are never logged.
	Headers map[string]string
	// WebhookSecret, when set, accepts signed completion events for the tool at
	// POST /webhooks/{tool}.
	WebhookSecret string
	// MaxBodyBytes bounds the answer kept in Result.Body; DefaultMaxBodyBytes when 0.
	MaxBodyBytes int64
	// BackoffBase and BackoffMax shape the exponential backoff with full jitter between
	// attempts; DefaultBackoffBase and DefaultBackoffMax when 0.
	BackoffBase, BackoffMax time.Duration
	// Classification declares which answers are definitive.
	Classification
	// Reclassify, when set, is given the outcome the HTTP executor classified each attempt's
	// answer as, and returns the one it acts on: whether it retries, the refusal rule, what it
	// reports. It is set in Go, never by a tools file: a seam for fault injection, through which
	// the chaos build (proof/failpoint) puts a fixed misclassification back for its control
	// runs. Nil: the classification stands.
	Reclassify func(Result) Result
	// Extra holds settings that only a custom executor understands.
	Extra map[string]any
}

// WithDefaults returns s with every zero value that has a default replaced by it (the defaults
// are documented on each field), so that everyone reading the settings (the executor, the
// ledger's lease) sees the same values.
func (s Settings) WithDefaults() Settings {
	if s.Timeout == 0 {
		s.Timeout = DefaultTimeout
	}
	if s.MaxBodyBytes == 0 {
		s.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if s.BackoffBase == 0 {
		s.BackoffBase = DefaultBackoffBase
	}
	if s.BackoffMax == 0 {
		s.BackoffMax = DefaultBackoffMax
	}
	switch {
	case !s.DedupesKeys:
		s.MaxAttempts = 1
	case s.MaxAttempts == 0:
		s.MaxAttempts = DefaultMaxAttempts
	}
	s.Classification = s.Classification.withDefaults()
	return s
}

// Factory builds an executor from its settings.
type Factory func(settings Settings) (Executor, error)

// Registry maps executor type names to factories. It is a value that the program builds and
// passes around, not a global, so that tests and embedders each have their own. It is safe for
// concurrent use.
type Registry struct {
	mu        sync.RWMutex
	factories map[string]Factory
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{factories: map[string]Factory{}}
}

// NewDefaultRegistry returns a registry holding the built-in executors: "http", built with
// client and logger (either may be nil; see NewHTTP).
func NewDefaultRegistry(client *http.Client, logger *slog.Logger) *Registry {
	r := NewRegistry()
	if err := r.Register(TypeHTTP, HTTPFactory(client, logger)); err != nil {
		panic(err) // cannot happen: the registry is new
	}
	return r
}

// HTTPFactory returns a Factory of HTTP executors that share client and logger.
func HTTPFactory(client *http.Client, logger *slog.Logger) Factory {
	return func(s Settings) (Executor, error) {
		log := logger
		if log != nil && s.Tool != "" {
			log = log.With("tool", s.Tool)
		}
		return NewHTTP(s, client, log)
	}
}

// Register adds a factory under typeName. Registering a name twice is an error, so that a
// plug-in cannot silently replace a built-in executor.
func (r *Registry) Register(typeName string, f Factory) error {
	if typeName == "" {
		return errors.New("executor: empty type name")
	}
	if f == nil {
		return fmt.Errorf("executor: nil factory for type %q", typeName)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.factories[typeName]; dup {
		return fmt.Errorf("executor: type %q is already registered", typeName)
	}
	r.factories[typeName] = f
	return nil
}

// New builds an executor of type typeName from s.
func (r *Registry) New(typeName string, s Settings) (Executor, error) {
	r.mu.RLock()
	f := r.factories[typeName]
	r.mu.RUnlock()
	if f == nil {
		return nil, fmt.Errorf("executor: unknown type %q (known: %v)", typeName, r.Types())
	}
	e, err := f(s)
	if err != nil {
		return nil, fmt.Errorf("executor %q for tool %q: %w", typeName, s.Tool, err)
	}
	if e == nil {
		return nil, fmt.Errorf("executor %q for tool %q: factory returned nil", typeName, s.Tool)
	}
	return e, nil
}

// Types returns the registered type names, sorted.
func (r *Registry) Types() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.factories))
	for n := range r.factories {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
