package chaos

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/audit"
)

// TestAuditReportVerdict: a run fails on any receipt break, and its
// control (an event edited first) fails when the verification misses it.
func TestAuditReportVerdict(t *testing.T) {
	brk := audit.Break{OperationID: "op_1", Seq: 2, Check: audit.CheckChain, Problem: "hash does not match"}
	require.NoError(t, (&AuditReport{Operations: 3}).verdict())
	require.ErrorContains(t, (&AuditReport{Operations: 3, Breaks: 1, First: []audit.Break{brk}}).verdict(), "operation op_1 event 2")
	require.ErrorContains(t, (&AuditReport{Operations: 3, Tampered: "an event"}).verdict(), "found no break")
	require.NoError(t, (&AuditReport{Operations: 3, Tampered: "an event", Breaks: 1, First: []audit.Break{brk}}).verdict())
	s := Summary{Audit: &AuditReport{Operations: 3, Breaks: 1, First: []audit.Break{brk}}}
	require.Error(t, s.Err(false))
	require.Contains(t, s.Line(), "receipts_checked=3 receipt_breaks=1")
}
