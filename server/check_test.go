package server_test

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/tool"
)

// The forms of the request checks the server runs on every call
// (ledger.ValidOperationID, tool.ValidName), as the regular expressions
// they replace state them.
var (
	operationIDForm = regexp.MustCompile(`^op_[0-9a-z]{26}$`)
	toolNameForm    = regexp.MustCompile(tool.NamePattern)
)

var checkSeeds = []string{
	"", "op_", "op_06h3125nw80tjqkybm4ez08f0c", "op_06h3125nw80tjqkybm4ez08f0", "op_06h3125nw80tjqkybm4ez08f0cc",
	"OP_06h3125nw80tjqkybm4ez08f0c", "op_06H3125nw80tjqkybm4ez08f0c", "op-06h3125nw80tjqkybm4ez08f0c",
	"op_06h3125nw80tjqkybm4ez08f0\u00e9", "op_06h3125nw80tjqkybm4ez08f\xff\xfe", "op_06h3125nw80tjqkybm4ez08f0_",
	"a", "pay_invoice", "_pay", "1pay", "Pay", "pay-invoice", "pay invoice", "pay\n", "p\u00e4y",
	strings.Repeat("a", 64), strings.Repeat("a", 65), "a" + strings.Repeat("_", 63), "z9", "{", "`", "/", ":",
}

func checkAgrees(t *testing.T, s string) {
	t.Helper()
	if got, want := ledger.ValidOperationID(s), operationIDForm.MatchString(s); got != want {
		t.Fatalf("ledger.ValidOperationID(%q) = %t, the form says %t", s, got, want)
	}
	if got, want := tool.ValidName(s), toolNameForm.MatchString(s); got != want {
		t.Fatalf("tool.ValidName(%q) = %t, the form says %t", s, got, want)
	}
}

// TestChecksMatchTheirForms: the written-out checks accept exactly what
// their regular expressions accept, on edge cases and on random strings
// built near both forms.
func TestChecksMatchTheirForms(t *testing.T) {
	t.Parallel()
	for _, s := range checkSeeds {
		checkAgrees(t, s)
	}
	alphabet := []byte("op_az09AZ-/:`{\xc3\xa9\xff")
	r := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		var b []byte
		switch r.IntN(3) {
		case 0:
			b = []byte("op_")
		case 1:
			b = []byte{byte('a' + r.IntN(26))}
		}
		for n := r.IntN(70); n > 0; n-- {
			if r.IntN(8) == 0 {
				b = append(b, alphabet[r.IntN(len(alphabet))])
			} else {
				b = append(b, "0123456789abcdefghijklmnopqrstuvwxyz_"[r.IntN(37)])
			}
		}
		checkAgrees(t, string(b))
	}
}

// FuzzChecksMatchTheirForms is TestChecksMatchTheirForms on the fuzzer's
// strings.
func FuzzChecksMatchTheirForms(f *testing.F) {
	for _, s := range checkSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { checkAgrees(t, s) })
}
