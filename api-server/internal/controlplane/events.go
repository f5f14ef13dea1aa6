package controlplane

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/api-server/internal/preview"
	"github.com/mangohq/mango/api-server/internal/usage"
	"github.com/mangohq/mango/db"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
	"github.com/mangohq/mango/proto/sessionwf"
)

// GetRun implements pb.ControlPlaneServer.
func (s *Server) GetRun(ctx context.Context, req *pb.GetRunRequest) (*pb.GetRunResponse, error) {
	const op = "get run"
	if err := requireSession(req.GetSessionId()); err != nil {
		return nil, err
	}
	after := max(req.GetTranscriptAfterSeq(), 0)
	run, err := s.store.RunState(ctx, req.GetSessionId(), after, req.GetWithTurnContext(), s.now())
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	sess := run.Session
	resp := &pb.GetRunResponse{
		SessionId: sess.ID, AgentId: sess.AgentID, AgentVersion: sess.AgentVersion, Agent: string(sess.Agent),
		Provider: sess.Provider, Status: statusToPB(sess.Status), LastSeq: sess.LastSeq, BudgetExhausted: sess.BudgetExhausted(),
		CompleteTurnTranscript: true,
	}
	var toolCfg struct {
		Tools      json.RawMessage `json:"tools"`
		MCPServers json.RawMessage `json:"mcp_servers"`
	}
	if err := json.Unmarshal(sess.Agent, &toolCfg); err != nil {
		return nil, s.fail(ctx, op, fmt.Errorf("decode agent snapshot of session %s: %w", sess.ID, err))
	}
	resp.Tools, resp.McpServers = jsonArray(toolCfg.Tools), jsonArray(toolCfg.MCPServers)
	if sess.EnvironmentID != nil {
		resp.EnvironmentId = *sess.EnvironmentID
		if run.Environment != nil {
			resp.EnvironmentConfig = string(run.Environment.Config)
		} else {
			s.log.WarnContext(ctx, "controlplane: session's environment is gone", "session", sess.ID, "environment", *sess.EnvironmentID)
		}
	}
	for i := range run.Pending {
		resp.PendingTriggers = append(resp.PendingTriggers, eventToPB(&run.Pending[i], ""))
	}
	resp.TranscriptAfterSeq = after
	resp.Transcript = make([]*pb.TranscriptEntry, 0, len(run.Transcript))
	for _, e := range run.Transcript {
		resp.Transcript = append(resp.Transcript, &pb.TranscriptEntry{Key: e.Key, Body: string(e.Body), Seq: e.Seq})
	}
	for _, body := range run.SystemMessages {
		resp.SystemMessages = append(resp.SystemMessages, systemMessageText(body))
	}
	if resp.Outcome, err = s.outcomeContext(ctx, sess.ID, run.Outcome, run.Pending); err != nil {
		return nil, s.fail(ctx, op, err)
	}
	if resp.Thread, err = s.threadContext(sess); err != nil {
		return nil, s.fail(ctx, op, err)
	}
	if sess.IsThread() {
		// A thread spends its session's budget.
		parent, err := s.store.SessionGet(ctx, *sess.ParentID)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		resp.BudgetExhausted = parent.BudgetExhausted()
	}
	if req.GetWithTurnContext() {
		resp.TurnContext = &pb.TurnContext{Resources: resourcesToPB(run.Resources)}
		if run.Snapshot != nil {
			resp.TurnContext.ContextSnapshot = snapshotToPB(run.Snapshot)
		}
	}
	return resp, nil
}

func jsonArray(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return "[]"
	}
	return string(raw)
}

// MarkTriggersProcessed implements pb.ControlPlaneServer.
func (s *Server) MarkTriggersProcessed(ctx context.Context, req *pb.MarkTriggersProcessedRequest) (*pb.MarkTriggersProcessedResponse, error) {
	if err := requireSession(req.GetSessionId()); err != nil {
		return nil, err
	}
	if len(req.GetEventIds()) == 0 {
		return nil, invalid("event_ids", "at least one is required")
	}
	evs, err := s.store.EventsMarkProcessed(ctx, req.GetSessionId(), req.GetEventIds(), s.now())
	if err != nil {
		return nil, s.fail(ctx, "mark triggers processed", err)
	}
	resp := &pb.MarkTriggersProcessedResponse{}
	for i := range evs {
		resp.Events = append(resp.Events, eventToPB(&evs[i], ""))
	}
	return resp, nil
}

// AppendEvents implements pb.ControlPlaneServer.
func (s *Server) AppendEvents(ctx context.Context, req *pb.AppendEventsRequest) (*pb.AppendEventsResponse, error) {
	if err := requireSession(req.GetSessionId()); err != nil {
		return nil, err
	}
	if len(req.GetEvents()) == 0 {
		return nil, invalid("events", "at least one is required")
	}
	evs, err := s.newEvents(req.GetSessionId(), req.GetEvents())
	if err != nil {
		return nil, err
	}
	transcript, err := transcriptEntries("transcript", req.GetTranscript())
	if err != nil {
		return nil, err
	}
	areq := &db.AppendRequest{Events: evs, Transcript: transcript}
	if slices.ContainsFunc(evs, func(e db.NewEvent) bool { return e.Type == "agent.tool_use" }) {
		// A self-hosted session's client worker runs the call: the session
		// needs a work item (db ignores this for other sessions).
		areq.EnsureWork = ids.New(ids.Work)
	}
	out, sess, err := s.appendEvents(ctx, req.GetSessionId(), req.GetEvents(), areq)
	if err != nil {
		return nil, s.fail(ctx, "append events", err)
	}
	return &pb.AppendEventsResponse{Events: out, BudgetExhausted: sess.BudgetExhausted()}, nil
}

// ParkTurn implements pb.ControlPlaneServer.
func (s *Server) ParkTurn(ctx context.Context, req *pb.ParkTurnRequest) (*pb.ParkTurnResponse, error) {
	const op = "park turn"
	sid := req.GetSessionId()
	if err := requireSession(sid); err != nil {
		return nil, err
	}
	if len(req.GetRequiredActionEventIds()) == 0 && len(req.GetRequiredActionEventKeys()) == 0 {
		return nil, invalid("required_action_event_ids", "at least one event id or key is required")
	}
	evs, err := s.newEvents(req.GetSessionId(), req.GetEvents())
	if err != nil {
		return nil, err
	}
	minted := make(map[string]string, len(evs))
	keys := make([]string, 0, len(evs)+len(req.GetRequiredActionEventKeys()))
	for _, e := range evs {
		minted[e.Key] = e.ID
		keys = append(keys, e.Key)
	}
	keys = append(keys, req.GetRequiredActionEventKeys()...)
	stored, err := s.store.EventIDsByKey(ctx, sid, keys)
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	eventIDs := append([]string{}, req.GetRequiredActionEventIds()...)
	for _, k := range req.GetRequiredActionEventKeys() {
		id := stored[k]
		if id == "" {
			id = minted[k]
		}
		if id == "" {
			return nil, invalid("required_action_event_keys", fmt.Sprintf("no event with key %q in the request or the session", k))
		}
		eventIDs = append(eventIDs, id)
	}
	for _, id := range eventIDs {
		if !ids.Valid(ids.Event, id) {
			return nil, invalid("required_action_event_ids", fmt.Sprintf("%q is not an event id", id))
		}
	}
	reason, err := json.Marshal(map[string]any{"type": "requires_action", "event_ids": eventIDs})
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	retry := allStored(evs, stored)
	decide := func(*db.Session) (*db.Change, error) {
		if retry {
			return nil, nil
		}
		return &db.Change{To: db.StatusIdle, StopReason: reason, EventID: ids.New(ids.Event)}, nil
	}
	out, sess, err := s.appendEvents(ctx, sid, req.GetEvents(), &db.AppendRequest{Events: evs, Decide: decide, TurnEnd: s.usageEvent(reqKey(evs))})
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	return &pb.ParkTurnResponse{Events: out, Status: statusToPB(sess.Status), StopReason: string(sess.StopReason)}, nil
}

// CompleteTurn implements pb.ControlPlaneServer.
func (s *Server) CompleteTurn(ctx context.Context, req *pb.CompleteTurnRequest) (*pb.CompleteTurnResponse, error) {
	const op = "complete turn"
	sid := req.GetSessionId()
	if err := requireSession(sid); err != nil {
		return nil, err
	}
	var to db.Status
	var reason json.RawMessage
	switch req.GetOutcome() {
	case pb.TurnOutcome_TURN_OUTCOME_END_TURN:
		to, reason = db.StatusIdle, json.RawMessage(`{"type":"end_turn"}`)
	case pb.TurnOutcome_TURN_OUTCOME_RETRIES_EXHAUSTED:
		to, reason = db.StatusIdle, json.RawMessage(`{"type":"retries_exhausted"}`)
	case pb.TurnOutcome_TURN_OUTCOME_BUDGET_REACHED:
		to, reason = db.StatusIdle, json.RawMessage(`{"type":"budget_reached"}`)
	case pb.TurnOutcome_TURN_OUTCOME_RESCHEDULING:
		to = db.StatusRescheduling
	case pb.TurnOutcome_TURN_OUTCOME_TERMINATED:
		to = db.StatusTerminated
	case pb.TurnOutcome_TURN_OUTCOME_RUNNING:
		to = db.StatusRunning
	default:
		return nil, invalid("outcome", "required")
	}
	evs, err := s.newEvents(req.GetSessionId(), req.GetEvents())
	if err != nil {
		return nil, err
	}
	transcript, err := transcriptEntries("transcript", req.GetTranscript())
	if err != nil {
		return nil, err
	}
	retry := false
	if len(evs) > 0 && req.GetTurnKey() == "" {
		keys := make([]string, 0, len(evs))
		for _, e := range evs {
			keys = append(keys, e.Key)
		}
		stored, err := s.store.EventIDsByKey(ctx, sid, keys)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		retry = allStored(evs, stored)
	}
	key := ""
	if tk := req.GetTurnKey(); tk != "" {
		key = tk + "/status/" + strings.ToLower(strings.TrimPrefix(req.GetOutcome().String(), "TURN_OUTCOME_"))
		retry = false // the keyed change is idempotent on its own
	}
	decide := func(cur *db.Session) (*db.Change, error) {
		if retry || cur.Status == to {
			// Already there: a retried call, or a turn that ended while an
			// interrupt was ending it too — exactly one status event.
			return nil, nil
		}
		return &db.Change{To: to, StopReason: reason, EventID: ids.New(ids.Event), Key: key}, nil
	}
	usageKey := key
	if usageKey == "" {
		usageKey = reqKey(evs)
	}
	out, sess, err := s.appendEvents(ctx, sid, req.GetEvents(), &db.AppendRequest{Events: evs, Transcript: transcript, Processed: req.GetProcessedEventIds(),
		Decide: decide, TurnEnd: s.usageEvent(usageKey)})
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	if sess.IsThread() {
		// A thread's turn end may owe its session a wake-up: its reply,
		// or the end of the session's held turn.
		s.wakeNow(ctx, *sess.ParentID)
	} else if to == db.StatusIdle && sess.Status == db.StatusRunning {
		// A turn end that left the session running (its outcome's
		// evaluation or revision is next) owes its workflow a wake-up.
		s.wakeNow(ctx, sid)
	}
	return &pb.CompleteTurnResponse{Events: out, Status: statusToPB(sess.Status), StopReason: string(sess.StopReason)}, nil
}

func allStored(evs []db.NewEvent, stored map[string]string) bool {
	if len(evs) == 0 {
		return false
	}
	for _, e := range evs {
		if stored[e.Key] == "" {
			return false
		}
	}
	return true
}

// reqKey is a key for what a request's keyed events end: the first
// event's key, or empty.
func reqKey(evs []db.NewEvent) string {
	if len(evs) == 0 {
		return ""
	}
	return evs[0].Key
}

// usageEvent returns the AppendRequest.TurnEnd of a turn-ending request:
// the session.usage snapshot appended before the status event, keyed
// after key when set (a retry of the same end finds it stored).
func (s *Server) usageEvent(key string) func(cur *db.Session) *db.NewEvent {
	return func(cur *db.Session) *db.NewEvent {
		ev := &db.NewEvent{ID: ids.New(ids.Event), Type: "session.usage", Body: usage.SnapshotEvent(cur, s.now())}
		if key != "" {
			ev.Key = key + "/session_usage"
			ev.ID = sessionwf.EventID(cur.ID, ev.Key)
		}
		return ev
	}
}

// newEvents validates worker events and gives each the id derived from its
// key (sessionwf.EventID), the id the worker announced in its previews,
// and prices the model usage they carry.
func (s *Server) newEvents(sessionID string, in []*pb.NewEvent) ([]db.NewEvent, error) {
	out := make([]db.NewEvent, 0, len(in))
	seen := make(map[string]bool, len(in))
	for i, e := range in {
		field := fmt.Sprintf("events[%d]", i)
		switch {
		case e.GetKey() == "":
			return nil, invalid(field+".key", "required")
		case seen[e.GetKey()]:
			return nil, invalid(field+".key", fmt.Sprintf("duplicate key %q", e.GetKey()))
		case e.GetType() == "":
			return nil, invalid(field+".type", "required")
		case strings.HasPrefix(e.GetType(), "user.") || strings.HasPrefix(e.GetType(), "session.status_"):
			return nil, invalid(field+".type", fmt.Sprintf("%q events are not appended by workers", e.GetType()))
		}
		seen[e.GetKey()] = true
		body, err := jsonObject(field+".body", e.GetBody())
		if err != nil {
			return nil, err
		}
		ev := db.NewEvent{ID: sessionwf.EventID(sessionID, e.GetKey()), Type: e.GetType(), Body: body, Key: e.GetKey()}
		if u := e.GetUsage(); u != nil {
			if err := checkUsage(field+".usage", u); err != nil {
				return nil, err
			}
			cost := s.prices.Cost(usage.Request{Model: u.GetModel(), InputTokens: u.GetInputTokens(), OutputTokens: u.GetOutputTokens(),
				CacheReadInputTokens: u.GetCacheReadInputTokens(), CacheCreation5m: u.GetCacheCreation_5MInputTokens(),
				CacheCreation1h: u.GetCacheCreation_1HInputTokens(), WebSearchRequests: u.GetWebSearchRequests(), WebFetchRequests: u.GetWebFetchRequests()})
			ev.Usage = &cost
		}
		out = append(out, ev)
	}
	return out, nil
}

// appendEvents runs req (its Now set here) through Store.Append and
// returns the stored events in request order; in are the worker's events
// req was made of.
func (s *Server) appendEvents(ctx context.Context, sessionID string, in []*pb.NewEvent, req *db.AppendRequest) ([]*pb.Event, *db.Session, error) {
	evs := req.Events
	if s.previews != nil {
		var wants []preview.Want
		for _, e := range in {
			if n := e.GetPreviewFrames(); n > 0 {
				wants = append(wants, preview.Want{EventID: sessionwf.EventID(sessionID, e.GetKey()), Frames: n})
			}
		}
		// Subscribers get the last deltas before the commit's notification
		// (bounded: previews never hold a commit up for long).
		s.previews.Sync(ctx, wants, previewSyncWait)
	}
	req.Now = s.now()
	sess, stored, err := s.store.Append(ctx, sessionID, req)
	if err != nil {
		return nil, nil, err
	}
	// Append returns the events already present (in request order), then
	// the new ones (in request order), then the status event, if any. The
	// events already present were stored by an earlier call with the same
	// keys (under the id derived from the key, or under a random id if
	// stored by an older version); the new ones carry the ids given here.
	var earlier []*db.Event
	byID := make(map[string]*db.Event, len(stored))
	appended := 0
	for i := range stored {
		if stored[i].Existed {
			earlier = append(earlier, &stored[i])
			continue
		}
		byID[stored[i].ID] = &stored[i]
		appended++
	}
	out := make([]*pb.Event, 0, len(evs))
	for _, e := range evs {
		ev, ok := byID[e.ID]
		if !ok {
			if len(earlier) == 0 {
				return nil, nil, fmt.Errorf("append events to session %s: event %q missing from the stored events", sessionID, e.Key)
			}
			ev, earlier = earlier[0], earlier[1:]
		}
		pe := eventToPB(ev, e.Key)
		pe.Existed = ev.Existed
		out = append(out, pe)
	}
	if appended > 0 {
		s.metrics.appended.Add(float64(appended))
	}
	return out, sess, nil
}

func eventToPB(e *db.Event, key string) *pb.Event {
	out := &pb.Event{Id: e.ID, Seq: e.Seq, Type: e.Type, Body: string(e.Body), Key: key, CreatedAt: timestamppb.New(e.CreatedAt)}
	if e.ProcessedAt != nil {
		out.ProcessedAt = timestamppb.New(*e.ProcessedAt)
	}
	return out
}

func statusToPB(st db.Status) pb.SessionStatus {
	switch st {
	case db.StatusIdle:
		return pb.SessionStatus_SESSION_STATUS_IDLE
	case db.StatusRunning:
		return pb.SessionStatus_SESSION_STATUS_RUNNING
	case db.StatusRescheduling:
		return pb.SessionStatus_SESSION_STATUS_RESCHEDULING
	case db.StatusTerminated:
		return pb.SessionStatus_SESSION_STATUS_TERMINATED
	}
	return pb.SessionStatus_SESSION_STATUS_UNSPECIFIED
}

// checkUsage refuses negative or absurd usage counters (a defective
// worker must not corrupt a session's totals).
func checkUsage(field string, u *pb.ModelUsage) error {
	const maxCount = 1 << 40
	for name, v := range map[string]int64{"input_tokens": u.GetInputTokens(), "output_tokens": u.GetOutputTokens(),
		"cache_read_input_tokens": u.GetCacheReadInputTokens(), "cache_creation_5m_input_tokens": u.GetCacheCreation_5MInputTokens(),
		"cache_creation_1h_input_tokens": u.GetCacheCreation_1HInputTokens(), "web_search_requests": u.GetWebSearchRequests(),
		"web_fetch_requests": u.GetWebFetchRequests()} {
		if v < 0 || v > maxCount {
			return invalid(field+"."+name, fmt.Sprintf("must be between 0 and %d, got %d", int64(maxCount), v))
		}
	}
	return nil
}

// systemMessageText is the text of a system.message body: its text blocks,
// joined by newlines.
func systemMessageText(body json.RawMessage) string {
	var m struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	_ = json.Unmarshal(body, &m)
	texts := make([]string, 0, len(m.Content))
	for _, b := range m.Content {
		texts = append(texts, b.Text)
	}
	return strings.Join(texts, "\n")
}
