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
	b, err := appendDocHead(b, e)
	if err != nil {
		return nil, err
	}
	if b, err = appendFacts(b, e.Facts); err != nil {
		return nil, err
	}
	return appendDocTail(b, e)
}

// appendDocHead writes EventDoc's members before the facts' value.
func appendDocHead(b []byte, e Event) ([]byte, error) {
	var err error
	for _, m := range []struct{ key, v string }{{`{"actor":`, e.Actor}, {`,"detail":`, e.Detail}} {
		b = append(b, m.key...)
		if b, err = appendString(b, m.v); err != nil {
			return nil, err
		}
	}
	return append(b, `,"facts":`...), nil
}

// appendDocTail writes EventDoc's members after the facts.
func appendDocTail(b []byte, e Event) ([]byte, error) {
	var err error
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

// Fact is one member of an event's facts as a writer lists them
// (DocHashFacts): Null is a JSON null (the field kept), Value then unused.
type Fact struct {
	Key, Value string
	Null       bool
}

// errFactOrder is a list of facts not in JCS order.
var errFactOrder = errors.New("audit: facts not listed in JCS order")

// appendFactList writes facts, which must come in JCS order (UTF-16 order
// of their keys, none twice), as appendFacts writes the same map.
func appendFactList(b []byte, facts []Fact) ([]byte, error) {
	b = append(b, '{')
	var err error
	for i, f := range facts {
		if i > 0 {
			b = append(b, ',')
		}
		if b, err = appendString(b, f.Key); err != nil {
			return nil, err
		}
		if i > 0 && fingerprint.CompareUTF16(facts[i-1].Key, f.Key) >= 0 {
			return nil, errFactOrder
		}
		b = append(b, ':')
		if f.Null {
			b = append(b, "null"...)
		} else if b, err = appendString(b, f.Value); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// DocHashFacts is what the writer of an event needs: DocHash of e with
// facts as its facts (e.Facts unused), and their text as FactsText writes
// it, from one document. The writers list their facts, whose keys are
// constants, in JCS order (an error otherwise): no map to build, iterate
// and sort per event, and the facts written once, not once for their text
// and again for the document (docs/performance.md, finding 39).
// TestDocHashFactsMatchesDocHash holds it to DocHash and FactsText.
func DocHashFacts(e Event, facts []Fact) (doc []byte, factsText string, err error) {
	var buf [768]byte
	b, err := appendDocHead(buf[:0], e)
	if err != nil {
		return nil, "", err
	}
	start := len(b)
	if b, err = appendFactList(b, facts); err != nil {
		return nil, "", err
	}
	end := len(b)
	if b, err = appendDocTail(b, e); err != nil {
		return nil, "", err
	}
	if len(facts) > 0 {
		factsText = string(b[start:end])
	}
	sum := sha256.Sum256(b)
	return sum[:], factsText, nil
}
