// Package modelanthropic is the real model client: an Anthropic-shaped
// Messages API, POST {base}/v1/messages, regular or streamed (SSE).
//
// # Requests
//
// Every request carries anthropic-version: 2023-06-01 and the API key, as
// x-api-key (the default) or as Authorization: Bearer (Config.Auth
// "bearer"). The body is {model, max_tokens, system, messages, tools,
// stream, thinking}; thinking is {"type":"enabled","budget_tokens":N} when
// Request.ThinkingBudget > 0. Config.Model, when set, replaces the model the
// request names. A custom tool without an input schema is declared with
// {"type":"object"}, and a tool_use block without input is sent with {}, as
// the API requires.
//
// # Responses
//
// Stream reads the server-sent events message_start, content_block_start,
// content_block_delta (text_delta, input_json_delta, thinking_delta,
// signature_delta, citations_delta), content_block_stop, message_delta,
// message_stop, ping and error, and assembles the same [model.Response]
// Create returns. text, tool_use and thinking blocks are decoded into
// [model.Block] fields; any other block (redacted_thinking, server_tool_use,
// web_search_tool_result, ...) and any block with members Block does not
// model (a text block's citations) also keeps its JSON in Block.Raw, so it
// is sent back unchanged. Unknown event and delta types are ignored.
//
// # Errors
//
// Failures are [*model.Error]s classified for retries:
//
//   - HTTP 429: rate_limit_error, retryable, with Retry-After (seconds or an
//     HTTP date; retry-after-ms is preferred when present).
//   - HTTP 529 and 5xx: retryable (overloaded_error, api_error).
//   - HTTP 408, the Config.Timeout elapsing: Type "timeout", retryable.
//   - Connection failures, resets and streams that end before message_stop:
//     Type "network", retryable (certificate errors are not retryable).
//   - Other 4xx: the provider's type, not retryable.
//   - An x-should-retry: true|false header overrides the status rules.
//   - An error event in the stream: the provider's type with the status
//     the same error would have had as a response (overloaded_error 529,
//     api_error 500, ...), retryable as above.
//   - A response larger than Config.MaxResponseBytes: Type
//     "response_too_large", not retryable. A malformed response: Type
//     "invalid_response", not retryable.
//
// The type and message come from the error envelope
// {"type":"error","error":{"type","message"}} when the body has one; a
// request-id header is appended to the message. Cancelling the caller's
// context returns the context's error (wrapped), not a *model.Error.
//
// The API key never appears in errors: occurrences in a server's message
// are replaced by "[redacted]", and Config and Client print without it.
// Redirects are not followed, so the key is never sent to another host.
package modelanthropic

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/mangohq/mango/execution-worker/model"
)

// Defaults for zero Config fields.
const (
	DefaultBaseURL          = "https://api.anthropic.com"
	DefaultMaxResponseBytes = 32 << 20
	DefaultTimeout          = 10 * time.Minute
	DefaultMaxTokens        = 4096
)

// APIVersion is the anthropic-version header sent with every request.
const APIVersion = "2023-06-01"

// Auth schemes for Config.Auth.
const (
	AuthXAPIKey = "x-api-key"
	AuthBearer  = "bearer"
)

// maxErrorBody bounds how much of an error response is read.
const maxErrorBody = 64 << 10

// Config configures a Client.
type Config struct {
	// BaseURL is the server's base URL; requests go to {BaseURL}/v1/messages.
	// Default DefaultBaseURL.
	BaseURL string
	// APIKey authenticates requests. Required.
	APIKey string
	// Auth is AuthXAPIKey (default) or AuthBearer.
	Auth string
	// Model, when set, replaces the model id of every request.
	Model string
	// HTTPClient sends the requests; default a client with
	// http.DefaultTransport. Its redirect policy is replaced so that
	// redirects are never followed; its Timeout should be zero (use
	// Timeout instead, which does not cut long streams).
	HTTPClient *http.Client
	// MaxResponseBytes caps the bytes read from one response, streamed or
	// not. Default DefaultMaxResponseBytes.
	MaxResponseBytes int64
	// Timeout bounds a Create call, and for Stream the wait for the
	// response headers and for each next piece of the stream (servers
	// send pings while the model thinks). Default DefaultTimeout.
	Timeout time.Duration
}

// String describes c without its API key.
func (c Config) String() string {
	key := ""
	if c.APIKey != "" {
		key = "[redacted]"
	}
	return fmt.Sprintf("modelanthropic.Config{BaseURL:%q APIKey:%q Auth:%q Model:%q MaxResponseBytes:%d Timeout:%v}",
		c.BaseURL, key, c.Auth, c.Model, c.MaxResponseBytes, c.Timeout)
}

// GoString is String, so %#v does not print the key either.
func (c Config) GoString() string { return c.String() }

// Client is a Messages API client. It is stateless and safe for concurrent
// use.
type Client struct {
	endpoint string
	apiKey   string
	bearer   bool
	model    string
	http     *http.Client
	maxBytes int64
	timeout  time.Duration
}

// New validates cfg and returns a client.
func New(cfg Config) (*Client, error) {
	base := cfg.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("modelanthropic: base URL %q: want http(s)://host[:port][/path]", base)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("modelanthropic: base URL %q: no query, fragment or user info allowed", base)
	}
	if cfg.APIKey == "" {
		return nil, errors.New("modelanthropic: API key is required")
	}
	c := &Client{
		endpoint: strings.TrimRight(u.String(), "/") + "/v1/messages",
		apiKey:   cfg.APIKey,
		model:    cfg.Model,
		maxBytes: cfg.MaxResponseBytes,
		timeout:  cfg.Timeout,
	}
	switch strings.ToLower(cfg.Auth) {
	case "", AuthXAPIKey:
	case AuthBearer:
		c.bearer = true
	default:
		return nil, fmt.Errorf("modelanthropic: auth %q: want %q or %q", cfg.Auth, AuthXAPIKey, AuthBearer)
	}
	if c.maxBytes <= 0 {
		c.maxBytes = DefaultMaxResponseBytes
	}
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	hc := &http.Client{}
	if cfg.HTTPClient != nil {
		copied := *cfg.HTTPClient
		hc = &copied
	}
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c.http = hc
	return c, nil
}

// String describes c without its API key.
func (c *Client) String() string {
	return fmt.Sprintf("modelanthropic.Client{endpoint:%q bearer:%v model:%q}", c.endpoint, c.bearer, c.model)
}

// GoString is String.
func (c *Client) GoString() string { return c.String() }

// Create sends req and returns the complete response.
func (c *Client) Create(ctx context.Context, req *model.Request) (*model.Response, error) {
	return c.do(ctx, req, false, nil)
}

// Stream sends req with "stream": true, calls onEvent as blocks start and
// text arrives, and returns the assembled response.
func (c *Client) Stream(ctx context.Context, req *model.Request, onEvent func(model.StreamEvent)) (*model.Response, error) {
	return c.do(ctx, req, true, onEvent)
}

// errTimeout is the cancellation cause when Config.Timeout elapses.
var errTimeout = errors.New("timeout")

func (c *Client) do(ctx context.Context, req *model.Request, stream bool, onEvent func(model.StreamEvent)) (*model.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("model request: %w", err)
	}
	body, err := c.body(req, stream)
	if err != nil {
		return nil, err
	}

	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// The watchdog cancels the request when the timeout elapses without
	// progress; Stream rearms it on every read.
	watchdog := time.AfterFunc(c.timeout, func() { cancel(errTimeout) })
	defer watchdog.Stop()

	hreq, err := http.NewRequestWithContext(rctx, http.MethodPost, c.endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("model request: %w", err)
	}
	hreq.Header.Set("anthropic-version", APIVersion)
	hreq.Header.Set("content-type", "application/json")
	if stream {
		hreq.Header.Set("accept", "text/event-stream")
	} else {
		hreq.Header.Set("accept", "application/json")
	}
	hreq.Header.Set("user-agent", "mango-execution-worker")
	if c.bearer {
		hreq.Header.Set("authorization", "Bearer "+c.apiKey)
	} else {
		hreq.Header.Set("x-api-key", c.apiKey)
	}

	hresp, err := c.http.Do(hreq)
	if err != nil {
		return nil, c.transportError(ctx, rctx, err)
	}
	defer func() { _ = hresp.Body.Close() }()

	if hresp.StatusCode < 200 || hresp.StatusCode > 299 {
		return nil, c.statusError(hresp)
	}

	var src io.Reader = hresp.Body
	if stream {
		src = &kickReader{r: src, watchdog: watchdog, d: c.timeout}
	}
	lr := &limitReader{r: src, n: c.maxBytes}

	var resp *model.Response
	if stream && isEventStream(hresp.Header.Get("content-type")) {
		resp, err = readStream(lr, onEvent)
	} else {
		resp, err = readJSON(lr)
		if err == nil && onEvent != nil {
			replay(resp, onEvent)
		}
	}
	if err != nil {
		if lr.exceeded {
			return nil, &model.Error{Type: "response_too_large", Message: fmt.Sprintf("response exceeds the %d byte cap (MaxResponseBytes)", c.maxBytes)}
		}
		if ctx.Err() != nil || errors.Is(context.Cause(rctx), errTimeout) {
			return nil, c.transportError(ctx, rctx, err)
		}
		var me *model.Error
		if errors.As(err, &me) {
			me.Message = c.redact(me.Message)
			return nil, me
		}
		return nil, c.transportError(ctx, rctx, err)
	}
	return resp, nil
}

// wireRequest is the JSON body of POST /v1/messages.
type wireRequest struct {
	Model     string          `json:"model"`
	MaxTokens int             `json:"max_tokens"`
	System    []wireText      `json:"system,omitempty"`
	Messages  []model.Message `json:"messages"`
	Tools     []model.ToolDef `json:"tools,omitempty"`
	Stream    bool            `json:"stream,omitempty"`
	Thinking  *wireThinking   `json:"thinking,omitempty"`
}

// wireText is a text block of the system prompt.
type wireText struct {
	Type         string        `json:"type"`
	Text         string        `json:"text"`
	CacheControl *cacheControl `json:"cache_control,omitempty"`
}

// cacheControl marks a prompt caching breakpoint: the prefix up to and
// including the block carrying it is cached.
type cacheControl struct {
	Type string `json:"type"`
}

var ephemeral = &cacheControl{Type: "ephemeral"}

type wireThinking struct {
	Type         string `json:"type"`
	BudgetTokens int    `json:"budget_tokens"`
}

func (c *Client) body(req *model.Request, stream bool) ([]byte, error) {
	if req == nil {
		return nil, &model.Error{Type: "invalid_request_error", Message: "request is nil"}
	}
	w := wireRequest{
		Model:     req.Model,
		MaxTokens: req.MaxTokens,
		Messages:  req.Messages,
		Tools:     req.Tools,
		Stream:    stream,
	}
	if c.model != "" {
		w.Model = c.model
	}
	if w.Model == "" {
		return nil, &model.Error{Type: "invalid_request_error", Message: "no model id: set the agent's model or MANGO_MODEL_ID"}
	}
	if w.MaxTokens <= 0 {
		w.MaxTokens = DefaultMaxTokens
	}
	if w.Messages == nil {
		w.Messages = []model.Message{}
	}
	if req.ThinkingBudget > 0 {
		w.Thinking = &wireThinking{Type: "enabled", BudgetTokens: req.ThinkingBudget}
	}
	w.Messages = fillToolInputs(w.Messages)
	w.Tools = fillSchemas(w.Tools)
	if req.System != "" {
		w.System = []wireText{{Type: "text", Text: req.System}}
	}
	if err := markCache(&w); err != nil {
		return nil, &model.Error{Type: "invalid_request_error", Message: "encode request: " + err.Error()}
	}
	b, err := json.Marshal(w)
	if err != nil {
		return nil, &model.Error{Type: "invalid_request_error", Message: "encode request: " + err.Error()}
	}
	return b, nil
}

// markCache sets the prompt caching breakpoints of a request, at most
// four as the Messages API allows, in prefix order: the last tool
// definition (tools are the start of the prompt), the system prompt, and
// the last two user messages. In a tool loop each request is the previous
// one plus an assistant message and a user message, so the breakpoint on
// the previous request's last user message is the cached prefix the next
// request reads, and the one on its own last user message is written for
// the round after. The caller's request is not modified.
func markCache(w *wireRequest) error {
	if n := len(w.Tools); n > 0 {
		last, err := withCacheControl(w.Tools[n-1])
		if err != nil {
			return err
		}
		w.Tools = append(append([]model.ToolDef(nil), w.Tools[:n-1]...), model.ToolDef{Name: w.Tools[n-1].Name, Type: w.Tools[n-1].Type, Raw: last})
	}
	if len(w.System) > 0 {
		w.System[len(w.System)-1].CacheControl = ephemeral
	}
	marked := 0
	var msgs []model.Message
	for i := len(w.Messages) - 1; i >= 0 && marked < 2; i-- {
		m := w.Messages[i]
		if m.Role != "user" {
			continue
		}
		j := cacheableBlock(m.Content)
		if j < 0 {
			continue
		}
		raw, err := withCacheControl(m.Content[j])
		if err != nil {
			return err
		}
		if msgs == nil {
			msgs = append([]model.Message(nil), w.Messages...)
		}
		content := append([]model.Block(nil), m.Content...)
		content[j] = model.Block{Type: content[j].Type, Raw: raw}
		msgs[i] = model.Message{Role: m.Role, Content: content}
		marked++
	}
	if msgs != nil {
		w.Messages = msgs
	}
	return nil
}

// cacheableBlock is the index of the last block of content that can carry
// a breakpoint (not thinking, not empty text), or -1.
func cacheableBlock(content []model.Block) int {
	for j := len(content) - 1; j >= 0; j-- {
		switch b := content[j]; {
		case b.Type == "thinking" || b.Type == "redacted_thinking":
		case b.Type == "text" && b.Text == "" && len(b.Raw) == 0:
		default:
			return j
		}
	}
	return -1
}

// withCacheControl is v's JSON object with cache_control set.
func withCacheControl(v any) (json.RawMessage, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		return nil, err
	}
	obj["cache_control"] = json.RawMessage(`{"type":"ephemeral"}`)
	return json.Marshal(obj)
}

// fillToolInputs gives tool_use blocks without input an empty object,
// copying only the messages it changes.
func fillToolInputs(msgs []model.Message) []model.Message {
	var out []model.Message
	copied := map[int]bool{}
	for i, m := range msgs {
		for j, b := range m.Content {
			if b.Type != "tool_use" || len(b.Raw) > 0 || len(b.Input) > 0 {
				continue
			}
			if out == nil {
				out = append([]model.Message(nil), msgs...)
			}
			if !copied[i] {
				out[i].Content = append([]model.Block(nil), m.Content...)
				copied[i] = true
			}
			out[i].Content[j].Input = json.RawMessage(`{}`)
		}
	}
	if out == nil {
		return msgs
	}
	return out
}

// fillSchemas gives custom tools without an input schema {"type":"object"}.
func fillSchemas(tools []model.ToolDef) []model.ToolDef {
	var out []model.ToolDef
	for i, d := range tools {
		if len(d.Raw) > 0 || d.Type != "" || len(d.InputSchema) > 0 {
			continue
		}
		if out == nil {
			out = append([]model.ToolDef(nil), tools...)
		}
		out[i].InputSchema = json.RawMessage(`{"type":"object"}`)
	}
	if out == nil {
		return tools
	}
	return out
}

// transportError classifies a failure to send or read: the caller's
// cancellation, the client's timeout, or a network failure.
func (c *Client) transportError(ctx, rctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("model request: %w", ctx.Err())
	}
	if errors.Is(context.Cause(rctx), errTimeout) {
		return &model.Error{Type: "timeout", Message: fmt.Sprintf("no response within %v", c.timeout), Retryable: true}
	}
	msg := c.redact(err.Error())
	var certErr *tls.CertificateVerificationError
	var unknownAuth x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	if errors.As(err, &certErr) || errors.As(err, &unknownAuth) || errors.As(err, &hostErr) {
		return &model.Error{Type: "network", Message: msg}
	}
	return &model.Error{Type: "network", Message: msg, Retryable: true}
}

// statusError classifies a non-2xx response.
func (c *Client) statusError(hresp *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(hresp.Body, maxErrorBody))
	status := hresp.StatusCode
	e := &model.Error{Status: status}
	var env struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(raw, &env) == nil && env.Error.Type != "" {
		e.Type, e.Message = env.Error.Type, env.Error.Message
	} else {
		e.Message = strings.TrimSpace(string(raw))
		if len(e.Message) > 512 {
			e.Message = e.Message[:512] + "..."
		}
	}
	if e.Message == "" {
		e.Message = http.StatusText(status)
	}
	switch {
	case status == http.StatusTooManyRequests:
		e.Retryable = true
		if e.Type == "" {
			e.Type = "rate_limit_error"
		}
	case status == http.StatusRequestTimeout:
		e.Retryable = true
		e.Type = "timeout"
	case status == 529:
		e.Retryable = true
		if e.Type == "" {
			e.Type = "overloaded_error"
		}
	case status >= 500:
		e.Retryable = true
		if e.Type == "" {
			e.Type = "api_error"
		}
	case status >= 300 && status < 400:
		e.Type = "invalid_response"
		e.Message = fmt.Sprintf("unexpected redirect to %q (redirects are not followed)", hresp.Header.Get("location"))
	default:
		if e.Type == "" {
			e.Type = defaultType(status)
		}
	}
	switch strings.ToLower(hresp.Header.Get("x-should-retry")) {
	case "true":
		e.Retryable = true
	case "false":
		e.Retryable = false
	}
	if e.Retryable {
		e.RetryAfter = retryAfter(hresp.Header, time.Now())
	}
	if id := hresp.Header.Get("request-id"); id != "" {
		e.Message += " (request-id " + id + ")"
	}
	e.Message = c.redact(e.Message)
	return e
}

// defaultType names the provider error type of a 4xx without an envelope.
func defaultType(status int) string {
	switch status {
	case 400:
		return "invalid_request_error"
	case 401:
		return "authentication_error"
	case 403:
		return "permission_error"
	case 404:
		return "not_found_error"
	case 413:
		return "request_too_large"
	default:
		return "invalid_request_error"
	}
}

// retryAfter reads retry-after-ms or Retry-After (seconds or an HTTP date).
func retryAfter(h http.Header, now time.Time) time.Duration {
	if v := h.Get("retry-after-ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("retry-after"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

func (c *Client) redact(s string) string {
	if c.apiKey == "" {
		return s
	}
	return strings.ReplaceAll(s, c.apiKey, "[redacted]")
}

func isEventStream(contentType string) bool {
	return strings.HasPrefix(strings.ToLower(strings.TrimSpace(contentType)), "text/event-stream")
}

// kickReader rearms the watchdog whenever data arrives.
type kickReader struct {
	r        io.Reader
	watchdog *time.Timer
	d        time.Duration
}

func (k *kickReader) Read(p []byte) (int, error) {
	n, err := k.r.Read(p)
	if n > 0 {
		k.watchdog.Reset(k.d)
	}
	return n, err
}

// limitReader reads at most n bytes and records whether r had more.
type limitReader struct {
	r        io.Reader
	n        int64
	exceeded bool
}

var errTooLarge = errors.New("response too large")

func (l *limitReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		// Probe one byte to tell "exactly at the cap" from "over it".
		var one [1]byte
		n, err := l.r.Read(one[:])
		if n > 0 {
			l.exceeded = true
			return 0, errTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

var _ model.Client = (*Client)(nil)
