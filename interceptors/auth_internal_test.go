package interceptors

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRoleRequiredMessage: the refusal names the method, the roles it
// admits and the roles the key has, in plain words.
func TestRoleRequiredMessage(t *testing.T) {
	t.Parallel()
	const get = "/opledger.v1.LedgerService/Get"
	for _, tc := range []struct {
		allowed, held []string
		want          string
	}{
		{[]string{"approver"}, []string{"agent"}, "Get needs a key with the approver role; this key has the agent role"},
		{[]string{"agent", "approver"}, []string{"operator"}, "Get needs a key with the agent or approver role; this key has the operator role"},
		{[]string{"agent", "approver", "operator"}, []string{"agent", "approver"},
			"Get needs a key with the agent, approver or operator role; this key has the agent and approver roles"},
		{[]string{"operator"}, nil, "Get needs a key with the operator role; this key has no role"},
		{nil, []string{"agent"}, "Get is not open to any role"},
	} {
		require.Equal(t, tc.want, roleRequiredMessage(get, tc.allowed, tc.held))
	}
}
