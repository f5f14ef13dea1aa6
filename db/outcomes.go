package db

// This file holds outcomes: what "done" means for a session, defined by a
// user.define_outcome event, and the grader loop that checks the agent's
// work against it. The loop is a chain of triggers in the session's log,
// so it runs through the same turns, retries and interrupts as messages:
//
//   - the user.define_outcome event starts the agent's turn (its
//     description is the task);
//   - that turn's end does not make the session idle: a
//     span.outcome_evaluation_start is appended as a trigger instead, and
//     the worker that takes it runs the grader;
//   - the grader's span.outcome_evaluation_end decides: satisfied or
//     failed end the outcome and the session goes idle; needs_revision
//     (while evaluations remain) is a trigger, whose turn revises the work
//     with the grader's explanation, and the loop goes round again;
//     max_iterations_reached ends the outcome and is a trigger too: the
//     agent's final acknowledgment turn;
//   - a user.interrupt ends the outcome interrupted (with the
//     evaluation's end when the grader was running); a turn that ends any
//     other way than end_turn (budget, retries, termination) ends it
//     failed.
//
// Every step is decided under the session's row lock, in the transaction
// of the append that causes it (outcomeAppend).

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/mangohq/mango/db/internal/dbsqlc"
)

// Outcome event types.
const (
	DefineOutcomeType     = "user.define_outcome"
	EvaluationStartType   = "span.outcome_evaluation_start"
	EvaluationOngoingType = "span.outcome_evaluation_ongoing"
	EvaluationEndType     = "span.outcome_evaluation_end"
)

// Outcome results: the states of an outcome (pending to evaluating) and
// the verdicts that end it. NeedsRevision is a verdict only: the outcome
// goes on, running.
const (
	OutcomePending       = "pending"
	OutcomeRunning       = "running"
	OutcomeEvaluating    = "evaluating"
	OutcomeSatisfied     = "satisfied"
	OutcomeNeedsRevision = "needs_revision"
	OutcomeMaxIterations = "max_iterations_reached"
	OutcomeFailed        = "failed"
	OutcomeInterrupted   = "interrupted"
)

// Outcome is an outcome of a session.
type Outcome struct {
	ID          string
	SessionID   string
	EventID     string
	Description string
	// Rubric is {"type":"text","content":...} or {"type":"file","file_id":...}.
	Rubric        json.RawMessage
	MaxIterations int
	// Iteration is the 0-indexed revision cycle the outcome is on.
	Iteration   int
	Result      string
	Explanation string
	// EvaluationStartID is the span.outcome_evaluation_start of the
	// evaluation in progress.
	EvaluationStartID *string
	CreatedAt         time.Time
	CompletedAt       *time.Time
}

// Active reports whether the outcome has not ended.
func (o *Outcome) Active() bool {
	return o.Result == OutcomePending || o.Result == OutcomeRunning || o.Result == OutcomeEvaluating
}

func outcomeFromRow(r dbsqlc.Outcome) *Outcome {
	return &Outcome{ID: r.ID, SessionID: r.SessionID, EventID: r.EventID, Description: r.Description, Rubric: r.Rubric,
		MaxIterations: int(r.MaxIterations), Iteration: int(r.Iteration), Result: r.Result, Explanation: r.Explanation,
		EvaluationStartID: r.EvaluationStartID, CreatedAt: r.CreatedAt, CompletedAt: r.CompletedAt}
}

// OutcomesOfSessions returns the outcomes of the sessions, by session, in
// the order they were defined.
func (s *Store) OutcomesOfSessions(ctx context.Context, sessionIDs []string) (map[string][]*Outcome, error) {
	out := map[string][]*Outcome{}
	if len(sessionIDs) == 0 {
		return out, nil
	}
	rows, err := s.q.OutcomeListForSessions(ctx, sessionIDs)
	if err != nil {
		return nil, mapErr("list outcomes", err)
	}
	for _, r := range rows {
		out[r.SessionID] = append(out[r.SessionID], outcomeFromRow(r))
	}
	return out, nil
}

// DefineOutcomeBody is the stored body of a user.define_outcome event.
type DefineOutcomeBody struct {
	OutcomeID     string          `json:"outcome_id"`
	Description   string          `json:"description"`
	Rubric        json.RawMessage `json:"rubric"`
	MaxIterations int             `json:"max_iterations"`
}

// EvaluationBody is the body of a span.outcome_evaluation_* event (the
// members each type has).
type EvaluationBody struct {
	OutcomeID   string `json:"outcome_id"`
	Iteration   int    `json:"iteration"`
	StartID     string `json:"outcome_evaluation_start_id,omitempty"`
	Result      string `json:"result,omitempty"`
	Explanation string `json:"explanation,omitempty"`
	// Usage is the grader's, as the end event shows it.
	Usage json.RawMessage `json:"usage,omitempty"`
}

// outcomeStep is what one append does to its session's outcome.
type outcomeStep struct {
	ctx    context.Context
	q      *dbsqlc.Queries
	cur    *Session
	req    *AppendRequest
	change *Change
	o      *Outcome
}

// outcomeAppend applies the outcome rules to an append on the locked
// session cur (see the top of this file) and returns the request and the
// change to carry out instead: events added (an evaluation's start or
// end), a worker's evaluation end made a trigger or dropped when stale,
// a turn end that starts an evaluation or a revision kept running.
func outcomeAppend(ctx context.Context, q *dbsqlc.Queries, cur *Session, req *AppendRequest, change *Change) (*AppendRequest, *Change, error) {
	verdict := slices.ContainsFunc(req.Events, isEnd)
	if cur.IsThread() || (cur.OutcomeID == nil && !verdict && !slices.ContainsFunc(req.Events, isDefine)) {
		return req, change, nil
	}
	r := *req
	r.Events = slices.Clone(req.Events)
	st := &outcomeStep{ctx: ctx, q: q, cur: cur, req: &r, change: change}
	if change != nil && change.Key != "" && (cur.OutcomeID != nil || verdict) {
		// A retried turn end whose change was made, or replaced by a step
		// of the loop that took its key: the evaluation's start, or the
		// verdict (stored under that key, not its own).
		stored, err := lookupKeys(ctx, q, cur.ID, []string{change.Key})
		if err != nil || len(stored) > 0 {
			r.Events = slices.DeleteFunc(r.Events, isEnd)
			return st.req, st.change, err
		}
	}
	// The append that defines an outcome goes on with it: running, not
	// evaluated yet, nothing else applies to it.
	defined, err := st.define()
	if err != nil || defined || cur.OutcomeID == nil {
		return st.req, st.change, err
	}
	row, err := q.OutcomeGet(ctx, *cur.OutcomeID)
	if err != nil {
		return nil, nil, fmt.Errorf("load outcome %s of session %s: %w", *cur.OutcomeID, cur.ID, err)
	}
	st.o = outcomeFromRow(row)
	switch {
	case !st.o.Active():
	case verdict:
		err = st.verdict()
	case slices.ContainsFunc(r.Events, func(ev NewEvent) bool { return ev.Type == "user.interrupt" && !ev.Queued }):
		err = st.interrupt()
	case change != nil && endsTurn(cur.Status, change.To):
		err = st.turnEnd()
	}
	if err != nil {
		return nil, nil, err
	}
	return st.req, st.change, nil
}

func isDefine(ev NewEvent) bool { return ev.Type == DefineOutcomeType }

func isEnd(ev NewEvent) bool { return ev.Type == EvaluationEndType }

// define stores the outcomes the request's user.define_outcome events
// define (pending while the event is queued, running once it is in the
// log) and makes the session's active outcome a new one (not one that
// ended while its event was queued); defined reports that it did.
func (st *outcomeStep) define() (defined bool, err error) {
	for _, ev := range st.req.Events {
		if !isDefine(ev) {
			continue
		}
		var body DefineOutcomeBody
		if err := json.Unmarshal(ev.Body, &body); err != nil {
			return false, fmt.Errorf("decode %s %s: %w", DefineOutcomeType, ev.ID, err)
		}
		result := OutcomeRunning
		if ev.Queued {
			result = OutcomePending
		}
		live, err := st.q.OutcomeUpsert(st.ctx, dbsqlc.OutcomeUpsertParams{ID: body.OutcomeID, SessionID: st.cur.ID, EventID: ev.ID,
			Description: body.Description, Rubric: body.Rubric, MaxIterations: int32(body.MaxIterations), Result: result,
			CreatedAt: st.req.Now})
		if err != nil {
			return false, err
		}
		if len(live) > 0 && (st.cur.OutcomeID == nil || *st.cur.OutcomeID != body.OutcomeID) {
			if err := st.q.SessionSetOutcome(st.ctx, dbsqlc.SessionSetOutcomeParams{ID: st.cur.ID, OutcomeID: &body.OutcomeID}); err != nil {
				return false, err
			}
			defined = true
		}
	}
	return defined, nil
}

// verdict applies the grader's span.outcome_evaluation_end: the
// outcome's verdict, or nothing when it is stale (the evaluation was
// interrupted, or a retry of a verdict already applied).
func (st *outcomeStep) verdict() error {
	i := slices.IndexFunc(st.req.Events, isEnd)
	ev := st.req.Events[i]
	var body EvaluationBody
	if err := json.Unmarshal(ev.Body, &body); err != nil {
		return fmt.Errorf("decode %s: %w", EvaluationEndType, err)
	}
	o := st.o
	if o.Result != OutcomeEvaluating || o.EvaluationStartID == nil || *o.EvaluationStartID != body.StartID {
		st.req.Events = slices.Delete(st.req.Events, i, i+1)
		if o.Iteration > body.Iteration {
			st.change = nil // a retry: the loop already went on
		}
		return nil
	}
	switch body.Result {
	case OutcomeSatisfied, OutcomeFailed:
		return st.finish(body.Result, body.Explanation)
	case OutcomeNeedsRevision, OutcomeMaxIterations:
	default:
		return fmt.Errorf("%s of outcome %s: unknown result %q", EvaluationEndType, o.ID, body.Result)
	}
	// The verdict is a trigger: the agent's revision, or its final
	// acknowledgment when no evaluation remains.
	if body.Result == OutcomeNeedsRevision && o.Iteration+1 >= o.MaxIterations {
		body.Result = OutcomeMaxIterations
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		ev.Body = b
	}
	ev.Pending = true
	st.keepRunning(&ev)
	st.req.Events[i] = ev
	if body.Result == OutcomeMaxIterations {
		return st.finish(OutcomeMaxIterations, body.Explanation)
	}
	o.Iteration++
	o.Result, o.Explanation, o.EvaluationStartID = OutcomeRunning, body.Explanation, nil
	return st.save()
}

// keepRunning turns the request's turn-ending change into a wake-up: the
// session runs on, for the trigger ev. ev takes the change's key, so
// that a retry of the request finds the change made.
func (st *outcomeStep) keepRunning(ev *NewEvent) {
	if st.change != nil && st.change.Key != "" {
		ev.Key = st.change.Key
	}
	st.change = &Change{Wake: true, WakeKind: "wakeup"}
}

// interrupt ends the outcome interrupted; an evaluation in progress ends
// with it (its trigger consumed, so that no grader starts) and the
// session goes idle.
func (st *outcomeStep) interrupt() error {
	o := st.o
	if o.Result == OutcomeEvaluating && o.EvaluationStartID != nil {
		body, err := json.Marshal(EvaluationBody{OutcomeID: o.ID, Iteration: o.Iteration, StartID: *o.EvaluationStartID,
			Result: OutcomeInterrupted, Explanation: interruptedExplanation, Usage: json.RawMessage(zeroSpanUsage)})
		if err != nil {
			return err
		}
		key := EvaluationEndKey(*o.EvaluationStartID)
		st.req.Events = append(st.req.Events, NewEvent{ID: derivedEventID(st.cur.ID, key), Type: EvaluationEndType, Body: body, Key: key})
		st.req.Processed = append(slices.Clip(st.req.Processed), *o.EvaluationStartID)
		// The session goes idle now: no grader may have taken the
		// evaluation yet, and one that did is stopped by the interrupt's
		// wake-up (its end then finds the session idle).
		st.change = &Change{To: StatusIdle, StopReason: json.RawMessage(endTurnStopReason),
			EventID: derivedEventID(st.cur.ID, "outcome_interrupted/"+*o.EvaluationStartID), Wake: true, WakeKind: "interrupt"}
	}
	return st.finish(OutcomeInterrupted, interruptedExplanation)
}

const interruptedExplanation = "The user interrupted the outcome (user.interrupt) before it was met."

// zeroSpanUsage is the usage of an evaluation that made no model request.
const zeroSpanUsage = `{"input_tokens":0,"output_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}`

// EvaluationEndKey is the key of the span.outcome_evaluation_end of the
// evaluation that startID started: the grader's, or the interrupt's
// (whichever comes first is the one stored).
func EvaluationEndKey(startID string) string { return "outcome_end/" + startID }

// turnEnd applies the end of a turn to the outcome: the agent's turn that
// ends with end_turn is evaluated (the session runs on); any other end
// (the budget, retries exhausted, termination, an evaluation that ended
// without a verdict) ends the outcome failed.
func (st *outcomeStep) turnEnd() error {
	o, change := st.o, st.change
	stop := stopType(change.StopReason)
	if o.Result == OutcomeRunning && change.To == StatusIdle && (stop == "" || stop == "end_turn") {
		return st.startEvaluation()
	}
	if o.Result == OutcomePending || stop == "requires_action" {
		return nil // not the outcome's turn, or parked: it goes on later
	}
	why := fmt.Sprintf("The session's turn ended with stop reason %s before the outcome was met.", stop)
	switch {
	case change.To == StatusTerminated:
		why = "The session terminated before the outcome was met."
	case stop == "budget_reached":
		why = "The session reached its budget (budget_reached) before the outcome was met."
	case o.Result == OutcomeEvaluating:
		why = "The evaluation ended without a verdict."
	}
	return st.finish(OutcomeFailed, why)
}

// startEvaluation appends the trigger of the outcome's next evaluation.
func (st *outcomeStep) startEvaluation() error {
	o := st.o
	key := fmt.Sprintf("outcome_start/%s/%d", o.ID, o.Iteration)
	body, err := json.Marshal(EvaluationBody{OutcomeID: o.ID, Iteration: o.Iteration})
	if err != nil {
		return err
	}
	ev := NewEvent{ID: derivedEventID(st.cur.ID, key), Type: EvaluationStartType, Body: body, Key: key, Pending: true}
	st.keepRunning(&ev)
	st.req.Events = append(st.req.Events, ev)
	o.Result, o.EvaluationStartID = OutcomeEvaluating, &ev.ID
	return st.save()
}

// finish ends the outcome with result: the session has no active outcome
// after it.
func (st *outcomeStep) finish(result, explanation string) error {
	o := st.o
	now := st.req.Now
	o.Result, o.Explanation, o.EvaluationStartID, o.CompletedAt = result, explanation, nil, &now
	if err := st.save(); err != nil {
		return err
	}
	return st.q.SessionSetOutcome(st.ctx, dbsqlc.SessionSetOutcomeParams{ID: st.cur.ID})
}

func (st *outcomeStep) save() error {
	o := st.o
	return st.q.OutcomeUpdate(st.ctx, dbsqlc.OutcomeUpdateParams{ID: o.ID, Iteration: int32(o.Iteration), Result: o.Result,
		Explanation: o.Explanation, EvaluationStartID: o.EvaluationStartID, CompletedAt: o.CompletedAt})
}

// stopType is the type of a stop reason ("" when it names none).
func stopType(stop json.RawMessage) string {
	var s struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(stop, &s)
	return s.Type
}
