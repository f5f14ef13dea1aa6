// Package otlptest is an OTLP trace receiver for tests: it serves
// OTLP/gRPC and OTLP/HTTP (protobuf) on 127.0.0.1 and keeps every span it
// is sent, flattened with its service name and attributes.
package otlptest

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Span is one received span.
type Span struct {
	Service  string
	Scope    string
	Name     string
	Kind     tracepb.Span_SpanKind
	TraceID  string
	SpanID   string
	ParentID string
	Start    time.Time
	End      time.Time
	Attrs    map[string]string
	Resource map[string]string
	Error    bool
}

// Receiver is a running receiver.
type Receiver struct {
	// GRPCAddr is the OTLP/gRPC address (host:port).
	GRPCAddr string
	// HTTPURL is the OTLP/HTTP base URL (spans go to HTTPURL/v1/traces).
	HTTPURL string

	mu    sync.Mutex
	spans []Span
	got   chan struct{}
	coltracepb.UnimplementedTraceServiceServer
}

// Start runs a receiver until the test ends.
func Start(t testing.TB) *Receiver {
	t.Helper()
	r := &Receiver{got: make(chan struct{}, 1)}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(gs, r)
	go func() { _ = gs.Serve(gl) }()
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(r.serveHTTP), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(hl) }()
	t.Cleanup(func() { gs.Stop(); _ = hs.Close() })
	r.GRPCAddr, r.HTTPURL = gl.Addr().String(), "http://"+hl.Addr().String()
	return r
}

// Env is the environment that sends a binary's spans here over protocol
// ("grpc" or "http/protobuf"), exported without delay.
func (r *Receiver) Env(protocol string) map[string]string {
	env := map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": protocol, "OTEL_BSP_SCHEDULE_DELAY": "50", "OTEL_EXPORTER_OTLP_INSECURE": "true"}
	if protocol == "grpc" {
		env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://" + r.GRPCAddr
	} else {
		env["OTEL_EXPORTER_OTLP_ENDPOINT"] = r.HTTPURL
	}
	return env
}

// Export implements the OTLP/gRPC trace service.
func (r *Receiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.add(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (r *Receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != "/v1/traces" || req.Method != http.MethodPost {
		http.NotFound(w, req)
		return
	}
	b, err := io.ReadAll(req.Body)
	var msg coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(b, &msg)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.add(&msg)
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}

func (r *Receiver) add(req *coltracepb.ExportTraceServiceRequest) {
	var spans []Span
	for _, rs := range req.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				spans = append(spans, Span{Service: res["service.name"], Scope: ss.GetScope().GetName(), Name: s.GetName(), Kind: s.GetKind(),
					TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()), ParentID: hex.EncodeToString(s.GetParentSpanId()),
					Start: time.Unix(0, int64(s.GetStartTimeUnixNano())), End: time.Unix(0, int64(s.GetEndTimeUnixNano())),
					Attrs: attrs(s.GetAttributes()), Resource: res, Error: s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR})
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, spans...)
	r.mu.Unlock()
	select {
	case r.got <- struct{}{}:
	default:
	}
}

// attrs flattens OTLP attributes to strings.
func attrs(kvs []*commonpb.KeyValue) map[string]string {
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		out[kv.GetKey()] = anyText(kv.GetValue())
	}
	return out
}

// Spans returns the spans received so far, by start time.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	out := append([]Span(nil), r.spans...)
	r.mu.Unlock()
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
}

// Wait waits until cond holds of the spans received, up to timeout, and
// returns them; it fails the test with what arrived otherwise.
func (r *Receiver) Wait(t testing.TB, timeout time.Duration, what string, cond func([]Span) bool) []Span {
	t.Helper()
	deadline := time.After(timeout)
	for {
		spans := r.Spans()
		if cond(spans) {
			return spans
		}
		select {
		case <-r.got:
		case <-deadline:
			names := make([]string, 0, len(spans))
			for _, s := range spans {
				names = append(names, s.Service+":"+s.Name)
			}
			t.Fatalf("no %s within %v; spans received: %v", what, timeout, names)
		}
	}
}
