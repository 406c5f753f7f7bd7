package ledger

import (
	"context"
	"time"
)

// RunPruner deletes finished operations older than the retention until ctx
// ends. Every replica may run it: batches skip rows another replica holds.
// Open and OUTCOME_UNKNOWN operations are never pruned. A key whose
// operation was pruned is free again: reusing it starts a new operation.
func (l *Ledger) RunPruner(ctx context.Context) {
	t := time.NewTicker(l.cfg.PruneInterval)
	defer t.Stop()
	for {
		if n, err := l.Prune(ctx); err != nil {
			l.logger.Warn("pruner: failed", "error", err)
		} else if n > 0 {
			l.logger.Info("pruner: deleted finished operations", "count", n, "retention", l.cfg.Retention.String())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Prune deletes every finished operation older than the retention, in
// batches, and returns how many it deleted.
func (l *Ledger) Prune(ctx context.Context) (int64, error) {
	var total int64
	for ctx.Err() == nil {
		n, err := l.store.OperationPrune(ctx, l.cfg.Retention, 1000)
		if err != nil {
			return total, err
		}
		total += n
		if n < 1000 {
			break
		}
	}
	_, err := l.store.TenantUsagePrune(ctx)
	return total, err
}

// Retention is how long finished operations are kept.
func (l *Ledger) Retention() time.Duration { return l.cfg.Retention }
