package tool

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opledger/opledger/executor"
)

// maxArgsDepth bounds the nesting of args' objects and arrays, counting
// the args object itself as level 1. Args are stored and returned in every
// Get as a google.protobuf.Struct, so they are held to the limit of every
// stored answer (executor.MaxStoredDepth: Java's and Python's protobuf
// runtimes refuse messages nested deeper than 100 levels, and each JSON
// level costs two or three). It also protects the recursive validator from
// values built in Go (a cycle).
const maxArgsDepth = executor.MaxStoredDepth

// ValidateArgs checks args against the tool's schema. args is the JSON
// object as (*structpb.Struct).AsMap returns it (a *structpb.Struct and
// json.RawMessage are accepted too); nil means {}. It returns an *ArgsError
// listing every violation, and never panics.
func (t *Tool) ValidateArgs(args any) (err error) {
	v, verr := normalizeArgs(args)
	if verr != nil {
		return verr
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("tool %s version %s: args validation failed internally: %v", t.Name, t.Version, p)
		}
	}()
	if t.schema == nil {
		return fmt.Errorf("tool %s version %s: no compiled schema (not loaded by Parse)", t.Name, t.Version)
	}
	if t.quick != nil && t.quick.accepts(v) {
		return nil
	}
	err = t.schema.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return fmt.Errorf("tool %s version %s: validating args: %w", t.Name, t.Version, err)
	}
	p := message.NewPrinter(language.English)
	var vs []Violation
	collect(ve, p, &vs)
	if len(vs) == 0 { // cannot happen for a failed validation, but never return an empty error
		vs = append(vs, Violation{Description: ve.ErrorKind.LocalizedString(p)})
	}
	slices.SortStableFunc(vs, func(a, b Violation) int { return strings.Compare(a.Field, b.Field) })
	vs = slices.Compact(vs)
	return &ArgsError{Violations: vs}
}

// collect flattens the error tree into its leaves, splitting "missing
// properties" and "additional properties" into one violation per property
// so that Field points at the property itself.
func collect(e *jsonschema.ValidationError, p *message.Printer, out *[]Violation) {
	if len(e.Causes) > 0 {
		for _, c := range e.Causes {
			collect(c, p, out)
		}
		return
	}
	loc := pointer(e.InstanceLocation)
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		for _, m := range k.Missing {
			*out = append(*out, Violation{Field: loc + "/" + escapeToken(m), Description: "is required"})
		}
	case *kind.AdditionalProperties:
		for _, m := range k.Properties {
			*out = append(*out, Violation{Field: loc + "/" + escapeToken(m), Description: "is not allowed"})
		}
	default:
		*out = append(*out, Violation{Field: loc, Description: describeKind(e.ErrorKind, p)})
	}
}

// describeKind words the common failures for the person reading a gRPC
// error; the library's own wording ("exclusiveMinimum: got 0, want 0") is
// kept for the rest.
func describeKind(k jsonschema.ErrorKind, p *message.Printer) string {
	switch k := k.(type) {
	case *kind.Type:
		return fmt.Sprintf("must be %s, got %s", strings.Join(k.Want, " or "), k.Got)
	case *kind.Minimum:
		return "must be >= " + ratString(k.Want)
	case *kind.Maximum:
		return "must be <= " + ratString(k.Want)
	case *kind.ExclusiveMinimum:
		return "must be > " + ratString(k.Want)
	case *kind.ExclusiveMaximum:
		return "must be < " + ratString(k.Want)
	case *kind.MultipleOf:
		return "must be a multiple of " + ratString(k.Want)
	case *kind.MinLength:
		return fmt.Sprintf("must be at least %d characters long, got %d", k.Want, k.Got)
	case *kind.MaxLength:
		return fmt.Sprintf("must be at most %d characters long, got %d", k.Want, k.Got)
	case *kind.Pattern:
		// The value itself is left out: it may be long, and the caller has it.
		return fmt.Sprintf("must match the pattern %s", k.Want)
	case *kind.Format:
		return fmt.Sprintf("must be a valid %s", k.Want)
	case *kind.MinItems:
		return fmt.Sprintf("must have at least %d items, got %d", k.Want, k.Got)
	case *kind.MaxItems:
		return fmt.Sprintf("must have at most %d items, got %d", k.Want, k.Got)
	default:
		return k.LocalizedString(p)
	}
}

func ratString(r *big.Rat) string {
	if r == nil {
		return "?"
	}
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}

func pointer(tokens []string) string {
	var sb strings.Builder
	for _, t := range tokens {
		sb.WriteByte('/')
		sb.WriteString(escapeToken(t))
	}
	return sb.String()
}

// pointerEscaper escapes JSON Pointer reference tokens (RFC 6901); built
// once, as a Replacer builds its tables on first use.
var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// escapeToken escapes a JSON Pointer reference token (RFC 6901).
func escapeToken(s string) string {
	if !strings.ContainsAny(s, "~/") {
		return s
	}
	return pointerEscaper.Replace(s)
}

// normalizeArgs turns args into the plain JSON values the validator
// understands and reports what it cannot: the validator itself would panic
// on NaN (it turns numbers into big.Rat) and recurse without bound.
func normalizeArgs(args any) (any, error) {
	var v any
	var err *ArgsError
	switch a := args.(type) {
	case nil:
		return map[string]any{}, nil
	case *structpb.Struct:
		if a == nil {
			return map[string]any{}, nil
		}
		v, err = normalizeValue(a, 0)
	case json.RawMessage:
		var d any
		if err := json.Unmarshal(a, &d); err != nil {
			return nil, &ArgsError{Violations: []Violation{{Description: "not valid JSON: " + err.Error()}}}
		}
		if d == nil {
			return map[string]any{}, nil
		}
		v, err = normalizeValue(d, 0)
	default:
		v, err = normalizeValue(args, 0)
	}
	if err != nil {
		return nil, err
	}
	return v, nil
}

// The NUL character (U+0000) is valid JSON in a string but PostgreSQL cannot
// store it in jsonb, where an operation's args live: args holding one are
// refused as invalid, before anything is stored, rather than failing the
// insert.
const (
	nulRefused       = "contains the NUL character (U+0000), which the ledger cannot store"
	nulMemberRefused = "has a member name containing the NUL character (U+0000), which the ledger cannot store"
)

// tooDeep is the violation of an object or array at level maxArgsDepth+1.
func tooDeep() *ArgsError {
	return violation(fmt.Sprintf("nested deeper than %d levels", maxArgsDepth))
}

// normalizeValue returns v as a plain JSON value. depth is the number of
// objects and arrays around v: an object or array at depth maxArgsDepth is
// one level too deep. A violation's Field is built on the way out (under),
// so a valid value costs no path strings.
func normalizeValue(v any, depth int) (any, *ArgsError) {
	switch v.(type) {
	case map[string]any, []any, *structpb.Struct, *structpb.ListValue:
		if depth >= maxArgsDepth {
			return nil, tooDeep()
		}
	}
	switch v := v.(type) {
	case string:
		if strings.IndexByte(v, 0) >= 0 {
			return nil, violation(nulRefused)
		}
		return v, nil
	case nil, bool, json.Number,
		int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return v, nil
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, violation("is not a finite number")
		}
		return v, nil
	case float32:
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return nil, violation("is not a finite number")
		}
		return float64(v), nil
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			if strings.IndexByte(k, 0) >= 0 {
				return nil, violation(nulMemberRefused)
			}
			n, err := normalizeValue(e, depth+1)
			if err != nil {
				return nil, err.under(escapeToken(k))
			}
			out[k] = n
		}
		return out, nil
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			n, err := normalizeValue(e, depth+1)
			if err != nil {
				return nil, err.under(strconv.Itoa(i))
			}
			out[i] = n
		}
		return out, nil
	// protobuf's JSON types are walked directly because AsMap would turn
	// NaN and ±Inf into strings instead of letting us refuse them.
	case *structpb.Struct:
		out := make(map[string]any, len(v.GetFields()))
		for k, e := range v.GetFields() {
			if strings.IndexByte(k, 0) >= 0 {
				return nil, violation(nulMemberRefused)
			}
			n, err := normalizeValue(e, depth+1)
			if err != nil {
				return nil, err.under(escapeToken(k))
			}
			out[k] = n
		}
		return out, nil
	case *structpb.ListValue:
		out := make([]any, len(v.GetValues()))
		for i, e := range v.GetValues() {
			n, err := normalizeValue(e, depth+1)
			if err != nil {
				return nil, err.under(strconv.Itoa(i))
			}
			out[i] = n
		}
		return out, nil
	case *structpb.Value:
		switch k := v.GetKind().(type) {
		case *structpb.Value_NullValue:
			return nil, nil
		case *structpb.Value_BoolValue:
			return k.BoolValue, nil
		case *structpb.Value_NumberValue:
			return normalizeValue(k.NumberValue, depth)
		case *structpb.Value_StringValue:
			return normalizeValue(k.StringValue, depth)
		case *structpb.Value_StructValue:
			return normalizeValue(k.StructValue, depth)
		case *structpb.Value_ListValue:
			return normalizeValue(k.ListValue, depth)
		default:
			return nil, violation("has no value")
		}
	default:
		return nil, violation(fmt.Sprintf("unsupported value of Go type %T", v))
	}
}

// under puts e's violation under the member or element token of the
// container that holds it.
func (e *ArgsError) under(token string) *ArgsError {
	e.Violations[0].Field = "/" + token + e.Violations[0].Field
	return e
}

// violation is one refused value; under gives it its place.
func violation(desc string) *ArgsError {
	return &ArgsError{Violations: []Violation{{Description: desc}}}
}
