// Package console serves Mango's web console at /console: server-rendered
// pages (html/template) and a little plain JavaScript (an EventSource per
// open session) to watch and drive sessions live and to manage agents,
// environments, files, vaults, deployments and webhooks.
//
// The console is a client of the public API. A visitor signs in with an
// API key; the key is kept sealed server-side and every page and action
// calls the API's own handler in this process with that key, so the
// console can do exactly what the key can do through the SDK, and
// nothing more. Everything it shows that came from a model, a tool, a
// file or a user is escaped (markdown is rendered without raw HTML and
// sanitized); the Content-Security-Policy forbids inline script, so even
// a rendering mistake cannot run one.
package console

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/trace"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/mangohq/mango/api-server/internal/envelope"
	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/internal/telemetry"
)

// Prefix is where the console is served.
const Prefix = "/console"

// Deps are the collaborators of the console.
type Deps struct {
	// API is the public API's handler, called in process.
	API http.Handler
	// Store keeps sign-ins.
	Store *db.Store
	// Secrets seals signed-in keys (the vault keys); empty refuses
	// sign-ins.
	Secrets *envelope.Keyring
	// Logger receives errors the visitor sees only as a request id.
	Logger *slog.Logger
	// Now returns the current time; tests may pin it.
	Now func() time.Time
	// SignInTTL is how long a sign-in lasts (default 12h).
	SignInTTL time.Duration
	// MaxUploadBytes caps one form post with files (default 512 MiB).
	MaxUploadBytes int64
}

// Console is the web console. It is an http.Handler for Prefix and below.
type Console struct {
	deps   Deps
	mux    *http.ServeMux
	pages  *pages
	assets *assets
	http   *http.Client
}

// New builds the console.
func New(deps Deps) (*Console, error) {
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	if deps.SignInTTL <= 0 {
		deps.SignInTTL = 12 * time.Hour
	}
	if deps.MaxUploadBytes <= 0 {
		deps.MaxUploadBytes = 512 << 20
	}
	as, err := loadAssets()
	if err != nil {
		return nil, err
	}
	ps, err := loadPages(as)
	if err != nil {
		return nil, err
	}
	c := &Console{deps: deps, mux: http.NewServeMux(), pages: ps, assets: as, http: &http.Client{Transport: inProcess{api: deps.API}}}
	c.routes()
	return c, nil
}

// ServeHTTP implements http.Handler.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if trace.SpanFromContext(r.Context()).IsRecording() { // name the request's span by its route
		if _, pattern := c.mux.Handler(r); pattern != "" {
			telemetry.SetRoute(r.Context(), strings.TrimPrefix(pattern, r.Method+" "))
		}
	}
	secureHeaders(w.Header())
	c.mux.ServeHTTP(w, r)
}

// contentSecurityPolicy allows the console's own scripts (and shared
// worker), styles and connections only: no inline script or style, no frames, no plugins, no
// form posting elsewhere, no images but its own and data: URIs.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; worker-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"

func secureHeaders(h http.Header) {
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin") // Origin is still sent on posts (no-referrer makes it "null")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=()")
}

// visit is one signed-in request: the API as its key sees it, and the
// CSRF token its forms carry.
type visit struct {
	api  *apiClient
	csrf string
	// path is the request's path, for the navigation.
	path string
}

// handler is a page or action of a signed-in visitor.
type handler func(w http.ResponseWriter, r *http.Request, v *visit) error

// signedIn resolves the sign-in cookie (a visitor without one is sent to
// the sign-in page, an action refused), checks the CSRF token of every
// request that changes something, and renders h's error.
func (c *Console) signedIn(h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		v, err := c.visitOf(r)
		if err != nil {
			if !errors.Is(err, errSignedOut) {
				c.fail(w, r, nil, err)
				return
			}
			if r.Method == http.MethodGet && r.Header.Get("Accept") != "text/event-stream" {
				http.Redirect(w, r, Prefix+"/sign-in?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			http.Error(w, "signed out: sign in to the console again", http.StatusUnauthorized)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if r.Context().Value(uploadRoute{}) == nil {
				r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
			}
			if status, err := checkCSRF(r, v.csrf); err != nil {
				http.Error(w, err.Error(), status)
				return
			}
		}
		if err := h(w, r, v); err != nil {
			c.fail(w, r, v, err)
		}
	})
}

// maxFormBytes caps the body of a form that uploads no file (the largest
// are an agent's system prompt and tools, far below it).
const maxFormBytes = 4 << 20

// errCSRF refuses a change that does not carry the sign-in's CSRF token.
var errCSRF = errors.New("refused: the request does not carry this sign-in's CSRF token (reload the page and try again)")

// checkCSRF accepts a changing request only from the console's own pages:
// the X-CSRF-Token header (scripts) or the csrf form field must be the
// sign-in's token, and an Origin header, when sent, must be this host.
// It answers the status to refuse with: 403, or 413 for a body over its
// cap.
func checkCSRF(r *http.Request, want string) (int, error) {
	if o := r.Header.Get("Origin"); o != "" {
		if u, err := url.Parse(o); err != nil || u.Host != r.Host {
			return http.StatusForbidden, errors.New("refused: the request comes from another origin")
		}
	}
	got := r.Header.Get("X-CSRF-Token")
	if got == "" {
		err := r.ParseForm() // a urlencoded body
		if err == nil && strings.HasPrefix(r.Header.Get("Content-Type"), "multipart/") {
			err = r.ParseMultipartForm(32 << 20)
		}
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return http.StatusRequestEntityTooLarge, fmt.Errorf("refused: the form is larger than the %d bytes this page takes", tooLarge.Limit)
		}
		got = r.PostFormValue("csrf")
	}
	if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		return http.StatusForbidden, errCSRF
	}
	return 0, nil
}

// fail renders err: a signed-out key goes back to the sign-in page, an
// API error shows the API's message (already safe for clients), anything
// else a generic message with the request's id (the cause goes to the
// log only).
func (c *Console) fail(w http.ResponseWriter, r *http.Request, v *visit, err error) {
	var ae *apiError
	switch {
	case errors.As(err, &ae) && ae.Status == http.StatusUnauthorized:
		c.clearCookie(w, r)
		http.Redirect(w, r, Prefix+"/sign-in", http.StatusSeeOther)
		return
	case errors.As(err, &ae):
		c.render(w, r, v, ae.Status, "error", errorPage{Status: ae.Status, Type: ae.Type, Message: ae.Message})
		return
	case errors.Is(err, context.Canceled):
		return
	}
	var bad badInput
	if errors.As(err, &bad) {
		c.render(w, r, v, http.StatusBadRequest, "error", errorPage{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: bad.Error()})
		return
	}
	c.deps.Logger.ErrorContext(r.Context(), "console request failed", "path", r.URL.Path, "err", err)
	c.render(w, r, v, http.StatusInternalServerError, "error", errorPage{Status: http.StatusInternalServerError, Type: "api_error",
		Message: "the console could not complete the request; the server's log has the cause"})
}

// badInput is a form value the console refuses before calling the API.
type badInput string

func (b badInput) Error() string { return string(b) }

// errorPage is the data of the error page.
type errorPage struct {
	Status  int
	Type    string
	Message string
}
