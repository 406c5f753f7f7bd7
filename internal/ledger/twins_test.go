package ledger_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/harness"
)

// TestPrepareTwinsNeverInternal (found by the chaos suite): two Prepares of
// the same call (same key, same arguments) racing each other both passed
// the insert's idempotency check before either had inserted; both then
// carried the same downstream key (it derives from the key and the
// arguments), and the second insert failed on the downstream key's unique
// index, which the insert's ON CONFLICT did not cover: its caller got
// INTERNAL instead of the operation, replayed. Every twin must get the one
// operation.
func TestPrepareTwinsNeverInternal(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{})
	servers := []opledgerv1.LedgerServiceClient{
		w.env.StartServer(harness.ServerOptions{NoReconciler: true}).Client,
		w.env.StartServer(harness.ServerOptions{NoReconciler: true}).Client,
	}
	const rounds, twins = 150, 6
	for r := range rounds {
		idem := harness.Unique("twin")
		args := payArgs(t, idem)
		ids := make([]string, twins)
		errs := make([]error, twins)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range twins {
			c := servers[i%len(servers)]
			wg.Go(func() {
				<-start
				resp, err := c.Prepare(harness.Ctx(w.agent, idem), &opledgerv1.PrepareRequest{Tool: "pay_invoice", Args: args})
				ids[i], errs[i] = resp.GetOperation().GetId(), err
			})
		}
		close(start)
		wg.Wait()
		for i := range twins {
			require.NoError(t, errs[i], "round %d, twin %d", r, i)
			require.Equal(t, ids[0], ids[i], "round %d: one key, one operation", r)
		}
	}
}
