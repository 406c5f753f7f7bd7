package server

import (
	"bytes"
	"errors"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// appendStructField appends field num of a message, a google.protobuf.Struct
// holding the JSON object b, in protobuf's wire format: the bytes
// proto.Marshal writes for that field, straight from the JSON, with no
// Struct built. An answer carries the operation's arguments and result, and
// building them as Structs (a map and a message per value) and marshalling
// those was most of what an answer cost the server (docs/performance.md,
// finding 25). It accepts exactly what jsonStruct accepts, and a decode of
// its bytes is the Struct jsonStruct builds; FuzzStructField checks both
// against each other. On error dst is returned unchanged.
//
// errTooDeep reports an object nested deeper than wireMaxDepth: a length is
// written before its content is known, so a container longer than 127 bytes
// moves its content once it is closed, and bounding the depth bounds that
// work (the caller builds a Struct instead).
func appendStructField(dst []byte, num protowire.Number, b []byte) ([]byte, error) {
	e := wireEncoder{jsonDecoder: jsonDecoder{b: b}, out: dst}
	e.space()
	if e.i >= len(e.b) || e.b[e.i] != '{' {
		return dst, errJSON
	}
	e.out = protowire.AppendTag(e.out, num, protowire.BytesType)
	start := e.open()
	if err := e.object(1); err != nil {
		return dst, err
	}
	e.close(start)
	e.space()
	if e.i != len(e.b) {
		return dst, errJSON
	}
	return e.out, nil
}

// wireMaxDepth bounds the nesting appendStructField encodes itself.
const wireMaxDepth = 64

var errTooDeep = errors.New("server: JSON nested too deep to encode directly")

// The wire tags of google.protobuf.Struct, Value and ListValue
// (struct.proto); each field is length-delimited but for null_value
// (varint), number_value (fixed64) and bool_value (varint).
const (
	tagStructFields   = 1<<3 | 2 // Struct.fields, a map entry
	tagEntryKey       = 1<<3 | 2 // the entry's key
	tagEntryValue     = 2<<3 | 2 // the entry's value
	tagValueNull      = 1<<3 | 0
	tagValueNumber    = 2<<3 | 1
	tagValueString    = 3<<3 | 2
	tagValueBool      = 4<<3 | 0
	tagValueStruct    = 5<<3 | 2
	tagValueList      = 6<<3 | 2
	tagListValueValue = 1<<3 | 2 // ListValue.values
)

type wireEncoder struct {
	jsonDecoder
	out []byte
	// keys holds where the names of the open objects' members are in out,
	// to refuse a duplicate name as jsonStruct does. A name moves only when
	// its own member is closed, and is recorded after that.
	keys [][2]int
}

// open reserves one byte for a length and returns where the content starts.
func (e *wireEncoder) open() int {
	e.out = append(e.out, 0)
	return len(e.out)
}

// close writes the length of the content from start on into the byte
// reserved before it, moving the content when its length needs more; it
// returns how far the content moved.
func (e *wireEncoder) close(start int) int {
	n := len(e.out) - start
	if n < 0x80 {
		e.out[start-1] = byte(n)
		return 0
	}
	k := protowire.SizeVarint(uint64(n))
	for range k - 1 {
		e.out = append(e.out, 0)
	}
	copy(e.out[start-1+k:], e.out[start:start+n])
	protowire.AppendVarint(e.out[:start-1], uint64(n))
	return k - 1
}

// object encodes the members of the object whose '{' is at d.i as Struct
// fields.
func (e *wireEncoder) object(depth int) error {
	if depth > wireMaxDepth {
		return errTooDeep
	}
	base := len(e.keys)
	defer func() { e.keys = e.keys[:base] }()
	more, err := e.enter(depth, '}')
	for more && err == nil {
		e.space()
		if e.i >= len(e.b) || e.b[e.i] != '"' {
			return errJSON
		}
		e.out = append(e.out, tagStructFields)
		entry := e.open()
		e.out = append(e.out, tagEntryKey)
		key := e.open()
		if e.out, err = e.appendStr(e.out); err != nil {
			return err
		}
		name := [2]int{key + e.close(key), len(e.out)}
		for _, k := range e.keys[base:] {
			if bytes.Equal(e.out[k[0]:k[1]], e.out[name[0]:name[1]]) {
				return errJSON // jsonStruct refuses duplicate names, as protojson does
			}
		}
		e.space()
		if e.i >= len(e.b) || e.b[e.i] != ':' {
			return errJSON
		}
		e.i++
		e.out = append(e.out, tagEntryValue)
		value := e.open()
		if err = e.value(depth); err != nil {
			return err
		}
		e.close(value)
		moved := e.close(entry)
		e.keys = append(e.keys, [2]int{name[0] + moved, name[1] + moved})
		more, err = e.next('}')
	}
	return err
}

// list encodes the elements of the array whose '[' is at d.i as ListValue
// values.
func (e *wireEncoder) list(depth int) error {
	if depth > wireMaxDepth {
		return errTooDeep
	}
	more, err := e.enter(depth, ']')
	for more && err == nil {
		e.out = append(e.out, tagListValueValue)
		value := e.open()
		if err = e.value(depth); err != nil {
			return err
		}
		e.close(value)
		more, err = e.next(']')
	}
	return err
}

// value encodes the fields of a Value for the value at d.i inside a
// container at depth.
func (e *wireEncoder) value(depth int) error {
	e.space()
	if e.i >= len(e.b) {
		return errJSON
	}
	var err error
	switch c := e.b[e.i]; c {
	case '{', '[':
		tag := byte(tagValueStruct)
		if c == '[' {
			tag = tagValueList
		}
		e.out = append(e.out, tag)
		start := e.open()
		if c == '{' {
			err = e.object(depth + 1)
		} else {
			err = e.list(depth + 1)
		}
		e.close(start)
	case '"':
		e.out = append(e.out, tagValueString)
		start := e.open()
		e.out, err = e.appendStr(e.out)
		e.close(start)
	case 't':
		err = e.word("true")
		e.out = append(e.out, tagValueBool, 1)
	case 'f':
		err = e.word("false")
		e.out = append(e.out, tagValueBool, 0)
	case 'n':
		err = e.word("null")
		e.out = append(e.out, tagValueNull, 0) // NULL_VALUE: a oneof member is written even when zero
	default:
		var f float64
		f, err = e.number()
		e.out = protowire.AppendFixed64(append(e.out, tagValueNumber), math.Float64bits(f))
	}
	return err
}

// appendStr appends the decoded string whose opening quote is at d.i to dst.
func (d *jsonDecoder) appendStr(dst []byte) ([]byte, error) {
	s, done, err := d.scanStr()
	if err != nil {
		return dst, err
	}
	if done {
		return append(dst, s...), nil
	}
	out, err := d.unescape(append(dst, s...), len(dst))
	if err != nil {
		return dst, err
	}
	return out, nil
}
