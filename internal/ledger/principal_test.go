package ledger_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/proof/harness"
	"github.com/opledger/opledger/store"
)

// TestPrincipalNamesAreText: a tenant or a principal's name given to the
// keys commands is refused with a message saying what is wrong when it is
// not short, printable UTF-8 text (bytes that are not UTF-8 reached the
// database and came back as its own error; control and bidirectional
// formatting characters would be shown to approvers as they are). Nothing
// is created.
func TestPrincipalNamesAreText(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{})
	ctx := context.Background()
	roles := []string{ledger.RoleAgent}
	bad := []string{"acme\xff", "ac\x00me", "ac\nme", "evil\u202egnp.exe", "a\u200bb"}
	for _, s := range bad {
		_, _, err := ledger.CreatePrincipal(ctx, env.Store, s, "bot", roles)
		require.ErrorContains(t, err, "tenant must be", "%q", s)
		_, _, err = ledger.CreatePrincipal(ctx, env.Store, "acme", s, roles)
		require.ErrorContains(t, err, "name must be", "%q", s)
		_, err = ledger.ListPrincipals(ctx, env.Store, s)
		require.ErrorContains(t, err, "tenant must be", "%q", s)
		_, _, err = ledger.RevokePrincipal(ctx, env.Store, "acme", store.PrincipalRef{Name: s})
		require.ErrorContains(t, err, "name must be", "%q", s)
	}
	_, _, err := ledger.CreatePrincipal(ctx, env.Store, "acme", strings.Repeat("n", 129), roles)
	require.ErrorContains(t, err, "name must be")
	// A new principal's name is read by approvers: nothing invisible in it
	// (a Hangul filler, a no-break space, a line separator).
	for _, s := range []string{"alice\u3164", "ali\u00a0ce", "al\u2028ice", "bob\u2800", "smuggled\ufe0f\ufe0f\ufe0f"} {
		_, _, err := ledger.CreatePrincipal(ctx, env.Store, "acme", s, roles)
		require.ErrorContains(t, err, "name must be visible text", "%q", s)
	}

	_, p, err := ledger.CreatePrincipal(ctx, env.Store, "acme", "Ana María (accounts payable)", roles)
	require.NoError(t, err)
	ps, err := ledger.ListPrincipals(ctx, env.Store, "acme")
	require.NoError(t, err)
	require.Len(t, ps, 1, "only the good name was created")
	require.Equal(t, p.ID, ps[0].ID)
}
