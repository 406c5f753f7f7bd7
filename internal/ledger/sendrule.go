package ledger

import (
	"time"

	"github.com/opledger/opledger/executor"
	"github.com/opledger/opledger/store"
)

// The send rule: when an attempt may send the operation's request to the
// downstream, and what each send proves. It is judged on the database's
// clock by the statements (the guards of state.go's table, built in
// guards.go), and on this process's monotonic clock by the executor, which
// enforces the bounds this file computes (Call.SendBy, the call's
// deadline); this file is the one place that states it.
//
//   - First send. first_sent_fence records the first attempt that may have
//     reached the downstream. FAILED promises that nothing happened, so only
//     a refusal of that first send earns it (GuardFirstSend); a refusal of a
//     later attempt proves nothing about the earlier one, and is recorded as
//     OUTCOME_UNKNOWN (record).
//   - Approval bound. An approval bounds when the first send may start: the
//     claim checks it is in force (GuardApprovalInForce), and the executor
//     sends nothing past Call.SendBy (downstreamCall). The first send
//     consumes the approval: once the request may have reached the
//     downstream it may have taken effect, so the operation never goes back
//     to AWAITING_APPROVAL, where it could be denied. A claim released with
//     nothing sent consumes nothing.
//   - Key window. A resubmission of the downstream key (a takeover, a claim
//     after a release or a lookup miss) is safe only while the downstream
//     still remembers the key: until keyWindowFactor of its key retention,
//     counted from the first claim on the database's clock, including the
//     time the request may take to reach it (GuardKeyWindow, keyStillDedupes).
//   - Call deadline. The call ends within four fifths of the lease the
//     claim measured, so that the outcome's write fits in the rest
//     (sendDeadline).

// keyWindowFactor is the share of a downstream's key retention inside
// which a resubmission of its key is trusted to be deduplicated
// (docs/tools.md, key_retention): a margin for a downstream that counts its
// retention on its own clock, from its own receipt of the first request.
// The statements receive it as a parameter (store.KeyWindow.Factor), so Go
// and SQL judge the same window.
const keyWindowFactor = 0.9

// keyStillDedupes reports whether resubmitting the operation's downstream key
// is harmless: the downstream dedupes keys, and it cannot yet have forgotten
// this one, nor will it have within ahead (how long a resubmission decided
// now may take to reach it). Past keyWindowFactor of its key retention,
// counted from the first claim on the database's clock, a lookup miss proves
// nothing and a resubmission could be a second effect. The statements that
// act on it check the same window themselves (keyWindow); this answer only
// picks the path.
func keyStillDedupes(b bound, op Operation, ahead time.Duration) bool {
	if !b.caps.DedupesKeys {
		return false
	}
	r := b.settings.KeyRetention
	if r == 0 || op.FirstClaimedAt.IsZero() {
		return true
	}
	if op.DBNow.IsZero() {
		return false
	}
	return op.SinceFirstClaim()+ahead < time.Duration(keyWindowFactor*float64(r))
}

// keyWindow is the guard that keyStillDedupes's rule becomes in a statement.
func keyWindow(b bound, ahead time.Duration) store.KeyWindow {
	return store.KeyWindow{Retention: b.settings.KeyRetention, Ahead: ahead, Factor: keyWindowFactor}
}

// resubmissionTooLate reports that a resubmission of op's downstream key,
// which may reach the downstream as late as the end of lease, could come
// after the downstream forgot the key (keyStillDedupes).
func resubmissionTooLate(op Operation, b bound, lease time.Duration) bool {
	return op.FirstSentFence != 0 && b.caps.DedupesKeys && b.settings.KeyRetention > 0 && !keyStillDedupes(b, op, lease)
}

// sendDeadline is when the attempt's call must end, on this process's
// clock: four fifths of the lease the claim measured (counted from before
// its statement), leaving the rest for the outcome's write.
func sendDeadline(op Operation, claimStart time.Time, lease time.Duration) time.Time {
	return claimStart.Add(min(lease, op.LeaseRemaining()) * 4 / 5)
}

// downstreamCall is the request of the attempt op holds. Until the first
// send, an approval bounds when a send may start (Call.SendBy): the
// approval's time left on the database's clock when the claim read it,
// counted on this process's clock from before the claim's statement.
func downstreamCall(op Operation, claimStart time.Time) executor.Call {
	call := executor.Call{Tenant: op.Tenant, Tool: op.Tool, ToolVersion: op.ToolVersion,
		OperationID: op.ID, DownstreamKey: op.DownstreamKey, Args: op.Args}
	if op.ApprovalRequired && op.FirstSentFence == 0 {
		call.SendBy = claimStart.Add(op.ApprovalExpiresAt.Sub(op.DBNow))
	}
	return call
}
