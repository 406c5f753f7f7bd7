package audit

import (
	"crypto/sha256"
	"errors"
	"slices"
	"unicode/utf8"

	"github.com/opledger/opledger/clients/go/fingerprint"
)

// The receipts' canonical documents hold only strings (and one integer),
// so they are written here directly rather than through
// fingerprint.Canonicalize's generic walk over map[string]any, which cost
// the hot path tens of microseconds per event in boxing, sorting and
// allocation (docs/performance.md). The bytes are RFC 8785's all the same:
// TestJCSWriterMatchesCanonicalize holds them to fingerprint.Canonicalize.

// errNotUTF8 is a text of an event that is not valid UTF-8, which JCS
// cannot represent.
var errNotUTF8 = errors.New("audit: text is not valid UTF-8")

// appendString writes s as RFC 8785 does: fingerprint's, the one JCS of
// the project, whose test the receipts' documents are held to.
func appendString(b []byte, s string) ([]byte, error) {
	b, err := fingerprint.AppendString(b, s)
	if err != nil {
		return nil, errNotUTF8
	}
	return b, nil
}

// appendFacts writes facts as a JCS object: members in UTF-16 order, a nil
// value as null.
func appendFacts(b []byte, facts map[string]*string) ([]byte, error) {
	keys := make([]string, 0, len(facts))
	for k := range facts {
		if !utf8.ValidString(k) {
			return nil, errNotUTF8
		}
		keys = append(keys, k)
	}
	slices.SortFunc(keys, fingerprint.CompareUTF16)
	b = append(b, '{')
	var err error
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		if b, err = appendString(b, k); err != nil {
			return nil, err
		}
		b = append(b, ':')
		if v := facts[k]; v == nil {
			b = append(b, "null"...)
		} else if b, err = appendString(b, *v); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// appendDoc writes EventDoc's object, its members in order.
func appendDoc(b []byte, e Event) ([]byte, error) {
	var err error
	for _, m := range []struct{ key, v string }{{`{"actor":`, e.Actor}, {`,"detail":`, e.Detail}} {
		b = append(b, m.key...)
		if b, err = appendString(b, m.v); err != nil {
			return nil, err
		}
	}
	b = append(b, `,"facts":`...)
	if b, err = appendFacts(b, e.Facts); err != nil {
		return nil, err
	}
	for _, m := range []struct{ key, v string }{{`,"op":`, e.OperationID}, {`,"to":`, e.ToState}, {`,"type":`, e.Type}} {
		b = append(b, m.key...)
		if b, err = appendString(b, m.v); err != nil {
			return nil, err
		}
	}
	return append(b, `,"v":2}`...), nil
}

// docHash is DocHash without a copy of the document.
func docHash(e Event) ([]byte, error) {
	var buf [512]byte
	doc, err := appendDoc(buf[:0], e)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(doc)
	return sum[:], nil
}
