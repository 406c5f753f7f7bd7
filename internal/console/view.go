package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/opledger/opledger/internal/ledger"
)

// Field is one row of an operation's arguments as the console shows them: a
// path into the args ("amount_minor", "lines[0].sku") and the value as text.
type Field struct {
	Path  string
	Value string
	// Note explains the value: "minor units: EUR 49.00".
	Note string
	// Kind is the JSON type: string, number, boolean, null, object, array.
	Kind string
	// Hidden is true when the value contains characters a person cannot see
	// or that reorder text (control, format, bidi): Value shows them as
	// \u escapes, and the page says so.
	Hidden bool
	// parent and key are the object that holds the value and its exact
	// key (parent is nil for an array's element): where a currency beside
	// an amount is looked up.
	parent map[string]any
	key    string
}

// decodeArgs parses stored args, keeping numbers exactly as stored.
func decodeArgs(b []byte) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return nil, err
	}
	return m, nil
}

// argFields flattens args into rows, sorted by path, and annotates amounts
// in minor units.
func argFields(b []byte) []Field {
	m, err := decodeArgs(b)
	if err != nil {
		return []Field{{Path: "(args)", Value: string(b), Kind: "string"}}
	}
	var out []Field
	flatten("", false, m, &out, nil, "")
	sort.SliceStable(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	annotateMinorUnits(out)
	return out
}

// flatten appends v's leaves to out; parent and key are the object that
// holds v and its key (parent is nil for an array's element and the root).
func flatten(path string, hid bool, v any, out *[]Field, parent map[string]any, key string) {
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 0 {
			*out = append(*out, Field{Path: orArgs(path), Value: "{}", Kind: "object", Hidden: hid})
			return
		}
		for k, e := range x {
			p, h := segment(path, k)
			flatten(p, hid || h, e, out, x, k)
		}
	case []any:
		if len(x) == 0 {
			*out = append(*out, Field{Path: orArgs(path), Value: "[]", Kind: "array", Hidden: hid})
			return
		}
		for i, e := range x {
			flatten(fmt.Sprintf("%s[%d]", path, i), hid, e, out, nil, "")
		}
	case string:
		shown := x
		if ambiguousText(x) {
			shown = jsonQuoted(x) // "false" is text, false a boolean
		}
		s, hidden := visible(shown)
		*out = append(*out, Field{Path: path, Value: s, Kind: "string", Hidden: hid || hidden, parent: parent, key: key})
	case json.Number:
		*out = append(*out, Field{Path: path, Value: x.String(), Kind: "number", Hidden: hid, parent: parent, key: key})
	case bool:
		*out = append(*out, Field{Path: path, Value: strconv.FormatBool(x), Kind: "boolean", Hidden: hid, parent: parent, key: key})
	case nil:
		*out = append(*out, Field{Path: path, Value: "null", Kind: "null", Hidden: hid, parent: parent, key: key})
	}
}

// segment is the path of key k in the object at path, as the page shows
// it, and whether k holds characters a person cannot see.
func segment(path, k string) (string, bool) {
	switch {
	case !plainKey(k):
		// "a.b", "lines[0]", "", " ": written as a quoted segment, so
		// that {"a.b":1} and {"a":{"b":1}} never look alike.
		p, h := visible(jsonQuoted(k))
		return path + "[" + p + "]", h
	case path != "":
		p, h := visible(k)
		return path + "." + p, h
	}
	return visible(k)
}

// plainKey reports whether key k can be shown bare in a path: not empty,
// and nothing a path's own syntax uses (. [ ] and quotes), no backslash
// (the \u escapes of visible) and no white space.
func plainKey(k string) bool {
	return k != "" && !strings.ContainsAny(k, ".[]\"\\") && !strings.ContainsFunc(k, unicode.IsSpace)
}

// ambiguousText reports whether string s, shown bare, would read as
// something else: empty or with white space at an end, another JSON value
// (false, null, 12, [], {}), or beginning with a quote (as a quoted string
// is shown). Such a string is shown quoted.
func ambiguousText(s string) bool {
	if s == "" || strings.TrimSpace(s) != s || strings.HasPrefix(s, `"`) {
		return true
	}
	return json.Valid([]byte(s))
}

// jsonQuoted writes s between double quotes with its quotes and backslashes
// escaped (visible then writes what cannot be seen as \u escapes).
func jsonQuoted(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

func orArgs(p string) string {
	if p == "" {
		return "(args)"
	}
	return p
}

// visible returns s with every character a person could not see or that
// could reorder the text around it (ledger.Invisible) written as a \u
// escape, and whether there was one.
func visible(s string) (string, bool) {
	var b strings.Builder
	hidden := false
	var prev rune
	for _, r := range s {
		invisible := ledger.Invisible(prev, r)
		prev = r
		if !invisible {
			b.WriteRune(r)
			continue
		}
		hidden = true
		if r > 0xFFFF {
			fmt.Fprintf(&b, `\U%08X`, r)
		} else {
			fmt.Fprintf(&b, `\u%04X`, r)
		}
	}
	return b.String(), hidden
}

// minorExponent is the number of decimal places of ISO 4217 currencies that
// differ from the usual 2.
var minorExponent = map[string]int{
	"BIF": 0, "CLP": 0, "DJF": 0, "GNF": 0, "ISK": 0, "JPY": 0, "KMF": 0, "KRW": 0, "PYG": 0,
	"RWF": 0, "UGX": 0, "UYI": 0, "VND": 0, "VUV": 0, "XAF": 0, "XOF": 0, "XPF": 0,
	"BHD": 3, "IQD": 3, "JOD": 3, "KWD": 3, "LYD": 3, "OMR": 3, "TND": 3, "CLF": 4, "UYW": 4,
}

// isMinorUnits reports whether an argument name says its value is in minor
// units of a currency: amount_minor, fee_minor_units, minor_amount.
func isMinorUnits(name string) bool {
	n := strings.ToLower(name)
	return strings.HasSuffix(n, "_minor") || strings.HasSuffix(n, "_minor_units") || strings.HasPrefix(n, "minor_") || n == "minor"
}

// annotateMinorUnits adds "minor units: EUR 49.00" to integer amounts whose
// name says minor units, taking the currency from a sibling field named
// currency (or <prefix>_currency); without one it says only "minor units".
func annotateMinorUnits(fields []Field) {
	for i := range fields {
		f := &fields[i]
		if f.Kind != "number" || f.parent == nil || !isMinorUnits(f.key) {
			continue
		}
		n, ok := new(big.Int).SetString(f.Value, 10)
		if !ok {
			f.Note = "minor units (not a whole number!)"
			continue
		}
		cur := siblingCurrency(f.parent, f.key)
		if cur == "" {
			f.Note = "minor units (no ISO 4217 currency code beside it)"
			continue
		}
		exp, known := minorExponent[cur]
		if !known {
			exp = 2
		}
		f.Note = fmt.Sprintf("minor units: %s %s", cur, formatMinor(n, exp))
	}
}

// siblingCurrency finds the currency of an amount named name in obj:
// "currency", or "<prefix>_currency" for an amount named "<prefix>_minor".
func siblingCurrency(obj map[string]any, name string) string {
	prefix := name
	for _, suffix := range []string{"_units", "_minor"} {
		if strings.HasSuffix(strings.ToLower(prefix), suffix) {
			prefix = prefix[:len(prefix)-len(suffix)]
		}
	}
	for _, want := range []string{prefix + "_currency", "currency"} {
		// The key as written, case aside; two that differ only in case
		// leave it unsaid rather than guessed.
		var found []string
		for k, v := range obj {
			if c, ok := v.(string); ok && strings.EqualFold(k, want) && isCurrencyCode(c) {
				found = append(found, c)
			}
		}
		switch len(found) {
		case 1:
			return found[0]
		case 0:
			continue
		}
		return ""
	}
	return ""
}

// isCurrencyCode reports whether c has the form of an ISO 4217 code: three
// ASCII capital letters. Only such a code is written into an amount's note;
// anything else (a right-to-left override is one character of three bytes)
// would reach the page unescaped there, reordering the amount after it.
func isCurrencyCode(c string) bool {
	if len(c) != 3 {
		return false
	}
	for i := 0; i < 3; i++ {
		if c[i] < 'A' || c[i] > 'Z' {
			return false
		}
	}
	return true
}

// formatMinor writes n minor units with exp decimal places and thousands
// separators: 123456789, 2 → "1,234,567.89".
func formatMinor(n *big.Int, exp int) string {
	neg := n.Sign() < 0
	digits := new(big.Int).Abs(n).String()
	for len(digits) <= exp {
		digits = "0" + digits
	}
	whole, frac := digits[:len(digits)-exp], digits[len(digits)-exp:]
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if exp > 0 {
		b.WriteByte('.')
		b.WriteString(frac)
	}
	return b.String()
}

// ago says how long before now t was, coarsely: "12 s", "3 min", "2 h 5 min".
func ago(now, t time.Time) string { return span(now.Sub(t)) }

func span(d time.Duration) string {
	if d < 0 {
		d = -d
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%d min", int(d.Minutes()))
	case d < 48*time.Hour:
		h := int(d.Hours())
		return fmt.Sprintf("%d h %d min", h, int(d.Minutes())-60*h)
	}
	return fmt.Sprintf("%d days", int(d.Hours()/24))
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

// opView is an operation as the pages show it.
type opView struct {
	ledger.Operation
	Fields    []Field
	Canonical string
	Hidden    bool
	Age       string
	Created   string
	// TimeLeft says how long the approval lasts or lasted.
	TimeLeft string
	// Urgent marks an approval that expired or expires within a minute.
	Urgent bool
	// Decidable: an approver may approve or deny it now.
	Decidable bool
	// Resolvable: an operator may resolve it now.
	Resolvable bool
	Result     string
	Error      string
	// Quorum is the current round's decisions and the number needed, as
	// the reader sees them (set by the page, which knows the reader).
	Quorum quorumView
}

func viewOf(op ledger.Operation, now time.Time) opView {
	canonical, _ := visible(string(op.Args))
	v := opView{Operation: op, Fields: argFields(op.Args), Canonical: canonical,
		Age: ago(now, op.CreatedAt), Created: stamp(op.CreatedAt)}
	for _, f := range v.Fields {
		v.Hidden = v.Hidden || f.Hidden
	}
	state := ledger.State(op.State)
	switch {
	case state == ledger.StateAwaitingApproval:
		v.TimeLeft = "no deadline; an approval lasts " + span(op.ApprovalTTL) + " once given"
		v.Decidable = true
	case state == ledger.StateReady && op.ApprovalRequired && op.FirstSentFence == 0:
		left := op.ApprovalExpiresAt.Sub(now)
		if left <= 0 {
			v.TimeLeft = "approval expired " + span(left) + " ago: decide again"
			v.Urgent = true
		} else {
			v.TimeLeft = "approved; expires in " + span(left) + " unless executed"
			v.Urgent = left < time.Minute
		}
		// Until it lapses an approval stands (repeating it is a no-op,
		// denying it a conflict); after, it may be decided again.
		v.Decidable = left <= 0
	case state == ledger.StateOutcomeUnknown, state == ledger.StateExecuting && now.After(op.LeaseExpiresAt):
		v.TimeLeft = "outcome unknown for " + span(now.Sub(op.UpdatedAt))
		v.Resolvable = true
	}
	if len(op.Result) > 0 {
		v.Result = string(op.Result)
	}
	if len(op.Error) > 0 {
		v.Error = string(op.Error)
	}
	return v
}
