package reason

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
)

// TestEveryReasonHasOneCode: every reason of the API's enum (but
// UNSPECIFIED) is in the table, so no layer ever has to choose a code.
func TestEveryReasonHasOneCode(t *testing.T) {
	t.Parallel()
	for n, name := range opledgerv1.ErrorReason_name {
		r := opledgerv1.ErrorReason(n)
		if r == opledgerv1.ErrorReason_ERROR_REASON_UNSPECIFIED {
			require.NotContains(t, codeOf, r)
			continue
		}
		c, ok := codeOf[r]
		require.True(t, ok, "%s has no code", name)
		require.NotEqual(t, codes.OK, c, name)
		require.Equal(t, r, Parse(String(r)))
	}
	require.Len(t, codeOf, len(opledgerv1.ErrorReason_name)-1)
}

func TestStatus(t *testing.T) {
	t.Parallel()
	err := Status(opledgerv1.ErrorReason_ERROR_REASON_IDEMPOTENCY_KEY_REUSED, "reused", map[string]string{"operation_id": "op_1"},
		FieldViolation("f", "bad"))
	st, ok := status.FromError(err)
	require.True(t, ok)
	require.Equal(t, codes.AlreadyExists, st.Code())
	var infos []*errdetails.ErrorInfo
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			infos = append(infos, info)
		}
	}
	require.Len(t, infos, 1)
	require.Equal(t, Domain, infos[0].GetDomain())
	require.Equal(t, "IDEMPOTENCY_KEY_REUSED", Of(err))
	require.Equal(t, "op_1", infos[0].GetMetadata()["operation_id"])
}
