package metrics

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
)

// GRPC records the gRPC server metrics under the names, label names, help
// texts and buckets of go-grpc-middleware's Prometheus provider, which
// dashboards and the operations guide know, and counts exactly what it
// counts. It differs in one thing: it looks a method's series up once and
// keeps them, where the provider hashes three or four label values into a
// vector five times per call, a third of what the whole interceptor chain
// cost a call (docs/performance.md, finding 27). TestGRPCMatchesProvider
// holds it to the provider's output.
type GRPC struct {
	started, handled, received, sent *prometheus.CounterVec
	handling                         *prometheus.HistogramVec

	// series maps a full method name to its *methodSeries. gRPC runs
	// interceptors only for registered methods, so it is bounded by the
	// server's methods; cached counts it, and past maxCachedMethods (a
	// server with that many methods is not this one) calls take the
	// vectors' path.
	series sync.Map
	cached atomic.Int32
}

// maxCachedMethods bounds the series cache.
const maxCachedMethods = 1024

// methodSeries is one method's series. A handled counter is looked up on the
// first call that ends with its code, so that only codes that happened (or
// that InitializeMetrics created) are exported, as the provider does.
type methodSeries struct {
	typ, service, method    string
	started, received, sent prometheus.Counter
	handling                prometheus.Observer
	handled                 [maxCode + 1]atomic.Pointer[prometheus.Counter]
	vecs                    *GRPC
}

// maxCode is the largest gRPC code; a code above it (never sent by grpc-go)
// takes the vector's path.
const maxCode = codes.Unauthenticated

func newGRPC(buckets []float64) *GRPC {
	labels := []string{"grpc_type", "grpc_service", "grpc_method"}
	withCode := []string{"grpc_type", "grpc_service", "grpc_method", "grpc_code"}
	counter := func(name, help string, l []string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, l)
	}
	return &GRPC{
		started: counter("grpc_server_started_total", "Total number of RPCs started on the server.", labels),
		handled: counter("grpc_server_handled_total",
			"Total number of RPCs completed on the server, regardless of success or failure.", withCode),
		received: counter("grpc_server_msg_received_total", "Total number of RPC stream messages received on the server.", labels),
		sent:     counter("grpc_server_msg_sent_total", "Total number of gRPC stream messages sent by the server.", labels),
		handling: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "grpc_server_handling_seconds",
			Help:    "Histogram of response latency (seconds) of gRPC that had been application-level handled by the server.",
			Buckets: buckets}, labels),
	}
}

// Describe implements prometheus.Collector.
func (g *GRPC) Describe(ch chan<- *prometheus.Desc) {
	g.started.Describe(ch)
	g.handled.Describe(ch)
	g.received.Describe(ch)
	g.sent.Describe(ch)
	g.handling.Describe(ch)
}

// Collect implements prometheus.Collector.
func (g *GRPC) Collect(ch chan<- prometheus.Metric) {
	g.started.Collect(ch)
	g.handled.Collect(ch)
	g.received.Collect(ch)
	g.sent.Collect(ch)
	g.handling.Collect(ch)
}

// InitializeMetrics creates every registered method's series at zero, and
// its handled counter for every code, so that rates exist before the first
// call.
func (g *GRPC) InitializeMetrics(server reflection.ServiceInfoProvider) {
	for service, info := range server.GetServiceInfo() {
		for _, m := range info.Methods {
			s := g.lookup("/"+service+"/"+m.Name, methodType(m.IsClientStream, m.IsServerStream))
			for _, c := range interceptors.AllCodes {
				s.handledCounter(c)
			}
		}
	}
}

func methodType(clientStream, serverStream bool) string {
	switch {
	case !clientStream && !serverStream:
		return string(interceptors.Unary)
	case clientStream && !serverStream:
		return string(interceptors.ClientStream)
	case !clientStream && serverStream:
		return string(interceptors.ServerStream)
	}
	return string(interceptors.BidiStream)
}

// lookup returns a method's series, creating them on its first call.
func (g *GRPC) lookup(fullMethod, typ string) *methodSeries {
	if s, ok := g.series.Load(fullMethod); ok {
		if s := s.(*methodSeries); s.typ == typ {
			return s
		}
	}
	service, method := "unknown", "unknown"
	if svc, m, ok := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/"); ok {
		service, method = svc, m
	}
	s := &methodSeries{typ: typ, service: service, method: method, vecs: g,
		started:  g.started.WithLabelValues(typ, service, method),
		received: g.received.WithLabelValues(typ, service, method),
		sent:     g.sent.WithLabelValues(typ, service, method),
		handling: g.handling.WithLabelValues(typ, service, method)}
	if g.cached.Load() < maxCachedMethods {
		if prev, loaded := g.series.LoadOrStore(fullMethod, s); !loaded {
			g.cached.Add(1)
		} else if prev := prev.(*methodSeries); prev.typ == typ {
			return prev
		}
	}
	return s
}

func (s *methodSeries) handledCounter(c codes.Code) prometheus.Counter {
	if c > maxCode {
		return s.vecs.handled.WithLabelValues(s.typ, s.service, s.method, c.String())
	}
	if p := s.handled[c].Load(); p != nil {
		return *p
	}
	counter := s.vecs.handled.WithLabelValues(s.typ, s.service, s.method, c.String())
	s.handled[c].Store(&counter)
	return counter
}

// done records a finished call as the provider does: its code is the
// status's, or a context error's, or Unknown.
func (s *methodSeries) done(err error, start time.Time) {
	st, ok := status.FromError(err)
	if !ok {
		st = status.FromContextError(err)
	}
	s.handledCounter(st.Code()).Inc()
	s.handling.Observe(time.Since(start).Seconds())
}

// UnaryServerInterceptor records unary calls: started, the request
// received, the response sent (when there is one), handled by code, and the
// handling time.
func (g *GRPC) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	unary := string(interceptors.Unary)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		s := g.lookup(info.FullMethod, unary)
		s.started.Inc()
		s.received.Inc()
		resp, err := handler(ctx, req)
		if err == nil {
			s.sent.Inc()
		}
		s.done(err, start)
		return resp, err
	}
}

// StreamServerInterceptor records streaming calls: started, each message
// received and sent without error, handled by code, and the handling time.
func (g *GRPC) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := time.Now()
		s := g.lookup(info.FullMethod, methodType(info.IsClientStream, info.IsServerStream))
		s.started.Inc()
		err := handler(srv, &countedStream{ServerStream: ss, s: s})
		s.done(err, start)
		return err
	}
}

type countedStream struct {
	grpc.ServerStream
	s *methodSeries
}

func (c *countedStream) SendMsg(m any) error {
	err := c.ServerStream.SendMsg(m)
	if err == nil {
		c.s.sent.Inc()
	}
	return err
}

func (c *countedStream) RecvMsg(m any) error {
	err := c.ServerStream.RecvMsg(m)
	if err == nil {
		c.s.received.Inc()
	}
	return err
}
