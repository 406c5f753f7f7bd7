// Package tool is opledger's tool registry: the tools an agent may call,
// loaded from a YAML file (see docs/tools.md), each with its effect, its
// approval policy, the JSON Schema its arguments must match and the
// executor that performs it.
package tool

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/opledger/opledger/executor"
)

// Effect says what calling a tool does to the world.
type Effect string

// The effects a tool can declare.
const (
	// EffectReadOnly tools change nothing.
	EffectReadOnly Effect = "read_only"
	// EffectIdempotent tools change something, but repeating a call has no
	// further effect.
	EffectIdempotent Effect = "idempotent"
	// EffectSideEffect tools change something on every call (a charge, an
	// e-mail); these are the ones the ledger exists for.
	EffectSideEffect Effect = "side_effect"
)

// Valid reports whether e is one of the known effects.
func (e Effect) Valid() bool {
	switch e {
	case EffectReadOnly, EffectIdempotent, EffectSideEffect:
		return true
	}
	return false
}

// Approval is a tool's approval policy.
type Approval struct {
	// Required means an operation must be approved before it may execute.
	Required bool
	// TTL is how long an approval stays valid; > 0 when Required.
	TTL time.Duration
}

// ExecutorConfig says how a tool is performed. Type "http" is built in;
// other types name executors registered in Go, which read the fields they
// need.
type ExecutorConfig struct {
	// Type names the executor ("http").
	Type string
	// URL is the endpoint the args are POSTed to (http).
	URL string
	// LookupURL, if set, finds the downstream's record by downstream key;
	// "{key}" in it is replaced by the URL-escaped key (http).
	LookupURL string
	// Timeout bounds one attempt; defaults to 10s.
	Timeout time.Duration
	// DedupesKeys means the downstream honours Idempotency-Key: the same key
	// has the same effect at most once, so a retry or a lease takeover with
	// the same key is safe.
	DedupesKeys bool
	// LookupConsistent means a not-found from LookupURL is trustworthy
	// (read-after-write consistent), so the operation may be resubmitted.
	LookupConsistent bool
	// ExternalRefField is the JSON field (dot path, e.g. "data.id") of a 2xx
	// body holding the downstream's reference.
	ExternalRefField string
	// MaxAttempts bounds attempts per Execute for failures of unknown
	// outcome; > 1 only when DedupesKeys. Defaults to 1.
	MaxAttempts int
	// Headers are extra static request headers.
	Headers map[string]string
	// KeyRetention is how long the downstream remembers an idempotency key
	// (Stripe: 24h); zero means it never forgets. Past it, the same key no
	// longer dedupes, so the ledger stops trusting a lookup miss, a lease
	// takeover or a resubmission for an operation first sent that long ago.
	KeyRetention time.Duration
	// WebhookSecret, when set, accepts signed completion events for this
	// tool at POST /webhooks/{tool}; keep it in the environment (${VAR}).
	WebhookSecret string
	// Classification declares which answers are definitive: the statuses
	// that are refusals, and the lookup statuses that settle an outcome.
	executor.Classification
}

// Tool is one version of a declared tool.
type Tool struct {
	// Name is the tool name, [a-z][a-z0-9_]{0,63}.
	Name string
	// Version is the tool version, [A-Za-z0-9._-]{1,32}.
	Version string
	// Description is for people and models.
	Description string
	// Effect is what a call does to the world.
	Effect Effect
	// Approval is the approval policy.
	Approval Approval
	// ArgsSchema is the JSON Schema of the args, as JSON.
	ArgsSchema json.RawMessage
	// Executor says how the tool is performed.
	Executor ExecutorConfig

	schema *jsonschema.Schema
}

// ErrUnknownTool is returned by Lookup for a name no tool has.
var ErrUnknownTool = errors.New("unknown tool")

// ErrUnknownVersion is returned by Lookup for a known tool without the
// requested version.
var ErrUnknownVersion = errors.New("unknown tool version")

// Registry holds the declared tools. It is immutable after loading and safe
// for concurrent use.
type Registry struct {
	// byName keeps each name's versions in declaration order; the last is
	// the current one.
	byName map[string][]*Tool
	list   []*Tool
}

// Lookup returns the tool with the given name and version; version ""
// means the tool's current version (the last one declared under that name).
func (r *Registry) Lookup(name, version string) (*Tool, error) {
	versions := r.byName[name]
	if len(versions) == 0 {
		return nil, fmt.Errorf("%w %q", ErrUnknownTool, name)
	}
	if version == "" {
		return versions[len(versions)-1], nil
	}
	for _, t := range versions {
		if t.Version == version {
			return t, nil
		}
	}
	return nil, fmt.Errorf("%w: tool %q has no version %q", ErrUnknownVersion, name, version)
}

// List returns every tool, sorted by name and then version.
func (r *Registry) List() []*Tool {
	return append([]*Tool(nil), r.list...)
}

// Names describes the configured tool names for a person, sorted and
// comma-separated, at most limit of them and then how many more there are:
// an unknown-tool error can say what would have worked without growing
// with the file.
func (r *Registry) Names(limit int) string {
	var names []string
	for _, t := range r.list {
		if len(names) == 0 || names[len(names)-1] != t.Name {
			names = append(names, t.Name)
		}
	}
	return boundedList(names, limit)
}

// Versions describes a tool's declared versions like Names, in declaration
// order (the last is the current one).
func (r *Registry) Versions(name string, limit int) string {
	var versions []string
	for _, t := range r.byName[name] {
		versions = append(versions, t.Version)
	}
	return boundedList(versions, limit)
}

func boundedList(items []string, limit int) string {
	if len(items) == 0 {
		return "(none)"
	}
	if limit > 0 && len(items) > limit {
		return strings.Join(items[:limit], ", ") + fmt.Sprintf(" and %d more", len(items)-limit)
	}
	return strings.Join(items, ", ")
}

// ArgsError reports args that do not match a tool's schema.
type ArgsError struct {
	// Violations lists what is wrong, one entry per problem.
	Violations []Violation
}

// Violation is one problem with the args.
type Violation struct {
	// Field is a JSON pointer into the args ("/amount_minor"); "" is the
	// args object itself.
	Field string
	// Description says what is wrong, for people.
	Description string
}

// Error joins the violations: "invalid args: /currency: …; /amount_minor: …".
func (e *ArgsError) Error() string {
	var sb strings.Builder
	sb.WriteString("invalid args")
	for i, v := range e.Violations {
		if i == 0 {
			sb.WriteString(": ")
		} else {
			sb.WriteString("; ")
		}
		if v.Field == "" {
			sb.WriteString("(args)")
		} else {
			sb.WriteString(v.Field)
		}
		sb.WriteString(": ")
		sb.WriteString(v.Description)
	}
	return sb.String()
}
