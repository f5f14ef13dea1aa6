package webhooks

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/mangohq/mango/internal/poll"
	"github.com/mangohq/mango/internal/promtest"
)

// statsStore is a memStore that reports its undone rows as pending.
type statsStore struct{ *memStore }

func (s statsStore) Stats(_ context.Context, now time.Time) (Stats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var st Stats
	for _, r := range s.rows {
		if !r.done {
			st.Pending++
			st.OldestAge = max(st.OldestAge, now.Sub(r.d.CreatedAt))
		}
	}
	return st, nil
}

// TestAttemptSpansAndMetrics: each attempt is a webhook.deliver client
// span naming the endpoint, event type, attempt and answer, never the
// URL's path or query, the secret or the body; failures are errors. The
// counters, histogram and pending gauges follow the attempts.
func TestAttemptSpansAndMetrics(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	reg := prometheus.NewRegistry()
	metrics := NewMetrics(reg)
	// Every result exists before the first attempt.
	if n := testutil.CollectAndCount(reg, "mango_webhook_deliveries_total"); n != 4 {
		t.Fatalf("mango_webhook_deliveries_total series before any attempt = %d, want 4 (ok, error, gave_up, skipped)", n)
	}

	srv, _ := endpoint(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/fail") {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	secret := newSecret(t)
	store := statsStore{newMemStore()}
	now := time.Now()
	ok := delivery(t, "wevt_ok", "ep_ok", srv.URL+"/hooks/pathsecret?token=querysecret", secret, now)
	ok.EventType = "session.status_idled"
	bad := delivery(t, "wevt_bad", "ep_bad", srv.URL+"/fail", secret, now.Add(-time.Minute))
	bad.EventType, bad.Attempt = "session.created", 2
	store.add(ok, bad)
	run(t, &Relay{Store: store, Poll: 10 * time.Millisecond, Tracer: tp.Tracer("webhooks"), Metrics: metrics, StatsInterval: 10 * time.Millisecond})
	store.waitRecord(t, "wevt_ok", "ep_ok")
	store.waitRecord(t, "wevt_bad", "ep_bad")

	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		if s.Name() == "webhook.deliver" {
			spans[attrOf(s, "mango.webhook.endpoint_id").AsString()] = s
		}
	}
	if len(spans) != 2 {
		t.Fatalf("webhook.deliver spans by endpoint = %v, want one for ep_ok and one for ep_bad", spans)
	}
	checkSpan(t, spans["ep_ok"], "session.status_idled", 1, http.StatusOK, codes.Unset)
	checkSpan(t, spans["ep_bad"], "session.created", 3, http.StatusServiceUnavailable, codes.Error)
	for _, s := range spans {
		for _, kv := range s.Attributes() {
			v := kv.Value.String()
			if strings.Contains(v, "secret") || strings.Contains(v, strings.TrimPrefix(secret, SecretPrefix)) || strings.Contains(v, "sesn_01") {
				t.Errorf("span attribute %s = %q carries the URL's path or query, the secret or the body", kv.Key, v)
			}
		}
	}

	if got := testutil.ToFloat64(metrics.deliveries.WithLabelValues(ResultOK)); got != 1 {
		t.Errorf("ok deliveries = %v, want 1", got)
	}
	if got := testutil.ToFloat64(metrics.deliveries.WithLabelValues(ResultError)); got != 1 {
		t.Errorf("error deliveries = %v, want 1", got)
	}
	if n, _ := promtest.HistogramCount(t, reg, "mango_webhook_delivery_duration_seconds", map[string]string{}); n != 2 {
		t.Errorf("mango_webhook_delivery_duration_seconds observations = %d, want 2", n)
	}
	// The failed delivery stays pending; its event is a minute old.
	poll.Until(t, guard, "the pending gauges to show the failed delivery", func() (bool, string) {
		pending, age := testutil.ToFloat64(metrics.pending), testutil.ToFloat64(metrics.oldestAge)
		return pending == 1 && age >= 60, fmt.Sprintf("pending %v, oldest age %vs", pending, age)
	})
}

// checkSpan checks an attempt span's kind, attributes and status.
func checkSpan(t *testing.T, s sdktrace.ReadOnlySpan, eventType string, attempt int64, status int, code codes.Code) {
	t.Helper()
	if s.SpanKind() != trace.SpanKindClient || s.Parent().IsValid() {
		t.Errorf("span kind %v, parent %v; want a client root span", s.SpanKind(), s.Parent())
	}
	if got := attrOf(s, "mango.webhook.event_type").AsString(); got != eventType {
		t.Errorf("mango.webhook.event_type = %q, want %q", got, eventType)
	}
	if got := attrOf(s, "mango.webhook.attempt").AsInt64(); got != attempt {
		t.Errorf("mango.webhook.attempt = %d, want %d", got, attempt)
	}
	if got := attrOf(s, "http.response.status_code").AsInt64(); got != int64(status) {
		t.Errorf("http.response.status_code = %d, want %d", got, status)
	}
	if got := attrOf(s, "server.address").AsString(); got != "127.0.0.1" {
		t.Errorf("server.address = %q, want the endpoint's host 127.0.0.1", got)
	}
	if s.Status().Code != code {
		t.Errorf("status %+v, want code %v", s.Status(), code)
	}
}

// attrOf returns a span's attribute (the zero Value when unset).
func attrOf(s sdktrace.ReadOnlySpan, key attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}
