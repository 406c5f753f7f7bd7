package tool

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"
	"google.golang.org/protobuf/types/known/structpb"
)

// The bounds of a policy. A rule is evaluated on every Prepare of its tool
// (and again at the claim after a policy change), so its cost is bounded at
// run time; its text and the quorum are bounded when the file loads.
const (
	// RuleCostLimit is the CEL cost (roughly: operations, with comprehensions
	// counted per element) one rule may spend on one call; past it the call
	// is refused, never allowed.
	RuleCostLimit = 10_000
	// maxRuleBytes bounds the text of one CEL expression.
	maxRuleBytes = 4096
	// maxDenyRules bounds a tool version's deny list.
	maxDenyRules = 32
	// MaxApprovers bounds approval.approvers.
	MaxApprovers = 10
)

var ruleNameRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,63}$`)

// Policy is a tool version's rules (docs/policy.md): what is refused, and
// who must approve what. Its rules are CEL, compiled and type-checked when
// the tools file loads.
type Policy struct {
	// Deny is checked in order: the first rule that holds refuses the call.
	Deny []DenyRule
	// Digest is the SHA-256 (hex) of the policy's canonical form (policyForm)
	// with the tool's name and version: Operation.policy_digest. Two tool
	// versions never share one, and any change of a rule changes it.
	Digest string

	approvalWhen, approvers cel.Program
}

// DenyRule refuses a call when When holds.
type DenyRule struct {
	Name, When, Message string

	prg cel.Program
}

// Principal is who a rule sees as the caller: the principal that prepared
// the operation.
type Principal struct {
	ID, Name string
	Roles    []string
}

// RuleInput is what a rule sees: `args`, `tool`, `principal`, `tenant`.
type RuleInput struct {
	Args      *structpb.Struct
	Principal Principal
	Tenant    string

	// vars are the variables the rules see, when Bind computed them.
	vars map[string]any
}

// Bind returns in with the variables t's expressions see computed once, for
// a caller that evaluates several of them on one call (the identity, each
// limit's key and amount): each evaluation then reads the same ones
// instead of converting the args again. The result is for t's expressions
// only.
func (t *Tool) Bind(in RuleInput) RuleInput {
	in.vars = t.ruleVars(in)
	return in
}

// Judgement is what a policy says of one call.
type Judgement struct {
	// Denied is the deny rule that holds, if any.
	Denied *DenyRule
	// Needed is how many distinct approvers must approve; 0 means none.
	Needed int
	// Rule names the rule that demanded approval ("approval.required",
	// "approval.when"), or is empty.
	Rule string
}

// RuleError is a rule that could not be evaluated for one call: a missing
// key, a type mismatch at run time, the cost limit. The call is refused:
// a rule that cannot say no never says yes.
type RuleError struct {
	Rule string
	Err  error
}

func (e *RuleError) Error() string {
	return fmt.Sprintf("policy rule %s could not be evaluated for these args: %v", e.Rule, e.Err)
}

// Judge evaluates t's policy for one call: the deny rules in order, then the
// approval rule.
func (t *Tool) Judge(in RuleInput) (Judgement, error) {
	vars := t.ruleVars(in)
	for i := range t.Policy.Deny {
		r := &t.Policy.Deny[i]
		held, err := evalBool(r.prg, vars)
		if err != nil {
			return Judgement{}, &RuleError{Rule: "deny." + r.Name, Err: err}
		}
		if held {
			return Judgement{Denied: r}, nil
		}
	}
	a := t.Approval
	j := Judgement{}
	switch {
	case a.Required:
		j = Judgement{Needed: a.Approvers, Rule: "approval.required"}
	case t.Policy.approvalWhen != nil:
		held, err := evalBool(t.Policy.approvalWhen, vars)
		if err != nil {
			return Judgement{}, &RuleError{Rule: "approval.when", Err: err}
		}
		if held {
			j = Judgement{Needed: a.Approvers, Rule: "approval.when"}
		}
	}
	if j.Needed > 0 && t.Policy.approvers != nil {
		n, err := evalQuorum(t.Policy.approvers, vars)
		if err != nil {
			return Judgement{}, &RuleError{Rule: "approval.approvers", Err: err}
		}
		j.Needed = n
	}
	return j, nil
}

func evalQuorum(prg cel.Program, vars map[string]any) (int, error) {
	out, _, err := prg.Eval(vars)
	if err != nil {
		return 0, err
	}
	n, ok := out.Value().(int64)
	if !ok {
		return 0, fmt.Errorf("returned %s, not an int", out.Type().TypeName())
	}
	if n < 1 || n > MaxApprovers {
		return 0, fmt.Errorf("yielded %d approvers; a quorum is 1 to %d", n, MaxApprovers)
	}
	return int(n), nil
}

// HasRules reports whether judging a call takes a CEL evaluation (Judge of
// a tool without rules costs nothing).
func (t *Tool) HasRules() bool {
	return len(t.Policy.Deny) > 0 || t.Policy.approvalWhen != nil || t.Policy.approvers != nil
}

func (t *Tool) ruleVars(in RuleInput) map[string]any {
	if in.vars != nil {
		return in.vars
	}
	args := map[string]any{}
	if in.Args != nil {
		for k, v := range in.Args.Fields {
			args[k] = celValue(v)
		}
	}
	roles := in.Principal.Roles
	if roles == nil {
		roles = []string{}
	}
	return map[string]any{
		"args":      args,
		"tool":      map[string]any{"name": t.Name, "version": t.Version},
		"principal": map[string]any{"id": in.Principal.ID, "name": in.Principal.Name, "roles": roles},
		"tenant":    in.Tenant,
	}
}

// celValue is v as a rule sees it: a whole number (within ±2^53, where a
// JSON number is exact) is a CEL int, so `args.amount_minor > 500` and
// `args.amount_minor % 100 == 0` read as written; any other number a double.
func celValue(v *structpb.Value) any {
	switch k := v.GetKind().(type) {
	case *structpb.Value_NumberValue:
		f := k.NumberValue
		if f == math.Trunc(f) && math.Abs(f) <= 1<<53 {
			return int64(f)
		}
		return f
	case *structpb.Value_StructValue:
		m := map[string]any{}
		for key, e := range k.StructValue.GetFields() {
			m[key] = celValue(e)
		}
		return m
	case *structpb.Value_ListValue:
		l := make([]any, len(k.ListValue.GetValues()))
		for i, e := range k.ListValue.GetValues() {
			l[i] = celValue(e)
		}
		return l
	case *structpb.Value_StringValue:
		return k.StringValue
	case *structpb.Value_BoolValue:
		return k.BoolValue
	default:
		return types.NullValue
	}
}

func evalBool(prg cel.Program, vars map[string]any) (bool, error) {
	out, _, err := prg.Eval(vars)
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("returned %s, not a bool", out.Type().TypeName())
	}
	return b, nil
}

// ruleEnv is the CEL environment every rule compiles in. args is a map of
// dynamic values (its fields are checked against the tool's args schema by
// checkFields); tool and principal are maps with fixed keys.
var ruleEnv = func() *cel.Env {
	env, err := cel.NewEnv(
		cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("tool", cel.MapType(cel.StringType, cel.StringType)),
		cel.Variable("principal", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("tenant", cel.StringType),
		cel.CrossTypeNumericComparisons(true),
		cel.ParserExpressionSizeLimit(maxRuleBytes),
	)
	if err != nil {
		panic(err)
	}
	return env
}()

// knownKeys are the keys of the fixed maps a rule sees.
var knownKeys = map[string][]string{
	"tool":      {"name", "version"},
	"principal": {"id", "name", "roles"},
}

// compileRule compiles and type-checks one rule that must yield a bool.
// fields are the args schema's declared properties (nil: any field).
func compileRule(where, src string, fields []string) (cel.Program, error) {
	return compileExpr(where, src, fields, types.BoolType)
}

// compileExpr compiles and type-checks one expression that must yield out.
func compileExpr(where, src string, fields []string, out *types.Type) (cel.Program, error) {
	src = strings.TrimSpace(src)
	if src == "" {
		return nil, fmt.Errorf("%s: empty expression", where)
	}
	if len(src) > maxRuleBytes {
		return nil, fmt.Errorf("%s: expression of %d bytes; at most %d", where, len(src), maxRuleBytes)
	}
	checked, iss := ruleEnv.Compile(src)
	if iss != nil && iss.Err() != nil {
		return nil, fmt.Errorf("%s: %s", where, strings.ReplaceAll(strings.TrimSpace(iss.Err().Error()), "<input>:", "at "))
	}
	if !checked.OutputType().IsExactType(out) {
		hint := ""
		if out == types.BoolType {
			hint = fmt.Sprintf(" (compare it: e.g. `%s == true`)", src)
		} else if out == types.IntType {
			hint = fmt.Sprintf(" (convert it: e.g. `int(%s)`)", src)
		}
		return nil, fmt.Errorf("%s: yields %s, not %s%s", where, checked.OutputType(), out, hint)
	}
	if err := checkFields(checked.NativeRep(), fields); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	prg, err := ruleEnv.Program(checked, cel.CostLimit(RuleCostLimit), cel.InterruptCheckFrequency(100))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return prg, nil
}

// checkFields refuses a rule that names a field the args schema does not
// declare, or a key that tool and principal do not have: such a rule would
// fail (or, under has(), silently never hold) on every call.
func checkFields(a *celast.AST, fields []string) error {
	var bad error
	info := a.SourceInfo()
	celast.PreOrderVisit(a.Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		if bad != nil {
			return
		}
		var operand celast.Expr
		var key string
		switch e.Kind() {
		case celast.SelectKind:
			operand, key = e.AsSelect().Operand(), e.AsSelect().FieldName()
		case celast.CallKind:
			c := e.AsCall()
			if c.FunctionName() != operators.Index || len(c.Args()) != 2 || c.Args()[1].Kind() != celast.LiteralKind {
				return
			}
			s, ok := c.Args()[1].AsLiteral().Value().(string)
			if !ok {
				return
			}
			operand, key = c.Args()[0], s
		default:
			return
		}
		if operand.Kind() != celast.IdentKind {
			return
		}
		name := operand.AsIdent()
		allowed, fixed := knownKeys[name]
		switch {
		case name == "args" && fields != nil:
			allowed = fields
		case !fixed:
			return
		}
		if !slices.Contains(allowed, key) {
			loc := info.GetStartLocation(e.ID())
			bad = fmt.Errorf("at %d:%d: %s has no field %q (it has: %s)", loc.Line(), loc.Column()+1, name, key, strings.Join(allowed, ", "))
		}
	}))
	return bad
}

type denyDoc struct {
	Name    string `yaml:"name"`
	When    string `yaml:"when"`
	Message string `yaml:"message"`
}

// schemaFields lists the top-level properties an args schema declares, or
// nil when it declares none (then a rule may name any field).
func schemaFields(raw json.RawMessage) []string {
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if json.Unmarshal(raw, &s) != nil || len(s.Properties) == 0 {
		return nil
	}
	fields := make([]string, 0, len(s.Properties))
	for k := range s.Properties {
		fields = append(fields, k)
	}
	slices.Sort(fields)
	return fields
}

// buildPolicy compiles a tool's deny rules and approval rule (ad is the
// approval as declared) and computes the digest.
func buildPolicy(t *Tool, deny []denyDoc, ad *approvalDoc) error {
	fields := schemaFields(t.ArgsSchema)
	if len(deny) > maxDenyRules {
		return fmt.Errorf("deny: %d rules; at most %d", len(deny), maxDenyRules)
	}
	seen := map[string]bool{}
	for i, d := range deny {
		where := fmt.Sprintf("deny[%d]", i)
		if !ruleNameRE.MatchString(d.Name) {
			return fmt.Errorf("%s.name: %q does not match %s", where, d.Name, ruleNameRE)
		}
		where = fmt.Sprintf("deny[%d] %s", i, d.Name)
		if seen[d.Name] {
			return fmt.Errorf("%s: duplicate rule name", where)
		}
		seen[d.Name] = true
		prg, err := compileRule(where+".when", d.When, fields)
		if err != nil {
			return err
		}
		msg := strings.TrimSpace(d.Message)
		if msg == "" {
			msg = "refused by the policy's rule " + d.Name
		}
		if len(msg) > 1024 {
			return fmt.Errorf("%s.message: %d bytes; at most 1024", where, len(msg))
		}
		t.Policy.Deny = append(t.Policy.Deny, DenyRule{Name: d.Name, When: strings.TrimSpace(d.When), Message: msg, prg: prg})
	}
	if ad != nil && strings.TrimSpace(ad.When) != "" {
		prg, err := compileRule("approval.when", ad.When, fields)
		if err != nil {
			return err
		}
		t.Policy.approvalWhen = prg
	}
	if t.Approval.ApproversExpr != "" {
		prg, err := compileExpr("approval.approvers", t.Approval.ApproversExpr, fields, types.IntType)
		if err != nil {
			return err
		}
		t.Policy.approvers = prg
	}
	for _, f := range t.Approval.Editable {
		if fields != nil && !slices.Contains(fields, f) {
			return fmt.Errorf("approval.editable: %q is not a property of args_schema (it has: %s)", f, strings.Join(fields, ", "))
		}
	}
	t.Policy.Digest = policyDigest(t)
	return nil
}

// policyForm is the canonical form a policy digest covers: every rule as
// written (trimmed), in order, with the tool's name and version.
type policyForm struct {
	Tool     string     `json:"tool"`
	Version  string     `json:"version"`
	Deny     []denyDoc  `json:"deny"`
	Approval approvalFm `json:"approval"`
}

type approvalFm struct {
	Required      bool     `json:"required"`
	When          string   `json:"when"`
	Approvers     int      `json:"approvers"`
	ApproversExpr string   `json:"approvers_expr"`
	TTLMillis     int64    `json:"ttl_ms"`
	Editable      []string `json:"editable"`
}

func policyDigest(t *Tool) string {
	f := policyForm{Tool: t.Name, Version: t.Version, Deny: []denyDoc{},
		Approval: approvalFm{Required: t.Approval.Required, When: t.Approval.When, Approvers: t.Approval.Approvers, ApproversExpr: t.Approval.ApproversExpr,
			TTLMillis: t.Approval.TTL.Milliseconds(), Editable: append([]string{}, t.Approval.Editable...)}}
	for _, d := range t.Policy.Deny {
		f.Deny = append(f.Deny, denyDoc{Name: d.Name, When: d.When, Message: d.Message})
	}
	b, err := json.Marshal(f)
	if err != nil {
		panic(err) // plain strings, ints and bools
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Summary describes the policy in plain words, for a model's tool
// description and a person reading ListTools.
func (t *Tool) Summary() string {
	var parts []string
	for _, d := range t.Policy.Deny {
		parts = append(parts, fmt.Sprintf("refused when %s (%s: %s)", d.When, d.Name, d.Message))
	}
	who := "an approver"
	if t.Approval.ApproversExpr != "" {
		who = fmt.Sprintf("as many distinct approvers as %s", t.Approval.ApproversExpr)
	} else if t.Approval.Approvers > 1 {
		who = fmt.Sprintf("%d distinct approvers", t.Approval.Approvers)
	}
	switch {
	case t.Approval.Required:
		parts = append(parts, "every call needs "+who)
	case t.Approval.When != "":
		parts = append(parts, fmt.Sprintf("needs %s when %s", who, t.Approval.When))
	default:
		parts = append(parts, "no approval needed")
	}
	if len(t.Approval.Editable) > 0 {
		parts = append(parts, "an approver may edit "+strings.Join(t.Approval.Editable, ", "))
	}
	return strings.Join(parts, "; ")
}

// errNoApproval is the load error of editable or approvers without an
// approval rule.
var errNoApproval = errors.New("set without approval.required or approval.when")
