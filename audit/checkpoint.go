package audit

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/transparency-dev/formats/log"
	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"

	"github.com/opledger/opledger/clients/go/fingerprint"
)

// The receipts' log: every checkpoint appends a leaf for each chain head
// that changed since the one before (an operation's id, its event count and
// the hash of its last event) to one append-only RFC 6962 Merkle tree, and
// signs the tree's new size and root as a checkpoint in the signed-note
// format transparency logs use (github.com/transparency-dev/formats/log,
// golang.org/x/mod/sumdb/note). A chain rewritten after a checkpoint no
// longer ends in the head the signed tree holds.

// hasher is the tree's: RFC 6962 over SHA-256.
var hasher = rfc6962.DefaultHasher

// Leaf is one chain head a checkpoint committed to.
type Leaf struct {
	// Index is the leaf's position in the log.
	Index       uint64   `json:"index"`
	OperationID string   `json:"operation_id"`
	Events      int32    `json:"events"`
	Head        HexBytes `json:"head"`
}

// LeafData is the leaf's bytes in the tree: the RFC 8785 form of
// {"events": n, "head": hex, "op": id}.
func LeafData(l Leaf) ([]byte, error) {
	return fingerprint.Canonicalize(map[string]any{"events": l.Events, "head": l.Head.String(), "op": l.OperationID})
}

// LeafHash is the leaf's RFC 6962 hash.
func LeafHash(l Leaf) ([]byte, error) {
	d, err := LeafData(l)
	if err != nil {
		return nil, err
	}
	return hasher.HashLeaf(d), nil
}

// Checkpoint is one signed tree head of the receipts' log.
type Checkpoint struct {
	Seq  int64    `json:"seq"`
	Size uint64   `json:"size"`
	Root HexBytes `json:"root"`
	// Range is the compact range [0, Size): what the next checkpoint
	// appends to (stored, not exported).
	Range []HexBytes `json:"-"`
	// Note is the signed note: the checkpoint body (origin, size, base64
	// root) and its signature lines.
	Note string `json:"note"`
}

// NextCheckpoint appends changed (in order; their Index is set here) to
// the log whose last checkpoint is last (nil: none yet) and signs the new
// tree head with signer; the checkpoint's origin is the signer's name.
func NextCheckpoint(last *Checkpoint, changed []Leaf, signer note.Signer) (*Checkpoint, []Leaf, error) {
	rf := compact.RangeFactory{Hash: hasher.HashChildren}
	r := rf.NewEmptyRange(0)
	seq := int64(1)
	if last != nil {
		hashes := make([][]byte, len(last.Range))
		for i, h := range last.Range {
			hashes[i] = h
		}
		var err error
		if r, err = rf.NewRange(0, last.Size, hashes); err != nil {
			return nil, nil, fmt.Errorf("audit: the last checkpoint's range: %w", err)
		}
		seq = last.Seq + 1
	}
	leaves := make([]Leaf, len(changed))
	for i, l := range changed {
		l.Index = r.End()
		h, err := LeafHash(l)
		if err != nil {
			return nil, nil, err
		}
		if err := r.Append(h, nil); err != nil {
			return nil, nil, err
		}
		leaves[i] = l
	}
	root, err := r.GetRootHash(nil)
	if err != nil {
		return nil, nil, err
	}
	body := log.Checkpoint{Origin: signer.Name(), Size: r.End(), Hash: root}.Marshal()
	msg, err := note.Sign(&note.Note{Text: string(body)}, signer)
	if err != nil {
		return nil, nil, fmt.Errorf("audit: sign checkpoint: %w", err)
	}
	cp := &Checkpoint{Seq: seq, Size: r.End(), Root: root, Note: string(msg)}
	for _, h := range r.Hashes() {
		cp.Range = append(cp.Range, h)
	}
	return cp, leaves, nil
}

// OpenCheckpoint checks a signed note against the verifier's key and
// returns the tree head it signs.
func OpenCheckpoint(msg string, v note.Verifier) (log.Checkpoint, error) {
	n, err := note.Open([]byte(msg), note.VerifierList(v))
	if err != nil {
		return log.Checkpoint{}, fmt.Errorf("audit: checkpoint signature: %w", err)
	}
	var c log.Checkpoint
	if _, err := c.Unmarshal([]byte(n.Text)); err != nil {
		return log.Checkpoint{}, fmt.Errorf("audit: checkpoint body: %w", err)
	}
	if c.Origin != v.Name() {
		return log.Checkpoint{}, fmt.Errorf("audit: checkpoint of origin %q, the key is %q's", c.Origin, v.Name())
	}
	return c, nil
}

// Tree holds every leaf hash of the log up to a size, to build inclusion
// proofs from (with the merkle library's proof.Inclusion and Rehash).
type Tree struct {
	// levels[k][j] is the hash of the perfect subtree of height k at
	// index j.
	levels [][][]byte
}

// NewTree builds the tree over leaf hashes.
func NewTree(leafHashes [][]byte) *Tree {
	t := &Tree{levels: [][][]byte{leafHashes}}
	for lv := t.levels[0]; len(lv) > 1; {
		next := make([][]byte, len(lv)/2)
		for j := range next {
			next[j] = hasher.HashChildren(lv[2*j], lv[2*j+1])
		}
		t.levels = append(t.levels, next)
		lv = next
	}
	return t
}

// Inclusion is the proof that leaf index is in the tree of size.
func (t *Tree) Inclusion(index, size uint64) ([][]byte, error) {
	nodes, err := proof.Inclusion(index, size)
	if err != nil {
		return nil, err
	}
	hashes := make([][]byte, len(nodes.IDs))
	for i, id := range nodes.IDs {
		if int(id.Level) >= len(t.levels) || id.Index >= uint64(len(t.levels[id.Level])) {
			return nil, fmt.Errorf("audit: node %d/%d is not in the tree", id.Level, id.Index)
		}
		hashes[i] = t.levels[id.Level][id.Index]
	}
	return nodes.Rehash(hashes, hasher.HashChildren)
}

// VerifyInclusion checks that leaf is in the tree of size with root.
func VerifyInclusion(l Leaf, size uint64, root []byte, p [][]byte) error {
	h, err := LeafHash(l)
	if err != nil {
		return err
	}
	return proof.VerifyInclusion(hasher, l.Index, size, h, p, root)
}

// NoteHash identifies a signed checkpoint (its SHA-256), for a report.
func NoteHash(msg string) string {
	sum := sha256.Sum256([]byte(msg))
	return fmt.Sprintf("%x", sum[:8])
}

// errRoot reports a tree whose root is not the checkpoint's.
var errRoot = errors.New("audit: the leaves do not make the checkpoint's root")

// CheckRoot recomputes the root of leafHashes and compares it with root.
func CheckRoot(leafHashes [][]byte, root []byte) error {
	rf := compact.RangeFactory{Hash: hasher.HashChildren}
	r := rf.NewEmptyRange(0)
	for _, h := range leafHashes {
		if err := r.Append(h, nil); err != nil {
			return err
		}
	}
	got, err := r.GetRootHash(nil)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, root) {
		return errRoot
	}
	return nil
}
