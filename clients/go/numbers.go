package client

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"strconv"
)

// InexactNumber finds the first number of raw (JSON text) whose IEEE-754
// double is not the number written: arguments travel to the ledger as a
// google.protobuf.Struct, whose numbers are doubles, so such a number would
// be changed silently on the way (9007199254740993 arrives as
// 9007199254740992; 12.00000000000000000001 as 12). It compares the
// literal with the double's shortest form, which is what the ledger's
// canonical JSON sends on (2^60 is a double, but it goes out as
// 1152921504606847000), and returns that form as carried. Numbers outside
// the double's range and text that is not JSON are left to the parser.
// Prepare refuses such args given as JSON text; the MCP gateway refuses
// such a model's call.
func InexactNumber(raw []byte) (literal, carried string, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", "", false
		}
		if n, isNum := tok.(json.Number); isNum {
			if carried, inexact := inexact(string(n)); inexact {
				return string(n), carried, true
			}
		}
	}
}

// maxNumberLiteral bounds the literal compared exactly; a longer one (a
// double has at most 17 significant digits) is taken as inexact.
const maxNumberLiteral = 1024

// inexact reports whether the JSON number literal lit is not the number
// its double's shortest form denotes, and gives that form.
func inexact(lit string) (string, bool) {
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil {
		return "", false // out of range: the parser refuses it
	}
	carried := strconv.FormatFloat(f, 'g', -1, 64)
	if carried == lit {
		return "", false
	}
	if len(lit) > maxNumberLiteral {
		return carried, true
	}
	want, wok := new(big.Rat).SetString(lit)
	got, gok := new(big.Rat).SetString(carried)
	return carried, !wok || !gok || want.Cmp(got) != 0
}

// inexactValue finds the first integer in v (a map[string]any's values,
// nested) that a double cannot carry, as InexactNumber does for text.
func inexactValue(v any) (literal, carried string, ok bool) {
	var lit string
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			if l, c, ok := inexactValue(e); ok {
				return l, c, true
			}
		}
		return "", "", false
	case []any:
		for _, e := range x {
			if l, c, ok := inexactValue(e); ok {
				return l, c, true
			}
		}
		return "", "", false
	case int:
		lit = strconv.FormatInt(int64(x), 10)
	case int64:
		lit = strconv.FormatInt(x, 10)
	case int32, int16, int8, uint8, uint16, uint32:
		return "", "", false // every one is a double
	case uint:
		lit = strconv.FormatUint(uint64(x), 10)
	case uint64:
		lit = strconv.FormatUint(x, 10)
	default:
		return "", "", false
	}
	carried, bad := inexact(lit)
	return lit, carried, bad
}

// inexactError is Prepare's refusal of such a number, before anything is
// sent.
func inexactError(literal, carried string) error {
	return fmt.Errorf("opledger: args: the number %s cannot travel exactly (the ledger's numbers are IEEE-754 doubles, "+
		"and it would arrive as %s): send it as a string", literal, carried)
}
