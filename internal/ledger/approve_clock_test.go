package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/harness"
	"github.com/opledger/opledger/store"
)

// TestApproveJudgesLapseWhenItDecides: an Approve that began before the
// approval's end but waited on the operation's row lock until after it must
// judge the lapse when it decides, not when its transaction began (now() in
// PostgreSQL): it renews the lapsed approval, instead of answering "approved,
// replayed" with an expiry already past, which the agent's Execute then
// refuses as APPROVAL_EXPIRED.
func TestApproveJudgesLapseWhenItDecides(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: harness.ToolsYAML(harness.ToolSpec{Name: "pay_brief",
		ApprovalTTL: 2 * time.Second, DedupesKeys: true, Lookup: true})})
	c := w.env.StartServer(harness.ServerOptions{NoReconciler: true}).Client
	op := prepare(t, c, w.agent, "pay_brief", payArgs(t, "INV-LOCK"))
	expires := approve(t, c, w.approver, op).GetOperation().GetApproval().GetExpireTime().AsTime()
	locked, release, unlocked := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		unlocked <- w.env.Store.InTx(context.Background(), func(tx *store.Conn) error {
			if _, err := tx.OperationGetForUpdate(context.Background(), "acme", op.GetId()); err != nil {
				return err
			}
			close(locked)
			<-release
			return nil
		})
	}()
	<-locked
	// The second Approve begins 400 ms before the approval's end and waits
	// on the lock until 400 ms after it.
	time.Sleep(time.Until(expires.Add(-400 * time.Millisecond)))
	type answer struct {
		resp *opledgerv1.ApproveResponse
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		r, err := decide(c, w.approver, op.GetId(), op.GetFingerprint(), opledgerv1.Decision_DECISION_APPROVE)
		done <- answer{r, err}
	}()
	time.Sleep(time.Until(expires.Add(400 * time.Millisecond)))
	close(release)
	require.NoError(t, <-unlocked)
	a := <-done
	require.NoError(t, a.err)
	require.True(t, a.resp.GetOperation().GetApproval().GetExpireTime().AsTime().After(expires),
		"the lapsed approval is renewed (replayed=%v)", a.resp.GetReplayed())
	_, err := execute(c, w.agent, op.GetId(), 0)
	require.NoError(t, err, "the approver was just told the operation is approved")
}
