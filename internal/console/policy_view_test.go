package console

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/ledger"
)

// TestPolicyWhy: each rule an operation can record says in words why it
// needs approval; the rule's CEL text is shown only for the policy the
// operation was judged under.
func TestPolicyWhy(t *testing.T) {
	t.Parallel()
	for rule, want := range map[string]string{
		"approval.required": "every call of this tool version needs approval",
		"approval.when":     "these arguments meet the tool's approval.when rule",
		"approval.edited":   "an approver edited the arguments",
		"limits.big_day":    "the call goes past the budget big_day, whose over: approve asks for an approval then",
		"something.new":     "a rule of the tool's policy",
	} {
		p := policyOf(ledger.Operation{ApprovalRule: rule, ApprovalRequired: true, ApprovalsNeeded: 1, PolicyDigest: "abc"}, nil)
		require.Contains(t, p.Why, want, rule)
		require.Empty(t, p.Expr, "no tool here: the text judged by is unknown")
		require.Equal(t, "the tool version is no longer configured on this server", p.Standing)
	}
	require.Empty(t, policyOf(ledger.Operation{}, nil).Why, "no approval needed, nothing to explain")
}
