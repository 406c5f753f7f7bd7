package server

import (
	"testing"

	"github.com/stretchr/testify/require"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
)

// TestEveryReasonHasACode: a reason added to the proto without a gRPC code
// would surface as INTERNAL.
func TestEveryReasonHasACode(t *testing.T) {
	for n, name := range opledgerv1.ErrorReason_name {
		if n == 0 {
			continue
		}
		_, ok := codeOf[opledgerv1.ErrorReason(n)]
		require.True(t, ok, "ErrorReason %s has no gRPC code in codeOf", name)
	}
}
