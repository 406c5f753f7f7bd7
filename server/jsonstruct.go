package server

import (
	"errors"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/structpb"
)

// jsonStruct decodes a JSON object into a Struct in one pass over its bytes,
// for a downstream's error body and for an object nested too deep for
// appendStructField, which encodes answers' args and results. protojson's
// reflective decoding would cost four times as much (docs/performance.md).
// It accepts exactly what protojson.Unmarshal accepts for a Struct and
// builds the same message; FuzzJSONStruct checks both against each other.
func jsonStruct(b []byte) (*structpb.Struct, error) {
	d := jsonDecoder{b: b}
	d.space()
	if d.i >= len(d.b) || d.b[d.i] != '{' {
		return nil, errJSON
	}
	s, err := d.object(1)
	if err != nil {
		return nil, err
	}
	d.space()
	if d.i != len(d.b) {
		return nil, errJSON
	}
	return s, nil
}

// errJSON is every decoding failure: stored JSON came through PostgreSQL's
// jsonb, so a failure means a bug, and the caller only needs to know that.
var errJSON = errors.New("server: invalid JSON for a Struct")

// maxJSONDepth is protojson's default recursion limit.
const maxJSONDepth = 10000

type jsonDecoder struct {
	b []byte
	i int
}

func (d *jsonDecoder) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// object decodes an object whose '{' is at d.i.
func (d *jsonDecoder) object(depth int) (*structpb.Struct, error) {
	s := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	more, err := d.enter(depth, '}')
	for more && err == nil {
		d.space()
		if d.i >= len(d.b) || d.b[d.i] != '"' {
			return nil, errJSON
		}
		var k string
		var v *structpb.Value
		if k, err = d.str(); err != nil {
			return nil, err
		}
		if _, dup := s.Fields[k]; dup {
			return nil, errJSON // protojson refuses duplicate map keys
		}
		d.space()
		if d.i >= len(d.b) || d.b[d.i] != ':' {
			return nil, errJSON
		}
		d.i++
		if v, err = d.value(depth); err != nil {
			return nil, err
		}
		s.Fields[k] = v
		more, err = d.next('}')
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// list decodes an array whose '[' is at d.i.
func (d *jsonDecoder) list(depth int) (*structpb.ListValue, error) {
	l := &structpb.ListValue{Values: []*structpb.Value{}}
	more, err := d.enter(depth, ']')
	for more && err == nil {
		var v *structpb.Value
		if v, err = d.value(depth); err != nil {
			return nil, err
		}
		l.Values = append(l.Values, v)
		more, err = d.next(']')
	}
	if err != nil {
		return nil, err
	}
	return l, nil
}

// enter consumes a container's opening byte at d.i and reports whether an
// element follows (false: the closing byte did, and was consumed).
func (d *jsonDecoder) enter(depth int, closing byte) (bool, error) {
	if depth > maxJSONDepth {
		return false, errJSON
	}
	d.i++
	d.space()
	if d.i < len(d.b) && d.b[d.i] == closing {
		d.i++
		return false, nil
	}
	return true, nil
}

// next consumes what follows a container's element: a comma, and another
// element follows, or the closing byte.
func (d *jsonDecoder) next(closing byte) (bool, error) {
	d.space()
	if d.i >= len(d.b) {
		return false, errJSON
	}
	switch d.b[d.i] {
	case ',':
		d.i++
		return true, nil
	case closing:
		d.i++
		return false, nil
	}
	return false, errJSON
}

// value decodes one value inside a container at depth.
func (d *jsonDecoder) value(depth int) (*structpb.Value, error) {
	d.space()
	if d.i >= len(d.b) {
		return nil, errJSON
	}
	switch c := d.b[d.i]; c {
	case '{':
		s, err := d.object(depth + 1)
		if err != nil {
			return nil, err
		}
		return &structpb.Value{Kind: &structpb.Value_StructValue{StructValue: s}}, nil
	case '[':
		l, err := d.list(depth + 1)
		if err != nil {
			return nil, err
		}
		return &structpb.Value{Kind: &structpb.Value_ListValue{ListValue: l}}, nil
	case '"':
		s, err := d.str()
		if err != nil {
			return nil, err
		}
		return &structpb.Value{Kind: &structpb.Value_StringValue{StringValue: s}}, nil
	case 't':
		return d.literal("true", &structpb.Value{Kind: &structpb.Value_BoolValue{BoolValue: true}})
	case 'f':
		return d.literal("false", &structpb.Value{Kind: &structpb.Value_BoolValue{BoolValue: false}})
	case 'n':
		return d.literal("null", &structpb.Value{Kind: &structpb.Value_NullValue{}})
	default:
		f, err := d.number()
		if err != nil {
			return nil, err
		}
		return &structpb.Value{Kind: &structpb.Value_NumberValue{NumberValue: f}}, nil
	}
}

// literal consumes word and returns v. What follows it, as what follows a
// number, is for the enclosing container to accept (a comma, its closing
// byte): "truex" and "1x" fail there, as protojson fails them.
func (d *jsonDecoder) literal(word string, v *structpb.Value) (*structpb.Value, error) {
	if err := d.word(word); err != nil {
		return nil, err
	}
	return v, nil
}

// word consumes word.
func (d *jsonDecoder) word(word string) error {
	end := d.i + len(word)
	if end > len(d.b) || string(d.b[d.i:end]) != word {
		return errJSON
	}
	d.i = end
	return nil
}

// number consumes a JSON number: -?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?
func (d *jsonDecoder) number() (float64, error) {
	start := d.i
	digits := func() int {
		n := 0
		for d.i < len(d.b) && '0' <= d.b[d.i] && d.b[d.i] <= '9' {
			d.i++
			n++
		}
		return n
	}
	if d.i < len(d.b) && d.b[d.i] == '-' {
		d.i++
	}
	if d.i < len(d.b) && d.b[d.i] == '0' {
		d.i++
	} else if digits() == 0 {
		return 0, errJSON
	}
	if d.i < len(d.b) && d.b[d.i] == '.' {
		d.i++
		if digits() == 0 {
			return 0, errJSON
		}
	}
	if d.i < len(d.b) && (d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		d.i++
		if d.i < len(d.b) && (d.b[d.i] == '+' || d.b[d.i] == '-') {
			d.i++
		}
		if digits() == 0 {
			return 0, errJSON
		}
	}
	f, err := strconv.ParseFloat(string(d.b[start:d.i]), 64)
	if err != nil {
		return 0, errJSON // out of a double's range, as protojson
	}
	return f, nil
}

// str decodes a string whose opening quote is at d.i. Strings without
// escapes, nearly all of them, are one copy of their bytes.
func (d *jsonDecoder) str() (string, error) {
	s, done, err := d.scanStr()
	if err != nil || done {
		return string(s), err
	}
	out, err := d.unescape(append([]byte(nil), s...), 0)
	if err != nil {
		return "", err
	}
	return string(out), nil
}

// scanStr consumes a string whose opening quote is at d.i up to its closing
// quote (done) or up to its first backslash, where it leaves d.i, and
// returns the bytes before that.
func (d *jsonDecoder) scanStr() (s []byte, done bool, err error) {
	d.i++
	start := d.i
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			s := d.b[start:d.i]
			d.i++
			if !utf8.Valid(s) {
				return nil, false, errJSON
			}
			return s, true, nil
		case c == '\\':
			return d.b[start:d.i], false, nil
		case c < 0x20:
			return nil, false, errJSON
		}
		d.i++
	}
	return nil, false, errJSON
}

// unescape appends the rest of a string that holds escapes to out, whose
// bytes from mark on are the string's so far; d.i is at a backslash. A \u
// escape of half a surrogate pair must be followed by the other half, as
// protojson requires, and the whole string must be UTF-8.
func (d *jsonDecoder) unescape(out []byte, mark int) ([]byte, error) {
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			if !utf8.Valid(out[mark:]) {
				return nil, errJSON
			}
			return out, nil
		case c < 0x20:
			return nil, errJSON
		case c != '\\':
			out = append(out, c)
			d.i++
			continue
		}
		if d.i+1 >= len(d.b) {
			return nil, errJSON
		}
		e := d.b[d.i+1]
		d.i += 2
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := d.hex4()
			if !ok {
				return nil, errJSON
			}
			if utf16.IsSurrogate(r) {
				if d.i+1 >= len(d.b) || d.b[d.i] != '\\' || d.b[d.i+1] != 'u' {
					return nil, errJSON
				}
				d.i += 2
				r2, ok := d.hex4()
				if !ok {
					return nil, errJSON
				}
				if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
					return nil, errJSON
				}
			}
			out = utf8.AppendRune(out, r)
		default:
			return nil, errJSON
		}
	}
	return nil, errJSON
}

// hex4 consumes the four hex digits of a \u escape.
func (d *jsonDecoder) hex4() (rune, bool) {
	if d.i+4 > len(d.b) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(d.b[d.i:d.i+4]), 16, 16)
	if err != nil {
		return 0, false
	}
	d.i += 4
	return rune(v), true
}
