package controlplane

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/db"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
	"github.com/mangohq/mango/proto/sessionwf"
)

// threadServer serves the SessionThreads service: a multi-agent
// session's coordinator starts child threads, messages them and waits for
// their replies (db/threads.go).
type threadServer struct {
	pb.UnimplementedSessionThreadsServer
	s *Server
}

// rosterEntry is an agent of a coordinator's roster, resolved.
type rosterEntry struct {
	AgentID  string
	Version  int64
	Snapshot json.RawMessage
	Name     string
	Desc     string
}

// multiagentConfig is the multiagent member of an agent snapshot, as
// stored: a coordinator's agents, or multiagent_20261001's predefined
// subagents.
type multiagentConfig struct {
	Type      string            `json:"type"`
	Agents    []json.RawMessage `json:"agents"`
	Subagents *struct {
		Type             string            `json:"type"`
		PredefinedAgents []json.RawMessage `json:"predefined_agents"`
	} `json:"subagents"`
}

// rosterRefs are the roster's entries of an agent snapshot: none without
// multiagent.
func rosterRefs(agent json.RawMessage) ([]json.RawMessage, error) {
	if !bytes.Contains(agent, []byte(`"multiagent":{`)) {
		return nil, nil // null or absent: most sessions, read every turn
	}
	var a struct {
		Multiagent *multiagentConfig `json:"multiagent"`
	}
	if err := json.Unmarshal(agent, &a); err != nil {
		return nil, fmt.Errorf("decode the agent snapshot's multiagent: %w", err)
	}
	switch {
	case a.Multiagent == nil:
		return nil, nil
	case a.Multiagent.Type == "coordinator":
		return a.Multiagent.Agents, nil
	case a.Multiagent.Subagents != nil && a.Multiagent.Subagents.Type == "enabled":
		return a.Multiagent.Subagents.PredefinedAgents, nil
	}
	return nil, nil
}

// roster is the roster of session sess's agent: its snapshot carries
// each agent's own snapshot at its pinned version (the session's create
// expanded it).
func (s *Server) roster(sess *db.Session) ([]rosterEntry, error) {
	refs, err := rosterRefs(sess.Agent)
	if err != nil || len(refs) == 0 {
		return nil, err
	}
	out := make([]rosterEntry, 0, len(refs))
	for _, raw := range refs {
		var a struct {
			ID          string `json:"id"`
			Version     int64  `json:"version"`
			Name        string `json:"name"`
			Description string `json:"description"`
		}
		if err := json.Unmarshal(raw, &a); err != nil || a.ID == "" {
			return nil, fmt.Errorf("decode a roster agent of session %s: %v", sess.ID, err)
		}
		out = append(out, rosterEntry{AgentID: a.ID, Version: a.Version, Snapshot: raw, Name: a.Name, Desc: a.Description})
	}
	return out, nil
}

// threadContext is the ThreadContext of a run of sess.
func (s *Server) threadContext(sess *db.Session) (*pb.ThreadContext, error) {
	tc := &pb.ThreadContext{AgentName: sess.AgentName()}
	if sess.IsThread() {
		tc.ThreadId, tc.PrimaryThreadId, tc.ParentSessionId = sess.ID, db.PrimaryThreadID(*sess.ParentID), *sess.ParentID
		return tc, nil
	}
	tc.ThreadId = db.PrimaryThreadID(sess.ID)
	tc.PrimaryThreadId = tc.ThreadId
	roster, err := s.roster(sess)
	if err != nil {
		return nil, err
	}
	for _, e := range roster {
		tc.Roster = append(tc.Roster, &pb.RosterAgent{AgentId: e.AgentID, Version: e.Version, Name: e.Name, Description: e.Desc})
	}
	return tc, nil
}

// SendToThread implements pb.SessionThreadsServer.
func (t *threadServer) SendToThread(ctx context.Context, req *pb.SendToThreadRequest) (*pb.SendToThreadResponse, error) {
	const op = "send to thread"
	s, sid := t.s, req.GetSessionId()
	if err := requireFields("session_id", sid, "key", req.GetKey(), "content", req.GetContent()); err != nil {
		return nil, err
	}
	if (req.GetAgentId() == "") == (req.GetThreadId() == "") {
		return nil, invalid("agent_id", "exactly one of agent_id and thread_id is required")
	}
	var content []json.RawMessage
	if err := json.Unmarshal([]byte(req.GetContent()), &content); err != nil || len(content) == 0 {
		return nil, invalid("content", "must be a non-empty JSON array of content blocks")
	}
	parent, err := s.store.SessionGet(ctx, sid)
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	if parent.IsThread() {
		return nil, status.Errorf(codes.InvalidArgument, "%s: %s is a child thread; only a session's primary thread starts and messages threads", op, sid)
	}
	if parent.SelfHosted {
		return nil, status.Errorf(codes.FailedPrecondition, "%s: session threads are not supported in a self-hosted environment (its worker serves the session only)", op)
	}
	m := &db.ThreadSend{ParentID: sid, ThreadID: req.GetThreadId(), FromThreadID: db.PrimaryThreadID(sid), FromAgentName: parent.AgentName(),
		Content: json.RawMessage(req.GetContent()), Key: req.GetKey(), Now: s.now()}
	if req.GetAgentId() != "" {
		if m.Spawn, err = t.spawn(ctx, parent, req.GetAgentId()); err != nil {
			return nil, err
		}
		m.ThreadID = db.ThreadID(sid, req.GetKey())
		if err := t.checkRunning(ctx, sid, m.ThreadID); err != nil {
			return nil, err
		}
	}
	thread, err := s.store.ThreadSend(ctx, m)
	switch {
	case errors.Is(err, db.ErrThreadClosed):
		return nil, status.Errorf(codes.FailedPrecondition, "%s: thread %s is archived or terminated and takes no more messages", op, m.ThreadID)
	case errors.Is(err, db.ErrNotFound):
		return nil, status.Errorf(codes.InvalidArgument, "%s: session %s has no thread %s", op, sid, m.ThreadID)
	case err != nil:
		return nil, s.fail(ctx, op, err)
	}
	s.wakeNow(ctx, thread.ID) // its workflow runs the message now, not at the relay's next poll
	if err := t.appendSent(ctx, sid, req.GetKey(), thread, m.Content); err != nil {
		return nil, s.fail(ctx, op, err)
	}
	return &pb.SendToThreadResponse{ThreadId: thread.ID, AgentName: thread.AgentName(), Created: m.Spawn != nil}, nil
}

// MaxRunningThreads is how many child threads of a session may run at
// once (the hosted API's limit).
const MaxRunningThreads = 25

// checkRunning refuses a new thread (threadID, unless a retry made it
// already) while MaxRunningThreads of the session's threads run.
func (t *threadServer) checkRunning(ctx context.Context, sid, threadID string) error {
	threads, err := t.s.store.ThreadList(ctx, sid)
	if err != nil {
		return t.s.fail(ctx, "send to thread", err)
	}
	running := 0
	for _, th := range threads {
		if th.ID == threadID {
			return nil
		}
		if th.Status == db.StatusRunning || th.Status == db.StatusRescheduling {
			running++
		}
	}
	if running >= MaxRunningThreads {
		return status.Errorf(codes.FailedPrecondition, "send to thread: %d threads of session %s are running, the most that may run at once; "+
			"wait for replies before starting another", running, sid)
	}
	return nil
}

// spawn is the roster agent agentID of parent's coordinator, to start as
// a thread.
func (t *threadServer) spawn(ctx context.Context, parent *db.Session, agentID string) (*db.ThreadSpawn, error) {
	roster, err := t.s.roster(parent)
	if err != nil {
		return nil, t.s.fail(ctx, "send to thread", err)
	}
	for _, e := range roster {
		if e.AgentID == agentID {
			skills, err := t.skills(ctx, e.Snapshot)
			if err != nil {
				return nil, t.s.fail(ctx, "send to thread", err)
			}
			return &db.ThreadSpawn{AgentID: e.AgentID, AgentVersion: e.Version, Agent: e.Snapshot, Skills: skills}, nil
		}
	}
	return nil, status.Errorf(codes.InvalidArgument, "send to thread: agent %q is not in the roster of session %s's agent", agentID, parent.ID)
}

// skills are the skill resources of a thread of an agent snapshot: its
// skills, at the versions the agent version pinned.
func (t *threadServer) skills(ctx context.Context, agent json.RawMessage) ([]db.SessionSkill, error) {
	var a struct {
		Skills []struct {
			SkillID string `json:"skill_id"`
			Version string `json:"version"`
		} `json:"skills"`
	}
	if err := json.Unmarshal(agent, &a); err != nil {
		return nil, fmt.Errorf("decode the skills of a roster agent: %w", err)
	}
	out := make([]db.SessionSkill, 0, len(a.Skills))
	for _, sk := range a.Skills {
		v, err := t.s.store.SkillVersionGet(ctx, sk.SkillID, sk.Version)
		if err != nil {
			return nil, fmt.Errorf("skill %s version %s of a roster agent: %w", sk.SkillID, sk.Version, err)
		}
		out = append(out, db.SessionSkill{ResourceID: ids.New(ids.Resource), SkillID: sk.SkillID, VersionID: v.ID, Name: v.Name})
	}
	return out, nil
}

// appendSent appends the primary thread's agent.thread_message_sent of a
// send (after the thread's events: locks go thread first).
func (t *threadServer) appendSent(ctx context.Context, sid, key string, thread *db.Session, content json.RawMessage) error {
	body, err := json.Marshal(map[string]any{"to_session_thread_id": thread.ID, "to_agent_name": thread.AgentName(), "content": content})
	if err != nil {
		return err
	}
	k := key + "/thread_message_sent"
	_, _, err = t.s.store.Append(ctx, sid, &db.AppendRequest{Now: t.s.now(),
		Events: []db.NewEvent{{ID: sessionwf.EventID(sid, k), Type: db.ThreadMessageSentType, Body: body, Key: k}}})
	return err
}

// AwaitThreadReplies implements pb.SessionThreadsServer.
func (t *threadServer) AwaitThreadReplies(ctx context.Context, req *pb.AwaitThreadRepliesRequest) (*pb.AwaitThreadRepliesResponse, error) {
	const op = "await thread replies"
	s, sid := t.s, req.GetSessionId()
	if err := requireFields("session_id", sid, "key", req.GetKey()); err != nil {
		return nil, err
	}
	maxWait := time.Duration(req.GetMaxWaitMs()) * time.Millisecond
	if maxWait <= 0 {
		maxWait = defaultAwaitMaxWait
	}
	holdUntil := s.now().Add(min(maxWait, maxAwaitMaxWait))
	key := "thread_wait/" + req.GetKey()
	for {
		wake := s.waitEvents(sid)
		got, err := s.store.ThreadTakeReplies(ctx, sid, req.GetThreadIds(), key, s.now())
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		if got.Done {
			return repliesToPB(got.Replies)
		}
		now := s.now()
		if !now.Before(holdUntil) {
			return &pb.AwaitThreadRepliesResponse{}, nil
		}
		drained, err := s.sleepUntil(ctx, wake, holdUntil.Sub(now))
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		if drained {
			return &pb.AwaitThreadRepliesResponse{}, nil
		}
	}
}

func repliesToPB(events []db.Event) (*pb.AwaitThreadRepliesResponse, error) {
	out := &pb.AwaitThreadRepliesResponse{Done: true}
	for _, ev := range events {
		var body struct {
			From    string          `json:"from_session_thread_id"`
			Name    string          `json:"from_agent_name"`
			Content json.RawMessage `json:"content"`
		}
		if err := json.Unmarshal(ev.Body, &body); err != nil {
			return nil, fmt.Errorf("decode reply %s: %w", ev.ID, err)
		}
		out.Replies = append(out.Replies, &pb.ThreadReply{ThreadId: body.From, AgentName: body.Name, Content: string(body.Content), EventId: ev.ID})
	}
	return out, nil
}
