package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
)

// setupTracing installs an OpenTelemetry tracer provider when the standard
// environment asks for one, and returns its shutdown. Tracing is off by
// default: it turns on with OTEL_TRACES_EXPORTER=otlp (endpoint, headers and
// protocol from the usual OTEL_EXPORTER_OTLP_* variables; HTTP/protobuf) or
// =console (spans as JSON on standard error), or when
// OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set.
// Sampling follows OTEL_TRACES_SAMPLER as the SDK reads it. enabled tells
// whether a provider was installed: without one the gRPC server leaves its
// tracing stats handler out, which costs on every call even as a no-op.
func setupTracing(ctx context.Context, getenv func(string) string, stderr io.Writer) (shutdown func(context.Context) error, enabled bool, err error) {
	exporter := strings.ToLower(getenv("OTEL_TRACES_EXPORTER"))
	if exporter == "" && (getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "") {
		exporter = "otlp"
	}
	var exp sdktrace.SpanExporter
	switch exporter {
	case "", "none":
		return func(context.Context) error { return nil }, false, nil
	case "otlp":
		exp, err = otlptracehttp.New(ctx)
	case "console":
		exp, err = stdouttrace.New(stdouttrace.WithWriter(stderr))
	default:
		return nil, false, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: want otlp, console or none", exporter)
	}
	if err != nil {
		return nil, false, fmt.Errorf("tracing: %w", err)
	}
	name := getenv("OTEL_SERVICE_NAME")
	if name == "" {
		name = "opledger"
	}
	res, err := resource.Merge(resource.Default(), resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName(name)))
	if err != nil {
		res = resource.Default()
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return tp.Shutdown, true, nil
}
