package tool

import (
	"math"
	"math/big"
	"reflect"
	"strconv"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// quickSchema is the part of a tool's args schema that ValidateArgs checks
// without the JSON Schema library, which costs a new tool call more CPU
// than anything else the server does to its args (docs/performance.md,
// finding 35): an object of named properties, each a string, an integer, a
// number or a boolean with at most length, pattern and bound keywords, as
// most tools' schemas are. It only ever accepts. Args it does not accept go
// to the library, whose verdict and wording stand, so a refusal is always
// the library's; and a schema with anything else in it gets no quickSchema.
// TestQuickSchemaAgrees and FuzzQuickSchemaAgrees hold it to the library.
type quickSchema struct {
	props    map[string]quickProp
	required []string
	closed   bool // additionalProperties: false
}

type quickProp struct {
	kind           string // "string", "integer", "number" or "boolean"
	minLen, maxLen int    // -1: none
	pattern        jsonschema.Regexp
	bounds         []quickBound
}

// quickBound is one numeric keyword, with a bound a float64 holds exactly
// and prints as (see quickFloat).
type quickBound struct {
	keyword string
	bound   float64
}

// quickKeywords are the jsonschema.Schema fields a quickSchema may meet
// (besides annotations, which assert nothing); any other field set makes
// the schema the library's alone. The check is by reflection, so a field a
// newer library adds is outside the subset until it is added here.
var quickKeywords = map[string]bool{
	"Types": true, "Required": true, "Properties": true, "AdditionalProperties": true,
	"MinLength": true, "MaxLength": true, "Pattern": true,
	"Minimum": true, "Maximum": true, "ExclusiveMinimum": true, "ExclusiveMaximum": true,
	// Where the schema is and what it is called, and annotations.
	"DraftVersion": true, "Location": true, "ID": true,
	"Title": true, "Description": true, "Default": true, "Comment": true, "ReadOnly": true, "WriteOnly": true,
	"Examples": true, "Deprecated": true,
}

// onlyQuickKeywords reports whether s sets no field outside quickKeywords
// but those of allowed.
func onlyQuickKeywords(s *jsonschema.Schema, allowed ...string) bool {
	ok := map[string]bool{}
	for _, a := range allowed {
		ok[a] = true
	}
	v := reflect.ValueOf(s).Elem()
	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		if !f.IsExported() || v.Field(i).IsZero() {
			continue
		}
		if !quickKeywords[f.Name] {
			return false
		}
		switch f.Name {
		case "DraftVersion", "Location", "ID", "Title", "Description", "Default", "Comment", "ReadOnly", "WriteOnly", "Examples", "Deprecated":
		default:
			if !ok[f.Name] {
				return false
			}
		}
	}
	return true
}

// compileQuick returns s's quickSchema, or nil when s is outside the subset.
func compileQuick(s *jsonschema.Schema) *quickSchema {
	if s == nil || !onlyQuickKeywords(s, "Types", "Required", "Properties", "AdditionalProperties") {
		return nil
	}
	if s.Types != nil && !sameStrings(s.Types.ToStrings(), "object") {
		return nil
	}
	q := &quickSchema{props: map[string]quickProp{}, required: s.Required}
	switch a := s.AdditionalProperties.(type) {
	case nil:
	case bool:
		q.closed = !a
	default:
		return nil
	}
	for name, ps := range s.Properties {
		p, ok := compileQuickProp(ps)
		if !ok {
			return nil
		}
		q.props[name] = p
	}
	return q
}

func compileQuickProp(s *jsonschema.Schema) (quickProp, bool) {
	p := quickProp{minLen: -1, maxLen: -1}
	if s == nil || s.Types == nil {
		return p, false
	}
	types := s.Types.ToStrings()
	if len(types) != 1 {
		return p, false
	}
	p.kind = types[0]
	switch p.kind {
	case "string":
		if !onlyQuickKeywords(s, "Types", "MinLength", "MaxLength", "Pattern") {
			return p, false
		}
		// The library reads a length beyond int64 as its low 64 bits, which
		// may be negative (maxLength 1e19 refuses every string): such a
		// bound is the library's, not "none".
		if (s.MinLength != nil && *s.MinLength < 0) || (s.MaxLength != nil && *s.MaxLength < 0) {
			return p, false
		}
		if s.MinLength != nil {
			p.minLen = *s.MinLength
		}
		if s.MaxLength != nil {
			p.maxLen = *s.MaxLength
		}
		p.pattern = s.Pattern
	case "integer", "number":
		if !onlyQuickKeywords(s, "Types", "Minimum", "Maximum", "ExclusiveMinimum", "ExclusiveMaximum") {
			return p, false
		}
		for _, b := range []struct {
			keyword string
			r       *big.Rat
		}{{"minimum", s.Minimum}, {"maximum", s.Maximum}, {"exclusiveMinimum", s.ExclusiveMinimum}, {"exclusiveMaximum", s.ExclusiveMaximum}} {
			if b.r == nil {
				continue
			}
			f, ok := quickFloat(b.r)
			if !ok {
				return p, false
			}
			p.bounds = append(p.bounds, quickBound{b.keyword, f})
		}
	case "boolean":
		if !onlyQuickKeywords(s, "Types") {
			return p, false
		}
	default:
		return p, false
	}
	return p, true
}

// quickFloat returns r as a float64 when comparing float64 args with it
// answers as the library does. The library compares the decimal a float64
// prints as (fmt's shortest form) with r; a float64 compares with r as
// that decimal does when r is a float64 itself and is the decimal it
// prints as (a decimal rounds to its float, and any other float lies
// outside that float's rounding interval).
func quickFloat(r *big.Rat) (float64, bool) {
	f, exact := r.Float64()
	if !exact || math.IsInf(f, 0) {
		return 0, false
	}
	printed, ok := new(big.Rat).SetString(strconv.FormatFloat(f, 'g', -1, 64))
	return f, ok && printed.Cmp(r) == 0
}

func sameStrings(got []string, want ...string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

// accepts reports whether the library would accept v, a value as
// normalizeArgs returns it, when it can tell at once; false means "ask the
// library", not "invalid".
func (q *quickSchema) accepts(v any) bool {
	m, ok := v.(map[string]any)
	if !ok {
		return false
	}
	for _, r := range q.required {
		if _, ok := m[r]; !ok {
			return false
		}
	}
	for k, e := range m {
		p, ok := q.props[k]
		if !ok {
			if q.closed {
				return false
			}
			continue
		}
		if !p.accepts(e) {
			return false
		}
	}
	return true
}

func (p *quickProp) accepts(v any) bool {
	switch p.kind {
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "string":
		s, ok := v.(string)
		if !ok {
			return false
		}
		if p.minLen >= 0 || p.maxLen >= 0 {
			n := utf8.RuneCountInString(s)
			if (p.minLen >= 0 && n < p.minLen) || (p.maxLen >= 0 && n > p.maxLen) {
				return false
			}
		}
		return p.pattern == nil || p.pattern.MatchString(s)
	}
	f, ok := v.(float64)
	if !ok || math.IsNaN(f) || math.IsInf(f, 0) || (p.kind == "integer" && f != math.Trunc(f)) {
		return false
	}
	for _, b := range p.bounds {
		switch b.keyword {
		case "minimum":
			ok = f >= b.bound
		case "maximum":
			ok = f <= b.bound
		case "exclusiveMinimum":
			ok = f > b.bound
		case "exclusiveMaximum":
			ok = f < b.bound
		}
		if !ok {
			return false
		}
	}
	return true
}
