package fingerprint

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/structpb"
)

// maxDepth bounds the nesting of values Canonicalize accepts. It matches the
// limit of encoding/json and, unlike unbounded recursion, turns a cyclic map
// into an error instead of a fatal stack overflow.
const maxDepth = 10000

// ErrUnsupported reports a value that has no JSON (I-JSON) representation:
// NaN, ±Inf, invalid UTF-8, a Go type outside the JSON data model, a cycle.
var ErrUnsupported = errors.New("fingerprint: value not representable in canonical JSON")

// Canonicalize returns the RFC 8785 (JCS) serialization of v.
//
// v is a JSON value in the shape produced by encoding/json decoding into
// any or by (*structpb.Struct).AsMap: map[string]any, []any, string, float64,
// bool and nil. For convenience it also accepts json.Number, json.RawMessage,
// Go integer and float32 types, and *structpb.Struct/Value/ListValue. Every
// number is converted to an IEEE-754 double first, exactly as it would be on
// the wire inside a google.protobuf.Struct, so an int64 above 2^53 is rounded
// the same way a client's would be. Prefer passing a *structpb.Struct over
// its AsMap: AsMap turns NaN and ±Inf into strings, which would collide with
// real strings, while the Struct itself is rejected.
func Canonicalize(v any) ([]byte, error) {
	return appendValue(make([]byte, 0, 128), v, 0)
}

func appendValue(b []byte, v any, depth int) ([]byte, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("%w: nesting deeper than %d", ErrUnsupported, maxDepth)
	}
	switch v := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case bool:
		if v {
			return append(b, "true"...), nil
		}
		return append(b, "false"...), nil
	case string:
		return appendString(b, v)
	case float64:
		return appendNumber(b, v)
	case map[string]any:
		return appendObject(b, v, depth)
	case []any:
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendValue(b, e, depth+1); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	case json.Number:
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil {
			return nil, fmt.Errorf("%w: number %q: %v", ErrUnsupported, string(v), err)
		}
		return appendNumber(b, f)
	case json.RawMessage:
		parsed, err := decodeRaw(v)
		if err != nil {
			return nil, err
		}
		return appendValue(b, parsed, depth)
	case float32:
		return appendNumber(b, float64(v))
	case int:
		return appendNumber(b, float64(v))
	case int8:
		return appendNumber(b, float64(v))
	case int16:
		return appendNumber(b, float64(v))
	case int32:
		return appendNumber(b, float64(v))
	case int64:
		return appendNumber(b, float64(v))
	case uint:
		return appendNumber(b, float64(v))
	case uint8:
		return appendNumber(b, float64(v))
	case uint16:
		return appendNumber(b, float64(v))
	case uint32:
		return appendNumber(b, float64(v))
	case uint64:
		return appendNumber(b, float64(v))
	case *structpb.Struct:
		return appendStruct(b, v, depth)
	case *structpb.Value:
		return appendStructValue(b, v, depth)
	case *structpb.ListValue:
		return appendListValue(b, v, depth)
	default:
		return nil, fmt.Errorf("%w: Go type %T", ErrUnsupported, v)
	}
}

// appendStruct and friends walk protobuf's JSON types directly instead of
// going through AsMap, which turns NaN and ±Inf into the strings "NaN",
// "Infinity" and "-Infinity" (a silent collision with real strings) and an
// unset Value into null.
func appendStruct(b []byte, s *structpb.Struct, depth int) ([]byte, error) {
	members := make([]member, 0, len(s.GetFields()))
	for k, v := range s.GetFields() {
		members = append(members, member{key: k, value: v})
	}
	return appendMembers(b, members, depth)
}

func appendListValue(b []byte, l *structpb.ListValue, depth int) ([]byte, error) {
	vs := l.GetValues()
	a := make([]any, len(vs))
	for i, v := range vs {
		a[i] = v
	}
	return appendValue(b, a, depth)
}

func appendStructValue(b []byte, v *structpb.Value, depth int) ([]byte, error) {
	switch k := v.GetKind().(type) {
	case *structpb.Value_NullValue:
		return appendValue(b, nil, depth)
	case *structpb.Value_BoolValue:
		return appendValue(b, k.BoolValue, depth)
	case *structpb.Value_NumberValue:
		return appendNumber(b, k.NumberValue)
	case *structpb.Value_StringValue:
		return appendString(b, k.StringValue)
	case *structpb.Value_StructValue:
		return appendStruct(b, k.StructValue, depth)
	case *structpb.Value_ListValue:
		return appendListValue(b, k.ListValue, depth)
	default:
		return nil, fmt.Errorf("%w: google.protobuf.Value with no kind set", ErrUnsupported)
	}
}

// decodeRaw parses JSON text keeping numbers as json.Number so that their
// conversion to float64 happens in one place (appendValue).
func decodeRaw(raw json.RawMessage) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%w: invalid JSON: %v", ErrUnsupported, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: invalid JSON: data after the top-level value", ErrUnsupported)
	}
	return v, nil
}

type member struct {
	key   string
	value any
}

func appendObject(b []byte, m map[string]any, depth int) ([]byte, error) {
	members := make([]member, 0, len(m))
	for k, v := range m {
		members = append(members, member{key: k, value: v})
	}
	return appendMembers(b, members, depth)
}

// appendMembers writes an object's members in RFC 8785's order.
func appendMembers(b []byte, members []member, depth int) ([]byte, error) {
	for _, mem := range members {
		if !utf8.ValidString(mem.key) {
			return nil, fmt.Errorf("%w: object key is not valid UTF-8", ErrUnsupported)
		}
	}
	slices.SortFunc(members, func(a, c member) int { return compareUTF16(a.key, c.key) })
	b = append(b, '{')
	for i, mem := range members {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = appendString(b, mem.key); err != nil {
			return nil, err
		}
		b = append(b, ':')
		if b, err = appendValue(b, mem.value, depth+1); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// CompareUTF16 orders two valid UTF-8 strings as RFC 8785 orders object
// member names (see compareUTF16), for callers that list names in the
// order canonical JSON gives them.
func CompareUTF16(a, b string) int { return compareUTF16(a, b) }

// compareUTF16 orders two valid UTF-8 strings by their UTF-16 code units, as
// RFC 8785 §3.2.3 sorts names. That is Go's byte (= code point) order but
// for a character above U+FFFF against one in U+E000..U+FFFF: the first's
// high surrogate (U+D800..U+DBFF) sorts before the second.
func compareUTF16(a, c string) int {
	for a != "" && c != "" {
		ra, na := utf8.DecodeRuneInString(a)
		rc, nc := utf8.DecodeRuneInString(c)
		if ra != rc {
			return cmp.Compare(utf16Key(ra), utf16Key(rc))
		}
		a, c = a[na:], c[nc:]
	}
	return cmp.Compare(len(a), len(c))
}

// utf16Key maps r to a number in the order of r's UTF-16 code units: a
// character above U+FFFF compares by its high surrogate (U+D800..U+DBFF),
// so after U+0000..U+D7FF and before U+E000..U+FFFF, and among its kind as
// the character itself (valid UTF-8 holds no surrogate).
func utf16Key(r rune) int {
	switch {
	case r < 0xD800:
		return int(r)
	case r >= 0x10000:
		return 0xD800 + int(r-0x10000) // up to 0x10D7FF
	default:
		return int(r) + 0x100000 // U+E000..U+FFFF: from 0x10E000
	}
}

const hexDigits = "0123456789abcdef"

// AppendString appends s as RFC 8785 writes a string, for a caller that
// writes documents of strings alone without building a value to
// Canonicalize (the server's receipts); invalid UTF-8 is ErrUnsupported.
func AppendString(b []byte, s string) ([]byte, error) { return appendString(b, s) }

// appendString escapes like ECMAScript JSON.stringify: only '"', '\\' and
// C0 controls; no HTML escaping, no '/' escaping, U+2028/U+2029 and all
// other non-ASCII characters are written as raw UTF-8.
func appendString(b []byte, s string) ([]byte, error) {
	if !utf8.ValidString(s) {
		return nil, fmt.Errorf("%w: string is not valid UTF-8", ErrUnsupported)
	}
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"':
			b = append(b, '\\', '"')
		case '\\':
			b = append(b, '\\', '\\')
		case '\b':
			b = append(b, '\\', 'b')
		case '\t':
			b = append(b, '\\', 't')
		case '\n':
			b = append(b, '\\', 'n')
		case '\f':
			b = append(b, '\\', 'f')
		case '\r':
			b = append(b, '\\', 'r')
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"'), nil
}

// appendNumber writes f as ECMAScript Number.prototype.toString does
// (ECMA-262 Number::toString, radix 10), which RFC 8785 §3.2.2.3 mandates.
// strconv's shortest formatting yields the same digits (the shortest string
// that round-trips, closest to the exact value); only the layout differs.
func appendNumber(b []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, fmt.Errorf("%w: number %v", ErrUnsupported, f)
	}
	if f == 0 { // also -0
		return append(b, '0'), nil
	}
	if f < 0 {
		b = append(b, '-')
		f = -f
	}
	var buf [32]byte
	e := strconv.AppendFloat(buf[:0], f, 'e', -1, 64) // d[.ddd]e±XX
	ePos := bytes.IndexByte(e, 'e')
	exp, err := strconv.Atoi(string(e[ePos+1:]))
	if err != nil {
		return nil, fmt.Errorf("fingerprint: formatting %v: %w", f, err)
	}
	var digits []byte
	digits = append(digits, e[0])
	if ePos > 1 {
		digits = append(digits, e[2:ePos]...)
	}
	k := len(digits) // number of significant digits
	n := exp + 1     // position of the decimal point relative to the digits
	switch {
	case k <= n && n <= 21:
		b = append(b, digits...)
		for range n - k {
			b = append(b, '0')
		}
	case 0 < n && n <= 21:
		b = append(b, digits[:n]...)
		b = append(b, '.')
		b = append(b, digits[n:]...)
	case -6 < n && n <= 0:
		b = append(b, '0', '.')
		for range -n {
			b = append(b, '0')
		}
		b = append(b, digits...)
	default:
		b = append(b, digits[0])
		if k > 1 {
			b = append(b, '.')
			b = append(b, digits[1:]...)
		}
		b = append(b, 'e')
		if n-1 >= 0 {
			b = append(b, '+')
		}
		b = strconv.AppendInt(b, int64(n-1), 10)
	}
	return b, nil
}
