package db_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/db/dbtest"
	"github.com/mangohq/mango/internal/traceparent"
)

// wakeSession creates a session and admits n wake-ups for it through
// Append, as the API does.
func wakeSession(t *testing.T, store *db.Store, id string, n int) {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	if _, _, err := store.SessionCreate(ctx, db.SessionCreateParams{ID: id, AgentID: "agent_1", AgentVersion: 1,
		Agent: json.RawMessage(`{"name":"a"}`), Provider: "local", Metadata: map[string]string{}, Now: now}, nil); err != nil {
		t.Fatalf("create session %s: %v", id, err)
	}
	for i := range n {
		req := &db.AppendRequest{
			Events: []db.NewEvent{{ID: fmt.Sprintf("sevt_%s_%d", id, i), Type: "user.message", Body: json.RawMessage(`{"content":[]}`), Pending: true}},
			Decide: func(*db.Session) (*db.Change, error) { return &db.Change{Wake: true}, nil },
			Now:    now,
		}
		if _, _, err := store.Append(ctx, id, req); err != nil {
			t.Fatalf("append to %s: %v", id, err)
		}
	}
}

func TestOutboxClaimLeaseRescheduleDelete(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	wakeSession(t, store, "sesn_a", 2)
	wakeSession(t, store, "sesn_b", 1)

	st, err := store.OutboxStats(ctx)
	if err != nil || st.Depth != 3 {
		t.Fatalf("OutboxStats() = %+v, %v; want depth 3", st, err)
	}

	rows, err := store.OutboxClaimForSession(ctx, "sesn_a", time.Minute)
	if err != nil || len(rows) != 2 {
		t.Fatalf("OutboxClaimForSession(sesn_a) = %+v, %v; want 2 rows", rows, err)
	}
	if rows[0].ID >= rows[1].ID || rows[0].Kind != "wakeup" || rows[0].Provider != "local" || rows[0].Attempts != 0 {
		t.Errorf("claimed rows = %+v; want oldest first, kind wakeup, provider local, 0 attempts", rows)
	}
	// Leased rows are invisible to every other claim.
	again, err := store.OutboxClaimDue(ctx, 10, time.Minute, 0)
	if err != nil || len(again) != 1 || again[0].SessionID != "sesn_b" {
		t.Fatalf("OutboxClaimDue() during the lease = %+v, %v; want only sesn_b's row", again, err)
	}

	if err := store.OutboxReschedule(ctx, rows[0].ID, "temporal unavailable", 0); err != nil {
		t.Fatalf("OutboxReschedule: %v", err)
	}
	if err := store.OutboxDelete(ctx, rows[1].ID); err != nil {
		t.Fatalf("OutboxDelete: %v", err)
	}
	if err := store.OutboxDelete(ctx, rows[1].ID); err != nil {
		t.Errorf("OutboxDelete of a deleted row = %v, want nil", err)
	}
	due, err := store.OutboxClaimDue(ctx, 10, time.Minute, 0)
	if err != nil || len(due) != 1 || due[0].ID != rows[0].ID || due[0].Attempts != 1 {
		t.Fatalf("OutboxClaimDue() after reschedule = %+v, %v; want row %d with 1 attempt", due, err, rows[0].ID)
	}
	st, err = store.OutboxStats(ctx)
	if err != nil || st.Depth != 2 || st.OldestAge <= 0 {
		t.Fatalf("OutboxStats() = %+v, %v; want depth 2 and a positive age", st, err)
	}
}

// TestOutboxClaimDueLeavesFreshRows: a row never attempted is left to the
// direct delivery while it is fresh; one already attempted (rescheduled)
// is claimed as soon as it is due.
func TestOutboxClaimDueLeavesFreshRows(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	wakeSession(t, store, "sesn_fresh", 1)
	wakeSession(t, store, "sesn_retried", 1)
	retried, err := store.OutboxClaimForSession(ctx, "sesn_retried", time.Minute)
	if err != nil || len(retried) != 1 {
		t.Fatalf("OutboxClaimForSession(sesn_retried) = %+v, %v; want its row", retried, err)
	}
	if err := store.OutboxReschedule(ctx, retried[0].ID, "temporal unavailable", 0); err != nil {
		t.Fatal(err)
	}
	rows, err := store.OutboxClaimDue(ctx, 10, time.Minute, time.Hour)
	if err != nil || len(rows) != 1 || rows[0].SessionID != "sesn_retried" {
		t.Fatalf("OutboxClaimDue(fresh 1h) = %+v, %v; want only the rescheduled row of sesn_retried", rows, err)
	}
	// Once due for longer than fresh, the untried row is the poll's too.
	if _, err := store.Pool().Exec(ctx, `UPDATE outbox SET next_attempt_at = now() - interval '2 hours' WHERE session_id = 'sesn_fresh'`); err != nil {
		t.Fatal(err)
	}
	rows, err = store.OutboxClaimDue(ctx, 10, time.Minute, time.Hour)
	if err != nil || len(rows) != 1 || rows[0].SessionID != "sesn_fresh" {
		t.Fatalf("OutboxClaimDue(fresh 1h) after 2h = %+v, %v; want sesn_fresh's row", rows, err)
	}
}

func TestOutboxClaimMissingSessionHasNoProvider(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	store := db.NewStore(pool)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO outbox (session_id, kind) VALUES ('sesn_gone', 'wakeup')`); err != nil {
		t.Fatal(err)
	}
	rows, err := store.OutboxClaimDue(ctx, 10, time.Minute, 0)
	if err != nil || len(rows) != 1 || rows[0].Provider != "" {
		t.Fatalf("OutboxClaimDue() = %+v, %v; want one row with an empty provider", rows, err)
	}
}

func TestOutboxConcurrentClaimsNeverShareARow(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	const sessions, perSession = 10, 5
	for i := range sessions {
		wakeSession(t, store, fmt.Sprintf("sesn_%d", i), perSession)
	}
	const claimers = 8
	var mu sync.Mutex
	seen := map[int64]int{}
	var wg sync.WaitGroup
	for range claimers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				rows, err := store.OutboxClaimDue(ctx, 3, time.Minute, 0)
				if err != nil {
					t.Errorf("OutboxClaimDue: %v", err)
					return
				}
				if len(rows) == 0 {
					return
				}
				mu.Lock()
				for _, r := range rows {
					seen[r.ID]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(seen) != sessions*perSession {
		t.Errorf("claimed %d distinct rows, want %d", len(seen), sessions*perSession)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("row %d claimed %d times, want once", id, n)
		}
	}
}

// TestOutboxTraceParentRoundTrip: each way of writing an outbox row (a
// wake-up with events, one without, a session's deletion) stores the W3C
// traceparent of the writer's span, and both claims return it; a writer
// without a span stores "".
func TestOutboxTraceParentRoundTrip(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	wakeSession(t, store, "sesn_untraced", 1)
	spanCtx := func(spanByte byte) context.Context {
		return trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, SpanID: trace.SpanID{0, 0, 0, 0, 0, 0, 0, spanByte},
			TraceFlags: trace.FlagsSampled,
		}))
	}
	withEvents, withoutEvents, fence := spanCtx(1), spanCtx(2), spanCtx(3)
	now := time.Now().UTC()
	if _, _, err := store.SessionCreate(context.Background(), db.SessionCreateParams{ID: "sesn_traced", AgentID: "agent_1", AgentVersion: 1,
		Agent: json.RawMessage(`{"name":"a"}`), Provider: "local", Metadata: map[string]string{}, Now: now}, nil); err != nil {
		t.Fatal(err)
	}
	appendWake := func(ctx context.Context, events []db.NewEvent) {
		t.Helper()
		if _, _, err := store.Append(ctx, "sesn_traced", &db.AppendRequest{Events: events, Now: now,
			Decide: func(*db.Session) (*db.Change, error) { return &db.Change{Wake: true}, nil }}); err != nil {
			t.Fatalf("append: %v", err)
		}
	}
	appendWake(withEvents, []db.NewEvent{{ID: "sevt_traced", Type: "user.message", Body: json.RawMessage(`{"content":[]}`), Pending: true}})
	appendWake(withoutEvents, nil)
	if _, _, err := store.SessionFence(fence, "sesn_traced", now); err != nil {
		t.Fatalf("SessionFence: %v", err)
	}

	traced, err := store.OutboxClaimForSession(context.Background(), "sesn_traced", time.Minute)
	if err != nil || len(traced) != 3 {
		t.Fatalf("OutboxClaimForSession(sesn_traced) = %+v, %v; want 3 rows", traced, err)
	}
	for i, ctx := range []context.Context{withEvents, withoutEvents, fence} {
		if want := traceparent.Of(ctx); traced[i].TraceParent != want || want == "" {
			t.Errorf("row %d (%s) traceparent = %q, want %q", i, traced[i].Kind, traced[i].TraceParent, want)
		}
	}
	untraced, err := store.OutboxClaimDue(context.Background(), 10, time.Minute, 0)
	if err != nil || len(untraced) != 1 || untraced[0].SessionID != "sesn_untraced" || untraced[0].TraceParent != "" {
		t.Fatalf("OutboxClaimDue() = %+v, %v; want sesn_untraced's row with an empty traceparent", untraced, err)
	}
	// The poll's claim returns it too.
	if _, err := store.Pool().Exec(context.Background(), `UPDATE outbox SET next_attempt_at = now() WHERE session_id = 'sesn_traced'`); err != nil {
		t.Fatal(err)
	}
	due, err := store.OutboxClaimDue(context.Background(), 10, time.Minute, 0)
	if err != nil || len(due) != 3 || due[0].TraceParent != traced[0].TraceParent {
		t.Fatalf("OutboxClaimDue() after the lease = %+v, %v; want sesn_traced's 3 rows with their traceparents", due, err)
	}
}
