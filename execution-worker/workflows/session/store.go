package session

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"sync/atomic"

	"github.com/mangohq/mango/execution-worker/agentruntime"
	"github.com/mangohq/mango/execution-worker/model"
	"github.com/mangohq/mango/execution-worker/tools"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// cpStore is agentruntime.Store over the ControlPlane: events, the
// provider transcript and the tool journal of one session.
type cpStore struct {
	cp        pb.ControlPlaneClient
	sessionID string
	// model is the model id the turn's requests use: it prices their
	// usage.
	model string
	// exhausted is the session's budget state as the last commit
	// reported it (or GetRun, before the first).
	exhausted atomic.Bool
	// previews counts the preview frames the turn sent of each event
	// (nil: the turn previews nothing).
	previews PreviewCounter
}

// PreviewCounter reports how many preview frames were sent of the event
// under a key, so the commit of that event can tell the api-server how many
// to expect before it (pb.NewEvent.preview_frames).
type PreviewCounter interface {
	Frames(key string) uint32
}

// Previewer is a turn's preview sink: it previews events and counts what
// it sent of each.
type Previewer interface {
	agentruntime.Previewer
	PreviewCounter
}

var (
	_ agentruntime.Store          = (*cpStore)(nil)
	_ agentruntime.BudgetReporter = (*cpStore)(nil)
)

// BudgetExhausted implements agentruntime.BudgetReporter.
func (s *cpStore) BudgetExhausted() bool { return s.exhausted.Load() }

// usageToPB is a model request's usage as the ControlPlane counts it.
// Cache writes the provider did not break down by lifetime are 5-minute
// writes (the default lifetime).
func (s *cpStore) usageToPB(u *model.Usage) *pb.ModelUsage {
	if u == nil {
		return nil
	}
	w5, w1 := u.CacheCreation5mInputTokens, u.CacheCreation1hInputTokens
	if rest := u.CacheCreationInputTokens - w5 - w1; rest > 0 {
		w5 += rest
	}
	return &pb.ModelUsage{Model: s.model, InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		CacheReadInputTokens: u.CacheReadInputTokens, CacheCreation_5MInputTokens: w5, CacheCreation_1HInputTokens: w1,
		WebSearchRequests: u.WebSearchRequests, WebFetchRequests: u.WebFetchRequests}
}

// pbEvents encodes events for the ControlPlane: a span end carries its
// request's usage, a previewed event the number of frames previewed of it.
func (s *cpStore) pbEvents(events []agentruntime.NewEvent) ([]*pb.NewEvent, error) {
	out := make([]*pb.NewEvent, 0, len(events))
	for _, e := range events {
		body, err := json.Marshal(e.Body)
		if err != nil {
			return nil, fmt.Errorf("encode %s event: %w", e.Type, err)
		}
		ev := &pb.NewEvent{Key: e.Key, Type: e.Type, Body: string(body), Usage: s.usageToPB(e.Usage)}
		if s.previews != nil {
			ev.PreviewFrames = s.previews.Frames(e.Key)
		}
		out = append(out, ev)
	}
	return out, nil
}

func (s *cpStore) AppendEvents(ctx context.Context, events []agentruntime.NewEvent) ([]string, error) {
	return s.AppendWithTranscript(ctx, nil, events)
}

func (s *cpStore) AppendEvent(ctx context.Context, event agentruntime.NewEvent) (string, bool, error) {
	evs, err := s.pbEvents([]agentruntime.NewEvent{event})
	if err != nil {
		return "", false, err
	}
	resp, err := s.cp.AppendEvents(ctx, &pb.AppendEventsRequest{SessionId: s.sessionID, Events: evs})
	if err != nil {
		return "", false, fmt.Errorf("append events: %w", err)
	}
	s.exhausted.Store(resp.GetBudgetExhausted())
	if len(resp.GetEvents()) != 1 {
		return "", false, fmt.Errorf("append events: %d events answered, want 1", len(resp.GetEvents()))
	}
	return resp.GetEvents()[0].GetId(), resp.GetEvents()[0].GetExisted(), nil
}

// pbTranscript encodes transcript messages for the ControlPlane.
func pbTranscript(msgs []agentruntime.TranscriptMessage) ([]*pb.TranscriptEntry, error) {
	out := make([]*pb.TranscriptEntry, 0, len(msgs))
	for _, m := range msgs {
		body, err := json.Marshal(transcriptBody{Message: m.Msg, Anchor: m.Anchor})
		if err != nil {
			return nil, fmt.Errorf("encode transcript message: %w", err)
		}
		out = append(out, &pb.TranscriptEntry{Key: m.Key, Body: string(body)})
	}
	return out, nil
}

// lastCommit encodes a turn's held last commit (agentruntime.Result.Last;
// nil: none) for CompleteTurn.
func (s *cpStore) lastCommit(c *agentruntime.Commit) ([]*pb.TranscriptEntry, []*pb.NewEvent, error) {
	if c == nil {
		return nil, nil, nil
	}
	transcript, err := pbTranscript(c.Transcript)
	if err != nil {
		return nil, nil, err
	}
	events, err := s.pbEvents(c.Events)
	return transcript, events, err
}

func (s *cpStore) AppendWithTranscript(ctx context.Context, transcript []agentruntime.TranscriptMessage, events []agentruntime.NewEvent) ([]string, error) {
	req := &pb.AppendEventsRequest{SessionId: s.sessionID}
	var err error
	if req.Transcript, err = pbTranscript(transcript); err != nil {
		return nil, err
	}
	if req.Events, err = s.pbEvents(events); err != nil {
		return nil, err
	}
	resp, err := s.cp.AppendEvents(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("append events: %w", err)
	}
	s.exhausted.Store(resp.GetBudgetExhausted())
	ids := make([]string, 0, len(resp.GetEvents()))
	for _, e := range resp.GetEvents() {
		ids = append(ids, e.GetId())
	}
	return ids, nil
}

func (s *cpStore) RecordMessage(ctx context.Context, key string, msg model.Message) error {
	body, err := json.Marshal(msg)
	if err != nil {
		return fmt.Errorf("encode transcript message: %w", err)
	}
	_, err = s.cp.AppendTranscript(ctx, &pb.AppendTranscriptRequest{SessionId: s.sessionID,
		Entries: []*pb.TranscriptEntry{{Key: key, Body: string(body)}}})
	if err != nil {
		return fmt.Errorf("append transcript: %w", err)
	}
	return nil
}

func (s *cpStore) ToolResult(ctx context.Context, toolUseID string) (*tools.Result, bool, error) {
	resp, err := s.cp.GetToolJournal(ctx, &pb.GetToolJournalRequest{SessionId: s.sessionID, ToolUseId: toolUseID})
	if err != nil {
		return nil, false, fmt.Errorf("read tool journal: %w", err)
	}
	if resp.GetEntry() == nil {
		return nil, false, nil
	}
	var r tools.Result
	if err := json.Unmarshal([]byte(resp.GetEntry().GetBody()), &r); err != nil {
		return nil, false, fmt.Errorf("decode tool journal entry: %w", err)
	}
	return &r, true, nil
}

// startMark is the journal entry that says a tool call has started. Its
// claim is fresh for every MarkStarted, so a call whose response was lost
// (the api-server restarted after committing) and that the client sends
// again still recognises the entry as its own.
type startMark struct {
	Content string `json:"content"`
	Claim   string `json:"claim"`
}

// MarkStarted claims the start of a tool call: true when this call stored
// the mark (or stored it on an earlier try of the same RPC), false when
// another attempt of the turn did.
func (s *cpStore) MarkStarted(ctx context.Context, key string) (bool, error) {
	mine := startMark{Content: "started", Claim: rand.Text()}
	body, err := json.Marshal(mine)
	if err != nil {
		return false, err
	}
	resp, err := s.cp.RecordToolJournal(ctx, &pb.RecordToolJournalRequest{SessionId: s.sessionID, ToolUseId: key, Body: string(body)})
	if err != nil {
		return false, fmt.Errorf("record tool start: %w", err)
	}
	if resp.GetCreated() {
		return true, nil
	}
	var stored startMark
	if err := json.Unmarshal([]byte(resp.GetEntry().GetBody()), &stored); err != nil {
		return false, nil // an older mark without a claim: another attempt's
	}
	return stored.Claim == mine.Claim, nil
}

func (s *cpStore) RecordToolResult(ctx context.Context, toolUseID string, r tools.Result) (tools.Result, error) {
	body, err := json.Marshal(r)
	if err != nil {
		return r, err
	}
	resp, err := s.cp.RecordToolJournal(ctx, &pb.RecordToolJournalRequest{SessionId: s.sessionID, ToolUseId: toolUseID, Body: string(body)})
	if err != nil {
		return r, fmt.Errorf("record tool journal: %w", err)
	}
	var stored tools.Result
	if err := json.Unmarshal([]byte(resp.GetEntry().GetBody()), &stored); err != nil {
		return r, fmt.Errorf("decode tool journal entry: %w", err)
	}
	return stored, nil
}
