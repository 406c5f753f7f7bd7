package ledger

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/executor"
	"github.com/opledger/opledger/tool"
)

// TestLeaseOwnersOfReplicasSharingAServerID: two processes given the same
// --server-id never name an attempt alike, so the one recovering a claim
// whose answer it lost (recoverClaim) never takes the other's live claim
// for its own; each holds its own attempts only.
func TestLeaseOwnersOfReplicasSharingAServerID(t *testing.T) {
	t.Parallel()
	reg, err := tool.Parse([]byte(`tools:
  - name: ping
    version: "1"
    effect: read_only
    args_schema: {type: object}
    executor: {type: http, url: "http://127.0.0.1:9/ping"}
`), func(string) string { return "" })
	require.NoError(t, err)
	logger := slog.New(slog.DiscardHandler)
	replica := func() *Ledger {
		l, err := New(Config{ServerID: "srv_shared", DownstreamSecret: []byte("0123456789abcdef")}, nil, reg,
			executor.NewDefaultRegistry(nil, logger), nil, logger)
		require.NoError(t, err)
		return l
	}
	a, b := replica(), replica()
	oa, ob := a.leaseOwner(), b.leaseOwner()
	require.NotEqual(t, oa, ob, "the first attempt of each")
	require.True(t, a.holdsLease(oa))
	require.False(t, b.holdsLease(oa))
	require.False(t, a.holdsLease(ob))
	require.NotEqual(t, oa, a.leaseOwner(), "each attempt its own")
}
