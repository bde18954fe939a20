package main

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// tracingFlushMax bounds the export of the last spans at shutdown: a
// collector that is down must not hold a stopping serve.
const tracingFlushMax = 5 * time.Second

// startTracing sends serve's traces to the OTLP/HTTP endpoint of
// --otlp-endpoint, a ratio of them (--trace-ratio; a caller's sampled
// traceparent is always followed), and returns the function that flushes
// and stops it. Without an endpoint it does nothing: the API's and the
// writer's tracers stay the no-op default. Spans are batched and dropped
// rather than waited for when the collector is slow: tracing never holds
// a command.
func startTracing(ctx context.Context, cfg *Config) (stop func(), err error) {
	if cfg.OTLPEndpoint == "" {
		return func() {}, nil
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(cfg.OTLPEndpoint))
	if err != nil {
		return nil, fmt.Errorf("--otlp-endpoint %s: %w", cfg.OTLPEndpoint, err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", "tresor")}
	if cfg.NodeName != "" {
		attrs = append(attrs, attribute.String("service.instance.id", cfg.NodeName))
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.TraceRatio))),
		sdktrace.WithResource(resource.NewSchemaless(attrs...)),
	)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), tracingFlushMax)
		defer cancel()
		tp.Shutdown(ctx)
	}, nil
}
