package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/opledger/opledger/clients/go/fingerprint"
)

// The receipts' per-event work on the hot path, on the events a new tool
// call writes (the bench's charge: docs/performance.md, finding 39).

func benchPreparedFacts() map[string]*string {
	str := func(s string) *string { return &s }
	sum := sha256.Sum256([]byte(`{"amount_minor":4900,"currency":"EUR","invoice_id":"INV-2048"}`))
	return map[string]*string{
		"approvals_needed": str(strconv.Itoa(0)), "approver": nil, "args_digest": str(hex.EncodeToString(sum[:])),
		"downstream_key": str("opl_3f9c2a7d1e5b4c8a9f0e2d1c3b4a5968"), "fingerprint": str("fp_7d1e5b4c8a9f0e2d1c3b4a59683f9c2a"),
		"policy_digest": str("2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"),
		"prepared_by":   str("pr_bench"), "reason": nil, "supersedes": nil,
		"tenant": str("bench"), "tool": str("bench_charge"), "tool_version": str("1"),
	}
}

var benchResult = []byte(`{"id":"ch_1f2e3d4c5b6a79880f1e2d3c","object":"charge","status":"succeeded","amount_minor":4900,"currency":"EUR","invoice_id":"INV-2048","idempotency_key":"opl_3f9c2a7d1e5b4c8a9f0e2d1c3b4a5968","request":{"amount_minor":4900,"currency":"EUR","invoice_id":"INV-2048"},"created":1733350000}`)

// BenchmarkPreparedEvent is what the store does for a PREPARED event: its
// facts' text and its doc hash.
func BenchmarkPreparedEvent(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		facts := benchPreparedFacts()
		if _, err := FactsText(facts); err != nil {
			b.Fatal(err)
		}
		if _, err := DocHash(Event{OperationID: "op_01JEXAMPLE0000000000000000", Type: "PREPARED", Actor: "pr_bench", ToState: "READY", Facts: facts}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClaimedEvent is a CLAIMED event's doc hash (no facts).
func BenchmarkClaimedEvent(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DocHash(Event{OperationID: "op_01JEXAMPLE0000000000000000", Type: "CLAIMED", Actor: "pr_bench", ToState: "EXECUTING"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOutcomeEvent is a SUCCEEDED event: the result's digest, the
// facts' text and the doc hash.
func BenchmarkOutcomeEvent(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		d, err := Digest(benchResult)
		if err != nil {
			b.Fatal(err)
		}
		ref := "ch_1f2e3d4c5b6a79880f1e2d3c"
		facts := map[string]*string{"error_digest": nil, "external_ref": &ref, "result_digest": &d}
		if _, err := FactsText(facts); err != nil {
			b.Fatal(err)
		}
		if _, err := DocHash(Event{OperationID: "op_01JEXAMPLE0000000000000000", Type: "SUCCEEDED", Actor: "pr_bench", ToState: "SUCCEEDED", Detail: "HTTP 200", Facts: facts}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkResultDigest is the result's digest alone.
func BenchmarkResultDigest(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Digest(benchResult); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPreparedEventWriter is what the store does for a PREPARED event
// since finding 39: its facts listed in JCS order, one document.
func BenchmarkPreparedEventWriter(b *testing.B) {
	b.ReportAllocs()
	sum := sha256.Sum256([]byte(`{"amount_minor":4900,"currency":"EUR","invoice_id":"INV-2048"}`))
	argsDigest := hex.EncodeToString(sum[:])
	for b.Loop() {
		facts := []Fact{
			{Key: "approvals_needed", Value: strconv.Itoa(0)}, {Key: "approver", Null: true}, {Key: "args_digest", Value: argsDigest},
			{Key: "downstream_key", Value: "opl_3f9c2a7d1e5b4c8a9f0e2d1c3b4a5968"}, {Key: "fingerprint", Value: "fp_7d1e5b4c8a9f0e2d1c3b4a59683f9c2a"},
			{Key: "policy_digest", Value: "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"},
			{Key: "prepared_by", Value: "pr_bench"}, {Key: "reason", Null: true}, {Key: "supersedes", Null: true},
			{Key: "tenant", Value: "bench"}, {Key: "tool", Value: "bench_charge"}, {Key: "tool_version", Value: "1"},
		}
		if _, _, err := DocHashFacts(Event{OperationID: "op_01JEXAMPLE0000000000000000", Type: "PREPARED", Actor: "pr_bench", ToState: "READY"}, facts); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOutcomeEventWriter is a SUCCEEDED event since finding 39.
func BenchmarkOutcomeEventWriter(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		d, err := Digest(benchResult)
		if err != nil {
			b.Fatal(err)
		}
		facts := []Fact{{Key: "error_digest", Null: true}, {Key: "external_ref", Value: "ch_1f2e3d4c5b6a79880f1e2d3c"}, {Key: "result_digest", Value: d}}
		if _, _, err := DocHashFacts(Event{OperationID: "op_01JEXAMPLE0000000000000000", Type: "SUCCEEDED", Actor: "pr_bench", ToState: "SUCCEEDED", Detail: "HTTP 200"}, facts); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkResultDigestGeneric is the result's digest the general way
// (fingerprint.Canonicalize), which Digest took for every text before
// finding 39.
func BenchmarkResultDigestGeneric(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		c, err := fingerprint.Canonicalize(json.RawMessage(benchResult))
		if err != nil {
			b.Fatal(err)
		}
		sum := sha256.Sum256(c)
		_ = hex.EncodeToString(sum[:])
	}
}
