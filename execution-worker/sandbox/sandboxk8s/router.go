package sandboxk8s

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/mangohq/mango/execution-worker/internal/httpcall"
)

// Router request headers (sandbox-router's proxy/headers.go).
const (
	headerSandboxID        = "X-Sandbox-ID"
	headerSandboxNamespace = "X-Sandbox-Namespace"
	headerSandboxPort      = "X-Sandbox-Port"
	headerSandboxPodIP     = "X-Sandbox-Pod-IP"
	headerSandboxTimeout   = "X-Sandbox-Timeout"
)

// maxErrorBody bounds how much of an error response is kept.
const maxErrorBody = 4 << 10

// maxBody bounds a response (an exec envelope carries up to twice
// MaxOutput, base64-encoded, inside JSON).
const maxBody = 1 << 30

// route is where the router sends a sandbox's requests.
type route struct {
	// id is the Sandbox name (X-Sandbox-ID).
	id string
	// podIP is the pod's address (X-Sandbox-Pod-IP), when known.
	podIP string
}

// statusOf returns the HTTP status of a non-2xx answer of the router (or
// of the runtime behind it) in err, or 0.
var statusOf = httpcall.StatusOf

// request is one call through the router.
type request struct {
	method, path string
	// body returns a fresh body for every attempt (nil: no body).
	body func() (io.Reader, string, error)
	// idempotent calls are retried on 5xx and transport errors; every
	// call is retried on 429.
	idempotent bool
	// timeout, when set, is sent as X-Sandbox-Timeout (the Python
	// router's per-request proxy timeout).
	timeout time.Duration
	// length is the body's length when known in advance (0: as the
	// reader tells, or chunked).
	length int64
}

// send runs req against rt with retries and returns the (bounded) body.
func (p *Provider) send(ctx context.Context, rt route, req request) ([]byte, error) {
	var data []byte
	err := p.retryRoute(ctx, req, func(ctx context.Context) (wait time.Duration, err error) {
		data, wait, err = p.sendOnce(ctx, rt, req)
		return wait, err
	})
	return data, err
}

func (p *Provider) sendOnce(ctx context.Context, rt route, req request) ([]byte, time.Duration, error) {
	resp, wait, err := p.openRoute(ctx, rt, req)
	if err != nil {
		return nil, wait, err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, 0, fmt.Errorf("sandbox router: %s %s: read body: %w", req.method, shortPath(req.path), err)
	}
	return data, 0, nil
}

// stream runs req against rt with the retries of send and returns the
// response, its body unread (the caller closes it).
func (p *Provider) stream(ctx context.Context, rt route, req request) (*http.Response, error) {
	var resp *http.Response
	err := p.retryRoute(ctx, req, func(ctx context.Context) (wait time.Duration, err error) {
		resp, wait, err = p.openRoute(ctx, rt, req)
		return wait, err
	})
	return resp, err
}

// retryRoute runs attempt until it succeeds or req may not be sent again.
func (p *Provider) retryRoute(ctx context.Context, req request, attempt func(context.Context) (time.Duration, error)) error {
	return p.retryWith(ctx, "", func(ctx context.Context) (bool, time.Duration, error) {
		wait, err := attempt(ctx)
		return err != nil && httpcall.Transient(err, req.idempotent), wait, err
	})
}

// openRoute makes one attempt of req and returns a 2xx response with its body
// unread, or an *httpcall.StatusError (with the server's Retry-After).
func (p *Provider) openRoute(ctx context.Context, rt route, req request) (*http.Response, time.Duration, error) {
	hr, err := httpcall.NewRequest(ctx, req.method, p.cfg.RouterURL+req.path, req.body, req.length)
	if err != nil {
		return nil, 0, err
	}
	hr.Header.Set(headerSandboxID, rt.id)
	hr.Header.Set(headerSandboxNamespace, p.cfg.Namespace)
	hr.Header.Set(headerSandboxPort, strconv.Itoa(p.cfg.RuntimePort))
	if rt.podIP != "" {
		hr.Header.Set(headerSandboxPodIP, rt.podIP)
	}
	if req.timeout > 0 {
		hr.Header.Set(headerSandboxTimeout, strconv.FormatFloat(req.timeout.Seconds(), 'f', -1, 64))
	}
	if p.cfg.RouterToken != "" {
		hr.Header.Set("Authorization", "Bearer "+p.cfg.RouterToken)
	}
	resp, err := p.cfg.HTTPClient.Do(hr)
	if err != nil {
		return nil, 0, fmt.Errorf("sandbox router: %s %s: %w", req.method, shortPath(req.path), err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		wait, err := httpcall.ReadStatusError(resp, maxErrorBody, httpcall.StatusError{
			Service: "sandbox router", Method: req.method, Target: shortPath(req.path), MessageKeys: []string{"detail", "message"},
		})
		return nil, wait, err
	}
	return resp, 0, nil
}

// shortPath keeps error messages short: the endpoint without the file
// path of a download.
func shortPath(p string) string {
	if rest, ok := strings.CutPrefix(p, "/download/"); ok && rest != "" {
		return "/download/..."
	}
	return p
}

// decode unmarshals a JSON response, reporting a protocol error clearly.
func decode(what string, data []byte, v any) error {
	return httpcall.Decode("sandbox runtime", what, data, v)
}

// percentEncode encodes every byte outside the RFC 3986 unreserved set,
// '/' included, as the agent-sandbox clients do for download paths.
func percentEncode(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := range len(s) {
		c := s[i]
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' {
			b.WriteByte(c)
		} else {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0x0f])
		}
	}
	return b.String()
}
