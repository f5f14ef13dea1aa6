package session

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"

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
}

var _ agentruntime.Store = (*cpStore)(nil)

func (s *cpStore) AppendEvents(ctx context.Context, events []agentruntime.NewEvent) ([]string, error) {
	return s.AppendWithTranscript(ctx, nil, events)
}

func (s *cpStore) AppendEvent(ctx context.Context, event agentruntime.NewEvent) (string, bool, error) {
	body, err := json.Marshal(event.Body)
	if err != nil {
		return "", false, fmt.Errorf("encode %s event: %w", event.Type, err)
	}
	resp, err := s.cp.AppendEvents(ctx, &pb.AppendEventsRequest{SessionId: s.sessionID,
		Events: []*pb.NewEvent{{Key: event.Key, Type: event.Type, Body: string(body)}}})
	if err != nil {
		return "", false, fmt.Errorf("append events: %w", err)
	}
	if len(resp.GetEvents()) != 1 {
		return "", false, fmt.Errorf("append events: %d events answered, want 1", len(resp.GetEvents()))
	}
	return resp.GetEvents()[0].GetId(), resp.GetEvents()[0].GetExisted(), nil
}

func (s *cpStore) AppendWithTranscript(ctx context.Context, transcript []agentruntime.TranscriptMessage, events []agentruntime.NewEvent) ([]string, error) {
	req := &pb.AppendEventsRequest{SessionId: s.sessionID}
	for _, m := range transcript {
		body, err := json.Marshal(transcriptBody{Message: m.Msg, Anchor: m.Anchor})
		if err != nil {
			return nil, fmt.Errorf("encode transcript message: %w", err)
		}
		req.Transcript = append(req.Transcript, &pb.TranscriptEntry{Key: m.Key, Body: string(body)})
	}
	for _, e := range events {
		body, err := json.Marshal(e.Body)
		if err != nil {
			return nil, fmt.Errorf("encode %s event: %w", e.Type, err)
		}
		req.Events = append(req.Events, &pb.NewEvent{Key: e.Key, Type: e.Type, Body: string(body)})
	}
	resp, err := s.cp.AppendEvents(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("append events: %w", err)
	}
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
