package tool

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
)

// Budgets and business identity (docs/policy.md). A limit bounds how much
// the operations of some tools may do within a sliding window; an identity
// makes one business operation (an invoice) one operation whatever the
// idempotency key. The ledger enforces both in PostgreSQL; this file only
// declares and evaluates them.

// Over says what a call past a limit gets.
type Over string

// The answers to a call past a limit.
const (
	// OverRefuse refuses it: LIMIT_EXCEEDED, nothing stored.
	OverRefuse Over = "refuse"
	// OverApprove records it, needing an approval it would not otherwise
	// need.
	OverApprove Over = "approve"
)

// MaxLimitUses bounds the operations one budget (a limit and a `per` key)
// holds within its window: the ledger keeps them on one row.
const MaxLimitUses = 10_000

// Limit is one `limits` entry of the tools file.
type Limit struct {
	// Name names the limit in LIMIT_EXCEEDED and metrics.
	Name string
	// Tools are the tool names whose operations count (any version).
	Tools []string
	// Per, if set, is a CEL string expression: the budget is per its value
	// (within the tenant); Sum, if set, a CEL number expression: the amount
	// an operation takes.
	Per, Sum string
	// Window is the sliding window, on the database's clock.
	Window time.Duration
	// Count bounds the operations in the window (0: no bound); Max bounds
	// the sum (used when Sum is set).
	Count int
	Max   float64
	// Over is what a call past the limit gets.
	Over Over

	per, sum cel.Program
}

// Identity is a tool's business identity: operations of the tool with the
// same Key value are one business operation while one is live or took
// effect within Window.
type Identity struct {
	Key    string
	Window time.Duration

	key cel.Program
}

type limitDoc struct {
	Name   string   `yaml:"name"`
	Tools  []string `yaml:"tools"`
	Per    string   `yaml:"per"`
	Window string   `yaml:"window"`
	Count  *int     `yaml:"count"`
	Sum    string   `yaml:"sum"`
	Max    *float64 `yaml:"max"`
	Over   string   `yaml:"over"`
}

type identityDoc struct {
	Key    string `yaml:"key"`
	Window string `yaml:"window"`
}

func positiveDuration(field, s string) (time.Duration, error) {
	if s == "" {
		return 0, fmt.Errorf("%s: missing (a Go duration, e.g. 24h)", field)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", field, err)
	}
	if d <= 0 {
		return 0, fmt.Errorf("%s: %s is not positive", field, s)
	}
	return d, nil
}

// buildIdentity compiles a tool's identity key, which must yield a string.
func buildIdentity(t *Tool, d *identityDoc) error {
	if d == nil {
		return nil
	}
	w, err := positiveDuration("identity.window", d.Window)
	if err != nil {
		return err
	}
	fields := schemaFields(t.ArgsSchema)
	prg, err := compileTyped("identity.key", d.Key, fields, t.ArgsSchema, types.StringType)
	if err != nil {
		return err
	}
	t.Identity = &Identity{Key: strings.TrimSpace(d.Key), Window: w, key: prg}
	return nil
}

// buildLimits compiles the top-level limits against the tools they name.
func buildLimits(r *Registry, docs []limitDoc) error {
	seen := map[string]bool{}
	for i, d := range docs {
		where := fmt.Sprintf("limits[%d]", i)
		if !ruleNameRE.MatchString(d.Name) {
			return fmt.Errorf("%s.name: %q does not match %s", where, d.Name, ruleNameRE)
		}
		where = fmt.Sprintf("limits[%d] %s", i, d.Name)
		if seen[d.Name] {
			return fmt.Errorf("%s: duplicate limit name", where)
		}
		seen[d.Name] = true
		l := &Limit{Name: d.Name, Per: strings.TrimSpace(d.Per), Sum: strings.TrimSpace(d.Sum), Over: Over(d.Over)}
		if len(d.Tools) == 0 {
			return fmt.Errorf("%s.tools: missing (the tools whose operations count)", where)
		}
		var tools []*Tool
		for _, name := range d.Tools {
			vs := r.byName[name]
			if len(vs) == 0 {
				return fmt.Errorf("%s.tools: no tool named %q is declared", where, name)
			}
			if slices.Contains(l.Tools, name) {
				return fmt.Errorf("%s.tools: %q listed twice", where, name)
			}
			l.Tools = append(l.Tools, name)
			tools = append(tools, vs...)
		}
		var err error
		if l.Window, err = positiveDuration(where+".window", d.Window); err != nil {
			return err
		}
		if d.Count != nil {
			if *d.Count < 1 || *d.Count > MaxLimitUses {
				return fmt.Errorf("%s.count: %d is not between 1 and %d", where, *d.Count, MaxLimitUses)
			}
			l.Count = *d.Count
		}
		switch {
		case l.Sum == "" && d.Max != nil:
			return fmt.Errorf("%s.max: set without sum (the expression whose total it bounds)", where)
		case l.Sum != "" && d.Max == nil:
			return fmt.Errorf("%s.sum: set without max", where)
		case l.Sum != "":
			if math.IsNaN(*d.Max) || math.IsInf(*d.Max, 0) || *d.Max < 0 {
				return fmt.Errorf("%s.max: %v is not a number ≥ 0", where, *d.Max)
			}
			l.Max = *d.Max
		}
		if l.Count == 0 && l.Sum == "" {
			return fmt.Errorf("%s: neither count nor sum: the limit bounds nothing", where)
		}
		switch l.Over {
		case "":
			l.Over = OverRefuse
		case OverRefuse, OverApprove:
		default:
			return fmt.Errorf("%s.over: %q is not refuse or approve", where, d.Over)
		}
		if l.Over == OverApprove {
			for _, t := range tools {
				if t.Approval.TTL == 0 {
					return fmt.Errorf("%s.over: approve, but tool %q version %q declares no approval ttl (approval: {ttl: …} without required or when sets the window an approval lasts)", where, t.Name, t.Version)
				}
			}
		}
		// The expressions must hold for every tool version that counts.
		for _, t := range tools {
			at := fmt.Sprintf("%s (for %s@%s)", where, t.Name, t.Version)
			if l.Per != "" {
				if l.per, err = compileTyped(at+".per", l.Per, schemaFields(t.ArgsSchema), t.ArgsSchema, types.StringType); err != nil {
					return err
				}
			}
			if l.Sum != "" {
				if l.sum, err = compileTyped(at+".sum", l.Sum, schemaFields(t.ArgsSchema), t.ArgsSchema, types.DoubleType); err != nil {
					return err
				}
			}
		}
		r.limits = append(r.limits, l)
		for _, t := range tools {
			t.Limits = append(t.Limits, l)
		}
	}
	return nil
}

// compileTyped compiles an expression that must yield out: a string, or a
// number (out DoubleType: int or double). An expression whose type the
// checker cannot know (dyn: a field of args) is accepted when it is a field
// the args schema types accordingly, or checked when evaluated.
func compileTyped(where, src string, fields []string, schema []byte, out *types.Type) (cel.Program, error) {
	src = strings.TrimSpace(src)
	if src == "" {
		return nil, fmt.Errorf("%s: empty expression", where)
	}
	checked, iss := ruleEnv.Compile(src)
	if iss != nil && iss.Err() != nil {
		return nil, fmt.Errorf("%s: %s", where, strings.ReplaceAll(strings.TrimSpace(iss.Err().Error()), "<input>:", "at "))
	}
	got := checked.OutputType()
	want := "a string"
	ok := got.IsExactType(types.StringType)
	if out == types.DoubleType {
		want = "a number"
		ok = got.IsExactType(types.IntType) || got.IsExactType(types.DoubleType) || got.IsExactType(types.UintType)
	}
	if !ok && got.IsExactType(types.DynType) {
		// A field of args, or a key of principal: its declared type decides.
		if kind := declaredType(checked.NativeRep(), schema); kind != "" {
			switch {
			case out == types.StringType && kind == "string", out == types.DoubleType && (kind == "integer" || kind == "number"):
				ok = true
			default:
				return nil, fmt.Errorf("%s: %s is declared %s, not %s", where, src, kind, want)
			}
		} else {
			ok = true // checked when evaluated
		}
	}
	if !ok {
		return nil, fmt.Errorf("%s: yields %s, not %s", where, got, want)
	}
	if err := checkFields(checked.NativeRep(), fields); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return ruleEnv.Program(checked, cel.CostLimit(RuleCostLimit), cel.InterruptCheckFrequency(100))
}

// declaredType is the JSON Schema type of an expression that is a bare
// `args.field` (or the string keys of principal and tool), or "".
func declaredType(a *celast.AST, schema []byte) string {
	e := a.Expr()
	if e.Kind() != celast.SelectKind || e.AsSelect().Operand().Kind() != celast.IdentKind {
		return ""
	}
	name, field := e.AsSelect().Operand().AsIdent(), e.AsSelect().FieldName()
	switch name {
	case "principal":
		if field == "roles" {
			return "array"
		}
		return "string"
	case "tool":
		return "string"
	case "args":
		return propertyType(schema, field)
	}
	return ""
}

// Evaluation errors of limits and identities name the expression; the
// ledger answers them ARGS_INVALID.
var errNotNumber = errors.New("did not yield a number")

// Amount is what an operation with these args takes of the limit's sum (0
// without a sum).
func (l *Limit) Amount(t *Tool, in RuleInput) (float64, error) {
	if l.sum == nil {
		return 0, nil
	}
	out, _, err := l.sum.Eval(t.ruleVars(in))
	if err != nil {
		return 0, &RuleError{Rule: "limits." + l.Name + ".sum", Err: err}
	}
	var f float64
	switch v := out.Value().(type) {
	case int64:
		f = float64(v)
	case uint64:
		f = float64(v)
	case float64:
		f = v
	default:
		return 0, &RuleError{Rule: "limits." + l.Name + ".sum", Err: fmt.Errorf("%w (%s)", errNotNumber, out.Type().TypeName())}
	}
	if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return 0, &RuleError{Rule: "limits." + l.Name + ".sum", Err: fmt.Errorf("yielded %v; an amount is a number ≥ 0", f)}
	}
	return f, nil
}

// Scope is the limit's `per` key for these args ("" without per).
func (l *Limit) Scope(t *Tool, in RuleInput) (string, error) {
	if l.per == nil {
		return "", nil
	}
	return evalString(l.per, t.ruleVars(in), "limits."+l.Name+".per")
}

// Value is the business identity of a call with these args.
func (id *Identity) Value(t *Tool, in RuleInput) (string, error) {
	return evalString(id.key, t.ruleVars(in), "identity.key")
}

func evalString(prg cel.Program, vars map[string]any, rule string) (string, error) {
	out, _, err := prg.Eval(vars)
	if err != nil {
		return "", &RuleError{Rule: rule, Err: err}
	}
	s, ok := out.Value().(string)
	if !ok {
		return "", &RuleError{Rule: rule, Err: fmt.Errorf("yielded %s, not a string", out.Type().TypeName())}
	}
	if s == "" || len(s) > 255 {
		return "", &RuleError{Rule: rule, Err: fmt.Errorf("yielded a string of %d bytes; 1 to 255", len(s))}
	}
	return s, nil
}

// Limits returns the tools file's limits, in declaration order.
func (r *Registry) Limits() []*Limit { return append([]*Limit(nil), r.limits...) }

// propertyType is the declared JSON Schema type of a top-level property
// ("" when the schema does not say one type).
func propertyType(schema []byte, field string) string {
	var s struct {
		Properties map[string]struct {
			Type any `json:"type"`
		} `json:"properties"`
	}
	if json.Unmarshal(schema, &s) != nil {
		return ""
	}
	t, _ := s.Properties[field].Type.(string)
	return t
}
