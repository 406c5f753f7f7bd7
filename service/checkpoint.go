package service

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/opledger/opledger/audit"
	"github.com/opledger/opledger/store"
)

// LoadAuditSigner reads a checkpoint signing key written by opledger audit
// keygen.
func LoadAuditSigner(path string) (note.Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--audit-signing-key: %w", err)
	}
	s, err := note.NewSigner(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("--audit-signing-key %s: not a key of opledger audit keygen: %w", path, err)
	}
	return s, nil
}

// Checkpointer signs the receipts' checkpoints every interval, on
// whichever replica takes the checkpoint lock (store.AuditCheckpoint).
type Checkpointer struct {
	Store    *store.Store
	Signer   note.Signer
	Interval time.Duration
	Log      *slog.Logger
}

// Run checkpoints until ctx ends.
func (c Checkpointer) Run(ctx context.Context) {
	t := time.NewTicker(c.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := c.Once(ctx); err != nil && ctx.Err() == nil {
			c.Log.Warn("audit: checkpoint failed", "error", err)
		}
	}
}

// Once signs one checkpoint of the changed chain heads, and more while a
// batch comes back full; it returns the last it made (nil: nothing
// changed, or another replica holds the lock).
func (c Checkpointer) Once(ctx context.Context) (*audit.Checkpoint, error) {
	var last *audit.Checkpoint
	for {
		n := 0
		cp, err := c.Store.AuditCheckpoint(ctx, func(prev *audit.Checkpoint, changed []audit.Leaf) (*audit.Checkpoint, []audit.Leaf, error) {
			n = len(changed)
			return audit.NextCheckpoint(prev, changed, c.Signer)
		})
		if err != nil || cp == nil {
			return last, err
		}
		last = cp
		c.Log.Info("audit: signed checkpoint", "seq", cp.Seq, "size", cp.Size, "heads", n)
		if n < store.AuditCheckpointBatch {
			return last, nil
		}
	}
}
