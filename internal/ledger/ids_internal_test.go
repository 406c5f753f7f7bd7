package ledger

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestKeyDeriverIsDownstreamKey: the key Prepare stores is DownstreamKey's,
// for parts of every length, including those longer than the deriver's
// stack buffer.
func TestKeyDeriverIsDownstreamKey(t *testing.T) {
	t.Parallel()
	secret := []byte("0123456789abcdef-another-secret")
	d := newKeyDeriver(secret)
	part := func() string { return strings.Repeat(string(rune('a'+rand.IntN(26))), rand.IntN(300)) }
	for range 500 {
		tenant, tool, key, fp := part(), part(), part(), part()
		require.Equal(t, DownstreamKey(secret, tenant, tool, key, fp), d.key(tenant, tool, key, fp))
	}
	require.Equal(t, DownstreamKey(secret, "", "", "", ""), d.key("", "", "", ""))
}

func BenchmarkDownstreamKey(b *testing.B) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	d := newKeyDeriver(secret)
	b.ReportAllocs()
	for b.Loop() {
		_ = d.key("acme", "pay_invoice", "idem-key-0123456789", "v1:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
	}
}
