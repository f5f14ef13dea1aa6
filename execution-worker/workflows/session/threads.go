package session

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mangohq/mango/execution-worker/agentruntime"
	"github.com/mangohq/mango/execution-worker/model"
	"github.com/mangohq/mango/execution-worker/tools"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// The coordinator's thread tools (docs/api.md, "Multi-agent sessions").
const (
	ToolStartThread    = "start_thread"
	ToolSendToThread   = "send_to_thread"
	ToolWaitForThreads = "wait_for_threads"
)

// threadWaitPoll is how long one AwaitThreadReplies call is held.
const threadWaitPoll = 30 * time.Second

// threadTools runs a coordinator's thread tools through the
// SessionThreads service. It implements agentruntime.Coordinator.
type threadTools struct {
	cp     pb.SessionThreadsClient
	sid    string
	roster []*pb.RosterAgent
}

// Definitions implements agentruntime.Coordinator.
func (t *threadTools) Definitions() []model.ToolDef {
	ids := make([]string, 0, len(t.roster))
	var lines []string
	for _, a := range t.roster {
		ids = append(ids, a.GetAgentId())
		line := fmt.Sprintf("- %s: %s", a.GetAgentId(), a.GetName())
		if d := strings.TrimSpace(a.GetDescription()); d != "" {
			line += " — " + d
		}
		lines = append(lines, line)
	}
	agentIDs, _ := json.Marshal(ids)
	return []model.ToolDef{
		{Name: ToolStartThread, Description: "Start a new session thread running one of your roster's agents, and send it its task. " +
			"The agent works in its own context, in the same sandbox and filesystem as you, and runs while you continue. " +
			"It replies when its turn ends; call " + ToolWaitForThreads + " to wait for replies. Returns the thread's id. Roster:\n" +
			strings.Join(lines, "\n"),
			InputSchema: json.RawMessage(`{"type":"object","properties":{"agent_id":{"type":"string","enum":` + string(agentIDs) +
				`,"description":"The roster agent to run."},"message":{"type":"string","description":"The task: everything the agent needs to know, since it does not see your conversation."}},"required":["agent_id","message"]}`)},
		{Name: ToolSendToThread, Description: "Send a follow-up message to a thread you started. The thread keeps everything from its " +
			"earlier turns. It replies when its turn ends; call " + ToolWaitForThreads + " to wait for the reply.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"thread_id":{"type":"string","description":"The thread's id, as ` +
				ToolStartThread + ` returned it."},"message":{"type":"string"}},"required":["thread_id","message"]}`)},
		{Name: ToolWaitForThreads, Description: "Wait until the threads you messaged have replied (all of them, or those named), " +
			"and return their replies not returned yet.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"thread_ids":{"type":"array","items":{"type":"string"},` +
				`"description":"Wait for these threads only; omit to wait for every thread you messaged."}}}`)},
	}
}

// Has implements agentruntime.Coordinator.
func (t *threadTools) Has(name string) bool {
	return name == ToolStartThread || name == ToolSendToThread || name == ToolWaitForThreads
}

// Call implements agentruntime.Coordinator.
func (t *threadTools) Call(ctx context.Context, useEventID, name string, input json.RawMessage) (tools.Result, error) {
	var in struct {
		AgentID   string   `json:"agent_id"`
		ThreadID  string   `json:"thread_id"`
		Message   string   `json:"message"`
		ThreadIDs []string `json:"thread_ids"`
	}
	if err := json.Unmarshal(input, &in); err != nil {
		return toolError("%s: the input is not a JSON object of the tool's schema: %v", name, err), nil
	}
	switch name {
	case ToolStartThread:
		if !slices.ContainsFunc(t.roster, func(a *pb.RosterAgent) bool { return a.GetAgentId() == in.AgentID }) {
			return toolError("%s: agent_id %q is not in your roster", name, in.AgentID), nil
		}
		return t.send(ctx, useEventID, &pb.SendToThreadRequest{AgentId: in.AgentID}, in.Message)
	case ToolSendToThread:
		if in.ThreadID == "" {
			return toolError("%s: thread_id is required", name), nil
		}
		return t.send(ctx, useEventID, &pb.SendToThreadRequest{ThreadId: in.ThreadID}, in.Message)
	}
	return t.wait(ctx, useEventID, in.ThreadIDs)
}

// send sends message to the thread req names (starting it when req names
// an agent).
func (t *threadTools) send(ctx context.Context, useEventID string, req *pb.SendToThreadRequest, message string) (tools.Result, error) {
	if strings.TrimSpace(message) == "" {
		return toolError("message is required and must not be empty"), nil
	}
	content, _ := json.Marshal([]map[string]string{{"type": "text", "text": message}})
	req.SessionId, req.Key, req.Content = t.sid, useEventID, string(content)
	resp, err := t.cp.SendToThread(ctx, req)
	if c := status.Code(err); c == codes.InvalidArgument || c == codes.FailedPrecondition {
		return toolError("%s", status.Convert(err).Message()), nil
	}
	if err != nil {
		return tools.Result{}, fmt.Errorf("send to thread: %w", err)
	}
	if resp.GetCreated() {
		return tools.Result{Content: fmt.Sprintf("Started thread %s (agent %s). It replies when its turn ends; call %s to wait for it.",
			resp.GetThreadId(), resp.GetAgentName(), ToolWaitForThreads)}, nil
	}
	return tools.Result{Content: fmt.Sprintf("Sent to thread %s (agent %s). It replies when its turn ends; call %s to wait for it.",
		resp.GetThreadId(), resp.GetAgentName(), ToolWaitForThreads)}, nil
}

// wait waits for the threads' replies, one held call after another.
func (t *threadTools) wait(ctx context.Context, useEventID string, threadIDs []string) (tools.Result, error) {
	for {
		resp, err := t.cp.AwaitThreadReplies(ctx, &pb.AwaitThreadRepliesRequest{SessionId: t.sid, Key: useEventID, ThreadIds: threadIDs,
			MaxWaitMs: threadWaitPoll.Milliseconds()})
		if err != nil {
			return tools.Result{}, fmt.Errorf("await thread replies: %w", err)
		}
		if resp.GetDone() {
			return repliesResult(resp.GetReplies()), nil
		}
		if err := ctx.Err(); err != nil {
			return tools.Result{}, err
		}
	}
}

// repliesResult is the model's view of the replies a wait returned.
func repliesResult(replies []*pb.ThreadReply) tools.Result {
	if len(replies) == 0 {
		return tools.Result{Content: "No thread has a reply for you: none of the threads waited for owed one."}
	}
	parts := make([]string, 0, len(replies))
	for _, r := range replies {
		parts = append(parts, fmt.Sprintf("Reply from thread %s (agent %s):\n%s", r.GetThreadId(), r.GetAgentName(), contentText(r.GetContent())))
	}
	return tools.Result{Content: strings.Join(parts, "\n\n")}
}

// contentText joins the text blocks of a JSON array of content blocks.
func contentText(content string) string {
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	_ = json.Unmarshal([]byte(content), &blocks)
	var texts []string
	for _, b := range blocks {
		if b.Type == "text" {
			texts = append(texts, b.Text)
		}
	}
	return strings.Join(texts, "\n")
}

func toolError(format string, args ...any) tools.Result {
	return tools.Result{Content: fmt.Sprintf(format, args...), IsError: true}
}

// threadReply is a child thread's reply to its coordinator at the end of
// a turn: an agent.thread_message_sent to the primary thread holding the
// text of the turn's last message; nil for a session (not a child
// thread) or a turn that said nothing.
func threadReply(tc *pb.ThreadContext, turnKey string, last []model.Block) *pb.NewEvent {
	if tc.GetParentSessionId() == "" {
		return nil
	}
	var texts []map[string]string
	for _, b := range last {
		if b.Type == "text" && strings.TrimSpace(b.Text) != "" {
			texts = append(texts, map[string]string{"type": "text", "text": b.Text})
		}
	}
	if len(texts) == 0 {
		texts = []map[string]string{{"type": "text", "text": "(The thread ended its turn without a message.)"}}
	}
	body, _ := json.Marshal(map[string]any{"to_session_thread_id": tc.GetPrimaryThreadId(), "to_agent_name": nil, "content": texts})
	return &pb.NewEvent{Key: turnKey + "/thread_reply", Type: "agent.thread_message_sent", Body: string(body)}
}

// lastBlocks are the content blocks of the model's last message in a
// held last commit (nil without one).
func lastBlocks(last *agentruntime.Commit) []model.Block {
	if last == nil || len(last.Transcript) == 0 {
		return nil
	}
	return last.Transcript[len(last.Transcript)-1].Msg.Content
}

// withReplyHeader is the content of a trigger that starts a coordinator's
// turn: a thread's reply no wait took (agent.thread_message_received)
// is introduced by a line naming the thread; any other trigger's content
// is returned as is.
func withReplyHeader(ev *pb.Event, content []model.Block) []model.Block {
	if ev.GetType() != "agent.thread_message_received" {
		return content
	}
	var from struct {
		ThreadID string `json:"from_session_thread_id"`
		Agent    string `json:"from_agent_name"`
	}
	_ = json.Unmarshal([]byte(ev.GetBody()), &from)
	head := model.Block{Type: "text", Text: fmt.Sprintf("Reply from thread %s (agent %s):", from.ThreadID, from.Agent)}
	return append([]model.Block{head}, content...)
}
