// Package modelanthropic is the real model client: an Anthropic-shaped
// Messages API, POST {base}/v1/messages, regular or streamed (SSE), sent
// with the official SDK (github.com/anthropics/anthropic-sdk-go/v2). The
// SDK does not retry: the caller retries on the classification below.
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
// the API requires. Prompt caching breakpoints mark the last tool, the
// system prompt and the last two user messages.
//
// # Responses
//
// Stream reads the server-sent events with the SDK's decoder and
// assembles them with Message.Accumulate (message_start,
// content_block_start, content_block_delta with text_delta,
// input_json_delta, thinking_delta, signature_delta and citations_delta,
// content_block_stop, message_delta, message_stop; ping and unknown events
// are ignored, error is reported), into the same [model.Response] Create
// returns. text, tool_use and thinking blocks are decoded into
// [model.Block] fields; any other block (redacted_thinking,
// server_tool_use, web_search_tool_result, ...) and any block with members
// Block does not model (a text block's citations) also keeps its JSON in
// Block.Raw, so it is sent back unchanged.
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
//     "invalid_response", not retryable. A request that does not encode:
//     Type "invalid_request_error", not retryable.
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
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/mangohq/mango/execution-worker/internal/defaults"
	"github.com/mangohq/mango/execution-worker/internal/httpcall"
	"github.com/mangohq/mango/execution-worker/model"
)

// Defaults for zero Config fields.
const (
	DefaultBaseURL          = "https://api.anthropic.com"
	DefaultMaxResponseBytes = 32 << 20
	DefaultTimeout          = 10 * time.Minute
	DefaultMaxTokens        = 4096
)

// APIVersion is the anthropic-version header sent with every request, in
// place of the SDK's own (2026-10-21 for SDK v2).
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
	sdk      anthropic.Client
	endpoint string
	apiKey   string
	bearer   bool
	model    string
	maxBytes int64
	timeout  time.Duration
}

// New validates cfg and returns a client.
func New(cfg Config) (*Client, error) {
	base := cmp.Or(cfg.BaseURL, DefaultBaseURL)
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
	base = strings.TrimRight(u.String(), "/")
	c := &Client{
		endpoint: base + "/v1/messages",
		apiKey:   cfg.APIKey,
		model:    cfg.Model,
		maxBytes: defaults.Positive(cfg.MaxResponseBytes, DefaultMaxResponseBytes),
		timeout:  defaults.Positive(cfg.Timeout, DefaultTimeout),
	}
	switch strings.ToLower(cfg.Auth) {
	case "", AuthXAPIKey:
	case AuthBearer:
		c.bearer = true
	default:
		return nil, fmt.Errorf("modelanthropic: auth %q: want %q or %q", cfg.Auth, AuthXAPIKey, AuthBearer)
	}
	hc := &http.Client{}
	if cfg.HTTPClient != nil {
		copied := *cfg.HTTPClient
		hc = &copied
	}
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

	opts := []option.RequestOption{
		option.WithoutEnvironmentDefaults(), // no ANTHROPIC_* variables, profiles or federation
		option.WithBaseURL(base + "/"),
		option.WithHTTPClient(hc),
		option.WithMaxRetries(0),
		option.WithoutOpenTelemetry(),
		option.WithHeader("anthropic-version", APIVersion),
	}
	if c.bearer {
		opts = append(opts, option.WithAuthToken(cfg.APIKey))
	} else {
		// The SDK's WithAPIKey sends the key as Authorization: Bearer;
		// the x-api-key scheme needs the header itself.
		opts = append(opts, option.WithHeader("x-api-key", cfg.APIKey))
	}
	c.sdk = anthropic.NewClient(opts...)
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
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("model request: %w", err)
	}
	p, err := c.params(req)
	if err != nil {
		return nil, err
	}
	k, rctx, done := c.start(ctx, false)
	defer done()
	// The SDK's per-request timeout matches the watchdog; without one the
	// SDK refuses large max_tokens unstreamed.
	msg, err := c.sdk.Messages.New(rctx, p, option.WithMiddleware(k.middleware), option.WithRequestTimeout(c.timeout))
	if err != nil {
		return nil, k.fail(ctx, rctx, err)
	}
	if err := checkMessage(msg); err != nil {
		return nil, k.fail(ctx, rctx, err)
	}
	resp, err := toResponse(msg, nil)
	if err != nil {
		return nil, k.fail(ctx, rctx, err)
	}
	return resp, nil
}

// Stream sends req with "stream": true, calls onEvent as blocks start and
// text arrives, and returns the assembled response.
func (c *Client) Stream(ctx context.Context, req *model.Request, onEvent func(model.StreamEvent)) (*model.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("model request: %w", err)
	}
	p, err := c.params(req)
	if err != nil {
		return nil, err
	}
	k, rctx, done := c.start(ctx, true)
	defer done()
	stream := c.sdk.Messages.NewStreaming(rctx, p, option.WithMiddleware(k.middleware))
	defer func() { _ = stream.Close() }()
	if err := stream.Err(); err != nil {
		return nil, k.fail(ctx, rctx, err)
	}
	var resp *model.Response
	if isEventStream(k.resp.Header.Get("content-type")) {
		resp, err = accumulate(stream, k.body, onEvent)
	} else if resp, err = readMessage(k.body); err == nil {
		replay(resp, onEvent)
	}
	if err != nil {
		return nil, k.fail(ctx, rctx, err)
	}
	return resp, nil
}

// errTimeout is the cancellation cause when Config.Timeout elapses.
var errTimeout = errors.New("timeout")

// call is one request: its watchdog, and the response as the middleware
// saw it.
type call struct {
	c        *Client
	watchdog *time.Timer
	stream   bool
	sent     bool           // the request reached the middleware, so it encoded
	resp     *http.Response // the response, once its headers arrived
	body     *body          // resp's body
}

// start begins a call: rctx is cancelled with errTimeout when Config.Timeout
// elapses without progress (a stream's reads rearm it); done releases it.
func (c *Client) start(ctx context.Context, stream bool) (k *call, rctx context.Context, done func()) {
	rctx, cancel := context.WithCancelCause(ctx)
	k = &call{c: c, stream: stream, watchdog: time.AfterFunc(c.timeout, func() { cancel(errTimeout) })}
	return k, rctx, func() {
		k.watchdog.Stop()
		cancel(nil)
	}
}

// middleware sits between the SDK and the HTTP client: it refuses
// redirects, and gives the response a body that enforces
// Config.MaxResponseBytes (maxErrorBody for errors), rearms the watchdog
// as a stream arrives and records read failures.
func (k *call) middleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	k.sent = true
	resp, err := next(req)
	if err != nil {
		return resp, err
	}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		_ = resp.Body.Close()
		return nil, &model.Error{Status: resp.StatusCode, Type: "invalid_response",
			Message: fmt.Sprintf("unexpected redirect to %q (redirects are not followed)", resp.Header.Get("location"))}
	}
	k.body = &body{rc: resp.Body, n: k.c.maxBytes}
	if resp.StatusCode >= 400 {
		k.body.n, k.body.truncate = maxErrorBody, true
	}
	if k.stream {
		k.body.watchdog, k.body.d = k.watchdog, k.c.timeout
	}
	resp.Body = k.body
	k.resp = resp
	return resp, nil
}

// fail classifies the failure of a call.
func (k *call) fail(ctx, rctx context.Context, err error) error {
	c := k.c
	var me *model.Error
	var ae *anthropic.Error
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("model request: %w", ctx.Err())
	case k.body != nil && k.body.exceeded:
		return &model.Error{Type: "response_too_large", Message: fmt.Sprintf("response exceeds the %d byte cap (MaxResponseBytes)", c.maxBytes)}
	case errors.Is(context.Cause(rctx), errTimeout) || errors.Is(err, context.DeadlineExceeded):
		return &model.Error{Type: "timeout", Message: fmt.Sprintf("no response within %v", c.timeout), Retryable: true}
	case errors.As(err, &me):
		me.Message = c.redact(me.Message)
		return me
	case errors.As(err, &ae) && ae.Response != nil:
		return c.statusError(ae.StatusCode, ae.Response.Header, ae.RawJSON())
	case !k.sent:
		return &model.Error{Type: "invalid_request_error", Message: "encode request: " + c.redact(err.Error())}
	case k.resp != nil && k.body.err == nil:
		// The response arrived and was read whole, so it did not decode.
		return invalidResponse("decode response: %s", c.redact(err.Error()))
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

// statusError classifies a non-2xx response with body raw.
func (c *Client) statusError(status int, h http.Header, raw string) error {
	e := &model.Error{Status: status}
	var env struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(raw), &env) == nil && env.Error.Type != "" {
		e.Type, e.Message = env.Error.Type, env.Error.Message
	} else {
		e.Message = strings.TrimSpace(raw)
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
	default:
		if e.Type == "" {
			e.Type = defaultType(status)
		}
	}
	switch strings.ToLower(h.Get("x-should-retry")) {
	case "true":
		e.Retryable = true
	case "false":
		e.Retryable = false
	}
	if e.Retryable {
		e.RetryAfter = httpcall.RetryAfter(h)
	}
	if id := h.Get("request-id"); id != "" {
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

func (c *Client) redact(s string) string {
	return strings.ReplaceAll(s, c.apiKey, "[redacted]")
}

// body is a response body that reads at most n bytes, records whether
// there were more and the first read failure, and rearms watchdog (when
// set) whenever data arrives.
type body struct {
	rc       io.ReadCloser
	n        int64
	truncate bool // at the cap, end the body instead of failing
	watchdog *time.Timer
	d        time.Duration
	exceeded bool
	err      error
}

var errTooLarge = errors.New("response too large")

func (b *body) Read(p []byte) (int, error) {
	if b.n <= 0 {
		if b.truncate {
			return 0, io.EOF
		}
		// Probe one byte to tell "exactly at the cap" from "over it".
		var one [1]byte
		n, err := b.rc.Read(one[:])
		if n > 0 {
			b.exceeded = true
			err = errTooLarge
		}
		return 0, b.record(err)
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	n, err := b.rc.Read(p)
	b.n -= int64(n)
	if n > 0 && b.watchdog != nil {
		b.watchdog.Reset(b.d)
	}
	return n, b.record(err)
}

func (b *body) record(err error) error {
	if err != nil && err != io.EOF && b.err == nil {
		b.err = err
	}
	return err
}

// Close closes the underlying body.
func (b *body) Close() error { return b.rc.Close() }

var _ model.Client = (*Client)(nil)
