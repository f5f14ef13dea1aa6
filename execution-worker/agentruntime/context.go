package agentruntime

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/mangohq/mango/execution-worker/model"
)

// Context-window management, model-agnostic.
//
// The model sees a projection of the conversation: the latest context
// snapshot's messages (which replace the first Covered messages of the
// lossless transcript) followed by the transcript messages after them.
// Before each model request the request's size is estimated from the last
// provider usage (the anchor: the prompt tokens the last response reported
// for the prefix it was sent) plus an estimate of what was added since.
// When the estimate passes the threshold, older turns are compacted in two
// stages: large old tool results are replaced by a stub naming the file
// they were spilled to in the sandbox, then, if that is not enough, the
// oldest turns are summarized by a model call. The result is stored as an
// immutable snapshot under a deterministic key before it is used, so a
// retried or resumed turn continues from exactly that projection. The
// transcript itself is never changed.

// ContextProfile is a model's context window and output limit, in tokens.
type ContextProfile struct {
	Window    int
	MaxOutput int
}

// DefaultContextProfile is assumed for models not in the table: smaller
// than every current Claude model's window, so an unknown model is
// compacted early rather than refused by the provider.
var DefaultContextProfile = ContextProfile{Window: 100_000, MaxOutput: 8_192}

// contextProfiles are the known models by id prefix (the longest match
// wins, so dated ids and aliases share an entry).
var contextProfiles = map[string]ContextProfile{
	"claude-opus-4":     {Window: 200_000, MaxOutput: 32_000},
	"claude-opus-4-5":   {Window: 200_000, MaxOutput: 64_000},
	"claude-sonnet-4":   {Window: 200_000, MaxOutput: 64_000},
	"claude-haiku-4-5":  {Window: 200_000, MaxOutput: 64_000},
	"claude-3-7-sonnet": {Window: 200_000, MaxOutput: 64_000},
	"claude-3-5-sonnet": {Window: 200_000, MaxOutput: 8_192},
	"claude-3-5-haiku":  {Window: 200_000, MaxOutput: 8_192},
	"claude-3-haiku":    {Window: 200_000, MaxOutput: 4_096},
}

// ProfileFor returns the context profile of a model id.
func ProfileFor(modelID string) ContextProfile {
	best, bestLen := DefaultContextProfile, 0
	for prefix, p := range contextProfiles {
		if strings.HasPrefix(modelID, prefix) && len(prefix) > bestLen {
			best, bestLen = p, len(prefix)
		}
	}
	return best
}

// ContextConfig tunes context management; the zero value uses the model's
// profile and the defaults.
type ContextConfig struct {
	// Window overrides the profile's window (MANGO_MODEL_CONTEXT_WINDOW).
	Window int
	// Threshold is the fraction of the window past which a request is
	// compacted first (default 0.8).
	Threshold float64
	// CompactionModel is the model that writes summaries
	// (MANGO_COMPACTION_MODEL); empty: the request's model.
	CompactionModel string
}

// DefaultContextThreshold is the default compaction threshold.
const DefaultContextThreshold = 0.8

// compactionTarget is the fraction of the window a compaction aims for, so
// that it is not needed again at the next request.
const compactionTarget = 0.5

// StubMinBytes is the size from which an old tool result is replaced by a
// stub when compacting.
const StubMinBytes = 4_096

// Anchor is what the provider measured of one request: the prompt tokens
// (input, cache read and cache creation) of the request that produced the
// assistant message at Index of the conversation, under the snapshot Key.
type Anchor struct {
	Index        int    `json:"-"`
	PromptTokens int64  `json:"prompt_tokens"`
	Snapshot     string `json:"snapshot"`
}

// ContextSnapshot is a stored compacted projection: Messages replace the
// first Covered messages of the conversation.
type ContextSnapshot struct {
	Key      string          `json:"key"`
	Covered  int             `json:"covered"`
	Messages []model.Message `json:"messages"`
}

// ContextStore stores context snapshots. A Store that implements it gets
// compaction; without it requests over the window end the turn.
type ContextStore interface {
	// SaveContextSnapshot stores snap unless a snapshot with its key
	// exists (the first write wins), commits events in the same
	// transaction, and returns the stored snapshot.
	SaveContextSnapshot(ctx context.Context, snap *ContextSnapshot, events []NewEvent) (*ContextSnapshot, error)
}

// ContextWindowError reports a request that does not fit the window even
// after compaction.
type ContextWindowError struct {
	Estimated, Limit int
}

func (e *ContextWindowError) Error() string {
	return fmt.Sprintf("the conversation needs about %d input tokens after compaction, more than the %d the model's context window leaves for input; "+
		"the turn was ended (start a new session, or send shorter input)", e.Estimated, e.Limit)
}

// estimateTokens estimates the tokens of size bytes of JSON: a quarter,
// rounded up.
func estimateTokens(size int) int { return (size + 3) / 4 }

func jsonSize(v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return 0
	}
	return len(b)
}

// project is the model-facing conversation of conv under snap.
func project(snap *ContextSnapshot, conv []model.Message) []model.Message {
	if snap == nil || snap.Covered > len(conv) {
		return conv
	}
	out := make([]model.Message, 0, len(snap.Messages)+len(conv)-snap.Covered)
	out = append(out, snap.Messages...)
	return append(out, conv[snap.Covered:]...)
}

func snapKey(snap *ContextSnapshot) string {
	if snap == nil {
		return ""
	}
	return snap.Key
}

// window returns the window and the input limit of req.
func (c *Core) window(req *model.Request) (window, limit, threshold int) {
	window = c.Context.Window
	if window <= 0 {
		window = ProfileFor(req.Model).Window
	}
	frac := c.Context.Threshold
	if frac <= 0 || frac > 1 {
		frac = DefaultContextThreshold
	}
	limit = window - req.MaxTokens
	threshold = min(int(frac*float64(window)), limit)
	return window, limit, threshold
}

// estimate is the estimated input tokens of req, whose messages are the
// projection of conv under the snapshot in force: the anchor's count plus
// the messages since, or the whole request when the anchor does not apply.
//
// An anchor larger than the window cannot be a provider's measure of a
// request that fit it (a scripted fake, or a window configured below the
// model's): it is ignored.
func estimate(req *model.Request, conv []model.Message, snap *ContextSnapshot, anchor *Anchor, window int) int {
	if anchor != nil && anchor.Snapshot == snapKey(snap) && anchor.Index <= len(conv) && anchor.Index >= 0 &&
		(snap == nil || snap.Covered <= anchor.Index) && anchor.PromptTokens <= int64(window) {
		tail := conv[anchor.Index:]
		return int(anchor.PromptTokens) + messagesTokens(jsonSize(tail), tail)
	}
	return messagesTokens(jsonSize(struct {
		System   string          `json:"system"`
		Messages []model.Message `json:"messages"`
		Tools    []model.ToolDef `json:"tools"`
	}{req.System, req.Messages, req.Tools}), req.Messages)
}

// Token costs of media blocks, which the model does not read as text:
// base64 data is not counted by its length. An image costs at most about
// (1568 px)²/750 tokens; a PDF page about 1,500 to 3,000 (text and image).
const (
	imageTokens        = 1600
	pdfTokensPerKiB    = 20 // about 2,000 tokens per 100 KiB page
	minDocumentTokens  = 1600
	base64BytesPerByte = 4.0 / 3
)

// messagesTokens estimates the tokens of size bytes of JSON holding msgs:
// text at four bytes a token, media blocks at their own cost.
func messagesTokens(size int, msgs []model.Message) int {
	removed, extra := 0, 0
	for _, m := range msgs {
		for _, b := range m.Content {
			r, e := mediaCost(b.Raw)
			if b.Type == "tool_result" && len(b.Content) > 0 && b.Content[0] == '[' {
				var inner []json.RawMessage
				if json.Unmarshal(b.Content, &inner) == nil {
					for _, raw := range inner {
						ri, ei := mediaCost(raw)
						r, e = r+ri, e+ei
					}
				}
			}
			removed, extra = removed+r, extra+e
		}
	}
	return estimateTokens(max(size-removed, 0)) + extra
}

// mediaCost returns the base64 bytes of an image or document block (left
// out of the text estimate) and the tokens it costs instead.
func mediaCost(raw json.RawMessage) (removed, tokens int) {
	if len(raw) == 0 || (!bytes.Contains(raw, []byte(`"image"`)) && !bytes.Contains(raw, []byte(`"document"`))) {
		return 0, 0
	}
	var b struct {
		Type   string `json:"type"`
		Source struct {
			Type string `json:"type"`
			Data string `json:"data"`
		} `json:"source"`
	}
	if json.Unmarshal(raw, &b) != nil || b.Source.Type != "base64" {
		return 0, 0
	}
	n := len(b.Source.Data)
	switch b.Type {
	case "image":
		return n, imageTokens
	case "document":
		decodedKiB := int(float64(n)/base64BytesPerByte) / 1024
		return n, max(minDocumentTokens, decodedKiB*pdfTokensPerKiB)
	}
	return 0, 0
}

// fit returns the request for the next model call of conv (whose last
// unsaved messages are not stored yet), compacting the projection first
// when it passes the threshold. It returns a *ContextWindowError when the
// request cannot fit.
func (c *Core) fit(ctx context.Context, run *Run, conv []model.Message, unsaved int) (*model.Request, error) {
	req := c.request(run, project(run.Snapshot, conv))
	window, limit, threshold := c.window(req)
	est := estimate(req, conv, run.Snapshot, run.Anchor, window)
	if est <= threshold {
		return req, nil
	}
	cs, ok := c.Store.(ContextStore)
	// The newest message stays out of the snapshot, and so do messages
	// not stored yet.
	covered := len(conv) - max(unsaved, 1)
	if ok && covered > 0 && (run.Snapshot == nil || run.Snapshot.Covered < covered) {
		snap, err := c.compact(ctx, run, cs, conv, covered, req)
		if err != nil {
			return nil, err
		}
		if snap != nil {
			run.Snapshot = snap
			req = c.request(run, project(snap, conv))
			est = estimate(req, conv, snap, nil, window)
		}
	}
	if est > limit {
		return nil, &ContextWindowError{Estimated: est, Limit: limit}
	}
	return req, nil
}

// compact builds, stores and returns the snapshot covering conv[:covered],
// or nil when there is nothing to compact.
func (c *Core) compact(ctx context.Context, run *Run, cs ContextStore, conv []model.Message, covered int, req *model.Request) (*ContextSnapshot, error) {
	window, _, _ := c.window(req)
	target := int(compactionTarget * float64(window))
	prev := run.Snapshot
	var head []model.Message
	if prev != nil && prev.Covered <= covered {
		head = append(head, prev.Messages...)
		head = append(head, conv[prev.Covered:covered]...)
	} else {
		head = append(head, conv[:covered]...)
	}
	tail := conv[covered:]
	key := "context/" + strconv.Itoa(covered)

	// Stage 1: stub large old tool results.
	head, stubbed, err := c.stubResults(ctx, run, head)
	if err != nil {
		return nil, err
	}
	// Sizes by message, so that trying every cut stays linear: the
	// request's JSON is the fixed part plus each message and a comma.
	fixed := jsonSize(struct {
		System   string          `json:"system"`
		Messages []model.Message `json:"messages"`
		Tools    []model.ToolDef `json:"tools"`
	}{req.System, nil, req.Tools})
	msgSize := func(ms []model.Message) int {
		n := 0
		for _, m := range ms {
			n += jsonSize(m) + 1
		}
		return n
	}
	sizes := make([]int, len(head)+1) // sizes[i]: bytes of head[i:]
	for i := len(head) - 1; i >= 0; i-- {
		sizes[i] = sizes[i+1] + jsonSize(head[i]) + 1
	}
	tailSize := msgSize(tail)
	pairSize := msgSize(summaryPair(""))
	var events []NewEvent
	summarized := false
	if estimateTokens(fixed+sizes[0]+tailSize) > target {
		// Stage 2: summarize the oldest turns: cut at the first turn start
		// (a user message with text and no tool result) that brings the
		// request under the target, or at the latest one; the current
		// turn is never summarized.
		// Cutting at len(head) keeps only the tail, when it starts a turn.
		cut := -1
		for i := 1; i <= len(head); i++ {
			next := tail
			if i < len(head) {
				next = head[i:]
			}
			// A cut must summarize more than an earlier summary.
			if len(next) == 0 || !turnStart(next[0]) || (i <= 2 && isSummary(head)) {
				continue
			}
			cut = i
			if estimateTokens(fixed+pairSize+sizes[i]+tailSize) <= target {
				break
			}
		}
		if cut > 0 {
			summary, evs, err := c.summarize(ctx, run, key, head[:cut], window, req.Model)
			if err != nil {
				return nil, err
			}
			events = append(events, evs...)
			head = append(summaryPair(summary), head[cut:]...)
			summarized = true
		}
	}
	if !stubbed && !summarized {
		return nil, nil
	}
	snap := &ContextSnapshot{Key: key, Covered: covered, Messages: head}
	events = append(events, NewEvent{Key: key + "/compacted", Type: "agent.thread_context_compacted", Body: struct{}{}})
	return cs.SaveContextSnapshot(ctx, snap, events)
}

// turnStart reports a user message with text and no tool result.
func turnStart(m model.Message) bool {
	if m.Role != "user" {
		return false
	}
	text := false
	for _, b := range m.Content {
		switch b.Type {
		case "tool_result":
			return false
		case "text":
			text = true
		}
	}
	return text
}

const summaryOpen = "<context_summary>\n"

func isSummary(msgs []model.Message) bool {
	return len(msgs) > 0 && len(msgs[0].Content) > 0 && strings.HasPrefix(msgs[0].Content[0].Text, summaryOpen)
}

// summaryPair is the projection's replacement for summarized turns.
func summaryPair(summary string) []model.Message {
	return []model.Message{
		{Role: "user", Content: []model.Block{{Type: "text", Text: summaryOpen + summary + "\n</context_summary>\n" +
			"Earlier turns of this conversation were summarized above to fit the context window. " +
			"Large tool results were saved to files under " + contextDir + " in the workspace."}}},
		{Role: "assistant", Content: []model.Block{{Type: "text", Text: "Understood. I will continue from this summary."}}},
	}
}

// contextDir holds the tool results compaction spilled.
const contextDir = ".mango/context/"

// stubResults replaces tool results of at least StubMinBytes by a stub,
// spilling each to a file of the sandbox when the session has one.
func (c *Core) stubResults(ctx context.Context, run *Run, msgs []model.Message) ([]model.Message, bool, error) {
	out := make([]model.Message, len(msgs))
	changed := false
	for i, m := range msgs {
		out[i] = m
		var blocks []model.Block
		for j, b := range m.Content {
			if b.Type != "tool_result" || len(b.Content) < StubMinBytes {
				continue
			}
			if blocks == nil {
				blocks = append([]model.Block(nil), m.Content...)
			}
			text := model.ResultText(b.Content)
			path := contextDir + safeName(b.ToolUseID) + ".txt"
			where := "It was saved to " + path + " in the workspace; use read with view_range, or grep, to inspect it."
			if run.hasSandbox() {
				sb, err := c.sandbox(ctx, run)
				if err != nil {
					return nil, false, err
				}
				if err := sb.WriteFile(ctx, path, []byte(text), 0o600); err != nil {
					return nil, false, fmt.Errorf("spill tool result %s: %w", b.ToolUseID, err)
				}
			} else {
				where = "It is no longer available."
			}
			preview := []rune(text)
			if len(preview) > 200 {
				preview = preview[:200]
			}
			stub := fmt.Sprintf("[Tool result of %d characters removed from the context to save space. %s It began: %s]",
				len([]rune(text)), where, string(preview))
			content, _ := json.Marshal([]textBlock{{Type: "text", Text: stub}})
			blocks[j] = model.Block{Type: "tool_result", ToolUseID: b.ToolUseID, Content: content, IsError: b.IsError}
		}
		if blocks != nil {
			out[i] = model.Message{Role: m.Role, Content: blocks}
			changed = true
		}
	}
	return out, changed, nil
}

func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') {
			return r
		}
		return '_'
	}, s)
}

const summarySystem = "You compact conversations for an AI agent that continues working after them. " +
	"Write a concise, factual summary of the conversation you are given: the user's requests, what was done, " +
	"files and commands involved, results, decisions and anything still open. Do not address the user."

const summaryInstruction = "Summarize the conversation above for the agent that continues it."

// summaryBlockChars bounds each block of the rendered conversation.
const summaryBlockChars = 2_000

// summarize asks the compaction model for a summary of msgs, wrapped in
// span events: the start is committed now, the end is returned to be
// committed with the snapshot.
func (c *Core) summarize(ctx context.Context, run *Run, key string, msgs []model.Message, window int, agentModel string) (string, []NewEvent, error) {
	modelID := c.Context.CompactionModel
	if modelID == "" {
		modelID = agentModel
	}
	maxTokens := min(4_096, window/8)
	budget := (window/2 - maxTokens) * 4 // bytes of rendered conversation
	text := renderForSummary(msgs, budget)
	req := &model.Request{Model: modelID, System: summarySystem, MaxTokens: maxTokens, Messages: []model.Message{
		{Role: "user", Content: []model.Block{{Type: "text", Text: "<conversation>\n" + text + "\n</conversation>"}}},
		{Role: "assistant", Content: []model.Block{{Type: "text", Text: "I have read the conversation."}}},
		{Role: "user", Content: []model.Block{{Type: "text", Text: summaryInstruction}}},
	}}
	ids, err := c.commit(ctx, run, nil, []NewEvent{{Key: key + "/span_start", Type: "span.model_request_start", Body: struct{}{}}})
	if err != nil {
		return "", nil, err
	}
	resp, err := c.Model.Create(ctx, req)
	if err != nil {
		endErr := c.endSpan(context.WithoutCancel(ctx), key, ids[0], nil, true)
		return "", nil, fmt.Errorf("compaction summary: %w", joinErr(err, endErr))
	}
	var parts []string
	for _, b := range resp.Content {
		if b.Type == "text" {
			parts = append(parts, b.Text)
		}
	}
	summary := strings.TrimSpace(strings.Join(parts, "\n"))
	if summary == "" {
		summary = "(no summary)"
	}
	return summary, []NewEvent{spanEnd(key, ids[0], &resp.Usage, false)}, nil
}

func joinErr(err, other error) error {
	if other == nil {
		return err
	}
	return fmt.Errorf("%w (closing the span: %v)", err, other)
}

// renderForSummary writes msgs as text, each block cut to
// summaryBlockChars, keeping a leading summary and the newest messages
// within budget bytes.
func renderForSummary(msgs []model.Message, budget int) string {
	var rendered []string
	for _, m := range msgs {
		var sb strings.Builder
		sb.WriteString("[" + m.Role + "]\n")
		for _, b := range m.Content {
			var s string
			switch b.Type {
			case "text":
				s = b.Text
			case "thinking":
				continue
			case "tool_use":
				s = "(tool call " + b.Name + " " + string(b.Input) + ")"
			case "tool_result":
				s = "(tool result) " + model.ResultText(b.Content)
			default:
				s = "(" + b.Type + ")"
			}
			if r := []rune(s); len(r) > summaryBlockChars {
				s = string(r[:summaryBlockChars]) + " [...]"
			}
			sb.WriteString(s + "\n")
		}
		rendered = append(rendered, sb.String())
	}
	total := 0
	keepFirst := isSummary(msgs)
	if keepFirst {
		total = len(rendered[0])
	}
	start := len(rendered)
	for start > 0 && (start > 1 || !keepFirst) && total+len(rendered[start-1]) <= budget {
		start--
		total += len(rendered[start])
	}
	var out []string
	if keepFirst && start > 0 {
		out = append(out, rendered[0])
		if start > 1 {
			out = append(out, "[... older messages omitted ...]\n")
		}
	} else if start > 0 {
		out = append(out, "[... older messages omitted ...]\n")
	}
	out = append(out, rendered[start:]...)
	return strings.Join(out, "")
}
