package agentruntime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/trace"
	"strconv"
	"strings"

	"github.com/mangohq/mango/execution-worker/model"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/tools"
)

// DefaultMaxRounds caps the model calls of one turn.
const DefaultMaxRounds = 20

// NewEvent is a complete event to commit: Key is deterministic for the
// turn and position, so committing it again on a retry is a no-op.
type NewEvent struct {
	Key  string
	Type string
	Body any
	// Usage is the model usage the event reports (span.model_request_end),
	// committed with it so the session's usage counts it exactly once.
	Usage *model.Usage
}

// Store is where a run's durable effects go (the ControlPlane in the
// worker). Every method must be idempotent by its key.
type Store interface {
	// AppendEvents commits events and returns their ids in order.
	AppendEvents(ctx context.Context, events []NewEvent) ([]string, error)
	// AppendEvent commits one event and reports whether an earlier call
	// had already stored it (a retry).
	AppendEvent(ctx context.Context, event NewEvent) (id string, existed bool, err error)
	// AppendWithTranscript commits events and stores transcript messages
	// in one transaction, and returns the events' ids in order.
	AppendWithTranscript(ctx context.Context, transcript []TranscriptMessage, events []NewEvent) ([]string, error)
	// RecordMessage appends a message to the provider transcript.
	RecordMessage(ctx context.Context, key string, msg model.Message) error
	// ToolResult returns the journaled result of a tool call, if any.
	ToolResult(ctx context.Context, toolUseID string) (*tools.Result, bool, error)
	// RecordToolResult journals a tool result (first write wins) and
	// returns the stored one.
	RecordToolResult(ctx context.Context, toolUseID string, r tools.Result) (tools.Result, error)
	// MarkStarted journals that a tool call is about to run, in one
	// atomic test-and-set: first is false when it was marked before (an
	// earlier attempt may have run it).
	MarkStarted(ctx context.Context, key string) (first bool, err error)
}

// ToolResults waits for the answers to the built-in tool calls of a
// self-hosted session, which the client's environment worker executes.
type ToolResults interface {
	// Await returns the answer to the agent.tool_use event useEventID:
	// the client's user.tool_result, or the error result recorded when
	// none came within the self-hosted timeout. It blocks until an answer
	// exists or ctx ends (then it returns ctx's error). Exactly one answer
	// exists per call: awaiting it again returns the same one.
	Await(ctx context.Context, useEventID string) (tools.Result, error)
}

// Previewer receives previews of events being produced (optional).
type Previewer interface {
	// Start announces an event of type being produced under key.
	Start(key, eventType string)
	// Delta carries a text fragment of the event under key.
	Delta(key, text string)
}

// TranscriptMessage is a message of the provider transcript and its key.
type TranscriptMessage struct {
	Key string
	Msg model.Message
	// Anchor is set on assistant messages: the provider's measure of the
	// request that produced them, kept beside the message so that a retry
	// estimates the next request exactly as the first attempt did.
	Anchor *Anchor
}

// Run is one turn's input.
type Run struct {
	// TurnKey identifies the turn: the id of its triggering event.
	TurnKey string
	// SessionID is the Mango session; MCP servers are reached with its
	// credentials.
	SessionID string
	// Agent is the session's agent snapshot.
	Agent *Agent
	// Tools is the parsed tool configuration.
	Tools *ToolConfig
	// Conversation is the projected conversation including this turn's
	// messages so far (the trigger's user message and, on a retry, what
	// the previous attempt recorded). Its messages may be shared with the
	// worker's transcript cache: never modify a message or block in
	// place; copy what changes.
	Conversation []model.Message
	// TurnMessages is how many of Conversation's last messages belong to
	// this turn (to number new ones deterministically).
	TurnMessages int
	// Sandbox returns the session's sandbox, provisioning it on first use.
	// Unused when ToolResults is set.
	Sandbox func(ctx context.Context) (sandbox.Sandbox, error)
	// ReadOnlyRoots are directories of the sandbox the write and edit
	// tools refuse to change (the mounts of read_only memory stores).
	ReadOnlyRoots []string
	// ToolResults, set for a session of a self-hosted environment, answers
	// its built-in tool calls: the client's worker runs them, and the run
	// waits for their results instead of running them in a sandbox (the
	// session has none). nil: built-ins run in Sandbox.
	ToolResults ToolResults
	// Coordinator, set on the primary thread of a multi-agent session,
	// runs the coordinator's thread tools; nil offers none.
	Coordinator Coordinator
	// Approved holds the agent.tool_use event ids of always_ask tools the
	// client allowed (user.tool_confirmation with result allow).
	Approved map[string]bool
	// Unsaved are the messages at the end of Conversation not stored in
	// the transcript yet (the trigger's user message): they are stored
	// with the turn's first commit.
	Unsaved []TranscriptMessage
	// Snapshot is the latest stored context snapshot of the session (nil:
	// the model sees Conversation as is).
	Snapshot *ContextSnapshot
	// Anchor is the provider's measure of the newest request, from the
	// transcript (nil: none).
	Anchor *Anchor
	// Attempt is the number of the activity attempt running the turn
	// (Temporal's, from 1), for the spans; 0: unknown.
	Attempt int

	mcp *mcpCatalog // the MCP tools of this run, set by Run
	// pending are events held for the run's next commit (see commit): a
	// round's last tool result rides on the next model request's span
	// start, one round trip instead of two.
	pending []NewEvent
	// fresh are the tool use events committed with their model message in
	// this run, by key: their ids, known not to have a result yet.
	fresh map[string]string
	// last is the turn's last commit, held for the caller (Core.HoldLast).
	last *Commit
}

// Commit is what one commit stores: transcript messages, then events.
type Commit struct {
	Transcript []TranscriptMessage
	Events     []NewEvent
}

// Outcome is how a turn ended.
type Outcome string

// Turn outcomes.
const (
	OutcomeEndTurn        Outcome = "end_turn"
	OutcomeRequiresAction Outcome = "requires_action"
	OutcomeRoundLimit     Outcome = "tool_use_limit"
	// OutcomeContextWindow: the next request does not fit the model's
	// context window even after compaction (Result.Detail says why).
	OutcomeContextWindow Outcome = "context_window"
)

// Result is how a run ended.
type Result struct {
	Outcome Outcome
	// RequiredEventIDs are the events the client must answer
	// (requires_action).
	RequiredEventIDs []string
	// Rounds is the number of model calls made in this run.
	Rounds int
	// Detail explains OutcomeContextWindow.
	Detail string
	// Last, with Core.HoldLast, is the turn's last commit (the model's
	// final response: its transcript message and events), not made: the
	// caller must commit it with the turn's end. nil when Run made every
	// commit itself.
	Last *Commit
}

// Runtime runs agent turns.
type Runtime interface {
	Run(ctx context.Context, run *Run) (*Result, error)
}

// Core is the default AgentRuntime.
type Core struct {
	Model   model.Client
	Store   Store
	Preview Previewer
	// MCP reaches the agent's MCP servers; nil offers no MCP tools.
	MCP       MCPClient
	MaxRounds int
	MaxTokens int
	// ModelID, when set, overrides the agent's model id.
	ModelID string
	// Context tunes context-window management.
	Context ContextConfig
	// HoldLast leaves the commit of a response that ends the turn (one
	// without tool uses) to the caller, in Result.Last, so that it commits
	// it with the turn's end: one commit fewer per turn. false: Run makes
	// it.
	HoldLast bool
	// Calls, shared by the turns of a process, lets an attempt take over
	// a tool call its abandoned predecessor still runs here; nil: a call
	// ends with the attempt that started it.
	Calls *Calls
	// Tracer makes the spans of model requests, tool calls and sandbox
	// acquisitions; nil makes none.
	Tracer trace.Tracer
	// CaptureContent lets the spans carry the model's text, tool input and
	// tool output, each clipped to MaxContentBytes
	// (MANGO_OTEL_CAPTURE_CONTENT); false: names, sizes and timings only.
	CaptureContent bool
	// Metrics measures model requests, tool calls and sandbox
	// acquisitions; nil measures nothing.
	Metrics Metrics
}

var _ Runtime = (*Core)(nil)

func (c *Core) maxRounds() int {
	if c.MaxRounds > 0 {
		return c.MaxRounds
	}
	return DefaultMaxRounds
}

// Run drives one turn. A model error is returned (classified by
// model.Retryable) after the span events are committed; the caller decides
// on retries, which resume from the transcript.
func (c *Core) Run(ctx context.Context, run *Run) (*Result, error) {
	cat, err := c.mcpCatalog(ctx, run)
	if err != nil {
		return nil, err
	}
	run.mcp = cat
	conv := append([]model.Message(nil), run.Conversation...)
	n := run.TurnMessages
	res := &Result{}
	// unsaved messages are stored with the next commit (one round trip
	// for both), or on their own when the turn ends first.
	unsaved := run.Unsaved
	end := func(o Outcome) (*Result, error) {
		res.Outcome = o
		if run.last != nil {
			// Held by callModel; nothing else is unsaved after a response.
			res.Last = run.last
			return res, nil
		}
		if err := c.saveAll(ctx, run, unsaved); err != nil {
			return nil, err
		}
		return res, nil
	}
	for {
		if len(conv) == 0 {
			return nil, errors.New("empty conversation")
		}
		last := conv[len(conv)-1]
		if last.Role == "assistant" {
			uses := toolUses(last)
			if len(uses) == 0 {
				return end(OutcomeEndTurn)
			}
			results, required, err := c.runTools(ctx, run, n-1, uses)
			if err != nil {
				return nil, err
			}
			if len(required) > 0 {
				res.RequiredEventIDs = required
				return end(OutcomeRequiresAction)
			}
			msg := model.Message{Role: "user", Content: results}
			unsaved = append(unsaved, TranscriptMessage{Key: messageKey(run.TurnKey, n), Msg: msg})
			conv = append(conv, msg)
			n++
			continue
		}
		if c.roundsSoFar(conv, run) >= c.maxRounds() {
			return end(OutcomeRoundLimit)
		}
		if c.budgetReached() {
			return end(OutcomeBudgetReached)
		}
		req, err := c.fit(ctx, run, conv, len(unsaved))
		var cwe *ContextWindowError
		if errors.As(err, &cwe) {
			res.Detail = cwe.Error()
			return end(OutcomeContextWindow)
		}
		if err != nil {
			if ctx.Err() != nil {
				// Interrupted: what the turn did stays (see below).
				err = errors.Join(err, c.saveAll(context.WithoutCancel(ctx), run, unsaved))
			}
			return nil, err
		}
		msg, err := c.callModel(ctx, run, req, len(conv), n, unsaved)
		res.Rounds++
		if err != nil {
			if ctx.Err() != nil {
				// Interrupted: the turn ends here, and what it did (the
				// user message, tool results) stays in the transcript.
				err = errors.Join(err, c.saveAll(context.WithoutCancel(ctx), run, unsaved))
			}
			return nil, err
		}
		unsaved = nil
		conv = append(conv, *msg)
		n++
	}
}

// commit appends events, and stores transcript messages, in one commit
// after the run's pending events; it returns the ids of events.
func (c *Core) commit(ctx context.Context, run *Run, transcript []TranscriptMessage, events []NewEvent) ([]string, error) {
	n := len(run.pending)
	all := append(run.pending[:n:n], events...)
	var ids []string
	var err error
	if len(transcript) > 0 {
		ids, err = c.Store.AppendWithTranscript(ctx, transcript, all)
	} else {
		ids, err = c.Store.AppendEvents(ctx, all)
	}
	if err != nil {
		return nil, err
	}
	run.pending = nil
	return ids[n:], nil
}

// flush commits the run's pending events, if any.
func (c *Core) flush(ctx context.Context, run *Run) error {
	if len(run.pending) == 0 {
		return nil
	}
	_, err := c.commit(ctx, run, nil, nil)
	return err
}

// saveAll commits the run's pending events and stores transcript
// messages: what a turn ending (or interrupted) leaves.
func (c *Core) saveAll(ctx context.Context, run *Run, msgs []TranscriptMessage) error {
	if len(run.pending) > 0 {
		_, err := c.commit(ctx, run, msgs, nil)
		return err
	}
	return c.save(ctx, msgs)
}

// save stores transcript messages (keys already stored are skipped).
func (c *Core) save(ctx context.Context, msgs []TranscriptMessage) error {
	for _, m := range msgs {
		if err := c.Store.RecordMessage(ctx, m.Key, m.Msg); err != nil {
			return err
		}
	}
	return nil
}

// roundsSoFar counts the assistant messages of this turn.
func (c *Core) roundsSoFar(conv []model.Message, run *Run) int {
	count := 0
	start := len(run.Conversation) - run.TurnMessages
	for i := max(start, 0); i < len(conv); i++ {
		if conv[i].Role == "assistant" {
			count++
		}
	}
	return count
}

func messageKey(turn string, n int) string { return turn + "/" + strconv.Itoa(n) }

func toolUses(m model.Message) []model.Block {
	var out []model.Block
	for _, b := range m.Content {
		if b.Type == "tool_use" {
			out = append(out, b)
		}
	}
	return out
}

func (c *Core) request(run *Run, conv []model.Message) *model.Request {
	id := run.Agent.Model.ID
	if c.ModelID != "" {
		id = c.ModelID
	}
	maxTokens := c.MaxTokens
	if maxTokens == 0 {
		maxTokens = 8192
	}
	// Never more output than the model can produce.
	maxTokens = min(maxTokens, ProfileFor(id).MaxOutput)
	req := &model.Request{Model: id, System: run.Agent.System, Messages: conv, MaxTokens: maxTokens}
	req.Tools = append(req.Tools, tools.Definitions(run.Tools.BuiltinNames())...)
	for _, name := range run.Tools.Order {
		ct := run.Tools.Custom[name]
		req.Tools = append(req.Tools, model.ToolDef{Name: ct.Name, Description: ct.Description, InputSchema: ct.InputSchema})
	}
	if run.mcp != nil {
		for _, name := range run.mcp.order {
			req.Tools = append(req.Tools, run.mcp.byName[name].def)
		}
	}
	if run.Coordinator != nil {
		req.Tools = append(req.Tools, run.Coordinator.Definitions()...)
	}
	req.Tools = append(req.Tools, tools.ServerTools(run.Tools.Web)...)
	return req
}

type usageBody struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
}

type textBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// callModel makes one model request (message n of the turn, at index of
// the conversation) and commits its events: span start (with the unsaved
// transcript messages), thinking, the agent message, tool uses, span end
// (with the model's message).
func (c *Core) callModel(ctx context.Context, run *Run, req *model.Request, index, n int, unsaved []TranscriptMessage) (*model.Message, error) {
	key := messageKey(run.TurnKey, n)
	ids, err := c.commit(ctx, run, unsaved, []NewEvent{{Key: key + "/span_start", Type: "span.model_request_start", Body: struct{}{}}})
	if err != nil {
		return nil, err
	}
	startID := ids[0]
	var resp *model.Response
	mctx, mt := c.modelSpan(ctx, run, req, n, c.Preview != nil)
	if c.Preview != nil {
		resp, err = c.Model.Stream(mctx, req, func(ev model.StreamEvent) {
			mt.delta() // the first streamed event is the time to first token
			switch {
			case ev.Type == "block_start" && ev.BlockType == "text":
				c.Preview.Start(key+"/message", "agent.message")
			case ev.Type == "block_start" && ev.BlockType == "thinking":
				c.Preview.Start(key+"/thinking/"+strconv.Itoa(ev.Index), "agent.thinking")
			case ev.Type == "text_delta":
				c.Preview.Delta(key+"/message", ev.Text)
			}
		})
	} else {
		resp, err = c.Model.Create(mctx, req)
	}
	mt.end(resp, err)
	if err != nil {
		// Close the span; the caller classifies and retries.
		endErr := c.endSpan(context.WithoutCancel(ctx), key, startID, nil, true)
		return nil, errors.Join(err, endErr)
	}
	msg := model.Message{Role: "assistant", Content: resp.Content}
	var events []NewEvent
	var text []textBlock
	for i, b := range resp.Content {
		switch b.Type {
		case "thinking", "redacted_thinking":
			events = append(events, NewEvent{Key: key + "/thinking/" + strconv.Itoa(i), Type: "agent.thinking", Body: struct{}{}})
		case "text":
			text = append(text, textBlock{Type: "text", Text: b.Text})
		}
	}
	if len(text) > 0 {
		events = append(events, NewEvent{Key: key + "/message", Type: "agent.message", Body: map[string]any{"content": text}})
	}
	// The model's message in the transcript, its events and the span's
	// end in one commit: a retry after it resumes with the model's answer
	// instead of asking again.
	events = append(events, spanEnd(key, startID, &resp.Usage, false))
	// The tool uses the runtime will run are announced in the same commit.
	uses := len(events)
	for _, u := range toolUses(msg) {
		if ev, ok := run.useEvent(key, u); ok {
			events = append(events, ev)
		}
	}
	anchor := &Anchor{Index: index, Snapshot: snapKey(run.Snapshot),
		PromptTokens: resp.Usage.InputTokens + resp.Usage.CacheReadInputTokens + resp.Usage.CacheCreationInputTokens}
	transcript := []TranscriptMessage{{Key: key, Msg: msg, Anchor: anchor}}
	if c.HoldLast && len(toolUses(msg)) == 0 {
		// The turn ends with this response: the caller commits it with
		// the turn's end. (An attempt that fails before then asks the
		// model again.)
		run.last = &Commit{Transcript: transcript, Events: append(run.pending, events...)}
		run.pending = nil
		run.Anchor = anchor
		return &msg, nil
	}
	ids, err = c.commit(ctx, run, transcript, events)
	if err != nil {
		return nil, err
	}
	if run.fresh == nil {
		run.fresh = map[string]string{}
	}
	for i, ev := range events[uses:] {
		run.fresh[ev.Key] = ids[uses+i]
	}
	run.Anchor = anchor
	return &msg, nil
}

func (c *Core) endSpan(ctx context.Context, key, startID string, u *model.Usage, isError bool) error {
	_, err := c.Store.AppendEvents(ctx, []NewEvent{spanEnd(key, startID, u, isError)})
	return err
}

// spanEnd is the span.model_request_end event of message key.
func spanEnd(key, startID string, u *model.Usage, isError bool) NewEvent {
	usage := usageBody{}
	if u != nil {
		usage = usageBody{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CacheReadInputTokens: u.CacheReadInputTokens, CacheCreationInputTokens: u.CacheCreationInputTokens}
	}
	suffix := "/span_end"
	if isError {
		// An errored attempt has its own key: a retry that succeeds
		// commits its own end.
		suffix = "/span_end_error/" + startID
	}
	return NewEvent{Key: key + suffix, Type: "span.model_request_end", Usage: u,
		Body: map[string]any{"model_request_start_id": startID, "is_error": isError, "model_usage": usage}}
}

// runTools handles the tool uses of assistant message n: built-ins allowed
// without asking run in the sandbox; custom tools and always_ask tools are
// announced and returned as required actions (the session parks).
func (c *Core) runTools(ctx context.Context, run *Run, n int, uses []model.Block) ([]model.Block, []string, error) {
	key := messageKey(run.TurnKey, n)
	var results []model.Block
	var required []string
	for _, u := range uses {
		input := u.Input
		if len(input) == 0 {
			input = json.RawMessage(`{}`)
		}
		var inputObj any
		_ = json.Unmarshal(input, &inputObj)
		if inputObj == nil {
			inputObj = map[string]any{}
		}
		if _, custom := run.Tools.Custom[u.Name]; custom {
			ids, err := c.commit(ctx, run, nil, []NewEvent{{Key: key + "/custom_tool_use/" + u.ID, Type: "agent.custom_tool_use",
				Body: map[string]any{"name": u.Name, "input": inputObj}}})
			if err != nil {
				return nil, nil, err
			}
			if r, ok, err := c.Store.ToolResult(ctx, ids[0]); err != nil {
				return nil, nil, err
			} else if ok {
				results = append(results, toolResultBlock(u.ID, *r))
				continue
			}
			required = append(required, ids[0])
			continue
		}
		if t, ok := run.mcpTool(u.Name); ok {
			ev, _ := run.useEvent(key, u)
			r, useEventID, asked, err := c.useTool(ctx, run, ev, t.setting.Policy, u.Name, func(ctx context.Context, useEventID string) (tools.Result, error) {
				return c.mcpResult(ctx, run, t, useEventID, input)
			})
			if err != nil {
				return nil, nil, err
			}
			if asked {
				required = append(required, useEventID)
				continue
			}
			// The result is journaled: its event waits for the next commit
			// (a retry that loses it makes it again from the journal).
			run.pending = append(run.pending, NewEvent{Key: key + "/mcp_tool_result/" + u.ID, Type: "agent.mcp_tool_result",
				Body: map[string]any{"mcp_tool_use_id": useEventID, "content": []textBlock{{Type: "text", Text: r.Content}}, "is_error": r.IsError}})
			results = append(results, toolResultBlock(u.ID, *r))
			continue
		}
		if run.Coordinator != nil && run.Coordinator.Has(u.Name) {
			r, err := c.runCoordinator(ctx, run, key, u, input)
			if err != nil {
				return nil, nil, err
			}
			results = append(results, toolResultBlock(u.ID, *r))
			continue
		}
		policy, builtin := run.Tools.Builtins[u.Name]
		if !builtin {
			results = append(results, toolResultBlock(u.ID, tools.Result{Content: fmt.Sprintf("tool %q is not available to this agent", u.Name), IsError: true}))
			continue
		}
		r, useEventID, asked, err := c.runBuiltin(ctx, run, key, u, policy, input)
		if err != nil {
			return nil, nil, err
		}
		if asked {
			required = append(required, useEventID)
			continue
		}
		results = append(results, toolResultBlock(u.ID, *r))
	}
	return results, required, nil
}

// runBuiltin handles built-in tool use u of model message key: it runs
// in the sandbox, or, in a self-hosted session, is awaited from the
// client's worker. asked: the session parks for the use's event. The
// result event, when the runtime reports one, waits for the next commit
// (a retry that loses it makes it again from the journal).
func (c *Core) runBuiltin(ctx context.Context, run *Run, key string, u model.Block, policy string, input json.RawMessage) (
	r *tools.Result, useEventID string, asked bool, err error) {
	ev, _ := run.useEvent(key, u)
	report := true
	if run.ToolResults != nil {
		var st awaitState
		if r, useEventID, st, err = c.awaitTool(ctx, run, ev, policy); err != nil || st == awaitAsked {
			return r, useEventID, st == awaitAsked, err
		}
		// An answered call's result event is already in the log; no
		// answer event exists for a denied call: report it.
		report = st == awaitDenied
	} else {
		r, useEventID, asked, err = c.useTool(ctx, run, ev, policy, u.Name, func(ctx context.Context, useEventID string) (tools.Result, error) {
			return c.execBuiltin(ctx, run, u.Name, useEventID, input)
		})
		if err != nil || asked {
			return r, useEventID, asked, err
		}
	}
	if report {
		run.pending = append(run.pending, NewEvent{Key: key + "/tool_result/" + u.ID, Type: "agent.tool_result",
			Body: map[string]any{"tool_use_id": useEventID, "content": []textBlock{{Type: "text", Text: r.Content}}, "is_error": r.IsError}})
	}
	return r, useEventID, false, nil
}

// execBuiltin runs built-in tool call name (its agent.tool_use is
// useEventID) in the session's sandbox, which it acquires within the
// call's span; a result too large for the model goes to a file there.
func (c *Core) execBuiltin(ctx context.Context, run *Run, name, useEventID string, input json.RawMessage) (out tools.Result, err error) {
	ctx, span := c.toolSpan(ctx, name, input)
	defer func() { span.end(out, err) }()
	sb, err := c.sandbox(ctx, run)
	if err != nil {
		return tools.Result{}, err
	}
	span.ranIn(sb.Ref().Provider)
	out, err = tools.Execute(tools.WithReadOnlyRoots(ctx, run.ReadOnlyRoots), sb, name, input)
	if err != nil {
		return tools.Result{}, err
	}
	return spillLarge(ctx, sb, useEventID, out)
}

// useTool announces a tool use (event typ under key) and runs it at most
// once: a result journaled earlier (by a previous attempt, or a client's
// denial) is returned as is; an always_ask use the client has not
// approved is returned as asked (the session parks); otherwise the start
// is journaled first, so that a worker dying mid-call makes the retry
// report the call as ambiguous instead of running it a second time. (An
// attempt given up mid-call while its worker lives leaves the call
// running for the next attempt: see Calls.)
func (c *Core) useTool(ctx context.Context, run *Run, use NewEvent, policy, name string,
	exec func(ctx context.Context, useEventID string) (tools.Result, error)) (r *tools.Result, useEventID string, asked bool, err error) {
	useEventID, r, err = c.announce(ctx, run, use)
	if err != nil || r != nil {
		return r, useEventID, false, err
	}
	if policy == AlwaysAsk && !run.Approved[useEventID] {
		return nil, useEventID, true, nil
	}
	first, err := c.Store.MarkStarted(ctx, useEventID+startedSuffix)
	if err != nil {
		return nil, "", false, err
	}
	if first {
		// The call may outlive this function: it uses its own copy of the id.
		id := useEventID
		stored, err := c.Calls.run(ctx, id, func(ctx context.Context) (tools.Result, error) {
			out, err := exec(ctx, id)
			if err != nil {
				return out, err
			}
			// A result the tool produced is recorded even if the run was
			// cancelled meanwhile: losing it would make the next attempt
			// report the call ambiguous. The store's own retry budget
			// bounds the wait.
			return c.Store.RecordToolResult(context.WithoutCancel(ctx), id, out)
		})
		if err != nil {
			return nil, "", false, err
		}
		return &stored, useEventID, false, nil
	}
	// An earlier attempt started the call: this process may still be
	// running it, or have finished it since the journal was read.
	stored, running, err := c.Calls.takeOver(ctx, useEventID)
	if err != nil {
		return nil, "", false, err
	}
	if running {
		return &stored, useEventID, false, nil
	}
	if r, done, err := c.Store.ToolResult(ctx, useEventID); err != nil || done {
		return r, useEventID, false, err
	}
	// Its attempt died with it: nobody knows whether it ran.
	if stored, err = c.Store.RecordToolResult(context.WithoutCancel(ctx), useEventID, ambiguous(name)); err != nil {
		return nil, "", false, err
	}
	return &stored, useEventID, false, nil
}

// announce commits tool use event use before the call runs, after the
// round's pending events (the previous tool's result), and returns its
// id and the result journaled for it earlier, if any. A use committed
// with its model message in this run (the usual case) is not committed
// again.
func (c *Core) announce(ctx context.Context, run *Run, use NewEvent) (useEventID string, r *tools.Result, err error) {
	if err := c.flush(ctx, run); err != nil {
		return "", nil, err
	}
	useEventID, fresh := run.fresh[use.Key]
	if fresh {
		return useEventID, nil, nil
	}
	useEventID, existed, err := c.Store.AppendEvent(ctx, use)
	if err != nil || !existed {
		// A use appended just now cannot have a result: the journal is
		// keyed by its id.
		return useEventID, nil, err
	}
	// A retry, or a resumed turn: the call may have a result (an earlier
	// attempt's, or the client's denial).
	r, done, err := c.Store.ToolResult(ctx, useEventID)
	if err != nil || !done {
		return useEventID, nil, err
	}
	return useEventID, r, nil
}

// awaitState is how a self-hosted built-in tool call stands after
// awaitTool.
type awaitState int

const (
	awaitAnswered awaitState = iota // the client's worker (or the timeout) answered it
	awaitAsked                      // always_ask, not approved yet: the session parks
	awaitDenied                     // the client denied it: no answer event exists
)

// awaitTool announces a built-in tool use of a self-hosted session and
// waits for the answer of the client's worker (run.ToolResults), which
// it journals. A result journaled earlier is an earlier attempt's answer,
// or, for an always_ask call the client did not approve, its denial. No
// start is journaled (as useTool does): the answer is durable in the
// session's log, so a retry waits for it again, never reports the call
// ambiguous.
func (c *Core) awaitTool(ctx context.Context, run *Run, use NewEvent, policy string) (*tools.Result, string, awaitState, error) {
	useEventID, r, err := c.announce(ctx, run, use)
	if err != nil {
		return nil, "", awaitAnswered, err
	}
	unapproved := policy == AlwaysAsk && !run.Approved[useEventID]
	switch {
	case r != nil && unapproved:
		return r, useEventID, awaitDenied, nil
	case r != nil:
		return r, useEventID, awaitAnswered, nil
	case unapproved:
		return nil, useEventID, awaitAsked, nil
	}
	out, err := run.ToolResults.Await(ctx, useEventID)
	if err != nil {
		return nil, "", awaitAnswered, fmt.Errorf("await self-hosted result of %s: %w", useEventID, err)
	}
	// The session has no sandbox to spill a large result to.
	stored, err := c.Store.RecordToolResult(context.WithoutCancel(ctx), useEventID, cutLarge(out))
	if err != nil {
		return nil, "", awaitAnswered, err
	}
	return &stored, useEventID, awaitAnswered, nil
}

// useEvent is the event announcing tool use u of model message key, for
// the tools the runtime runs itself (built-ins and MCP tools); false for
// custom tools and tools the agent does not have.
func (r *Run) useEvent(key string, u model.Block) (NewEvent, bool) {
	var input any
	_ = json.Unmarshal(u.Input, &input)
	if input == nil {
		input = map[string]any{}
	}
	if r.Tools == nil {
		return NewEvent{}, false
	}
	if _, custom := r.Tools.Custom[u.Name]; custom {
		return NewEvent{}, false
	}
	if t, ok := r.mcpTool(u.Name); ok {
		return NewEvent{Key: key + "/mcp_tool_use/" + u.ID, Type: "agent.mcp_tool_use", Body: map[string]any{"name": t.name,
			"mcp_server_name": t.server, "input": input, "evaluated_permission": evaluated(t.setting.Policy)}}, true
	}
	policy, builtin := r.Tools.Builtins[u.Name]
	if r.Coordinator != nil && r.Coordinator.Has(u.Name) {
		policy, builtin = AlwaysAllow, true
	}
	if !builtin {
		return NewEvent{}, false
	}
	return NewEvent{Key: key + "/tool_use/" + u.ID, Type: "agent.tool_use", Body: map[string]any{"name": u.Name,
		"input": input, "evaluated_permission": evaluated(policy)}}, true
}

// mcpTool returns the MCP tool offered under a model-facing name.
func (r *Run) mcpTool(name string) (*mcpTool, bool) {
	if r.mcp == nil {
		return nil, false
	}
	t, ok := r.mcp.byName[name]
	return t, ok
}

// mcpResult calls an MCP tool; a result too large for the model goes to a
// file in the sandbox when the session has one, else it is cut.
func (c *Core) mcpResult(ctx context.Context, run *Run, t *mcpTool, useEventID string, input json.RawMessage) (tools.Result, error) {
	mctx, span := c.mcpSpan(ctx, t, input)
	out, err := c.callMCP(mctx, run, t, useEventID, input)
	span.end(out, err)
	if err != nil || len([]rune(out.Content)) <= MaxToolResultChars {
		return out, err
	}
	if run.hasSandbox() {
		sb, err := c.sandbox(ctx, run)
		if err != nil {
			return tools.Result{}, err
		}
		return spillLarge(ctx, sb, useEventID, out)
	}
	return cutLarge(out), nil
}

// hasSandbox reports whether the session has a sandbox: it has built-in
// tools and they run in Mango (not on a self-hosted environment's worker).
func (r *Run) hasSandbox() bool {
	return r.Sandbox != nil && r.ToolResults == nil && r.Tools != nil && r.Tools.NeedsSandbox()
}

// cutLarge cuts a result's text too large for the model, for a session
// without a sandbox to spill it to.
func cutLarge(r tools.Result) tools.Result {
	total := len([]rune(r.Content))
	if total <= MaxToolResultChars {
		return r
	}
	r.Content = fmt.Sprintf("%s\n\n[The result was cut at %d of %d characters.]", string([]rune(r.Content)[:MaxToolResultChars]), MaxToolResultChars, total)
	return r
}

func evaluated(policy string) string {
	if policy == AlwaysAsk {
		return "ask"
	}
	return "allow"
}

func toolResultBlock(toolUseID string, r tools.Result) model.Block {
	if len(r.Blocks) > 0 {
		return model.Block{Type: "tool_result", ToolUseID: toolUseID, Content: r.Blocks, IsError: r.IsError}
	}
	content, _ := json.Marshal([]textBlock{{Type: "text", Text: r.Content}})
	return model.Block{Type: "tool_result", ToolUseID: toolUseID, Content: content, IsError: r.IsError}
}

// Answer interprets a client's response to a required action. For a
// custom tool result or a denial it returns the tool result to journal
// (under the answered event's id) and true; an approval returns false and
// approved=true: the tool runs when the turn resumes.
func Answer(eventType string, body json.RawMessage) (r tools.Result, journal, approved bool, err error) {
	switch eventType {
	case "user.tool_confirmation":
		var in struct {
			Result      string `json:"result"`
			DenyMessage string `json:"deny_message"`
		}
		if err := json.Unmarshal(body, &in); err != nil {
			return r, false, false, err
		}
		if in.Result == "allow" {
			return r, false, true, nil
		}
		msg := "The user denied this tool call."
		if in.DenyMessage != "" {
			msg += " " + in.DenyMessage
		}
		return tools.Result{Content: msg, IsError: true}, true, false, nil
	case "user.custom_tool_result":
		var in struct {
			Content json.RawMessage `json:"content"`
			IsError bool            `json:"is_error"`
		}
		if err := json.Unmarshal(body, &in); err != nil {
			return r, false, false, err
		}
		r, err = ContentResult(in.Content, in.IsError)
		return r, err == nil, false, err
	}
	return r, false, false, nil
}

// ContentResult is the tool result a client's answer carries: content,
// its content blocks as a JSON array (absent or null: none), and isError.
// Text blocks are joined into Content; when other blocks (images,
// documents) are present, the model gets all blocks as sent.
func ContentResult(content json.RawMessage, isError bool) (tools.Result, error) {
	var raws []json.RawMessage
	if len(content) > 0 {
		if err := json.Unmarshal(content, &raws); err != nil {
			return tools.Result{}, fmt.Errorf("decode result content: %w", err)
		}
	}
	var parts []string
	blocks := false
	for _, raw := range raws {
		var b textBlock
		if err := json.Unmarshal(raw, &b); err != nil {
			return tools.Result{}, fmt.Errorf("decode result content block: %w", err)
		}
		if b.Type == "text" || b.Type == "" {
			parts = append(parts, b.Text)
		} else {
			blocks = true
		}
	}
	r := tools.Result{Content: strings.Join(parts, "\n"), IsError: isError}
	if blocks {
		// Images go to the model as sent, beside the text blocks.
		var err error
		if r.Blocks, err = json.Marshal(raws); err != nil {
			return tools.Result{}, err
		}
	}
	return r, nil
}

// MaxRoundsOrDefault returns the round cap in force.
func (c *Core) MaxRoundsOrDefault() int { return c.maxRounds() }

// startedSuffix marks the journal entry written before a tool runs.
const startedSuffix = "/started"

func ambiguous(tool string) tools.Result {
	return tools.Result{IsError: true, Content: fmt.Sprintf("The %s call was interrupted by a worker failure: it may or may not have "+
		"completed, and it was not run again. Check its effects before retrying.", tool)}
}

// MaxToolResultChars is the largest tool result sent to the model whole;
// larger ones are written to a file in the sandbox and the model gets a
// preview and the file's path.
const MaxToolResultChars = 100_000

const previewChars = 2_000

func spillLarge(ctx context.Context, sb sandbox.Sandbox, id string, r tools.Result) (tools.Result, error) {
	if len([]rune(r.Content)) <= MaxToolResultChars {
		return r, nil
	}
	path := ".mango/tool-results/" + id + ".txt"
	if err := sb.WriteFile(ctx, path, []byte(r.Content), 0o600); err != nil {
		return r, fmt.Errorf("write large tool result: %w", err)
	}
	preview := []rune(r.Content)[:previewChars]
	r.Content = fmt.Sprintf("%s\n\n[The full result (%d characters) is too large to show; it was saved to %s in the workspace. "+
		"Use read with view_range, or grep, to inspect it.]", string(preview), len([]rune(r.Content)), path)
	return r, nil
}
