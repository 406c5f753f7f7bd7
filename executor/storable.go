package executor

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// MaxStoredDepth is the deepest nesting of objects and arrays kept in a
// stored answer, counting the top-level object as level 1. Every stored
// answer is returned in Get, Execute and Reconcile as a
// google.protobuf.Struct, where each JSON level costs two or three protobuf
// message levels (Value, then Struct and its map entry, or ListValue), and
// every client runtime must decode it: Java's and Python's protobuf
// runtimes refuse a message nested deeper than 100 levels by default (Go's
// 10000), and then the operation could never be read again. 20 JSON levels
// of objects are 62 message levels in a GetResponse (of arrays, 43), which
// leaves room for the messages around them; tool's ValidateArgs holds a
// caller's args to the same limit.
const MaxStoredDepth = 20

// PostgreSQL's numeric, which jsonb stores every number as, holds at most
// this many digits before the decimal point and this many after it.
const (
	numericMaxBefore = 131072
	numericMaxScale  = 16383
	// numericMaxExponent bounds the exponents PostgreSQL reads at all.
	numericMaxExponent = 1<<30 - 1
)

// Storable returns the JSON text b (valid JSON, such as Object returns) in a
// form PostgreSQL can store, so that a downstream's answer never keeps its
// outcome from being recorded. jsonb holds no NUL character (U+0000), no
// unpaired surrogate and no byte that is not UTF-8, and a number only within
// numeric's range. In strings and member names, each such character, escaped
// or not, becomes U+FFFD (each byte that is not UTF-8 one U+FFFD, as a UTF-8
// decoder reads them); a number beyond the range becomes a string of the
// number's text. An object or array nested deeper than MaxStoredDepth
// levels becomes a string of its compact JSON text (each byte in it that is
// not UTF-8 a U+FFFD), so that every client can decode the stored answer;
// the top level is never replaced, so an object stays an object.
// Everything else, including the order of members and the escapes that
// PostgreSQL can hold, is kept as it is; an answer with nothing to change
// is returned as it is, uncopied.
func Storable(b []byte) []byte {
	s := rewriter{in: b}
	depth := 0 // the levels of objects and arrays open at i
	for i := 0; i < len(b); {
		switch c := b[i]; {
		case c == '"':
			i = s.str(i + 1)
		case c == '{' || c == '[':
			if depth == MaxStoredDepth {
				j := valueEnd(b, i)
				s.replace(i, j, deepText(b[i:j]))
				i = j
				continue
			}
			depth++
			i++
		case c == '}' || c == ']':
			depth--
			i++
		case c == '-' || ('0' <= c && c <= '9'):
			j := numberEnd(b, i)
			if !numericHolds(b[i:j]) {
				s.replace(i, j, `"`+string(b[i:j])+`"`)
			}
			i = j
		default:
			i++
		}
	}
	return s.done()
}

// valueEnd returns the index after the object or array whose opening
// bracket is at i (len(b) if it is not closed).
func valueEnd(b []byte, i int) int {
	depth := 0
	for i < len(b) {
		switch b[i] {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth--; depth == 0 {
				return i + 1
			}
		}
		i++
	}
	return i
}

// deepText is the JSON string that replaces a value nested too deep: the
// value's compact text, with each byte that is not UTF-8 as U+FFFD (as
// StorableText). What jsonb could not hold in the value itself (an escaped
// NUL, an unpaired surrogate, a number beyond numeric's range) is plain
// text inside the string, which it holds.
func deepText(v []byte) string {
	var c bytes.Buffer
	if json.Compact(&c, v) == nil {
		v = c.Bytes()
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(StorableText(string(v))) // a string always encodes
	return string(bytes.TrimSuffix(out.Bytes(), []byte("\n")))
}

// StorableText returns s as PostgreSQL's text (and a protobuf string) can
// hold it: each NUL character and each byte that is not UTF-8 becomes
// U+FFFD, as in Storable.
func StorableText(s string) string {
	if strings.IndexByte(s, 0) < 0 && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == 0 || (r == utf8.RuneError && n == 1) {
			b.WriteString("\uFFFD")
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// rewriter copies its input only from the first replacement on.
type rewriter struct {
	in   []byte
	out  []byte // nil until the first replacement
	last int    // in[last:] is not copied yet
}

func (r *rewriter) replace(from, to int, with string) {
	if r.out == nil {
		r.out = make([]byte, 0, len(r.in)+16)
	}
	r.out = append(r.out, r.in[r.last:from]...)
	r.out = append(r.out, with...)
	r.last = to
}

func (r *rewriter) done() []byte {
	if r.out == nil {
		return r.in
	}
	return append(r.out, r.in[r.last:]...)
}

// str scans the string whose text starts at i and returns the index after
// its closing quote.
func (r *rewriter) str(i int) int {
	b := r.in
	for i < len(b) {
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c == '\\' && i+1 < len(b) && b[i+1] == 'u':
			u, ok := hex4(b, i+2)
			switch {
			case !ok:
				i += 2
			case u >= 0xD800 && u < 0xDC00: // a high surrogate: kept only with its low half
				if low, ok := hex4(b, i+8); ok && b[i+6] == '\\' && b[i+7] == 'u' && low >= 0xDC00 && low < 0xE000 {
					i += 12
					continue
				}
				fallthrough
			case u == 0 || (u >= 0xDC00 && u < 0xE000):
				r.replace(i, i+6, `\ufffd`)
				i += 6
			default:
				i += 6
			}
		case c == '\\':
			i += 2
		case c < utf8.RuneSelf:
			i++
		default:
			if ru, n := utf8.DecodeRune(b[i:]); ru == utf8.RuneError && n == 1 {
				r.replace(i, i+1, "\uFFFD")
				i++
			} else {
				i += n
			}
		}
	}
	return i
}

// hex4 reads the four hexadecimal digits at b[i:i+4].
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var u rune
	for _, c := range b[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		u = u<<4 | rune(c)
	}
	return u, true
}

// numberEnd returns the index after the number token starting at i.
func numberEnd(b []byte, i int) int {
	for i < len(b) {
		switch c := b[i]; {
		case '0' <= c && c <= '9', c == '-', c == '+', c == '.', c == 'e', c == 'E':
			i++
		default:
			return i
		}
	}
	return i
}

// numericHolds reports whether PostgreSQL's numeric can hold the JSON
// number tok: at most numericMaxBefore digits before the decimal point from
// the first that is not zero, and a display scale (the digits written after
// the point, less the exponent) of at most numericMaxScale, whatever the
// value (PostgreSQL refuses 0e-99999).
func numericHolds(tok []byte) bool {
	i := 0
	if i < len(tok) && tok[i] == '-' {
		i++
	}
	intStart := i
	for i < len(tok) && '0' <= tok[i] && tok[i] <= '9' {
		i++
	}
	intDigits := tok[intStart:i]
	var frac []byte
	if i < len(tok) && tok[i] == '.' {
		i++
		fracStart := i
		for i < len(tok) && '0' <= tok[i] && tok[i] <= '9' {
			i++
		}
		frac = tok[fracStart:i]
	}
	exp := 0
	if i < len(tok) && (tok[i] == 'e' || tok[i] == 'E') {
		i++
		neg := false
		if i < len(tok) && (tok[i] == '+' || tok[i] == '-') {
			neg = tok[i] == '-'
			i++
		}
		for ; i < len(tok); i++ {
			exp = exp*10 + int(tok[i]-'0')
			if exp >= numericMaxExponent {
				return false
			}
		}
		if neg {
			exp = -exp
		}
	}
	if len(frac)-exp > numericMaxScale {
		return false
	}
	// Digits before the point, counted from the first that is not zero.
	sig := bytes.TrimLeft(intDigits, "0")
	if len(sig) != 0 {
		return len(sig)+exp <= numericMaxBefore
	}
	lead := len(frac) - len(bytes.TrimLeft(frac, "0"))
	if lead == len(frac) {
		return true // the value is zero
	}
	return exp-lead <= numericMaxBefore
}

// The bounds on what the ledger stores from outside it. Every stored value
// is returned in Get, Execute, Reconcile and ListOperations, and one that
// could be any size would make its operation, and every page of its
// tenant's list that holds it, unreadable to a client with gRPC's default
// 4 MiB receive limit, until retention pruned it.
const (
	// MaxStoredBytes bounds each JSON object stored from outside: a
	// downstream's answer kept as an operation's result or error body, from
	// an executor, a lookup or a webhook, as stored (compact, after
	// Storable). A JSON value costs at most about 5.5 times its text as a
	// google.protobuf.Struct (a small number: 2 bytes of text, 11 on the
	// wire), so an object at the bound is at most about 360 KiB on the wire.
	MaxStoredBytes = DefaultMaxBodyBytes
	// MaxStoredText bounds each text stored from outside, in bytes: an
	// external reference, an executor's or a lookup's detail, an approval's
	// or a cancellation's reason, an operator's note. 1,000 characters of
	// any script fit.
	MaxStoredText = 4 << 10
)

// truncatedText ends a text Bound cut short.
const truncatedText = "…[truncated]"

// Bound is the one rule by which whatever comes from outside the ledger
// (an executor's or a lookup's answer, a webhook's data, reference and
// detail) becomes what is stored: the body made a JSON object (Object) that
// PostgreSQL can hold (Storable) and at most MaxStoredBytes long, else
// stored as {"raw": "<its first 8 KiB>", "truncated": true}, the shape the
// HTTP executor gives an answer longer than it reads; the reference and the
// detail made text PostgreSQL can hold (StorableText) and at most
// MaxStoredText bytes long, else cut at a character boundary and ended with
// "…[truncated]". A value within the bounds is kept as it is.
func Bound(r Result) Result {
	r.Body = boundObject(Storable(Object(r.Body)))
	r.ExternalRef = BoundText(r.ExternalRef)
	r.Detail = BoundText(r.Detail)
	return r
}

// boundObject is Bound's rule for a storable JSON object b.
func boundObject(b json.RawMessage) json.RawMessage {
	if len(b) <= MaxStoredBytes {
		return b
	}
	// wrapRaw keeps at most maxRawBytes of text, which JSON's escapes
	// (at most 6 bytes for one) and Storable's replacements keep far below
	// MaxStoredBytes.
	return Storable(wrapRaw(b, true))
}

// BoundText is Bound's rule for one text: s as PostgreSQL's text can hold
// it (StorableText), at most MaxStoredText bytes long. A caller's text
// that BoundText would change is refused rather than stored changed (the
// ledger's FIELD_INVALID), so only what a downstream said is ever cut.
func BoundText(s string) string {
	s = StorableText(s)
	if len(s) <= MaxStoredText {
		return s
	}
	cut := MaxStoredText - len(truncatedText)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + truncatedText
}
