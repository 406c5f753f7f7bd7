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

// Prune deletes every finished operation older than the retention, and
// every webhook event received longer ago than that, in batches, and
// returns how many operations it deleted.
func (l *Ledger) Prune(ctx context.Context) (int64, error) {
	total, err := inBatches(ctx, func() (int64, error) { return l.store.OperationPrune(ctx, l.cfg.Retention, pruneBatch) })
	if err != nil {
		return total, err
	}
	if _, err := inBatches(ctx, func() (int64, error) {
		return l.store.WebhookEventPrune(ctx, l.cfg.Retention, pruneBatch)
	}); err != nil {
		return total, err
	}
	// Budgets and identities nothing counts in any more.
	for _, prune := range []func() (int64, error){
		func() (int64, error) { return l.store.BudgetPrune(ctx, pruneBatch) },
		func() (int64, error) { return l.store.IdentityPrune(ctx, pruneBatch) },
	} {
		if _, err := inBatches(ctx, prune); err != nil {
			return total, err
		}
	}
	_, err = l.store.TenantUsagePrune(ctx)
	return total, err
}

// pruneBatch bounds the rows one pruning statement deletes.
const pruneBatch = 1000

// inBatches runs prune until a batch comes back short or ctx ends, and
// returns how many rows it deleted in all.
func inBatches(ctx context.Context, prune func() (int64, error)) (int64, error) {
	var total int64
	for ctx.Err() == nil {
		n, err := prune()
		if err != nil {
			return total, err
		}
		total += n
		if n < pruneBatch {
			break
		}
	}
	return total, nil
}

// Retention is how long finished operations are kept.
func (l *Ledger) Retention() time.Duration { return l.cfg.Retention }
