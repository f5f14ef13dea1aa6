package db_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/db/dbtest"
)

// BenchmarkTurnAppends: the per-turn cost of usage accounting, with and
// without usage carried by the span end (and the session.usage snapshot
// at the turn's end).
func BenchmarkTurnAppends(b *testing.B) {
	b.Run("usage", func(b *testing.B) { benchmarkTurnAppends(b, true) })
	b.Run("no_usage", func(b *testing.B) { benchmarkTurnAppends(b, false) })
}

func setUsage(e *db.NewEvent, on bool) {
	if on {
		e.Usage = &db.Usage{InputTokens: 1200, OutputTokens: 40, ListCostNanos: 4_200_000}
	}
}

func setTurnEnd(req *db.AppendRequest, on bool, i int) {
	if on {
		req.TurnEnd = func(cur *db.Session) *db.NewEvent {
			body, _ := json.Marshal(map[string]any{"usage": cur.Usage, "budget": nil})
			return &db.NewEvent{ID: fmt.Sprintf("sevt_u%d", i), Type: "session.usage", Body: body}
		}
	}
}

// BenchmarkTurnAppends measures the appends of one one-round turn as the
// ControlPlane makes them: the trigger moving the session to running, the
// span start, the model's message with the span end (carrying usage when
// withUsage) and the turn's two transcript entries, and the turn's end (with its session.usage snapshot when
// withUsage).
func benchmarkTurnAppends(b *testing.B, withUsage bool) {
	store := dbtest.Store(b)
	ctx := context.Background()
	now := time.Now().UTC()
	if _, _, err := store.SessionCreate(ctx, db.SessionCreateParams{ID: "sesn_bench", AgentID: "agent_1", AgentVersion: 1,
		Agent: json.RawMessage(`{"name":"a"}`), Provider: "local", Metadata: map[string]string{}, Now: now}, nil); err != nil {
		b.Fatal(err)
	}
	move := func(i int, to db.Status, turnEnd bool) {
		req := &db.AppendRequest{Now: now, Decide: func(*db.Session) (*db.Change, error) {
			return &db.Change{To: to, EventID: fmt.Sprintf("sevt_%s_%d", to, i)}, nil
		}}
		setTurnEnd(req, turnEnd, i)
		if _, _, err := store.Append(ctx, "sesn_bench", req); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		move(i, db.StatusRunning, false)
		if _, _, err := store.Append(ctx, "sesn_bench", &db.AppendRequest{Now: now, Events: []db.NewEvent{
			{ID: fmt.Sprintf("sevt_s%d", i), Type: "span.model_request_start", Body: json.RawMessage(`{}`), Key: fmt.Sprintf("t%d/span_start", i)}}}); err != nil {
			b.Fatal(err)
		}
		end := db.NewEvent{ID: fmt.Sprintf("sevt_e%d", i), Type: "span.model_request_end", Key: fmt.Sprintf("t%d/span_end", i),
			Body: json.RawMessage(`{"model_request_start_id":"x","is_error":false,"model_usage":{"input_tokens":1200,"output_tokens":40,"cache_read_input_tokens":0,"cache_creation_input_tokens":0}}`)}
		setUsage(&end, withUsage)
		if _, _, err := store.Append(ctx, "sesn_bench", &db.AppendRequest{Now: now, Events: []db.NewEvent{
			{ID: fmt.Sprintf("sevt_m%d", i), Type: "agent.message", Body: json.RawMessage(`{"content":[{"type":"text","text":"hi"}]}`), Key: fmt.Sprintf("t%d/message", i)},
			end},
			Transcript: []db.TranscriptEntry{
				{Key: fmt.Sprintf("t%d/0", i), Body: json.RawMessage(`{"role":"user","content":[{"type":"text","text":"hello"}]}`)},
				{Key: fmt.Sprintf("t%d/1", i), Body: json.RawMessage(`{"role":"assistant","content":[{"type":"text","text":"hi"}]}`)}},
			Processed: []string{fmt.Sprintf("sevt_%s_%d", db.StatusRunning, i)}}); err != nil {
			b.Fatal(err)
		}
		move(i, db.StatusIdle, withUsage)
	}
}
