package ledger_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/proof/harness"
)

// TestApprovalNotificationOfAnEarlierWaitIsNotSentLate: the "prepared"
// notification of an operation still failing when an approver decides it is
// dropped, not sent late, even though the operation later awaits approval
// again (its approval lapsed): that wait has its own notification
// ("approval_expired"); the first one is about a wait that a decision ended.
func TestApprovalNotificationOfAnEarlierWaitIsNotSentLate(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: harness.ToolsYAML(harness.ToolSpec{Name: "pay_quick", ApprovalTTL: time.Second})})
	r := newReceiver(t, http.StatusServiceUnavailable) // the first delivery fails, then every one is acknowledged
	srv := notifyingServer(w, r, ledger.ApprovalWebhook{Backoff: 3 * time.Second})
	op := prepare(t, srv.Client, w.agent, "pay_quick", payArgs(t, "INV-STALE"))
	r.waitFor("the failed first delivery", func(d []delivery) bool { return len(d) >= 1 })

	decided := time.Now()
	expires := approve(t, srv.Client, w.approver, op).GetOperation().GetApproval().GetExpireTime().AsTime()
	for time.Now().Before(expires.Add(50 * time.Millisecond)) {
		time.Sleep(20 * time.Millisecond)
	}
	_, err := execute(srv.Client, w.agent, op.GetId(), 0)
	_, reason := reasonOf(t, err)
	require.Equal(t, "APPROVAL_EXPIRED", reason)
	require.Less(t, time.Since(decided), 2500*time.Millisecond, "the first notification's retry (3 s) is still ahead")

	waitDrained(t, w.env.DBURL)
	got := r.deliveries()
	var ids []string
	for _, d := range got {
		ids = append(ids, d.payload.ID+" "+d.payload.Reason+" "+d.at.Sub(decided).Round(time.Millisecond).String()+" "+http.StatusText(d.status))
	}
	for _, d := range got {
		if d.payload.ID == op.GetId()+"/1" {
			require.True(t, d.at.Before(decided),
				"the notification of the wait the approval ended was sent after the decision (times from the decision): %v", ids)
		}
	}
	require.Len(t, got, 2, "the failed first delivery, and the one for the new wait: %v", ids)
}
