package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"golang.org/x/mod/sumdb/note"
)

// An export is JSON Lines, one object per line, each with a "type":
//
//	header      {version, tenant, since, until, created_at}
//	checkpoint  {checkpoint: {seq, size, root, note}}      the newest signed checkpoint
//	operation   {operation: Operation}
//	event       {event: Event}                            after its operation, in seq order
//	proof       {proof: {checkpoint_seq, size, leaf, hashes}} the operation's newest head in that checkpoint
//	end         {operations, events, proofs, checkpoints}  the counts: a file without it is truncated
//
// VerifyExport checks one with nothing but the file and the checkpoint
// signer's public key (docs/audit.md).

// ExportVersion is the export format's version.
const ExportVersion = 1

// Line is one line of an export.
type Line struct {
	Type       string      `json:"type"`
	Version    int         `json:"version,omitempty"`
	Tenant     string      `json:"tenant,omitempty"`
	Since      *time.Time  `json:"since,omitempty"`
	Until      *time.Time  `json:"until,omitempty"`
	CreatedAt  *time.Time  `json:"created_at,omitempty"`
	Checkpoint *Checkpoint `json:"checkpoint,omitempty"`
	Operation  *Operation  `json:"operation,omitempty"`
	Event      *Event      `json:"event,omitempty"`
	Proof      *Proof      `json:"proof,omitempty"`
	// The end line's counts.
	Operations  *int `json:"operations,omitempty"`
	Events      *int `json:"events,omitempty"`
	Proofs      *int `json:"proofs,omitempty"`
	Checkpoints *int `json:"checkpoints,omitempty"`
}

// Proof is an inclusion proof of an operation's chain head in a
// checkpoint's tree.
type Proof struct {
	CheckpointSeq int64      `json:"checkpoint_seq"`
	Size          uint64     `json:"size"`
	Leaf          Leaf       `json:"leaf"`
	Hashes        []HexBytes `json:"hashes"`
}

// The export's own checks.
const (
	// CheckSignature opens every checkpoint with the public key.
	CheckSignature Check = "signature"
	// CheckProof holds every operation's checkpointed head to its chain and
	// the inclusion proof to the checkpoint's root.
	CheckProof Check = "proof"
	// CheckComplete demands well-formed lines, the header first and the end
	// line last with the counts of what came before it.
	CheckComplete Check = "complete"
)

// ExportReport is what VerifyExport checked.
type ExportReport struct {
	Tenant                                                     string
	Operations, Events, Hashed, Proofs, Checkpoints, Unchecked int
	Breaks                                                     []Break
}

// VerifyExport reads an export and checks it: the header, every signed
// checkpoint against v, every operation's chain and fields
// (VerifyOperation), every proof, and the end line's counts.
func VerifyExport(r io.Reader, v note.Verifier, off Off) ExportReport {
	var rep ExportReport
	add := func(c Check, op string, seq int32, format string, args ...any) {
		if !off[c] {
			rep.Breaks = append(rep.Breaks, Break{OperationID: op, Seq: seq, Check: c, Problem: fmt.Sprintf(format, args...)})
		}
	}
	type opRec struct {
		op     Operation
		events []Event
		proofs []Proof
	}
	var ops []*opRec
	byID := map[string]*opRec{}
	checkpoints := map[int64]Checkpoint{}
	var end *Line
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<16), 64<<20)
	n := 0
	for sc.Scan() {
		n++
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		var l Line
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			add(CheckComplete, "", 0, "line %d is not an export line: %v", n, err)
			continue
		}
		if end != nil {
			add(CheckComplete, "", 0, "line %d comes after the end line", n)
		}
		switch {
		case n == 1 && l.Type != "header":
			add(CheckComplete, "", 0, "line 1 is not the header")
		}
		switch l.Type {
		case "header":
			if n != 1 {
				add(CheckComplete, "", 0, "line %d: a second header", n)
			}
			if l.Version != ExportVersion {
				add(CheckComplete, "", 0, "export version %d, this verifier reads %d", l.Version, ExportVersion)
			}
			rep.Tenant = l.Tenant
		case "checkpoint":
			if l.Checkpoint == nil {
				add(CheckComplete, "", 0, "line %d: a checkpoint line without its checkpoint", n)
				continue
			}
			rep.Checkpoints++
			cp := *l.Checkpoint
			head, err := OpenCheckpoint(cp.Note, v)
			if err != nil {
				add(CheckSignature, "", 0, "checkpoint %d: %v", cp.Seq, err)
				// The signature's check off: the checkpoint as the line says.
				head.Size, head.Hash = cp.Size, cp.Root
			} else if head.Size != cp.Size || !bytes.Equal(head.Hash, cp.Root) {
				add(CheckSignature, "", 0, "checkpoint %d: the line's size and root are not the signed ones", cp.Seq)
			}
			cp.Size, cp.Root = head.Size, head.Hash
			checkpoints[cp.Seq] = cp
		case "operation":
			if l.Operation == nil {
				add(CheckComplete, "", 0, "line %d: an operation line without its operation", n)
				continue
			}
			if rep.Tenant != "" && l.Operation.Tenant != rep.Tenant {
				add(CheckComplete, l.Operation.ID, 0, "an operation of tenant %q in tenant %q's export", l.Operation.Tenant, rep.Tenant)
			}
			rec := &opRec{op: *l.Operation}
			ops = append(ops, rec)
			byID[rec.op.ID] = rec
		case "event":
			if l.Event == nil || byID[l.Event.OperationID] == nil {
				add(CheckComplete, "", 0, "line %d: an event before (or without) its operation", n)
				continue
			}
			rec := byID[l.Event.OperationID]
			rec.events = append(rec.events, *l.Event)
		case "proof":
			if l.Proof == nil || byID[l.Proof.Leaf.OperationID] == nil {
				add(CheckComplete, "", 0, "line %d: a proof before (or without) its operation", n)
				continue
			}
			rec := byID[l.Proof.Leaf.OperationID]
			rec.proofs = append(rec.proofs, *l.Proof)
		case "end":
			e := l
			end = &e
		default:
			add(CheckComplete, "", 0, "line %d: unknown type %q", n, l.Type)
		}
	}
	if err := sc.Err(); err != nil {
		add(CheckComplete, "", 0, "reading the export: %v", err)
	}
	for _, rec := range ops {
		rep.Operations++
		rep.Events += len(rec.events)
		for _, e := range rec.events {
			if e.Hash != nil {
				rep.Hashed++
			}
		}
		rep.Breaks = append(rep.Breaks, VerifyOperation(rec.op, rec.events, off)...)
		if len(rec.proofs) == 0 && rec.op.ChainHead != nil {
			rep.Unchecked++ // written after the newest checkpoint
		}
		for _, p := range rec.proofs {
			rep.Proofs++
			verifyProof(rec.op.ID, rec.events, p, checkpoints, func(seq int32, format string, args ...any) {
				add(CheckProof, rec.op.ID, seq, format, args...)
			})
		}
	}
	switch {
	case end == nil:
		add(CheckComplete, "", 0, "the export has no end line: it is truncated")
	case count(end.Operations) != rep.Operations || count(end.Events) != rep.Events || count(end.Proofs) != rep.Proofs ||
		count(end.Checkpoints) != rep.Checkpoints:
		add(CheckComplete, "", 0, "the end line counts %d operations, %d events, %d proofs, %d checkpoints; the file holds %d, %d, %d, %d",
			count(end.Operations), count(end.Events), count(end.Proofs), count(end.Checkpoints),
			rep.Operations, rep.Events, rep.Proofs, rep.Checkpoints)
	}
	return rep
}

func count(p *int) int {
	if p == nil {
		return -1
	}
	return *p
}

// verifyProof checks that the head p commits to is the chain's (the hash of
// its event p.Leaf.Events) and that the leaf is in the checkpoint's tree.
func verifyProof(id string, events []Event, p Proof, checkpoints map[int64]Checkpoint, add func(int32, string, ...any)) {
	cp, ok := checkpoints[p.CheckpointSeq]
	if !ok {
		add(0, "a proof against checkpoint %d, which the export does not hold", p.CheckpointSeq)
		return
	}
	if p.Size != cp.Size {
		add(0, "a proof for a tree of %d leaves against checkpoint %d of %d", p.Size, cp.Seq, cp.Size)
		return
	}
	var at *Event
	for i := range events {
		if events[i].Seq == p.Leaf.Events {
			at = &events[i]
		}
	}
	if at == nil || !bytes.Equal(at.Hash, p.Leaf.Head) {
		add(p.Leaf.Events, "checkpoint %d signed the chain's head at event %d as %x; the chain holds another: it was rewritten", cp.Seq, p.Leaf.Events, []byte(p.Leaf.Head))
		return
	}
	hashes := make([][]byte, len(p.Hashes))
	for i, h := range p.Hashes {
		hashes[i] = h
	}
	if err := VerifyInclusion(p.Leaf, cp.Size, cp.Root, hashes); err != nil {
		add(p.Leaf.Events, "the head is not in checkpoint %d's tree: %v", cp.Seq, err)
	}
}
