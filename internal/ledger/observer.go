package ledger

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// tracer names the ledger's spans; without a configured provider it is the
// global no-op.
var tracer = otel.Tracer("github.com/opledger/opledger/internal/ledger")

// opAttrs identifies an operation on a span: never its args or raw key,
// only the key's digest.
// startDownstreamSpan starts the span of a downstream call. Its attributes
// (one of them a digest) are built only for a span being recorded: with
// tracing off it is a no-op.
func (l *Ledger) startDownstreamSpan(ctx context.Context, op Operation) (context.Context, trace.Span) {
	ctx, span := tracer.Start(ctx, "downstream.call", trace.WithSpanKind(trace.SpanKindClient))
	if span.IsRecording() {
		span.SetAttributes(opAttrs(op)...)
	}
	return ctx, span
}

func opAttrs(op Operation) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("opledger.operation_id", op.ID), attribute.String("opledger.tenant", op.Tenant),
		attribute.String("opledger.tool", op.Tool), attribute.Int("opledger.attempt", int(op.Attempts)),
		attribute.Int64("opledger.fence", op.Fence), attribute.String("opledger.idempotency_key_digest", digest(op.IdempotencyKey)),
	}
}

// Observer receives the ledger's countable moments; the metrics package
// implements it. Methods must be cheap and must not block.
type Observer interface {
	// ExecutionStarted: a claim (or takeover) is about to call the downstream.
	ExecutionStarted(tool string)
	// DuplicatePrevented: a repeated Prepare or Execute was answered from the
	// ledger without reaching the downstream. replay says whether a recorded
	// outcome was served (rather than a pending or in-progress answer).
	DuplicatePrevented(method, tool string, replay bool)
	// DownstreamCalled: the downstream answered (or failed to) after d.
	DownstreamCalled(tool, outcome string, d time.Duration)
	// Reconciled: a reconciliation ended with result (e.g. "succeeded",
	// "ready", "inconclusive").
	Reconciled(tool, result string)
	// Decided: an approver decided, after waiting d since Prepare.
	Decided(tool, decision string, d time.Duration)
	// LimitUsed: an operation took a share of the limit's budget.
	LimitUsed(limit string)
	// LimitRefused: a Prepare was refused by the limit (or, for
	// "identity:<tool>", by a business identity).
	LimitRefused(limit string)
}

type nopObserver struct{}

func (nopObserver) ExecutionStarted(string)                        {}
func (nopObserver) DuplicatePrevented(string, string, bool)        {}
func (nopObserver) DownstreamCalled(string, string, time.Duration) {}
func (nopObserver) Reconciled(string, string)                      {}
func (nopObserver) Decided(string, string, time.Duration)          {}
func (nopObserver) LimitUsed(string)                               {}
func (nopObserver) LimitRefused(string)                            {}

// SetObserver installs o; call before serving.
func (l *Ledger) SetObserver(o Observer) {
	if o == nil {
		o = nopObserver{}
	}
	l.obs = o
}
