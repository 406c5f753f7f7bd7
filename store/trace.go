package store

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// queryTracer turns every statement into an OpenTelemetry span named after
// its sqlc query (never its arguments). With no tracer provider configured
// the global no-op provider makes this nearly free.
type queryTracer struct{ tracer trace.Tracer }

func newQueryTracer() *queryTracer {
	return &queryTracer{tracer: otel.Tracer("github.com/opledger/opledger/store")}
}

type spanKey struct{}

func (q *queryTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if !trace.SpanFromContext(ctx).SpanContext().IsValid() {
		return ctx // only trace statements inside a traced request
	}
	name := queryName(data.SQL)
	ctx, span := q.tracer.Start(ctx, "store."+name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("db.system", "postgresql"), attribute.String("db.operation.name", name)))
	return context.WithValue(ctx, spanKey{}, span)
}

func (q *queryTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	span, ok := ctx.Value(spanKey{}).(trace.Span)
	if !ok {
		return
	}
	if data.Err != nil && data.Err != pgx.ErrNoRows {
		span.SetStatus(codes.Error, "statement failed")
	}
	span.SetAttributes(attribute.Int64("db.rows_affected", data.CommandTag.RowsAffected()))
	span.End()
}

// queryName extracts sqlc's "-- name: X :kind" header, or the first word.
func queryName(sql string) string {
	if rest, ok := strings.CutPrefix(sql, "-- name: "); ok {
		if i := strings.IndexByte(rest, ' '); i > 0 {
			return rest[:i]
		}
	}
	f := strings.Fields(sql)
	if len(f) == 0 {
		return "query"
	}
	return strings.ToLower(f[0])
}
