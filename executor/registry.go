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

// Settings are an executor's settings as a tools file declares them. Custom executors read the
// fields that mean something to them and may carry anything else in Extra.
type Settings struct {
	// Tool is the name of the tool the executor serves, for errors and logs.
	Tool             string
	URL              string
	LookupURL        string
	Timeout          time.Duration
	DedupesKeys      bool
	LookupConsistent bool
	ExternalRefField string
	MaxAttempts      int
	Headers          map[string]string
	MaxBodyBytes     int64
	BackoffBase      time.Duration
	BackoffMax       time.Duration
	// Classification declares which answers are definitive.
	Classification Classification
	// Extra holds settings that only a custom executor understands.
	Extra map[string]any
}

// HTTPConfig returns the HTTP executor configuration that s describes.
func (s Settings) HTTPConfig() HTTPConfig {
	return HTTPConfig{
		URL:              s.URL,
		LookupURL:        s.LookupURL,
		Timeout:          s.Timeout,
		DedupesKeys:      s.DedupesKeys,
		LookupConsistent: s.LookupConsistent,
		ExternalRefField: s.ExternalRefField,
		MaxAttempts:      s.MaxAttempts,
		Headers:          s.Headers,
		MaxBodyBytes:     s.MaxBodyBytes,
		BackoffBase:      s.BackoffBase,
		BackoffMax:       s.BackoffMax,
		Classification:   s.Classification,
	}
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
		return NewHTTP(s.HTTPConfig(), client, log)
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
