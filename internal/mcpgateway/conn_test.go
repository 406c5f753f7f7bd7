package mcpgateway_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/mcpgateway"
)

// TestPlaintextOnlyWhereDecided: auto is plaintext for loopback targets
// only; anything else needs --tls off.
func TestPlaintextOnlyWhereDecided(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		target, mode string
		plain        bool
	}{
		{"127.0.0.1:50051", "", true},
		{"127.0.0.2:50051", mcpgateway.TLSAuto, true},
		{"localhost:50051", "", true},
		{"[::1]:50051", "", true},
		{"dns:///localhost:50051", "", true},
		{"ledger.internal:443", "", false},
		{"10.0.0.5:50051", "", false},
		{"dns:///ledger.example.com:443", "", false},
		{"127.0.0.1:50051", mcpgateway.TLSOn, false},
		{"ledger.internal:50051", mcpgateway.TLSOff, true},
	} {
		plain, err := mcpgateway.ConnConfig{Target: c.target, TLS: c.mode}.Plaintext()
		require.NoError(t, err)
		require.Equal(t, c.plain, plain, "%s with --tls %q", c.target, c.mode)
	}
	plain, err := mcpgateway.ConnConfig{Target: "127.0.0.1:50051", CAFile: "ca.pem"}.Plaintext()
	require.NoError(t, err)
	require.False(t, plain, "a CA means TLS, even on loopback")
}
