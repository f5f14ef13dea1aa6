// Package modelfake is the offline, deterministic model: the default model
// of Mango and of its tests. It never touches the network.
//
// The fake answers from a script written in the conversation itself: lines
// starting with a '#' directive in the last plain-text user message (see
// docs/fake-model.md for the language and examples). Without directives it
// echoes the user text as "You said: <text>".
//
// # Which message holds the script
//
// The script message is the last user message that has a text block (a
// message of tool results has none). Its text blocks are joined by
// newlines. The assistant messages after it that contain a tool_use block are the tool rounds
// already taken; their count decides what comes next, so a multi-round
// script advances as the caller feeds tool results back.
//
// # Determinism
//
// The same request always gets the same response: message ids, tool_use ids
// ("toolu_fake_<hash>") and thinking signatures are derived from a SHA-256
// of the request, and usage is computed from text lengths. Nothing depends
// on time or randomness; #slow only changes how fast Stream delivers (and
// how long a #grade answer takes).
//
// The one piece of state is the counter behind "#error <kind> <times>": a
// small mutex-protected map from a hash of the conversation up to and
// including the script message to the number of calls seen, so that the
// first <times> calls of that conversation fail and later ones (retries,
// later rounds) succeed. Two conversations with identical messages share a
// counter. The map is cleared when it reaches 4096 entries.
package modelfake

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/mangohq/mango/execution-worker/model"
)

// DefaultModel is the model id reported when the request names none.
const DefaultModel = "mango-fake"

// maxCounters bounds the #error counter map.
const maxCounters = 4096

// resultPreview is how many characters of a tool result the final reply
// quotes.
const resultPreview = 200

// LoopCommand is the bash input #loop sends every round.
const LoopCommand = `{"command":"echo loop"}`

// Client is the fake model client. The zero value is not usable; call New.
type Client struct {
	mu       sync.Mutex
	calls    map[string]int // #error counters, by conversation hash
	observer func(Call)
}

// Call is one answered request, as an observer sees it.
type Call struct {
	// Request is the request as received. Observers must not modify it.
	Request *model.Request
	// EstimatedInputTokens is the fake's size estimate of the request
	// (EstimateInputTokens), whatever #usage reports.
	EstimatedInputTokens int64
	// Response is the answer returned.
	Response *model.Response
}

// SetObserver makes fn see every successful call, synchronously, before
// the call returns; nil removes it. Tests use it to record what was sent.
func (c *Client) SetObserver(fn func(Call)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.observer = fn
}

// EstimateInputTokens is the fake's default input_tokens for req: the
// bytes of the system prompt and of every message's text, thinking, tool
// inputs, tool results and raw blocks, divided by 4 (rounded down), at
// least 1. Tool definitions are not counted.
func EstimateInputTokens(req *model.Request) int64 {
	return tokens(requestSize(req))
}

// New returns a fake model client.
func New() *Client {
	return &Client{calls: make(map[string]int)}
}

// Create answers req according to its script.
func (c *Client) Create(ctx context.Context, req *model.Request) (*model.Response, error) {
	return c.respond(ctx, req, nil)
}

// Stream answers like Create, reporting each block's start and the text of
// text blocks word by word, pausing between words as #slow asks.
func (c *Client) Stream(ctx context.Context, req *model.Request, onEvent func(model.StreamEvent)) (*model.Response, error) {
	return c.respond(ctx, req, onEvent)
}

func (c *Client) respond(ctx context.Context, req *model.Request, onEvent func(model.StreamEvent)) (*model.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("modelfake: %w", err)
	}
	if req == nil {
		return nil, invalid("request is nil")
	}
	idx := scriptIndex(req.Messages)
	if idx < 0 {
		return nil, invalid("messages: no user message with text")
	}
	sc, err := parseScript(userText(req.Messages[idx]))
	if err != nil {
		return nil, invalid("script: " + err.Error())
	}
	if sc.fail != nil && c.fails(req.Messages[:idx+1], sc.fail) {
		return nil, sc.fail.modelError()
	}

	reqHash := hashRequest(req)
	rounds := toolRounds(req.Messages[idx+1:])
	var content []model.Block
	var stop string
	if sc.grade != nil {
		tool, err := gradeTool(req)
		if err != nil {
			return nil, invalid("#grade: " + err.Error())
		}
		if err := wait(ctx, sc.slow); err != nil {
			return nil, err
		}
		content = []model.Block{{Type: "tool_use", ID: toolUseID(reqHash, 0), Name: tool, Input: sc.grade.verdict(sc.text)}}
		stop = "tool_use"
	} else {
		content, stop = answer(sc, req.Messages, reqHash, rounds)
	}

	modelID := req.Model
	if modelID == "" {
		modelID = DefaultModel
	}
	resp := &model.Response{
		ID:         "msg_fake_" + reqHash,
		Model:      modelID,
		Content:    content,
		StopReason: stop,
		Usage: model.Usage{
			InputTokens:  EstimateInputTokens(req),
			OutputTokens: tokens(blocksSize(content)),
		},
	}
	if n := len(sc.usage); n > 0 {
		sc.usage[min(rounds, n-1)].apply(&resp.Usage)
	}
	if onEvent != nil {
		if err := emit(ctx, resp.Content, sc.slow, onEvent); err != nil {
			return nil, err
		}
	}
	c.mu.Lock()
	observer := c.observer
	c.mu.Unlock()
	if observer != nil {
		observer(Call{Request: req, EstimatedInputTokens: EstimateInputTokens(req), Response: resp})
	}
	return resp, nil
}

// answer is the content and stop reason of a scripted answer other than
// #grade, after rounds tool rounds of the conversation msgs.
func answer(sc *script, msgs []model.Message, reqHash string, rounds int) ([]model.Block, string) {
	var content []model.Block
	if sc.think != "" {
		content = append(content, model.Block{
			Type:      "thinking",
			Thinking:  sc.think,
			Signature: "fakesig_" + hashString(sc.think),
		})
	}
	var calls []toolCall
	switch {
	case sc.loop:
		calls = []toolCall{{name: "bash", input: json.RawMessage(LoopCommand)}}
	case sc.parallel:
		if rounds == 0 {
			calls = sc.tools
		}
	case rounds < len(sc.tools):
		calls = sc.tools[rounds : rounds+1]
	}
	stop := "tool_use"
	for i, call := range calls {
		content = append(content, model.Block{
			Type:  "tool_use",
			ID:    toolUseID(reqHash, i),
			Name:  call.name,
			Input: call.input,
		})
	}
	if len(calls) == 0 {
		content = append(content, model.Block{Type: "text", Text: finalReply(sc, msgs)})
		stop = "end_turn"
		if sc.stop != "" {
			stop = sc.stop
		}
	}
	return content, stop
}

// gradeTool is the tool a #grade answer calls: the one req.ToolChoice
// names, else the request's only tool. It must be one of the request's
// tools.
func gradeTool(req *model.Request) (string, error) {
	tc := req.ToolChoice
	if tc != nil && tc.Type == "none" {
		return "", fmt.Errorf("tool_choice is none, the verdict needs a tool call")
	}
	if tc != nil && tc.Name != "" {
		for _, t := range req.Tools {
			if t.Name == tc.Name {
				return t.Name, nil
			}
		}
		return "", fmt.Errorf("tool_choice names %q, which is not among the request's tools", tc.Name)
	}
	if len(req.Tools) != 1 {
		return "", fmt.Errorf("no tool_choice name and %d tools: name the verdict's tool in tool_choice or declare exactly one", len(req.Tools))
	}
	return req.Tools[0].Name, nil
}

// toolUseID is the id of the i-th tool_use block of the answer to the
// request hashed as reqHash.
func toolUseID(reqHash string, i int) string {
	return "toolu_fake_" + hashString(fmt.Sprintf("%s/%d", reqHash, i))
}

// wait pauses d, or until ctx is done.
func wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("modelfake: %w", ctx.Err())
	case <-t.C:
		return nil
	}
}

// fails counts a call of the conversation msgs and reports whether f makes
// it fail.
func (c *Client) fails(msgs []model.Message, f *failure) bool {
	if f.times == 0 {
		return true
	}
	key := hashJSON(msgs)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.calls) >= maxCounters {
		clear(c.calls)
	}
	c.calls[key]++
	return c.calls[key] <= f.times
}

// emit streams content as events, pausing slow between text deltas.
func emit(ctx context.Context, content []model.Block, slow time.Duration, onEvent func(model.StreamEvent)) error {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for i, b := range content {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("modelfake: %w", err)
		}
		onEvent(model.StreamEvent{Type: "block_start", Index: i, BlockType: b.Type})
		if b.Type != "text" {
			continue
		}
		for j, w := range words(b.Text) {
			if j > 0 && slow > 0 {
				if timer == nil {
					timer = time.NewTimer(slow)
				} else {
					timer.Reset(slow)
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("modelfake: %w", ctx.Err())
				case <-timer.C:
				}
			} else if err := ctx.Err(); err != nil {
				return fmt.Errorf("modelfake: %w", err)
			}
			onEvent(model.StreamEvent{Type: "text_delta", Index: i, Text: w})
		}
	}
	return nil
}

// words splits s into pieces that concatenate back to s, each a word with
// the whitespace before it.
func words(s string) []string {
	var out []string
	start := 0
	prevSpace := false
	for i, r := range s {
		space := unicode.IsSpace(r)
		if space && !prevSpace && i > start {
			out = append(out, s[start:i])
			start = i
		}
		prevSpace = space
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// finalReply is the text of the answer that ends the turn.
func finalReply(sc *script, msgs []model.Message) string {
	if sc.echoBlocks {
		return echoBlocks(msgs)
	}
	if sc.hasReply {
		return sc.reply
	}
	if len(sc.tools) > 0 {
		if s := resultSummary(msgs); s != "" {
			return s
		}
	}
	return "You said: " + sc.text
}

// resultSummary describes the tool results of the last message, one line
// per result, naming each tool by the tool_use it answers.
func resultSummary(msgs []model.Message) string {
	if len(msgs) < 2 {
		return ""
	}
	last := msgs[len(msgs)-1]
	names := map[string]string{}
	for _, b := range msgs[len(msgs)-2].Content {
		if b.Type == "tool_use" {
			names[b.ID] = b.Name
		}
	}
	var lines []string
	for _, b := range last.Content {
		if b.Type != "tool_result" {
			continue
		}
		name := names[b.ToolUseID]
		if name == "" {
			name = b.ToolUseID
		}
		verb := "returned"
		if b.IsError {
			verb = "returned an error"
		}
		lines = append(lines, fmt.Sprintf("Tool %s %s: %s", name, verb, truncate(model.ResultText(b.Content), resultPreview)))
	}
	return strings.Join(lines, "\n")
}

// truncate cuts s to at most n characters.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i := 0
	for k := range s {
		if i == n {
			return s[:k]
		}
		i++
	}
	return s
}

// scriptIndex is the index of the last user message with a text block, or
// -1. (A message of tool results has none; a user's message may begin with
// the results of calls its turn left unanswered.)
func scriptIndex(msgs []model.Message) int {
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		if m.Role != "user" {
			continue
		}
		for _, b := range m.Content {
			if b.Type == "text" {
				return i
			}
		}
	}
	return -1
}

func userText(m model.Message) string {
	var parts []string
	for _, b := range m.Content {
		if b.Type == "text" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// toolRounds counts the assistant messages holding a tool_use block.
func toolRounds(msgs []model.Message) int {
	n := 0
	for _, m := range msgs {
		if m.Role != "assistant" {
			continue
		}
		for _, b := range m.Content {
			if b.Type == "tool_use" {
				n++
				break
			}
		}
	}
	return n
}

// tokens estimates tokens as a quarter of the bytes, at least 1.
func tokens(size int) int64 {
	return int64(max(size/4, 1))
}

func requestSize(req *model.Request) int {
	n := len(req.System)
	for _, m := range req.Messages {
		n += blocksSize(m.Content)
	}
	return n
}

func blocksSize(blocks []model.Block) int {
	n := 0
	for _, b := range blocks {
		n += len(b.Text) + len(b.Thinking) + len(b.Input) + len(b.Content) + len(b.Raw)
	}
	return n
}

func invalid(msg string) *model.Error {
	return &model.Error{Status: 400, Type: "invalid_request_error", Message: "fake: " + msg}
}

func hashJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		// Unreachable for model types; fall back to the formatted value.
		b = fmt.Appendf(nil, "%#v", v)
	}
	return hashBytes(b)
}

// hashRequest hashes the model, system prompt, messages, tools and tool
// choice of req: every field length-prefixed, so distinct requests hash
// apart, without encoding the (possibly large) request, or its tool
// definitions, as JSON. Without a tool choice nothing is added for it, so
// such requests keep the ids they had before tool choices existed.
func hashRequest(req *model.Request) string {
	w := fieldHash{h: sha256.New(), buf: make([]byte, 0, 4096)}
	w.str(req.Model)
	w.str(req.System)
	w.num(len(req.Messages))
	for _, m := range req.Messages {
		w.str(m.Role)
		w.num(len(m.Content))
		for _, b := range m.Content {
			for _, f := range [...]string{b.Type, b.Text, b.Thinking, b.Signature, b.ID, b.Name, b.ToolUseID} {
				w.str(f)
			}
			w.bytes(b.Input)
			w.bytes(b.Content)
			w.bytes(b.Raw)
			if b.IsError {
				w.num(1)
			} else {
				w.num(0)
			}
		}
	}
	w.num(len(req.Tools))
	for _, t := range req.Tools {
		w.str(t.Name)
		w.str(t.Description)
		w.bytes(t.InputSchema)
		w.str(t.Type)
		w.bytes(t.Raw)
	}
	if tc := req.ToolChoice; tc != nil {
		w.str(tc.Type)
		w.str(tc.Name)
	}
	return w.sum()
}

// fieldHash hashes length-prefixed fields through one buffer: no copy
// per field.
type fieldHash struct {
	h   hash.Hash
	buf []byte
}

func (w *fieldHash) num(v int) {
	w.room(8)
	w.buf = binary.BigEndian.AppendUint64(w.buf, uint64(v))
}

func (w *fieldHash) str(s string) {
	w.num(len(s))
	if w.room(len(s)) {
		w.buf = append(w.buf, s...)
	} else {
		io.WriteString(w.h, s) //nolint:errcheck // a hash never fails to write
	}
}

func (w *fieldHash) bytes(b []byte) {
	w.num(len(b))
	if w.room(len(b)) {
		w.buf = append(w.buf, b...)
	} else {
		w.h.Write(b)
	}
}

// room makes room for n bytes in the buffer, if they can fit in it,
// writing what it holds to the hash.
func (w *fieldHash) room(n int) bool {
	if len(w.buf)+n > cap(w.buf) {
		w.h.Write(w.buf)
		w.buf = w.buf[:0]
	}
	return n <= cap(w.buf)
}

func (w *fieldHash) sum() string {
	w.h.Write(w.buf)
	sum := w.h.Sum(nil)
	return hex.EncodeToString(sum[:12])
}

func hashString(s string) string { return hashBytes([]byte(s)) }

func hashBytes(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12])
}

var _ model.Client = (*Client)(nil)
