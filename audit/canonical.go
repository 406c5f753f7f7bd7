package audit

import (
	"bytes"
	"slices"
	"sync"
	"unicode/utf8"

	"github.com/opledger/opledger/clients/go/fingerprint"
)

// Digest's fast path. An operation's result is what its downstream
// answered, compacted (executor.readBody): valid JSON whose strings rarely
// hold an escape and whose numbers are mostly small integers, but whose
// members come in the downstream's order, not RFC 8785's. For such a text
// the canonical form is the text itself without its whitespace and with
// every object's members sorted, so canonicalJSON writes exactly that, with
// no decoding into map[string]any (fingerprint.Canonicalize's walk over
// encoding/json cost an outcome's event about 57 allocations and most of
// the receipts' Go CPU: docs/performance.md, finding 39). Whatever lies
// outside that subset it leaves to Canonicalize, the project's one RFC
// 8785, which TestCanonicalJSONMatchesCanonicalize and
// FuzzCanonicalJSONMatchesCanonicalize hold it to.

// maxFastDepth bounds the nesting canonicalJSON takes on; deeper texts go
// the general way.
const maxFastDepth = 64

// canonBufs recycles canonicalJSON's output buffers (results up to the
// executor's 64 KiB cap; bigger ones are not kept).
var canonBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// span is one object member: its name (between the quotes, which hold no
// escape) in the input and its value's canonical text in the output.
type span struct{ k0, k1, v0, v1 int }

// canonicalJSON appends the RFC 8785 form of in to dst when in lies in the
// fast path's subset: strings without a backslash or a control character
// and of valid UTF-8 (so written as they are), numbers that are integers of
// at most 15 digits other than -0 (exact as doubles, and written by
// ECMAScript as they are spelled), no duplicate member names, nesting to
// maxFastDepth. ok is false otherwise, dst then unusable.
func canonicalJSON(dst, in []byte) (out []byte, ok bool) {
	p := canonParser{in: in}
	p.ws()
	if out, ok = p.value(dst, 0); !ok {
		return nil, false
	}
	p.ws()
	return out, p.pos == len(in)
}

type canonParser struct {
	in  []byte
	pos int
}

func (p *canonParser) ws() {
	for p.pos < len(p.in) {
		switch p.in[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *canonParser) value(dst []byte, depth int) ([]byte, bool) {
	if p.pos >= len(p.in) {
		return nil, false
	}
	switch c := p.in[p.pos]; {
	case c == '{':
		return p.object(dst, depth+1)
	case c == '[':
		return p.array(dst, depth+1)
	case c == '"':
		s0, s1, ok := p.str()
		if !ok {
			return nil, false
		}
		return append(dst, p.in[s0-1:s1+1]...), true
	case c == '-' || c >= '0' && c <= '9':
		return p.number(dst)
	case c == 't':
		return p.literal(dst, "true")
	case c == 'f':
		return p.literal(dst, "false")
	case c == 'n':
		return p.literal(dst, "null")
	}
	return nil, false
}

func (p *canonParser) literal(dst []byte, lit string) ([]byte, bool) {
	if !bytes.HasPrefix(p.in[p.pos:], []byte(lit)) {
		return nil, false
	}
	p.pos += len(lit)
	return append(dst, lit...), true
}

// str reads a string whose opening quote is at pos, returning the bounds of
// its contents.
func (p *canonParser) str() (s0, s1 int, ok bool) {
	s0 = p.pos + 1
	ascii := true
	for i := s0; i < len(p.in); i++ {
		switch c := p.in[i]; {
		case c == '"':
			if !ascii && !utf8.Valid(p.in[s0:i]) {
				return 0, 0, false
			}
			p.pos = i + 1
			return s0, i, true
		case c == '\\' || c < 0x20:
			return 0, 0, false
		case c >= 0x80:
			ascii = false
		}
	}
	return 0, 0, false
}

func (p *canonParser) number(dst []byte) ([]byte, bool) {
	i := p.pos
	if p.in[i] == '-' {
		i++
	}
	d0 := i
	for i < len(p.in) && p.in[i] >= '0' && p.in[i] <= '9' {
		i++
	}
	n := i - d0
	switch {
	case n == 0 || n > 15:
		return nil, false
	case p.in[d0] == '0' && (n > 1 || d0 > p.pos): // a leading zero, or -0
		return nil, false
	case i < len(p.in) && (p.in[i] == '.' || p.in[i] == 'e' || p.in[i] == 'E'):
		return nil, false
	}
	dst = append(dst, p.in[p.pos:i]...)
	p.pos = i
	return dst, true
}

func (p *canonParser) array(dst []byte, depth int) ([]byte, bool) {
	if depth > maxFastDepth {
		return nil, false
	}
	p.pos++ // [
	dst = append(dst, '[')
	p.ws()
	if p.pos < len(p.in) && p.in[p.pos] == ']' {
		p.pos++
		return append(dst, ']'), true
	}
	for {
		var ok bool
		if dst, ok = p.value(dst, depth); !ok {
			return nil, false
		}
		p.ws()
		if p.pos >= len(p.in) {
			return nil, false
		}
		switch p.in[p.pos] {
		case ',':
			p.pos++
			dst = append(dst, ',')
			p.ws()
		case ']':
			p.pos++
			return append(dst, ']'), true
		default:
			return nil, false
		}
	}
}

// object writes its members' values after dst's end as it reads them, then
// the object itself, members sorted, after those, and moves it back over
// them.
func (p *canonParser) object(dst []byte, depth int) ([]byte, bool) {
	if depth > maxFastDepth {
		return nil, false
	}
	p.pos++ // {
	mark := len(dst)
	var small [16]span
	members := small[:0]
	p.ws()
	if p.pos < len(p.in) && p.in[p.pos] == '}' {
		p.pos++
		return append(dst, '{', '}'), true
	}
	for {
		if p.pos >= len(p.in) || p.in[p.pos] != '"' {
			return nil, false
		}
		k0, k1, ok := p.str()
		if !ok {
			return nil, false
		}
		p.ws()
		if p.pos >= len(p.in) || p.in[p.pos] != ':' {
			return nil, false
		}
		p.pos++
		p.ws()
		v0 := len(dst)
		if dst, ok = p.value(dst, depth); !ok {
			return nil, false
		}
		members = append(members, span{k0, k1, v0, len(dst)})
		p.ws()
		if p.pos >= len(p.in) {
			return nil, false
		}
		if p.in[p.pos] == '}' {
			p.pos++
			break
		}
		if p.in[p.pos] != ',' {
			return nil, false
		}
		p.pos++
		p.ws()
	}
	in := p.in
	key := func(m span) []byte { return in[m.k0:m.k1] }
	if len(members) <= len(small) {
		// Insertion sort: no closure, no allocation, and these are small.
		for i := 1; i < len(members); i++ {
			for j := i; j > 0 && compareUTF16(key(members[j]), key(members[j-1])) < 0; j-- {
				members[j], members[j-1] = members[j-1], members[j]
			}
		}
	} else {
		slices.SortFunc(members, func(a, b span) int { return compareUTF16(key(a), key(b)) })
	}
	start := len(dst)
	dst = append(dst, '{')
	for i, m := range members {
		if i > 0 {
			if bytes.Equal(key(m), key(members[i-1])) {
				return nil, false // a duplicate name: encoding/json keeps the last
			}
			dst = append(dst, ',')
		}
		dst = append(dst, '"')
		dst = append(dst, key(m)...)
		dst = append(dst, '"', ':')
		dst = append(dst, dst[m.v0:m.v1]...)
	}
	dst = append(dst, '}')
	n := copy(dst[mark:], dst[start:])
	return dst[:mark+n], true
}

// compareUTF16 is fingerprint.CompareUTF16 on valid UTF-8 bytes: byte order
// (the code points') but where the runes that first differ are one above
// U+FFFF and one in U+E000..U+FFFF, which UTF-16 orders the other way.
func compareUTF16(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	if i == n {
		return len(a) - len(b)
	}
	if a[i] < 0x80 && b[i] < 0x80 {
		return int(a[i]) - int(b[i])
	}
	for i > 0 && a[i]&0xC0 == 0x80 { // back to the runes' first byte
		i--
	}
	ra, _ := utf8.DecodeRune(a[i:])
	rb, _ := utf8.DecodeRune(b[i:])
	return fingerprint.CompareUTF16(string(ra), string(rb))
}
