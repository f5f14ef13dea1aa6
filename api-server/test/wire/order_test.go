package wire

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

// TestEventOrderAgrees checks the one order of a session's log (db/events.go):
// the list in both directions and at any page size, processed_at, the
// created_at filters and the SSE stream, live and replayed with
// Last-Event-ID, all agree, with messages queued behind a turn, a message
// queued behind an interrupted turn and a parked turn; and a queued
// message takes its place after the turn it waited for.
func TestEventOrderAgrees(t *testing.T) {
	t.Parallel()
	e := newTurnEnv(t)
	weather := anthropic.BetaAgentNewParamsToolUnion{OfCustom: &anthropic.BetaManagedAgentsCustomToolParams{Name: "get_weather",
		Description: "weather", InputSchema: anthropic.BetaManagedAgentsCustomToolInputSchemaParam{Properties: map[string]any{}}}}
	id := e.session(t, append([]anthropic.BetaAgentNewParamsToolUnion{weather}, toolset...))
	events := e.watch(t, id)
	var streamedAll []streamed

	// Two messages sent while a slow turn runs wait for it.
	e.say(t, id, "#slow 100ms\n#reply one two three four")
	streamedAll = append(streamedAll, until(t, events, "span.model_request_start", 30*time.Second)...)
	e.say(t, id, "#reply second")
	e.say(t, id, "#reply third")
	for range 3 {
		streamedAll = append(streamedAll, until(t, events, "session.status_idle", 30*time.Second)...)
	}
	// A message queued behind a turn that is interrupted runs after it.
	e.say(t, id, `#tool bash {"command":"sleep 20"}`)
	streamedAll = append(streamedAll, until(t, events, "agent.tool_use", 30*time.Second)...)
	e.say(t, id, "#reply after the interrupt")
	e.sendRaw(t, id, map[string]any{"type": "user.interrupt"})
	for range 2 {
		streamedAll = append(streamedAll, until(t, events, "session.status_idle", 30*time.Second)...)
	}
	// A parked turn and its answer.
	e.say(t, id, `#tool get_weather {"city":"Paris"}`)
	evs := until(t, events, "session.status_idle", 30*time.Second)
	streamedAll = append(streamedAll, evs...)
	_, waiting := stopReason(last(evs, "session.status_idle"))
	if len(waiting) != 1 {
		t.Fatalf("parked turn waits for %v, want one custom tool use", waiting)
	}
	e.sendRaw(t, id, map[string]any{"type": "user.custom_tool_result", "custom_tool_use_id": waiting[0],
		"content": []any{map[string]any{"type": "text", "text": "sunny"}}})
	streamedAll = append(streamedAll, until(t, events, "session.status_idle", 30*time.Second)...)

	ctx := context.Background()
	list := listAll(t, e, id, anthropic.BetaSessionEventListParams{Limit: anthropic.Int(3)})
	if got, want := idsOf(list), streamedIDs(streamedAll); !slices.Equal(got, want) {
		t.Fatalf("the list and the live stream disagree:\nlist   %v\nstream %v", typesOfListed(list), typesOf(streamedAll))
	}
	desc := listAll(t, e, id, anthropic.BetaSessionEventListParams{Order: "desc", Limit: anthropic.Int(4)})
	if got := idsOf(desc); !slices.Equal(got, reversed(idsOf(list))) {
		t.Errorf("order=desc is not the list reversed:\nasc  %v\ndesc %v", idsOf(list), got)
	}
	var prev time.Time
	for i, ev := range list {
		at := processedAt(t, ev)
		if at.IsZero() || at.Before(prev) {
			t.Fatalf("event %d (%s) processed_at %v after %v: want set and never going back along the list", i, ev.Type, at, prev)
		}
		prev = at
		// Each message but the first takes its place when the session
		// takes it up: after the previous turn's end.
		if ev.Type == "user.message" && i > 0 && list[i-1].Type != "session.status_idle" {
			t.Errorf("user.message at %d follows %s, want the previous turn's session.status_idle:\n%v", i, list[i-1].Type, typesOfListed(list))
		}
	}
	// created_at[gte] compares against processed_at: a suffix of the list.
	mid := len(list) / 2
	since := processedAt(t, list[mid])
	after := listAll(t, e, id, anthropic.BetaSessionEventListParams{CreatedAtGte: anthropic.Time(since)})
	first := slices.IndexFunc(list, func(ev anthropic.BetaManagedAgentsSessionEventUnion) bool { return !processedAt(t, ev).Before(since) })
	if !slices.Equal(idsOf(after), idsOf(list[first:])) {
		t.Errorf("created_at[gte]=%v gave %d events, want the list's suffix from %d (%d events)", since, len(after), first, len(list)-first)
	}
	// Replay after any event gives exactly the rest of the list.
	replayCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	stream := e.client.Beta.Sessions.Events.StreamEvents(replayCtx, id, anthropic.BetaSessionEventStreamParams{},
		option.WithHeader("Last-Event-ID", list[mid].ID))
	defer func() { _ = stream.Close() }()
	var replayed []string
	for len(replayed) < len(list)-mid-1 && stream.Next() {
		replayed = append(replayed, stream.Current().ID)
	}
	if !slices.Equal(replayed, idsOf(list[mid+1:])) {
		t.Errorf("replay after event %d = %v (%v), want %v", mid, replayed, stream.Err(), idsOf(list[mid+1:]))
	}
}

func listAll(t *testing.T, e *turnEnv, id string, p anthropic.BetaSessionEventListParams) []anthropic.BetaManagedAgentsSessionEventUnion {
	t.Helper()
	var out []anthropic.BetaManagedAgentsSessionEventUnion
	pager := e.client.Beta.Sessions.Events.ListAutoPaging(context.Background(), id, p)
	for pager.Next() {
		out = append(out, pager.Current())
	}
	if err := pager.Err(); err != nil {
		t.Fatalf("list events: %v", err)
	}
	return out
}

func processedAt(t *testing.T, ev anthropic.BetaManagedAgentsSessionEventUnion) time.Time {
	t.Helper()
	var v struct {
		ProcessedAt *time.Time `json:"processed_at"`
	}
	if err := json.Unmarshal([]byte(ev.RawJSON()), &v); err != nil || v.ProcessedAt == nil {
		t.Fatalf("listed %s has no processed_at (%v): %s", ev.Type, err, ev.RawJSON())
	}
	return *v.ProcessedAt
}

func idsOf(evs []anthropic.BetaManagedAgentsSessionEventUnion) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.ID
	}
	return out
}

func typesOfListed(evs []anthropic.BetaManagedAgentsSessionEventUnion) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.Type
	}
	return out
}

func streamedIDs(evs []streamed) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.ID
	}
	return out
}

func reversed(s []string) []string {
	out := slices.Clone(s)
	slices.Reverse(out)
	return out
}
