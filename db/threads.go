package db

// This file holds child session threads (multi-agent sessions). A child
// thread is a session of its own, with its parent set: its log,
// transcript, triggers, status machine, usage and workflow are those of
// any session, so a thread runs durably exactly as a session does. What
// makes it a thread:
//
//   - every event appended to it carries session_thread_id, and its
//     status events are session.thread_status_*, with its agent's name;
//   - every event appended to it is copied (same id) into its parent's log
//     in the same transaction, so the session's log shows all its threads
//     in one order, and the thread's usage is added to the session's;
//   - its status moves the session's: a thread that starts running makes
//     an idle session run; the primary thread's turn that ends while
//     threads run is held (held_stop_reason) until the last one is idle;
//   - its agent.thread_message_sent to the primary thread (its reply, at
//     its turn's end) becomes an agent.thread_message_received pending in
//     the parent's log: the coordinator's wait takes it, or it starts the
//     coordinator's next turn.
//
// Locks are taken thread first, parent second, always: a write to the
// parent never locks one of its threads in the same transaction.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/mangohq/mango/db/internal/dbsqlc"
)

// ThreadIDPrefix starts the id of a session thread.
const ThreadIDPrefix = "sthr_"

// sessionIDPrefix starts the id of a session (ids.Session).
const sessionIDPrefix = "sesn_"

// Thread event types.
const (
	ThreadCreatedType         = "session.thread_created"
	ThreadMessageSentType     = "agent.thread_message_sent"
	ThreadMessageReceivedType = "agent.thread_message_received"
)

// PrimaryThreadID is the id of a session's primary thread: the session
// itself, under the thread prefix.
func PrimaryThreadID(sessionID string) string {
	return ThreadIDPrefix + strings.TrimPrefix(sessionID, sessionIDPrefix)
}

// SessionOfPrimaryThread is the session whose primary thread id is, or ""
// when id names no primary thread.
func SessionOfPrimaryThread(id string) string {
	body, ok := strings.CutPrefix(id, ThreadIDPrefix)
	if !ok {
		return ""
	}
	return sessionIDPrefix + body
}

// ThreadID is the id of the child thread a parent's spawn of key makes:
// derived from both, so a retried spawn names the same thread.
func ThreadID(parentID, key string) string { return ThreadIDPrefix + idBody(parentID, "thread/"+key) }

// derivedEventID is the id of an event the store itself appends for
// session sessionID under key: derived, so a retry names the same event.
func derivedEventID(sessionID, key string) string { return "sevt_" + idBody(sessionID, key) }

// idBody is 24 base62 characters of SHA-256 of a and b.
func idBody(a, b string) string {
	const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	sum := sha256.Sum256([]byte(a + "\x00" + b))
	n := new(big.Int).SetBytes(sum[:])
	out := make([]byte, 24)
	base := big.NewInt(62)
	mod := new(big.Int)
	for i := range out {
		n.DivMod(n, base, mod)
		out[i] = alphabet[mod.Int64()]
	}
	return string(out)
}

// IsThread reports whether the session is a child thread.
func (s *Session) IsThread() bool { return s.ParentID != nil }

// AgentName is the name in the session's agent snapshot.
func (s *Session) AgentName() string { return agentName(s.Agent) }

// agentName is the name in an agent snapshot.
func agentName(agent json.RawMessage) string {
	var a struct {
		Name string `json:"name"`
	}
	_ = json.Unmarshal(agent, &a)
	return a.Name
}

// threadStatusType is the type of a child thread's status event: the
// session's (StatusEventType) under the thread prefix.
func threadStatusType(to Status) string {
	return "session.thread_" + strings.TrimPrefix(StatusEventType(to), "session.")
}

// withMembers returns the JSON object body with the members of add
// (a JSON object) it lacks, added first.
func withMembers(body, add json.RawMessage) json.RawMessage {
	var have map[string]json.RawMessage
	if len(bytes.TrimSpace(body)) == 0 {
		body = json.RawMessage(`{}`)
	}
	if json.Unmarshal(body, &have) != nil {
		return body
	}
	var extra map[string]json.RawMessage
	_ = json.Unmarshal(add, &extra)
	missing := map[string]json.RawMessage{}
	for k, v := range extra {
		if _, ok := have[k]; !ok {
			missing[k] = v
		}
	}
	if len(missing) == 0 {
		return body
	}
	head, _ := json.Marshal(missing)
	inner := bytes.TrimSpace(body)[1:]
	if len(bytes.TrimSpace(inner)) == 1 { // "}": the body was empty
		return head
	}
	return append(append(head[:len(head)-1:len(head)-1], ','), inner...)
}

// threadMembers are the members every event of a child thread carries.
func threadMembers(s *Session) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"session_thread_id": s.ID})
	return b
}

// markThreadEvents gives the fresh events of a child thread's append the
// thread's id, and its status events their thread type and agent name.
func (p *appendPlan) markThreadEvents(cur *Session) {
	if !cur.IsThread() {
		return
	}
	members := threadMembers(cur)
	named, _ := json.Marshal(map[string]string{"session_thread_id": cur.ID, "agent_name": cur.AgentName()})
	for i := range p.fresh {
		ev := &p.fresh[i]
		if to, ok := statusOfEventType(ev.Type); ok {
			ev.Type = threadStatusType(to)
			ev.Body = withMembers(ev.Body, named)
			continue
		}
		ev.Body = withMembers(ev.Body, members)
	}
}

// statusOfEventType is the status a session.status_* event type
// announces.
func statusOfEventType(typ string) (Status, bool) {
	for _, st := range []Status{StatusIdle, StatusRunning, StatusRescheduling, StatusTerminated} {
		if typ == StatusEventType(st) {
			return st, true
		}
	}
	return "", false
}

// threadAppend writes the plan of an append to child thread cur, then
// copies its new events into the parent's log, with what they move
// there, in the same transaction (see the file comment).
func (s *Store) threadAppend(ctx context.Context, q *dbsqlc.Queries, cur *Session, plan *appendPlan, last func()) (*Session, []Event, error) {
	if !plan.numbers() {
		return plan.execute(ctx, q, last)
	}
	sess, events, err := plan.execute(ctx, q, nil)
	if err != nil {
		return nil, nil, err
	}
	preq, err := s.parentRequest(ctx, q, cur, sess, plan)
	if err != nil {
		return nil, nil, err
	}
	if _, _, err := s.appendKeyed(ctx, q, *cur.ParentID, preq, true, last); err != nil {
		return nil, nil, fmt.Errorf("copy events of thread %s to session %s: %w", cur.ID, *cur.ParentID, err)
	}
	return sess, events, nil
}

// parentRequest is the append to the parent of thread cur (before) /
// sess (after) that copies the plan's new events and applies what they
// move: the parent's status, the thread's reply.
func (s *Store) parentRequest(ctx context.Context, q *dbsqlc.Queries, cur, sess *Session, plan *appendPlan) (*AppendRequest, error) {
	req := &AppendRequest{Now: plan.req.Now, Events: make([]NewEvent, 0, len(plan.fresh)+1)}
	replied := false
	for _, ev := range plan.fresh {
		req.Events = append(req.Events, NewEvent{ID: ev.ID, Type: ev.Type, Body: ev.Body, Usage: ev.Usage})
		if ev.Type == ThreadMessageSentType {
			received, err := replyReceived(cur, ev)
			if err != nil {
				return nil, err
			}
			req.Events = append(req.Events, *received)
			replied = true
		}
	}
	delta := awaitingDelta(cur, sess, replied)
	if delta != nil {
		if err := q.ThreadAddAwaiting(ctx, dbsqlc.ThreadAddAwaitingParams{ID: cur.ID, Delta: *delta}); err != nil {
			return nil, err
		}
	}
	moved := plan.setStatus && cur.Status != sess.Status
	req.Decide = func(p *Session) (*Change, error) {
		return parentChange(ctx, q, p, cur, sess, moved, replied)
	}
	return req, nil
}

// awaitingDelta is how a thread's append moves the count of its
// coordinator's messages awaiting a reply: one fewer with a reply; none
// left when its turn ended otherwise than waiting for the client (an
// interrupt, a failure, a termination). nil: unchanged.
func awaitingDelta(cur, sess *Session, replied bool) *int32 {
	one, zero := int32(-1), int32(0)
	switch {
	case replied:
		return &one
	case endsTurn(cur.Status, sess.Status) && !requiresAction(sess.StopReason):
		return &zero
	}
	return nil
}

// requiresAction reports whether an idle stop reason waits for the client.
func requiresAction(stop json.RawMessage) bool {
	var r struct {
		Type string `json:"type"`
	}
	return json.Unmarshal(stop, &r) == nil && r.Type == "requires_action"
}

// replyReceived is the agent.thread_message_received, pending in the
// parent's log, of thread cur's reply sent (its agent.thread_message_sent
// to the primary thread).
func replyReceived(cur *Session, sent NewEvent) (*NewEvent, error) {
	var body struct {
		To      string          `json:"to_session_thread_id"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(sent.Body, &body); err != nil {
		return nil, fmt.Errorf("decode %s %s: %w", ThreadMessageSentType, sent.ID, err)
	}
	if body.To != PrimaryThreadID(*cur.ParentID) {
		return nil, fmt.Errorf("thread %s sent a message to %q: a thread replies to its session's primary thread only", cur.ID, body.To)
	}
	received, _ := json.Marshal(map[string]any{"from_session_thread_id": cur.ID, "from_agent_name": cur.AgentName(), "content": body.Content})
	key := "thread_reply/" + sent.ID
	return &NewEvent{ID: derivedEventID(*cur.ParentID, key), Type: ThreadMessageReceivedType, Body: received, Key: key, Pending: true}, nil
}

// parentChange is the change of parent p (locked) that thread cur's
// append makes: moved reports that the thread's status moved (to
// sess.Status), replied that it replied to the coordinator.
//
//   - A terminated session does not move.
//   - A reply is work for the primary thread: the session runs (a held
//     turn end is dropped) and its workflow is woken.
//   - A thread that starts running makes an idle session run.
//   - The last thread that stops running ends a held turn: the session
//     goes idle with the held stop reason.
func parentChange(ctx context.Context, q *dbsqlc.Queries, p, cur, sess *Session, moved, replied bool) (*Change, error) {
	key := "thread_status/" + cur.ID + "/" + fmt.Sprint(sess.LastSeq)
	running := func(st Status) bool { return st == StatusRunning || st == StatusRescheduling }
	if p.Status == StatusTerminated {
		return nil, nil // the session ended: its threads' events are still copied
	}
	if replied {
		if p.HeldStopReason != nil {
			if err := q.ThreadSetHeld(ctx, dbsqlc.ThreadSetHeldParams{ID: p.ID}); err != nil {
				return nil, err
			}
		}
		c := &Change{Wake: true}
		if p.Status == StatusIdle {
			c.To, c.EventID, c.Key = StatusRunning, derivedEventID(p.ID, key), key
		}
		return c, nil
	}
	if !moved {
		return nil, nil
	}
	if running(sess.Status) && p.Status == StatusIdle {
		return &Change{To: StatusRunning, EventID: derivedEventID(p.ID, key), Key: key}, nil
	}
	if running(sess.Status) || !running(cur.Status) || p.HeldStopReason == nil {
		return nil, nil
	}
	others, err := q.ThreadRunningOthers(ctx, dbsqlc.ThreadRunningOthersParams{ParentID: &p.ID, ExceptID: cur.ID})
	if err != nil || others > 0 {
		return nil, err
	}
	if err := q.ThreadSetHeld(ctx, dbsqlc.ThreadSetHeldParams{ID: p.ID}); err != nil {
		return nil, err
	}
	return &Change{To: StatusIdle, StopReason: p.HeldStopReason, EventID: derivedEventID(p.ID, key), Key: key}, nil
}

// holdTurnEnd holds the end of the primary thread's turn of session cur
// (locked) while child threads run: the session stays running, and goes
// idle with the change's stop reason when the last thread is idle
// (parentChange). It returns the change to make instead (nil: none).
func holdTurnEnd(ctx context.Context, q *dbsqlc.Queries, cur *Session, change *Change) (*Change, error) {
	if !cur.HasThreads || change == nil || change.To != StatusIdle || !endsTurn(cur.Status, change.To) {
		return change, nil
	}
	n, err := q.ThreadRunningOthers(ctx, dbsqlc.ThreadRunningOthersParams{ParentID: &cur.ID, ExceptID: ""})
	if err != nil || n == 0 {
		return change, err
	}
	stop := change.StopReason
	if len(stop) == 0 {
		stop = json.RawMessage(endTurnStopReason)
	}
	if err := q.ThreadSetHeld(ctx, dbsqlc.ThreadSetHeldParams{ID: cur.ID, Held: stop}); err != nil {
		return nil, err
	}
	return &Change{Wake: change.Wake, WakeKind: change.WakeKind}, nil
}

// ThreadSpawn is an agent to run as a new child thread.
type ThreadSpawn struct {
	AgentID      string
	AgentVersion int64
	// Agent is the thread's agent snapshot.
	Agent json.RawMessage
	// Skills are its agent's skills, placed in the session's sandbox as
	// the thread's own skill resources.
	Skills []SessionSkill
}

// ThreadSend is a message from a session's primary thread to one of its
// child threads, which Spawn creates first when set.
type ThreadSend struct {
	ParentID string
	ThreadID string
	Spawn    *ThreadSpawn
	// From names the sender (the primary thread) and its agent.
	FromThreadID, FromAgentName string
	Content                     json.RawMessage
	// Key makes the send idempotent (the coordinator's tool use id).
	Key string
	Now time.Time
}

// Thread errors.
var (
	// ErrThreadClosed refuses a message to a thread that is archived or
	// terminated.
	ErrThreadClosed = errors.New("the thread is archived or terminated")
)

// ThreadSend delivers a message to a child thread, creating it first
// when m.Spawn is set: the thread gets an agent.thread_message_received
// trigger (with session.thread_created before it when it is new), runs
// (its workflow woken) and awaits one more reply; all of it copied into
// the parent's log. A retry with the same key changes nothing. The
// parent's agent.thread_message_sent is the caller's to append (after:
// locks go thread first).
func (s *Store) ThreadSend(ctx context.Context, m *ThreadSend) (*Session, error) {
	var thread *Session
	err := s.inTx(ctx, "send to thread", func(q *dbsqlc.Queries) error {
		created := false
		if m.Spawn != nil {
			ids, err := q.ThreadInsert(ctx, dbsqlc.ThreadInsertParams{ID: m.ThreadID, ParentID: m.ParentID, AgentID: m.Spawn.AgentID,
				AgentVersion: m.Spawn.AgentVersion, Agent: m.Spawn.Agent, Now: m.Now})
			if err != nil {
				return err
			}
			created = len(ids) == 1
			if created {
				if err := insertSkillResources(ctx, q, m.ThreadID, m.Now, m.Spawn.Skills); err != nil {
					return err
				}
			}
		}
		req := s.threadSendRequest(m, created)
		sess, events, err := s.appendKeyed(ctx, q, m.ThreadID, req, true, nil)
		if err != nil {
			return err
		}
		if sess.ParentID == nil || *sess.ParentID != m.ParentID {
			return fmt.Errorf("send to thread %s: %w", m.ThreadID, ErrNotFound)
		}
		if !events[len(events)-1].Existed {
			if err := q.ThreadAddAwaiting(ctx, dbsqlc.ThreadAddAwaitingParams{ID: m.ThreadID, Delta: 1}); err != nil {
				return err
			}
		}
		thread = sess
		return q.ThreadMarkParent(ctx, m.ParentID)
	})
	if err != nil {
		return nil, mapErr("send to thread", err)
	}
	return thread, nil
}

// threadSendRequest is the append to the thread of m.
func (s *Store) threadSendRequest(m *ThreadSend, created bool) *AppendRequest {
	body, _ := json.Marshal(map[string]any{"from_session_thread_id": m.FromThreadID, "from_agent_name": m.FromAgentName, "content": m.Content})
	req := &AppendRequest{Now: m.Now}
	if created {
		cbody, _ := json.Marshal(map[string]any{"agent_name": agentName(m.Spawn.Agent)})
		key := m.Key + "/thread_created"
		req.Events = append(req.Events, NewEvent{ID: derivedEventID(m.ThreadID, key), Type: ThreadCreatedType, Body: cbody, Key: key})
	}
	key := m.Key + "/received"
	req.Events = append(req.Events, NewEvent{ID: derivedEventID(m.ThreadID, key), Type: ThreadMessageReceivedType, Body: body, Key: key, Pending: true})
	req.Decide = func(cur *Session) (*Change, error) {
		if cur.ArchivedAt != nil || cur.Status == StatusTerminated {
			return nil, ErrThreadClosed
		}
		c := &Change{Wake: true}
		if cur.Status == StatusIdle {
			skey := m.Key + "/running"
			c.To, c.EventID, c.Key = StatusRunning, derivedEventID(m.ThreadID, skey), skey
		}
		return c, nil
	}
	return req
}

// ThreadList returns a session's child threads, oldest first.
func (s *Store) ThreadList(ctx context.Context, parentID string) ([]*Session, error) {
	rows, err := s.q.ThreadList(ctx, &parentID)
	if err != nil {
		return nil, mapErr("list threads", err)
	}
	out := make([]*Session, 0, len(rows))
	for _, r := range rows {
		t, err := sessionFromRow(r)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// ThreadGet returns a child thread of a session; ErrNotFound when the
// session has no such thread.
func (s *Store) ThreadGet(ctx context.Context, parentID, threadID string) (*Session, error) {
	t, err := s.SessionGet(ctx, threadID)
	if err != nil {
		return nil, err
	}
	if t.ParentID == nil || *t.ParentID != parentID {
		return nil, fmt.Errorf("thread %s of session %s: %w", threadID, parentID, ErrNotFound)
	}
	return t, nil
}

// ThreadArchive archives an idle child thread: it is terminated
// (session.thread_status_terminated, copied into the session's log) and
// takes no more messages. Archiving it again changes nothing. A running
// thread is refused with ErrConflict.
func (s *Store) ThreadArchive(ctx context.Context, parentID, threadID string, now time.Time) (*Session, error) {
	t, err := s.ThreadGet(ctx, parentID, threadID)
	if err != nil {
		return nil, err
	}
	if t.ArchivedAt != nil {
		return t, nil
	}
	if t.Status == StatusRunning || t.Status == StatusRescheduling {
		return nil, fmt.Errorf("archive thread %s: it is %s: %w", threadID, t.Status, ErrConflict)
	}
	var out *Session
	err = s.inTx(ctx, "archive thread", func(q *dbsqlc.Queries) error {
		key := "thread_archived"
		req := &AppendRequest{Now: now, Decide: func(cur *Session) (*Change, error) {
			if cur.Status == StatusRunning || cur.Status == StatusRescheduling {
				return nil, fmt.Errorf("archive thread %s: it is %s: %w", threadID, cur.Status, ErrConflict)
			}
			if cur.Status == StatusTerminated {
				return nil, nil
			}
			return &Change{To: StatusTerminated, EventID: derivedEventID(threadID, key), Key: key}, nil
		}}
		if _, _, err := s.appendKeyed(ctx, q, threadID, req, true, nil); err != nil {
			return err
		}
		r, err := q.ThreadArchive(ctx, dbsqlc.ThreadArchiveParams{ID: threadID, ParentID: &parentID, Now: now})
		if err != nil {
			return err
		}
		out, err = sessionFromRow(r)
		return err
	})
	if err != nil {
		return nil, mapErr("archive thread", err)
	}
	return out, nil
}

// ThreadReplies is what a coordinator's wait for its threads' replies
// took.
type ThreadReplies struct {
	// Done: no awaited thread is still working; Replies are the replies
	// the wait took (possibly none).
	Done    bool
	Replies []Event
}

// ThreadTakeReplies takes the replies of a session's child threads for
// the coordinator's wait named key, once none of the awaited threads
// (threadIDs; all when empty) owes a reply: they are marked taken in the
// parent's log and recorded under key, so a retried wait gets the same
// replies. Done is false while one still works.
func (s *Store) ThreadTakeReplies(ctx context.Context, parentID string, threadIDs []string, key string, now time.Time) (*ThreadReplies, error) {
	if e, err := s.ToolJournalGet(ctx, parentID, key); err == nil {
		var out ThreadReplies
		if err := json.Unmarshal(e.Body, &out); err != nil {
			return nil, fmt.Errorf("decode the replies taken by %s: %w", key, err)
		}
		return &out, nil
	} else if !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	if threadIDs == nil {
		threadIDs = []string{}
	}
	out := &ThreadReplies{}
	err := s.inTx(ctx, "take thread replies", func(q *dbsqlc.Queries) error {
		if _, err := q.SessionLock(ctx, parentID); err != nil {
			return err
		}
		busy, err := q.ThreadAwaiting(ctx, dbsqlc.ThreadAwaitingParams{ParentID: &parentID, Ids: threadIDs})
		if err != nil || len(busy) > 0 {
			return err
		}
		rows, err := q.ThreadRepliesPending(ctx, dbsqlc.ThreadRepliesPendingParams{SessionID: parentID, Ids: threadIDs})
		if err != nil {
			return err
		}
		ids := make([]string, 0, len(rows))
		for _, r := range rows {
			out.Replies = append(out.Replies, eventFromRow(r))
			ids = append(ids, r.ID)
		}
		if len(ids) > 0 {
			if _, err := q.EventMarkProcessed(ctx, dbsqlc.EventMarkProcessedParams{SessionID: parentID, Ids: ids, Now: now}); err != nil {
				return err
			}
		}
		out.Done = true
		body, _ := json.Marshal(out)
		_, err = q.ToolJournalInsert(ctx, dbsqlc.ToolJournalInsertParams{SessionID: parentID, ToolUseID: key, Body: body})
		return err
	})
	if err != nil {
		return nil, mapErr("take thread replies", err)
	}
	return out, nil
}

// EventThread is the child thread whose event eventID of the session's
// log is ("" when the event is the session's own); ErrNotFound when the
// log has no such event.
func (s *Store) EventThread(ctx context.Context, sessionID, eventID string) (string, error) {
	t, err := s.q.EventThreadOf(ctx, dbsqlc.EventThreadOfParams{SessionID: sessionID, ID: eventID})
	if err != nil {
		return "", mapErr("find the thread of an event", err)
	}
	return t, nil
}
