package db

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"
)

// These tests need no PostgreSQL: they check what an append decides to
// write (decideAppend, appendKeys, planAppend), not how it writes it.

// planSummary is what a test compares of an appendPlan.
type planSummary struct {
	Kept       []string // ids, "+existed" for events stored under their key
	Queued     []string
	Fresh      []string // "type id key"
	SetStatus  bool
	Status     Status
	StopReason string
	SetUsage   bool
	Usage      Usage
	Wake       bool
	WakeKind   string
	// Numbers: an EventsAppend statement, announced on NotifyChannel.
	Numbers bool
	// Announced are the ids announced on InterruptChannel.
	Announced         []string
	CommitsWithAppend bool
	ActiveMicros      int64
	Running           bool // RunningSince set
}

func summarize(p *appendPlan) planSummary {
	s := planSummary{SetStatus: p.setStatus, Status: p.session.Status, StopReason: string(p.stopReason),
		SetUsage: p.setUsage, Usage: p.session.Usage, Wake: p.wake, WakeKind: p.wakeKind, Numbers: p.numbers(),
		CommitsWithAppend: p.commitsWithAppend(), ActiveMicros: p.session.ActiveMicros, Running: p.session.RunningSince != nil}
	for _, e := range p.kept {
		id := e.ID
		if e.Existed {
			id += "+existed"
		}
		s.Kept = append(s.Kept, id)
	}
	for _, e := range p.queued {
		s.Queued = append(s.Queued, e.ID)
	}
	for _, ev := range p.fresh {
		s.Fresh = append(s.Fresh, fmt.Sprintf("%s %s %s", ev.Type, ev.ID, ev.Key))
		if p.announces(ev) {
			s.Announced = append(s.Announced, ev.ID)
		}
	}
	return s
}

var planNow = time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)

func at(t time.Time) *time.Time { return &t }

// turnEnd is an AppendRequest.TurnEnd that records the session it saw.
type turnEnd struct {
	seen []Session
	none bool // returns no event
}

func (te *turnEnd) fn(cur *Session) *NewEvent {
	te.seen = append(te.seen, *cur)
	if te.none {
		return nil
	}
	return &NewEvent{ID: "sevt_usage", Type: "session.usage", Key: "end/session_usage"}
}

// planCase is one case of TestPlanAppend: the session and request an
// append plans from, and the plan it must make.
type planCase struct {
	name    string
	cur     Session
	events  []NewEvent
	change  *Change
	stored  map[string]Event
	turnEnd *turnEnd
	want    planSummary
	// wantTurnEnd is the status TurnEnd saw, empty when it must not
	// be called.
	wantTurnEnd Status
}

// The sessions the cases start from, and a stop reason they use.
var (
	planIdle           = Session{ID: "sesn_1", Status: StatusIdle, StopReason: json.RawMessage(`{"type":"end_turn"}`), LastSeq: 4}
	planRunning        = Session{ID: "sesn_1", Status: StatusRunning, ActiveMicros: 1_000_000, RunningSince: at(planNow.Add(-2 * time.Second)), LastSeq: 4}
	planRescheduling   = Session{ID: "sesn_1", Status: StatusRescheduling, ActiveMicros: 1_000_000, LastSeq: 4}
	planRequiresAction = json.RawMessage(`{"type":"requires_action","event_ids":["sevt_x"]}`)
)

func planMsg(id, key string) NewEvent { return NewEvent{ID: id, Type: "agent.message", Key: key} }

// planEventCases: what an append of events writes without a status move:
// numbering, answers from stored keys, queued messages, usage.
func planEventCases() []planCase {
	return []planCase{{
		name:   "events only: numbered, no status, no wake",
		cur:    planIdle,
		events: []NewEvent{planMsg("sevt_a", "k/a"), planMsg("sevt_b", "")},
		want: planSummary{Fresh: []string{"agent.message sevt_a k/a", "agent.message sevt_b "}, Status: StatusIdle,
			WakeKind: "wakeup", Numbers: true, CommitsWithAppend: true},
	}, {
		name:   "dedupe hit: a stored event is answered, a change already made is skipped",
		cur:    planRunning,
		events: []NewEvent{planMsg("sevt_a", "k/a"), planMsg("sevt_b", "k/b")},
		change: &Change{To: StatusIdle, EventID: "sevt_idle", Key: "k/end", Wake: true},
		stored: map[string]Event{"k/a": {ID: "sevt_a", Seq: 3}, "k/end": {ID: "sevt_idle", Seq: 4}},
		want: planSummary{Kept: []string{"sevt_a+existed"}, Fresh: []string{"agent.message sevt_b k/b"}, Status: StatusRunning,
			WakeKind: "wakeup", Numbers: true, CommitsWithAppend: true, ActiveMicros: 1_000_000, Running: true},
	}, {
		name:   "retry of a whole request: nothing to number",
		cur:    planIdle,
		events: []NewEvent{planMsg("sevt_a", "k/a")},
		stored: map[string]Event{"k/a": {ID: "sevt_a", Seq: 3}},
		want:   planSummary{Kept: []string{"sevt_a+existed"}, Status: StatusIdle, WakeKind: "wakeup", CommitsWithAppend: true},
	}, {
		name:   "queued message: stored outside the log, not numbered",
		cur:    planRunning,
		events: []NewEvent{{ID: "sevt_q", Type: "user.message", Queued: true}},
		want: planSummary{Kept: []string{"sevt_q"}, Queued: []string{"sevt_q"}, Status: StatusRunning, WakeKind: "wakeup",
			CommitsWithAppend: true, ActiveMicros: 1_000_000, Running: true},
	}, {
		name: "usage of new events is added, of stored ones not",
		cur:  Session{ID: "sesn_1", Status: StatusRunning, Usage: Usage{InputTokens: 10, ListCostNanos: 100}},
		events: []NewEvent{
			{ID: "sevt_a", Type: "span.model_request_end", Key: "k/a", Usage: &Usage{InputTokens: 5, OutputTokens: 2, ListCostNanos: 50}},
			{ID: "sevt_b", Type: "span.model_request_end", Key: "k/b", Usage: &Usage{InputTokens: 7, Unpriced: true}},
			{ID: "sevt_c", Type: "span.model_request_end", Key: "k/c", Usage: &Usage{OutputTokens: 1}},
		},
		stored: map[string]Event{"k/b": {ID: "sevt_b"}},
		want: planSummary{Kept: []string{"sevt_b+existed"},
			Fresh:  []string{"span.model_request_end sevt_a k/a", "span.model_request_end sevt_c k/c"},
			Status: StatusRunning, SetUsage: true, Usage: Usage{InputTokens: 15, OutputTokens: 3, ListCostNanos: 150},
			WakeKind: "wakeup", Numbers: true, CommitsWithAppend: true},
	}}
}

// planTurnCases: status moves that start or end a turn, and when TurnEnd
// runs.
func planTurnCases() []planCase {
	return []planCase{{
		name:    "idle to running: status event, clock started, workflow woken",
		cur:     planIdle,
		events:  []NewEvent{{ID: "sevt_m", Type: "user.message"}},
		change:  &Change{To: StatusRunning, EventID: "sevt_run", Wake: true},
		turnEnd: &turnEnd{},
		want: planSummary{Fresh: []string{"user.message sevt_m ", "session.status_running sevt_run "}, SetStatus: true,
			Status: StatusRunning, Wake: true, WakeKind: "wakeup", Numbers: true, CommitsWithAppend: true, Running: true},
	}, {
		name:    "running to idle ends the turn: turn-end event, end_turn by default, clock stopped",
		cur:     planRunning,
		events:  []NewEvent{{ID: "sevt_a", Type: "span.model_request_end", Key: "k/a", Usage: &Usage{OutputTokens: 4}}},
		change:  &Change{To: StatusIdle, EventID: "sevt_idle", Key: "k/end"},
		turnEnd: &turnEnd{},
		want: planSummary{
			Fresh: []string{"span.model_request_end sevt_a k/a", "session.usage sevt_usage end/session_usage",
				"session.status_idle sevt_idle k/end"},
			SetStatus: true, Status: StatusIdle, StopReason: `{"type":"end_turn"}`, SetUsage: true, Usage: Usage{OutputTokens: 4},
			WakeKind: "wakeup", Numbers: true,
			CommitsWithAppend: true, ActiveMicros: 3_000_000},
		wantTurnEnd: StatusRunning,
	}, {
		name:    "running to idle requiring action, TurnEnd without an event",
		cur:     planRunning,
		change:  &Change{To: StatusIdle, EventID: "sevt_idle", StopReason: planRequiresAction},
		turnEnd: &turnEnd{none: true},
		want: planSummary{Fresh: []string{"session.status_idle sevt_idle "}, SetStatus: true, Status: StatusIdle,
			StopReason: string(planRequiresAction), WakeKind: "wakeup", Numbers: true, CommitsWithAppend: true, ActiveMicros: 3_000_000},
		wantTurnEnd: StatusRunning,
	}, {
		name:    "running to rescheduling does not end the turn",
		cur:     planRunning,
		change:  &Change{To: StatusRescheduling, EventID: "sevt_resched", StopReason: planRequiresAction},
		turnEnd: &turnEnd{},
		want: planSummary{Fresh: []string{"session.status_rescheduled sevt_resched "}, SetStatus: true, Status: StatusRescheduling,
			WakeKind: "wakeup", Numbers: true, CommitsWithAppend: true, ActiveMicros: 3_000_000},
	}, {
		name:    "running to terminated ends the turn",
		cur:     planRunning,
		change:  &Change{To: StatusTerminated, EventID: "sevt_term"},
		turnEnd: &turnEnd{},
		want: planSummary{Fresh: []string{"session.usage sevt_usage end/session_usage", "session.status_terminated sevt_term "},
			SetStatus: true, Status: StatusTerminated, WakeKind: "wakeup", Numbers: true, CommitsWithAppend: true, ActiveMicros: 3_000_000},
		wantTurnEnd: StatusRunning,
	}, {
		name:    "rescheduling to idle ends the turn",
		cur:     planRescheduling,
		change:  &Change{To: StatusIdle, EventID: "sevt_idle"},
		turnEnd: &turnEnd{},
		want: planSummary{Fresh: []string{"session.usage sevt_usage end/session_usage", "session.status_idle sevt_idle "},
			SetStatus: true, Status: StatusIdle, StopReason: `{"type":"end_turn"}`, WakeKind: "wakeup", Numbers: true,
			CommitsWithAppend: true, ActiveMicros: 1_000_000},
		wantTurnEnd: StatusRescheduling,
	}, {
		name:    "rescheduling to running restarts the clock and wakes",
		cur:     planRescheduling,
		change:  &Change{To: StatusRunning, EventID: "sevt_run", Wake: true, WakeKind: "wakeup"},
		turnEnd: &turnEnd{},
		want: planSummary{Fresh: []string{"session.status_running sevt_run "}, SetStatus: true, Status: StatusRunning,
			Wake: true, WakeKind: "wakeup", Numbers: true, CommitsWithAppend: true, ActiveMicros: 1_000_000, Running: true},
	}}
}

// planStatusCases: status moves outside a turn, and changes that move
// nothing.
func planStatusCases() []planCase {
	return []planCase{{
		name:   "idle to terminated",
		cur:    planIdle,
		change: &Change{To: StatusTerminated, EventID: "sevt_term"},
		want: planSummary{Fresh: []string{"session.status_terminated sevt_term "}, SetStatus: true, Status: StatusTerminated,
			WakeKind: "wakeup", Numbers: true, CommitsWithAppend: true},
	}, {
		name:   "still idle with a new stop reason: a new idle event",
		cur:    planIdle,
		events: []NewEvent{{ID: "sevt_answer", Type: "user.tool_confirmation"}},
		change: &Change{To: StatusIdle, StopReason: planRequiresAction, EventID: "sevt_idle2", Key: "k/idle2"},
		want: planSummary{Fresh: []string{"user.tool_confirmation sevt_answer ", "session.status_idle sevt_idle2 k/idle2"},
			SetStatus: true, Status: StatusIdle, StopReason: string(planRequiresAction), WakeKind: "wakeup", Numbers: true,
			CommitsWithAppend: true},
	}, {
		name:   "still idle with a new stop reason and no event id: only the status is written",
		cur:    planIdle,
		change: &Change{To: StatusIdle, StopReason: planRequiresAction},
		want: planSummary{SetStatus: true, Status: StatusIdle, StopReason: string(planRequiresAction), WakeKind: "wakeup",
			CommitsWithAppend: true},
	}, {
		name:   "a change to the current status moves nothing but may wake",
		cur:    planRunning,
		change: &Change{To: StatusRunning, EventID: "sevt_run", Wake: true},
		want: planSummary{Status: StatusRunning, Wake: true, WakeKind: "wakeup", CommitsWithAppend: true,
			ActiveMicros: 1_000_000, Running: true},
	}}
}

// planInterruptCases: when an interrupt is announced and COMMIT waits for
// it.
func planInterruptCases() []planCase {
	return []planCase{{
		name:   "an interrupt that wakes the workflow is announced; COMMIT waits for the announcement",
		cur:    planRunning,
		events: []NewEvent{{ID: "sevt_int", Type: InterruptEventType}, {ID: "sevt_other", Type: "user.message"}},
		change: &Change{Wake: true, WakeKind: "interrupt"},
		want: planSummary{Fresh: []string{"user.interrupt sevt_int ", "user.message sevt_other "}, Status: StatusRunning,
			Wake: true, WakeKind: "interrupt", Numbers: true, Announced: []string{"sevt_int"}, ActiveMicros: 1_000_000, Running: true},
	}, {
		name:   "an interrupt without an interrupt wake is not announced",
		cur:    planRunning,
		events: []NewEvent{{ID: "sevt_int", Type: InterruptEventType}},
		change: &Change{Wake: true},
		want: planSummary{Fresh: []string{"user.interrupt sevt_int "}, Status: StatusRunning, Wake: true, WakeKind: "wakeup",
			Numbers: true, CommitsWithAppend: true, ActiveMicros: 1_000_000, Running: true},
	}, {
		name:   "an interrupt wake without an event: outbox row only",
		cur:    planRunning,
		change: &Change{Wake: true, WakeKind: "interrupt"},
		want:   planSummary{Status: StatusRunning, Wake: true, WakeKind: "interrupt", ActiveMicros: 1_000_000, Running: true},
	}}
}

func TestPlanAppend(t *testing.T) {
	t.Parallel()
	tests := slices.Concat(planEventCases(), planTurnCases(), planStatusCases(), planInterruptCases())
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			before := tc.cur
			cur := tc.cur
			req := &AppendRequest{Events: tc.events, Now: planNow}
			if tc.turnEnd != nil {
				req.TurnEnd = tc.turnEnd.fn
			}
			p, err := planAppend(&cur, req, tc.change, tc.stored)
			if err != nil {
				t.Fatalf("planAppend = %v; want a plan", err)
			}
			if got := summarize(p); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("plan:\n got %+v\nwant %+v", got, tc.want)
			}
			if !reflect.DeepEqual(cur, before) {
				t.Errorf("planAppend changed the session it was given: %+v; want it left as %+v", cur, before)
			}
			checkTurnEnd(t, tc.turnEnd, tc.wantTurnEnd, tc.want.Usage)
		})
	}
}

// checkTurnEnd checks that TurnEnd was called once, on a session still in
// status want with the request's usage, or not at all when want is empty.
func checkTurnEnd(t *testing.T, te *turnEnd, want Status, usage Usage) {
	t.Helper()
	if te == nil {
		return
	}
	if want == "" {
		if len(te.seen) != 0 {
			t.Errorf("TurnEnd called with %+v; want no call", te.seen)
		}
		return
	}
	if len(te.seen) != 1 || te.seen[0].Status != want || te.seen[0].Usage != usage {
		t.Errorf("TurnEnd saw %+v; want one call on a %s session with usage %+v", te.seen, want, usage)
	}
}

// TestPlanAppendInvalidTransition: a move the state machine forbids is
// refused before TurnEnd runs.
func TestPlanAppendInvalidTransition(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ from, to Status }{
		{StatusTerminated, StatusRunning},
		{StatusTerminated, StatusIdle},
		{StatusIdle, StatusRescheduling},
	} {
		t.Run(fmt.Sprintf("%s to %s", tc.from, tc.to), func(t *testing.T) {
			t.Parallel()
			te := &turnEnd{}
			req := &AppendRequest{Now: planNow, TurnEnd: te.fn}
			p, err := planAppend(&Session{ID: "sesn_1", Status: tc.from}, req, &Change{To: tc.to, EventID: "sevt_s"}, nil)
			if !errors.Is(err, ErrInvalidTransition) {
				t.Fatalf("planAppend = %+v, %v; want ErrInvalidTransition", p, err)
			}
			if len(te.seen) != 0 {
				t.Errorf("TurnEnd called with %+v; want no call on a refused move", te.seen)
			}
		})
	}
}

// TestPlanAppendQueuedEvent: a queued event waits with its body (an empty
// one as {}) and the commit's time, without processed_at.
func TestPlanAppendQueuedEvent(t *testing.T) {
	t.Parallel()
	req := &AppendRequest{Now: planNow, Events: []NewEvent{{ID: "sevt_q", Type: "user.message", Queued: true}}}
	p, err := planAppend(&Session{ID: "sesn_1", Status: StatusRunning}, req, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Event{SessionID: "sesn_1", ID: "sevt_q", Type: "user.message", Body: json.RawMessage(`{}`), CreatedAt: planNow}
	if len(p.queued) != 1 || !reflect.DeepEqual(p.queued[0], want) {
		t.Errorf("queued = %+v; want [%+v]", p.queued, want)
	}
}

// TestPlanAppendEnsureWork: a work item is ensured for a self-hosted
// session only, and only by a request that appends or queues an event
// (a retry whose events are all stored ensures none).
func TestPlanAppendEnsureWork(t *testing.T) {
	t.Parallel()
	stored := map[string]Event{"k": {ID: "sevt_k", Type: "agent.tool_use"}}
	for _, c := range []struct {
		name       string
		selfHosted bool
		work       string
		events     []NewEvent
		want       bool
	}{
		{"self-hosted, new event", true, "work_1", []NewEvent{planMsg("sevt_1", "")}, true},
		{"self-hosted, queued event", true, "work_1", []NewEvent{{ID: "sevt_q", Type: "user.message", Queued: true}}, true},
		{"self-hosted, without EnsureWork", true, "", []NewEvent{planMsg("sevt_1", "")}, false},
		{"self-hosted, stored event", true, "work_1", []NewEvent{{ID: "sevt_k", Type: "agent.tool_use", Key: "k"}}, false},
		{"self-hosted, no event", true, "work_1", nil, false},
		{"cloud", false, "work_1", []NewEvent{planMsg("sevt_1", "")}, false},
	} {
		req := &AppendRequest{Now: planNow, Events: c.events, EnsureWork: c.work}
		p, err := planAppend(&Session{ID: "sesn_1", Status: StatusRunning, SelfHosted: c.selfHosted}, req, nil, stored)
		if err != nil {
			t.Fatal(err)
		}
		if p.ensureWork != c.want {
			t.Errorf("%s: ensureWork = %v; want %v", c.name, p.ensureWork, c.want)
		}
	}
}

// TestEventsAppendParams: the one statement carries the plan's events
// (empty bodies as {}), transcript, marks, status, usage and wake.
func TestEventsAppendParams(t *testing.T) {
	t.Parallel()
	req := &AppendRequest{Now: planNow, Processed: []string{"sevt_m"},
		Events: []NewEvent{
			{ID: "sevt_a", Type: "agent.message", Key: "k/a", Body: json.RawMessage(`{"content":[]}`), Usage: &Usage{InputTokens: 3}},
			{ID: "sevt_b", Type: "agent.tool_use", Pending: true},
		},
		Transcript: []TranscriptEntry{{Key: "t/1", Body: json.RawMessage(`{"role":"assistant"}`)}}}
	cur := &Session{ID: "sesn_1", Status: StatusRunning, RunningSince: at(planNow.Add(-time.Second))}
	p, err := planAppend(cur, req, &Change{To: StatusIdle, EventID: "sevt_idle", Key: "k/end", Wake: true, WakeKind: "wakeup"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	arg := p.eventsAppendParams()
	checks := []struct {
		what      string
		got, want any
	}{
		{"session id", arg.SessionID, "sesn_1"},
		{"ids", arg.Ids, []string{"sevt_a", "sevt_b", "sevt_idle"}},
		{"types", arg.Types, []string{"agent.message", "agent.tool_use", "session.status_idle"}},
		{"bodies", arg.Bodies, []string{`{"content":[]}`, `{}`, `{"stop_reason":{"type":"end_turn"}}`}},
		{"keys", arg.Keys, []string{"k/a", "", "k/end"}},
		{"pending", arg.Pending, []bool{false, true, false}},
		{"transcript keys", arg.TranscriptKeys, []string{"t/1"}},
		{"transcript bodies", arg.TranscriptBodies, []string{`{"role":"assistant"}`}},
		{"processed", arg.Processed, []string{"sevt_m"}},
		{"set status", arg.SetStatus, true},
		{"status", arg.Status, "idle"},
		{"stop reason", string(arg.StopReason), `{"type":"end_turn"}`},
		{"active micros", arg.ActiveMicros, int64(1_000_000)},
		{"running since", arg.RunningSince, (*time.Time)(nil)},
		{"set usage", arg.SetUsage, true},
		{"usage", string(arg.Usage), `{"input_tokens":3}`},
		{"now", arg.Now, planNow},
		{"wake", arg.Wake, true},
		{"wake kind", arg.WakeKind, "wakeup"},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %#v; want %#v", c.what, c.got, c.want)
		}
	}
}

func TestDecideAppend(t *testing.T) {
	t.Parallel()
	refused := errors.New("refused")
	change := &Change{To: StatusRunning, EventID: "sevt_run"}
	later := planNow.Add(time.Minute)
	tests := []struct {
		name       string
		cur        Session
		decide     func(*Session) (*Change, error)
		wantErr    error
		wantChange *Change
		wantNow    time.Time
	}{
		{name: "deleting", cur: Session{ID: "sesn_1", Deleting: true}, wantErr: ErrDeleting},
		{name: "refused by Decide", cur: Session{ID: "sesn_1"}, decide: func(*Session) (*Change, error) { return nil, refused }, wantErr: refused},
		{name: "no Decide", cur: Session{ID: "sesn_1"}, wantNow: planNow},
		{name: "Decide's change", cur: Session{ID: "sesn_1"}, decide: func(*Session) (*Change, error) { return change, nil },
			wantChange: change, wantNow: planNow},
		{name: "Now not before the newest event", cur: Session{ID: "sesn_1", LastEventAt: &later}, wantNow: later},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := &AppendRequest{Now: planNow, Decide: tc.decide}
			got, gotChange, err := decideAppend(&tc.cur, req)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("decideAppend = %v; want %v", err, tc.wantErr)
				}
				var de *decideError
				if isDecide := errors.As(err, &de); isDecide != (tc.decide != nil) {
					t.Errorf("decideAppend error %v is a decideError: %v; want %v", err, isDecide, tc.decide != nil)
				}
				return
			}
			if err != nil || gotChange != tc.wantChange || !got.Now.Equal(tc.wantNow) {
				t.Fatalf("decideAppend = now %v, change %+v, %v; want now %v, change %+v", got.Now, gotChange, err, tc.wantNow, tc.wantChange)
			}
			if !req.Now.Equal(planNow) {
				t.Errorf("the caller's request Now = %v; want it left at %v", req.Now, planNow)
			}
		})
	}
}

func TestAppendKeys(t *testing.T) {
	t.Parallel()
	events := []NewEvent{{ID: "a", Key: "k/a"}, {ID: "b"}, {ID: "c", Key: "k/c"}}
	tests := []struct {
		name   string
		change *Change
		want   []string
	}{
		{"no change", nil, []string{"k/a", "k/c"}},
		{"change without key", &Change{To: StatusIdle}, []string{"k/a", "k/c"}},
		{"change key first", &Change{To: StatusIdle, Key: "k/end"}, []string{"k/end", "k/a", "k/c"}},
	}
	for _, tc := range tests {
		if got := appendKeys(tc.change, events); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: appendKeys = %q; want %q", tc.name, got, tc.want)
		}
	}
	if got := appendKeys(nil, []NewEvent{{ID: "a"}}); got != nil {
		t.Errorf("appendKeys without keys = %q; want none (no lookup)", got)
	}
}

func TestEndsTurn(t *testing.T) {
	t.Parallel()
	ends := map[[2]Status]bool{
		{StatusRunning, StatusIdle}: true, {StatusRunning, StatusTerminated}: true,
		{StatusRescheduling, StatusIdle}: true, {StatusRescheduling, StatusTerminated}: true,
	}
	all := []Status{StatusIdle, StatusRunning, StatusRescheduling, StatusTerminated}
	for _, from := range all {
		for _, to := range all {
			if got, want := endsTurn(from, to), ends[[2]Status{from, to}]; got != want {
				t.Errorf("endsTurn(%s, %s) = %v; want %v", from, to, got, want)
			}
		}
	}
}
