package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/opledger/opledger/audit"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/store"
)

func cmdAuditExport(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := newFlagSet("audit export", "--tenant T [--since TIME] [--until TIME] --out FILE", `
Writes a tenant's receipts as JSON Lines (docs/audit.md): the newest signed
checkpoint, the operations changed at or after --since and created before
--until (RFC 3339 times; unbounded when absent) with all their events, and
for each the inclusion proof of its chain head in that checkpoint, then an
end line with the counts. Needs DATABASE_URL and, in OPLEDGER_API_KEY, an
operator key of the tenant: another tenant's export is refused.`)
	e := newEnvFlags(fs)
	var url, key, tenant, since, until, out string
	e.str(&url, "database-url", "DATABASE_URL", "", "PostgreSQL connection `URL`")
	e.str(&key, "api-key", "OPLEDGER_API_KEY", "", "an operator `key` of the tenant")
	fs.StringVar(&tenant, "tenant", "", "the `tenant` to export (required)")
	fs.StringVar(&since, "since", "", "operations changed at or after this `TIME` (RFC 3339)")
	fs.StringVar(&until, "until", "", "operations created before this `TIME` (RFC 3339)")
	fs.StringVar(&out, "out", "", "the export `FILE` (required; not overwritten)")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	if err := e.apply(getenv); err != nil {
		return err
	}
	if tenant == "" || out == "" {
		return errors.New("audit export: --tenant and --out are required")
	}
	var q store.AuditQuery
	for _, t := range []struct {
		name, v string
		at      *time.Time
	}{{"since", since, &q.Since}, {"until", until, &q.Until}} {
		if t.v == "" {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, t.v)
		if err != nil {
			return fmt.Errorf("audit export: --%s %q is not an RFC 3339 time", t.name, t.v)
		}
		*t.at = at
	}
	if key == "" {
		return errors.New("audit export: OPLEDGER_API_KEY must hold an operator key of the tenant")
	}
	st, err := keysStore(ctx, url)
	if err != nil {
		return err
	}
	defer st.Close()
	p, err := ledger.PrincipalOfKey(ctx, st, key)
	if err != nil {
		return fmt.Errorf("audit export: %w", err)
	}
	if p.Tenant != tenant || !slices.Contains(p.Roles, ledger.RoleOperator) {
		return fmt.Errorf("audit export: refused: the key is not an operator key of tenant %q", tenant)
	}
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("audit export: %w", err)
	}
	w := bufio.NewWriter(f)
	q.Tenant, q.Limit = tenant, auditPage
	var counts [4]int
	// One snapshot: the checkpoint, its leaves and the operations of one
	// moment.
	err = st.InSnapshot(ctx, func(c *store.Conn) error {
		var err error
		counts, err = writeExport(ctx, c, q, w)
		return err
	})
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(out)
		return fmt.Errorf("audit export: %w", err)
	}
	fmt.Fprintf(stdout, "exported tenant %s to %s: %d operations, %d events, %d proofs, %d checkpoints\n",
		tenant, out, counts[0], counts[1], counts[2], counts[3])
	return nil
}

// writeExport writes the export's lines and returns its counts
// (operations, events, proofs, checkpoints).
func writeExport(ctx context.Context, st *store.Conn, q store.AuditQuery, w io.Writer) ([4]int, error) {
	var n [4]int
	enc := json.NewEncoder(w)
	now := time.Now().UTC()
	h := audit.Line{Type: "header", Version: audit.ExportVersion, Tenant: q.Tenant, CreatedAt: &now}
	if !q.Since.IsZero() {
		h.Since = &q.Since
	}
	if !q.Until.IsZero() {
		h.Until = &q.Until
	}
	if err := enc.Encode(h); err != nil {
		return n, err
	}
	cps, err := st.AuditCheckpoints(ctx)
	if err != nil {
		return n, err
	}
	var cp *audit.Checkpoint
	var tree *audit.Tree
	if len(cps) > 0 {
		cp = &cps[len(cps)-1]
		leaves, err := st.AuditLeaves(ctx, cp.Size, nil)
		if err != nil {
			return n, err
		}
		hashes := make([][]byte, len(leaves))
		for i, l := range leaves {
			if hashes[i], err = audit.LeafHash(l); err != nil {
				return n, err
			}
		}
		tree = audit.NewTree(hashes)
		if err := enc.Encode(audit.Line{Type: "checkpoint", Checkpoint: cp}); err != nil {
			return n, err
		}
		n[3]++
	}
	for {
		recs, err := st.AuditPage(ctx, q)
		if err != nil {
			return n, err
		}
		ids := make([]string, len(recs))
		for i, r := range recs {
			ids[i] = r.Operation.ID
		}
		// Each operation's newest leaf in the checkpoint's tree.
		newest := map[string]audit.Leaf{}
		if cp != nil && len(ids) > 0 {
			leaves, err := st.AuditLeaves(ctx, 0, ids)
			if err != nil {
				return n, err
			}
			for _, l := range leaves {
				if l.Index < cp.Size {
					newest[l.OperationID] = l
				}
			}
		}
		for _, r := range recs {
			op := r.Operation
			if err := enc.Encode(audit.Line{Type: "operation", Operation: &op}); err != nil {
				return n, err
			}
			n[0]++
			for _, e := range r.Events {
				if err := enc.Encode(audit.Line{Type: "event", Event: &e}); err != nil {
					return n, err
				}
				n[1]++
			}
			l, ok := newest[op.ID]
			if !ok {
				continue
			}
			p, err := tree.Inclusion(l.Index, cp.Size)
			if err != nil {
				return n, err
			}
			pr := audit.Proof{CheckpointSeq: cp.Seq, Size: cp.Size, Leaf: l}
			for _, h := range p {
				pr.Hashes = append(pr.Hashes, h)
			}
			if err := enc.Encode(audit.Line{Type: "proof", Proof: &pr}); err != nil {
				return n, err
			}
			n[2]++
		}
		if len(recs) < int(q.Limit) {
			break
		}
		q.AfterID = recs[len(recs)-1].Operation.ID
	}
	end := audit.Line{Type: "end", Operations: &n[0], Events: &n[1], Proofs: &n[2], Checkpoints: &n[3]}
	return n, enc.Encode(end)
}

func verifyExportFile(file, publicKey string, stdout io.Writer) error {
	if publicKey == "" {
		return errors.New("audit verify: an export needs --public-key FILE (FILE.pub of opledger audit keygen)")
	}
	b, err := os.ReadFile(publicKey)
	if err != nil {
		return fmt.Errorf("audit verify: %w", err)
	}
	v, err := note.NewVerifier(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("audit verify: --public-key %s is not a public key of opledger audit keygen: %w", publicKey, err)
	}
	f, err := os.Open(file)
	if err != nil {
		return fmt.Errorf("audit verify: %w", err)
	}
	defer f.Close()
	rep := audit.VerifyExport(f, v, nil)
	for _, b := range rep.Breaks {
		fmt.Fprintln(stdout, "BREAK", b.String())
	}
	fmt.Fprintf(stdout, "%s (tenant %s): checked %d operations, %d events (%d hash-chained), %d checkpoints (key %s), %d inclusion proofs; %d operations changed after the newest checkpoint (chains checked, not yet signed): %d breaks\n",
		file, rep.Tenant, rep.Operations, rep.Events, rep.Hashed, rep.Checkpoints, v.Name(), rep.Proofs, rep.Unchecked, len(rep.Breaks))
	if len(rep.Breaks) > 0 {
		return breaksError(len(rep.Breaks))
	}
	return nil
}
