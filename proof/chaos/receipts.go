package chaos

import (
	"context"
	"fmt"

	"github.com/opledger/opledger/audit"
	"github.com/opledger/opledger/store"
)

// AuditReport is the receipts' check at the end of a run (Options.AuditVerify):
// every operation's hash chain and decisive fields in the live tables, as
// `opledger audit verify --database` checks them, before the cluster is torn
// down.
type AuditReport struct {
	Operations, Events, Hashed int
	// Breaks counts every break; First holds the first few.
	Breaks int
	First  []audit.Break
	// Tampered names the event Options.AuditTamper changed ("" when none).
	Tampered string
}

// line is the report's part of Summary.Line.
func (a *AuditReport) line() string {
	return fmt.Sprintf("receipts_checked=%d receipt_breaks=%d", a.Operations, a.Breaks)
}

// verdict is the report's part of Summary.Err: no break, or with
// Options.AuditTamper at least one (the control: the check is shown to
// catch an edit of the tables).
func (a *AuditReport) verdict() error {
	switch {
	case a.Tampered != "" && a.Breaks == 0:
		return fmt.Errorf("receipts control: %s was changed in the tables and the verification found no break; it proves nothing", a.Tampered)
	case a.Tampered == "" && a.Breaks > 0:
		return fmt.Errorf("receipts: %d break(s) in the live tables, e.g. %s", a.Breaks, a.First[0])
	}
	return nil
}

// verifyReceipts checks the receipts of every operation of the run; with
// Options.AuditTamper it first changes one hash-chained event's detail, as
// someone with the table's rights could.
func (r *Runner) verifyReceipts(ctx context.Context) (*AuditReport, error) {
	rep := &AuditReport{}
	if r.opts.AuditTamper {
		const pick = `(SELECT operation_id, seq FROM operation_event WHERE hash IS NOT NULL ORDER BY operation_id, seq DESC LIMIT 1)`
		if err := store.AdminExec(ctx, r.dbURL, `UPDATE operation_event SET detail = detail || ' (edited)' WHERE (operation_id, seq) = `+pick); err != nil {
			return nil, fmt.Errorf("chaos: receipts control: %w", err)
		}
		rep.Tampered = "the detail of the last event of the first operation"
	}
	st, err := store.Open(ctx, store.Config{URL: r.dbURL, MaxConns: 2})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	err = st.AuditVerifyAll(ctx, 500, func(rec store.AuditRecord, breaks []audit.Break) {
		rep.Operations++
		rep.Events += len(rec.Events)
		for _, e := range rec.Events {
			if e.Hash != nil {
				rep.Hashed++
			}
		}
		rep.Breaks += len(breaks)
		for _, b := range breaks {
			if len(rep.First) < 20 {
				rep.First = append(rep.First, b)
			}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("chaos: receipts: %w", err)
	}
	r.logf("receipts: checked %d operations, %d events (%d hash-chained): %d breaks", rep.Operations, rep.Events, rep.Hashed, rep.Breaks)
	return rep, nil
}
