package session

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mangohq/mango/execution-worker/agentruntime"
	"github.com/mangohq/mango/execution-worker/model"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sessionfiles"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// events returns one event per "id:type" spec ("type" alone: no id).
func events(t *testing.T, specs ...string) []*pb.Event {
	t.Helper()
	out := make([]*pb.Event, 0, len(specs))
	for _, s := range specs {
		id, typ, ok := strings.Cut(s, ":")
		if !ok {
			id, typ = "", s
		}
		out = append(out, &pb.Event{Id: id, Type: typ})
	}
	return out
}

func TestRouteTurn(t *testing.T) {
	t.Parallel()
	serves := func(q string) bool { return q == "mango.docker.here" }
	for _, c := range []struct {
		name      string
		in        RunTurnInput
		serves    func(string) bool
		wantQueue string
		wantHere  bool
	}{
		{"first turn, no queue known", RunTurnInput{}, serves, "", true},
		{"turn on the sandbox's queue", RunTurnInput{TaskQueue: "mango.docker.there"}, serves, "mango.docker.there", true},
		{"eager turn on a worker of its locality", RunTurnInput{Locality: "mango.docker.here"}, serves, "mango.docker.here", true},
		{"eager turn on a worker of another locality", RunTurnInput{Locality: "mango.docker.there"}, serves, "mango.docker.there", false},
		{"eager turn on a worker that serves nothing", RunTurnInput{Locality: "mango.docker.here"}, nil, "mango.docker.here", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			queue, here := routeTurn(c.in, c.serves)
			if queue != c.wantQueue || here != c.wantHere {
				t.Errorf("routeTurn(%+v) = %q, %v; want %q, %v", c.in, queue, here, c.wantQueue, c.wantHere)
			}
		})
	}
}

func TestTriage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		pending   []string
		wantKind  trigger
		wantBatch []string
	}{
		{"nothing pending", nil, triggerNone, nil},
		{"a lone interrupt", []string{"i1:user.interrupt"}, triggerInterrupt, []string{"i1"}},
		{"an interrupt before a message", []string{"i1:user.interrupt", "m1:user.message"}, triggerInterrupt, []string{"i1"}},
		{"a message", []string{"m1:user.message"}, triggerMessage, []string{"m1"}},
		{"a message before more", []string{"m1:user.message", "m2:user.message", "i1:user.interrupt"}, triggerMessage, []string{"m1"}},
		{"answers up to the first other trigger",
			[]string{"a1:user.custom_tool_result", "a2:user.tool_confirmation", "m1:user.message", "a3:user.tool_confirmation"},
			triggerAnswers, []string{"a1", "a2"}},
		{"answers only", []string{"a1:user.tool_confirmation", "a2:user.tool_confirmation"}, triggerAnswers, []string{"a1", "a2"}},
		{"an answer before an interrupt", []string{"a1:user.custom_tool_result", "i1:user.interrupt"}, triggerAnswers, []string{"a1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			kind, batch := triage(events(t, c.pending...))
			if kind != c.wantKind || !slices.Equal(eventIDs(batch), c.wantBatch) {
				t.Errorf("triage(%v) = %v, %v; want %v, %v", c.pending, kind, eventIDs(batch), c.wantKind, c.wantBatch)
			}
		})
	}
}

func TestParkedTurnKey(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		keys    []string
		want    string
		wantErr bool
	}{
		{"no parked turn", nil, "", true},
		{"the last message's turn", []string{"sevt_1/0", "sevt_1/1", "sevt_2/0", "sevt_2/1"}, "sevt_2", false},
		{"a key without a message number", []string{"sevt_3"}, "sevt_3", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := parkedTurnKey(c.keys)
			if got != c.want || (err != nil) != c.wantErr {
				t.Errorf("parkedTurnKey(%v) = %q, %v; want %q, error %v", c.keys, got, err, c.want, c.wantErr)
			}
		})
	}
}

func TestTurnMessages(t *testing.T) {
	t.Parallel()
	keys := []string{"sevt_1/0", "sevt_1/1", "sevt_10/0", "sevt_2/0", "sevt_1/2"}
	for key, want := range map[string]int{"sevt_1": 3, "sevt_10": 1, "sevt_2": 1, "sevt_3": 0} {
		if got := turnMessages(keys, key); got != want {
			t.Errorf("turnMessages(%v, %q) = %d, want %d", keys, key, got, want)
		}
	}
}

func TestTakeMessage(t *testing.T) {
	t.Parallel()
	msg := &pb.Event{Id: "sevt_2", Type: "user.message", Body: `{"content":[{"type":"text","text":"hi"}]}`}
	for _, c := range []struct {
		name        string
		keys        []string
		wantKeys    []string
		wantUnsaved []string
	}{
		{"a new turn opens with its message, stored with its first commit",
			[]string{"sevt_1/0", "sevt_1/1"}, []string{"sevt_1/0", "sevt_1/1", "sevt_2/0"}, []string{"sevt_2/0"}},
		{"a retried turn finds its message stored",
			[]string{"sevt_1/0", "sevt_2/0", "sevt_2/1"}, []string{"sevt_1/0", "sevt_2/0", "sevt_2/1"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tu := &turn{batch: []*pb.Event{msg}, keys: slices.Clone(c.keys), conv: make([]model.Message, len(c.keys))}
			if err := tu.takeMessage(context.Background()); err != nil {
				t.Fatalf("takeMessage = %v, want nil", err)
			}
			var unsaved []string
			for _, m := range tu.unsaved {
				unsaved = append(unsaved, m.Key)
			}
			if tu.key != "sevt_2" || !slices.Equal(tu.keys, c.wantKeys) || !slices.Equal(unsaved, c.wantUnsaved) || len(tu.conv) != len(c.wantKeys) {
				t.Errorf("takeMessage: key %q, keys %v, unsaved %v, %d messages; want key sevt_2, keys %v, unsaved %v, %d messages",
					tu.key, tu.keys, unsaved, len(tu.conv), c.wantKeys, c.wantUnsaved, len(c.wantKeys))
			}
			if tu.approved == nil || len(tu.approved) != 0 {
				t.Errorf("takeMessage: approved %v, want an empty map", tu.approved)
			}
		})
	}
}

func TestTakeAnswersResumesTheParkedTurn(t *testing.T) {
	t.Parallel()
	allow := func(id, tool string) *pb.Event {
		return &pb.Event{Id: id, Type: "user.tool_confirmation", Body: `{"tool_use_id":"` + tool + `","result":"allow"}`}
	}
	batch := []*pb.Event{allow("sevt_3", "tu_1"), allow("sevt_4", "tu_2")}
	tu := &turn{batch: batch, keys: []string{"sevt_1/0", "sevt_2/0", "sevt_2/1"}}
	if err := tu.takeAnswers(context.Background()); err != nil {
		t.Fatalf("takeAnswers = %v, want nil", err)
	}
	if tu.key != "sevt_2" || !tu.approved["tu_1"] || !tu.approved["tu_2"] || len(tu.approved) != 2 {
		t.Errorf("takeAnswers: key %q, approved %v; want key sevt_2, approved tu_1 and tu_2", tu.key, tu.approved)
	}
	orphan := &turn{batch: batch}
	if err := orphan.takeAnswers(context.Background()); err == nil {
		t.Errorf("takeAnswers without a parked turn = nil, want an error")
	}
	bad := &turn{batch: []*pb.Event{{Id: "sevt_5", Type: "user.tool_confirmation", Body: "{"}}, keys: []string{"sevt_2/0"}}
	if err := bad.takeAnswers(context.Background()); err == nil {
		t.Errorf("takeAnswers of an undecodable answer = nil, want an error")
	}
}

func TestClassifyEnd(t *testing.T) {
	t.Parallel()
	failed := errors.New("model unreachable")
	for _, c := range []struct {
		name                   string
		runErr                 error
		cancelled, interrupted bool
		want                   turnEnd
	}{
		{"ran to an outcome", nil, false, false, endCompleted},
		{"ran to an outcome as the context was cancelled", nil, true, true, endCompleted},
		{"failed", failed, false, false, endFailed},
		{"cancelled by an interrupt", failed, true, true, endInterrupted},
		{"cancelled otherwise: abandoned", failed, true, false, endAbandoned},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := classifyEnd(c.runErr, c.cancelled, c.interrupted); got != c.want {
				t.Errorf("classifyEnd(%v, cancelled %v, interrupted %v) = %v, want %v", c.runErr, c.cancelled, c.interrupted, got, c.want)
			}
		})
	}
}

func TestInterruptConsumed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		batch    []string
		rest     []string
		pushedID string
		pushed   bool
		want     []string
	}{
		{"the batch and the interrupts queued after it",
			[]string{"m1:user.message"}, []string{"m2:user.message", "i1:user.interrupt", "i2:user.interrupt"}, "", false,
			[]string{"m1", "i1", "i2"}},
		{"a pushed interrupt loaded with the run counts once",
			[]string{"a1:user.tool_confirmation", "a2:user.tool_confirmation"}, []string{"i1:user.interrupt"}, "i1", true,
			[]string{"a1", "a2", "i1"}},
		{"a pushed interrupt committed after the run was loaded",
			[]string{"m1:user.message"}, []string{"m2:user.message"}, "i9", true,
			[]string{"m1", "i9"}},
		{"no interrupt pushed", []string{"m1:user.message"}, nil, "", false, []string{"m1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			batch := events(t, c.batch...)
			got := eventIDs(interruptConsumed(batch, events(t, c.rest...), c.pushedID, c.pushed))
			if !slices.Equal(got, c.want) {
				t.Errorf("interruptConsumed = %v, want %v", got, c.want)
			}
			if len(batch) != len(c.batch) {
				t.Errorf("interruptConsumed changed the batch to %v, want %v kept", eventIDs(batch), c.batch)
			}
		})
	}
}

func TestPlanCommit(t *testing.T) {
	t.Parallel()
	note := &pb.NewEvent{Key: "sevt_1/outputs", Type: "session.error"}
	for _, c := range []struct {
		name       string
		result     agentruntime.Result
		notes      []*pb.NewEvent
		want       endCommit
		wantEvents []string // keys
		wantText   string   // in the last event's body
	}{
		{"requires action parks, notes appended first",
			agentruntime.Result{Outcome: agentruntime.OutcomeRequiresAction}, []*pb.NewEvent{note},
			endCommit{park: true, reported: TurnParked}, []string{"sevt_1/outputs"}, ""},
		{"end turn commits the held last response",
			agentruntime.Result{Outcome: agentruntime.OutcomeEndTurn}, []*pb.NewEvent{note},
			endCommit{last: true, outcome: pb.TurnOutcome_TURN_OUTCOME_END_TURN, reported: TurnIdle}, []string{"sevt_1/outputs"}, ""},
		{"round limit ends the turn with an error after the notes",
			agentruntime.Result{Outcome: agentruntime.OutcomeRoundLimit}, []*pb.NewEvent{note},
			endCommit{outcome: pb.TurnOutcome_TURN_OUTCOME_END_TURN, reported: TurnIdle},
			[]string{"sevt_1/outputs", "sevt_1/round_limit/session_error"}, "limit of 7 model requests"},
		{"budget reached",
			agentruntime.Result{Outcome: agentruntime.OutcomeBudgetReached}, nil,
			endCommit{outcome: pb.TurnOutcome_TURN_OUTCOME_BUDGET_REACHED, reported: TurnIdle}, nil, ""},
		{"context window ends the turn with the detail",
			agentruntime.Result{Outcome: agentruntime.OutcomeContextWindow, Detail: "too long by 12 tokens"}, nil,
			endCommit{outcome: pb.TurnOutcome_TURN_OUTCOME_END_TURN, reported: TurnIdle},
			[]string{"sevt_1/context_window/session_error"}, "too long by 12 tokens"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := planCommit(&c.result, "sevt_1", 7, c.notes)
			var keys []string
			for _, e := range got.events {
				keys = append(keys, e.GetKey())
			}
			if got.park != c.want.park || got.last != c.want.last || got.outcome != c.want.outcome || got.reported != c.want.reported {
				t.Errorf("planCommit = park %v, last %v, outcome %v, reported %q; want park %v, last %v, outcome %v, reported %q",
					got.park, got.last, got.outcome, got.reported, c.want.park, c.want.last, c.want.outcome, c.want.reported)
			}
			if !slices.Equal(keys, c.wantEvents) {
				t.Errorf("planCommit events = %v, want %v", keys, c.wantEvents)
			}
			if c.wantText != "" && !strings.Contains(got.events[len(got.events)-1].GetBody(), c.wantText) {
				t.Errorf("planCommit last event body = %s, want it to contain %q", got.events[len(got.events)-1].GetBody(), c.wantText)
			}
		})
	}
}

func TestTurnReleasesLastFirst(t *testing.T) {
	t.Parallel()
	var order []string
	tu := &turn{}
	for _, name := range []string{"heartbeat", "interrupts", "provisioning"} {
		tu.onReturn(func() { order = append(order, name) })
	}
	tu.release()
	if want := []string{"provisioning", "interrupts", "heartbeat"}; !slices.Equal(order, want) {
		t.Errorf("release ran %v, want %v", order, want)
	}
}

func TestPlanFailure(t *testing.T) {
	t.Parallel()
	retryable := func(after time.Duration) error {
		return fmt.Errorf("model request: %w", &model.Error{Status: 529, Type: "overloaded_error", Message: "busy", Retryable: true, RetryAfter: after})
	}
	vanished := &sandbox.VanishedError{SessionID: "sesn_1", Ref: sandbox.Ref{Provider: "docker", ID: "c1"}}
	const (
		endTurn     = pb.TurnOutcome_TURN_OUTCOME_END_TURN
		terminated  = pb.TurnOutcome_TURN_OUTCOME_TERMINATED
		exhausted   = pb.TurnOutcome_TURN_OUTCOME_RETRIES_EXHAUSTED
		rescheduled = pb.TurnOutcome_TURN_OUTCOME_RESCHEDULING
	)
	for _, c := range []struct {
		name       string
		runErr     error
		vanished   *sandbox.VanishedError
		attempt    int
		want       failure // event: checked by wantEvent
		wantEvent  string  // key of the session.error
		wantStatus string  // its retry status
		wantNone   bool    // the activity fails
	}{
		{"a resource that cannot be mounted ends the turn",
			fmt.Errorf("acquire: %w", &sessionfiles.ResourceError{ResourceID: "file_1", Reason: "gone"}), nil, 0,
			failure{key: "t1", outcome: endTurn, consume: true, reported: TurnIdle}, "t1/resource/file_1/session_error", retryExhausted, false},
		{"a sandbox that cannot be provisioned ends the turn",
			&sandbox.ProvisionError{SessionID: "sesn_1", Reason: "no image"}, vanished, 0,
			failure{key: "t1", outcome: endTurn, consume: true, reported: TurnIdle}, "t1/sandbox_provisioning/session_error", retryExhausted, false},
		{"a vanished sandbox terminates the session",
			errors.New("exec: no such container"), vanished, 0,
			failure{key: "t1", outcome: terminated, consume: true, reported: TurnStopped}, "t1/sandbox_vanished/session_error", retryTerminal, false},
		{"a transient model error is retried after the server's delay",
			retryable(3 * time.Second), nil, 0,
			failure{key: "t1/attempt/0", outcome: rescheduled, reported: TurnRetry, retryAfter: 3 * time.Second}, "t1/attempt/0/session_error", retryRetrying, false},
		{"a transient model error is retried after a doubling delay",
			retryable(0), nil, 1,
			failure{key: "t1/attempt/1", outcome: rescheduled, reported: TurnRetry, retryAfter: 2 * time.Second}, "t1/attempt/1/session_error", retryRetrying, false},
		{"a retry waits a minute at most",
			retryable(time.Hour), nil, 1,
			failure{key: "t1/attempt/1", outcome: rescheduled, reported: TurnRetry, retryAfter: time.Minute}, "t1/attempt/1/session_error", retryRetrying, false},
		{"the last try exhausts the retries",
			retryable(0), nil, MaxModelAttempts - 1,
			failure{key: "t1", outcome: exhausted, consume: true, reported: TurnIdle}, fmt.Sprintf("t1/attempt/%d/session_error", MaxModelAttempts-1), retryExhausted, false},
		{"an unrecoverable model error terminates the session",
			&model.Error{Status: 400, Type: "invalid_request_error", Message: "bad"}, nil, 0,
			failure{key: "t1", outcome: terminated, consume: true, reported: TurnStopped}, "t1/model_error/session_error", retryTerminal, false},
		{"anything else fails the activity", errors.New("control plane unreachable"), nil, 0, failure{}, "", "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, ok := planFailure(c.runErr, c.vanished, "t1", c.attempt)
			if ok == c.wantNone {
				t.Fatalf("planFailure(%v) ok = %v, want %v", c.runErr, ok, !c.wantNone)
			}
			if c.wantNone {
				return
			}
			ev := got.event
			got.event = nil
			if got != c.want {
				t.Errorf("planFailure(%v) = %+v, want %+v", c.runErr, got, c.want)
			}
			status := `"retry_status":{"type":"` + c.wantStatus + `"}`
			if ev.GetKey() != c.wantEvent || ev.GetType() != "session.error" || !strings.Contains(ev.GetBody(), status) {
				t.Errorf("planFailure(%v) event = %s %s %s, want a session.error keyed %s with %s", c.runErr, ev.GetKey(), ev.GetType(), ev.GetBody(), c.wantEvent, status)
			}
		})
	}
}
