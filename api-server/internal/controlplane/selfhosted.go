package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mangohq/mango/db"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
	"github.com/mangohq/mango/proto/sessionwf"
)

// Bounds of AwaitToolResultRequest.max_wait: unset means
// defaultAwaitMaxWait; a longer wait is cut to maxAwaitMaxWait.
const (
	defaultAwaitMaxWait = 30 * time.Second
	maxAwaitMaxWait     = 5 * time.Minute
)

// awaitPollEvery is how often AwaitToolResult looks again when the server
// has no EventWaits to be woken by.
const awaitPollEvery = time.Second

// timeoutKeySuffix ends the key of the error result the api-server
// appends when a self-hosted tool call's timeout passed unanswered.
const timeoutKeySuffix = "/self_hosted_timeout"

// AwaitToolResult implements pb.ControlPlaneServer: it holds the call,
// woken by the session's event notifications, until the tool_use has an
// answer, its timeout passes (then it appends the error result itself) or
// max_wait passes (resolved false).
func (s *Server) AwaitToolResult(ctx context.Context, req *pb.AwaitToolResultRequest) (*pb.AwaitToolResultResponse, error) {
	const op = "await tool result"
	sid, useID := req.GetSessionId(), req.GetToolUseEventId()
	if err := requireFields("session_id", sid, "tool_use_event_id", useID); err != nil {
		return nil, err
	}
	timeout := req.GetTimeout().AsDuration()
	if req.GetTimeout() == nil || timeout <= 0 {
		return nil, invalid("timeout", "required, a positive duration")
	}
	maxWait := req.GetMaxWait().AsDuration()
	if maxWait <= 0 {
		maxWait = defaultAwaitMaxWait
	}
	holdUntil := s.now().Add(min(maxWait, maxAwaitMaxWait))
	sess, err := s.store.SessionGet(ctx, sid)
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	if !sess.SelfHosted {
		return nil, status.Errorf(codes.FailedPrecondition, "%s: session %s is not of a self_hosted environment: its tools run on Mango's workers", op, sid)
	}
	for {
		wake := s.waitEvents(sid)
		answer, use, err := s.store.ToolUseAnswer(ctx, sid, useID)
		if errors.Is(err, db.ErrNotFound) {
			return nil, status.Errorf(codes.NotFound, "%s: %s is not an agent.tool_use event of session %s", op, useID, sid)
		}
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		if answer != nil {
			return answerToPB(sid, use.ID, answer)
		}
		deadline, now := use.CreatedAt.Add(timeout), s.now()
		if !now.Before(deadline) {
			return s.timeOutToolUse(ctx, sid, use, timeout)
		}
		if !now.Before(holdUntil) {
			return &pb.AwaitToolResultResponse{}, nil
		}
		drained, err := s.sleepUntil(ctx, wake, min(deadline.Sub(now), holdUntil.Sub(now)))
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		if drained {
			// Shutting down: the worker calls again, on another replica.
			return &pb.AwaitToolResultResponse{}, nil
		}
	}
}

// waitEvents returns a channel closed when the session's events may have
// changed: at its next event notification, or, without EventWaits, after
// awaitPollEvery.
func (s *Server) waitEvents(sessionID string) <-chan struct{} {
	if s.eventWaits != nil {
		return s.eventWaits.Wait(sessionID)
	}
	ch := make(chan struct{})
	time.AfterFunc(awaitPollEvery, func() { close(ch) })
	return ch
}

// sleepUntil waits until wake is closed or d passes; it returns ctx's
// error when ctx ends first, and drained when the server drains first
// (a graceful stop does not wait for held calls).
func (s *Server) sleepUntil(ctx context.Context, wake <-chan struct{}, d time.Duration) (drained bool, err error) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-wake:
	case <-timer.C:
	case <-s.drain:
		return true, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
	return false, nil
}

// timeOutToolUse appends the error result of a self-hosted tool call whose
// timeout passed unanswered, as the answer (ToolResults: unless the
// client's result committed first, which is then the answer).
func (s *Server) timeOutToolUse(ctx context.Context, sid string, use *db.Event, timeout time.Duration) (*pb.AwaitToolResultResponse, error) {
	const op = "time out tool use"
	var u struct {
		Name string `json:"name"`
	}
	_ = json.Unmarshal(use.Body, &u)
	msg := fmt.Sprintf("no self-hosted worker returned a result for this %s call within %s: the call was given up "+
		"(check that a worker of the session's environment is running and polling)", u.Name, timeout)
	body, err := json.Marshal(map[string]any{"tool_use_id": use.ID, "is_error": true,
		"content": []map[string]string{{"type": "text", "text": msg}}})
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	key := use.ID + timeoutKeySuffix
	ev := db.NewEvent{ID: sessionwf.EventID(sid, key), Type: "agent.tool_result", Body: body, Key: key}
	_, stored, err := s.store.Append(ctx, sid, &db.AppendRequest{Events: []db.NewEvent{ev}, ToolResults: []string{use.ID}, Now: s.now()})
	var answered *db.ToolUseError
	if errors.As(err, &answered) && answered.Answered {
		// The client's result (or an earlier call's timeout) came first.
		answer, _, err := s.store.ToolUseAnswer(ctx, sid, use.ID)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		if answer == nil {
			return nil, s.fail(ctx, op, fmt.Errorf("tool use %s of session %s answered, and no answer found", use.ID, sid))
		}
		return answerToPB(sid, use.ID, answer)
	}
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	for i := range stored {
		if stored[i].Type == "agent.tool_result" {
			return answerToPB(sid, use.ID, &stored[i])
		}
	}
	return nil, s.fail(ctx, op, fmt.Errorf("append the timeout result of tool use %s of session %s: not among the stored events", use.ID, sid))
}

// answerToPB is the response carrying answer, the event that answers tool
// use useID of session sid.
func answerToPB(sid, useID string, answer *db.Event) (*pb.AwaitToolResultResponse, error) {
	var body struct {
		Content json.RawMessage `json:"content"`
		IsError bool            `json:"is_error"`
	}
	if err := json.Unmarshal(answer.Body, &body); err != nil {
		return nil, status.Errorf(codes.Internal, "await tool result: decode answer %s: %v", answer.ID, err)
	}
	return &pb.AwaitToolResultResponse{Resolved: true, IsError: body.IsError, Content: jsonArray(body.Content),
		AnswerEventId: answer.ID, TimedOut: answer.ID == sessionwf.EventID(sid, useID+timeoutKeySuffix)}, nil
}
