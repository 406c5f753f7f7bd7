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

// Approval is a tool's approval rule (see Policy for the deny rules).
type Approval struct {
	// Required means every operation must be approved before it may
	// execute.
	Required bool
	// When, if set, is a CEL expression: an operation needs approval only
	// when it holds (exclusive with Required).
	When string
	// Approvers is how many distinct approvers must approve (the quorum);
	// 0 when neither Required nor When is set, else 1 to MaxApprovers. With
	// ApproversExpr it is the most the expression may yield.
	Approvers int
	// ApproversExpr, if set, is a CEL expression yielding the quorum for
	// one call (e.g. `args.amount_minor > 100000 ? 2 : 1`).
	ApproversExpr string
	// TTL is how long an approval stays valid, counted from the last
	// approval of the quorum; > 0 when Required or When.
	TTL time.Duration
	// Editable lists the args fields an approver may change
	// (ApproveRequest.edited_args).
	Editable []string
}

// MayRequire reports whether some call of the tool needs an approval.
func (a Approval) MayRequire() bool { return a.Required || a.When != "" }

// ExecutorConfig says how a tool is performed: the executor settings the
// tools file declares (see executor.Settings, which documents each field and
// its default). Zero values stand for the defaults; read them through
// executor.Settings.WithDefaults.
type ExecutorConfig = executor.Settings

// Tool is one version of a declared tool.
type Tool struct {
	// Name is the tool name, NamePattern.
	Name string
	// Version is the tool version, [A-Za-z0-9._-]{1,32}.
	Version string
	// Description is for people and models.
	Description string
	// Effect is what a call does to the world.
	Effect Effect
	// Approval is the approval rule.
	Approval Approval
	// Policy is the rest of the tool's rules and its digest.
	Policy Policy
	// Identity, if set, is the tool's business identity.
	Identity *Identity
	// Limits are the tools file's limits this tool's operations count
	// against, in declaration order.
	Limits []*Limit
	// ArgsSchema is the JSON Schema of the args, as JSON.
	ArgsSchema json.RawMessage
	// Executor says how the tool is performed.
	Executor ExecutorConfig

	schema *jsonschema.Schema
	// quick checks the args the schema's simple part accepts without the
	// library (quick.go); nil for schemas outside that part.
	quick *quickSchema
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
	limits []*Limit
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

// NamePattern is the form of a tool name.
const NamePattern = `^[a-z][a-z0-9_]{0,63}$`

// ValidName reports whether name has NamePattern's form. Every Prepare
// checks its tool's name, so it is written out: a regular expression costs
// ten times as much (docs/performance.md, finding 29).
func ValidName(name string) bool {
	if len(name) == 0 || len(name) > 64 || name[0] < 'a' || name[0] > 'z' {
		return false
	}
	for i := 1; i < len(name); i++ {
		if c := name[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}
