// Package sandboxdaytona is the "daytona" sandbox provider: each session gets
// a Daytona sandbox, reached through Daytona's published REST APIs with a
// hand-written client (standard library only).
//
// # Control plane
//
// Calls go to DAYTONA_API_URL with the API key as a Bearer token. The
// sandbox of a session is named mango-<KeyHash(sessionKey)> and labelled
// mango.managed=true, mango.session_key_hash=<KeyHash> and
// mango.installation=<installation id>; the raw session key is never sent.
// Sandboxes of other installations sharing the organisation are never
// listed, attached or deleted; legacy ones without mango.installation are
// used only through this installation's bindings. Create first looks the sandbox up by its label
// (GET /sandbox?labels=...), then by its deterministic name, and only then
// creates it (POST /sandbox). Daytona names are unique within an
// organisation, so a concurrent Create from another worker loses with a
// conflict and re-finds the winner's sandbox. Create and Attach poll
// GET /sandbox/{id} until the state is "started", starting a stopped, paused
// or archived sandbox with POST /sandbox/{id}/start (this is how an
// auto-paused sandbox resumes). Attach verifies the label (else
// [sandbox.ErrNotOwned]); a sandbox that is gone, destroying or destroyed is
// [sandbox.ErrNotFound]. Sandboxes are created with autoStopInterval =
// DAYTONA_AUTO_PAUSE_MINUTES and auto-delete disabled, so an idle sandbox
// is stopped with its filesystem kept, never silently deleted.
//
// Idempotent calls (GET, DELETE, start, file upload and download, and the
// name-guarded create) are retried on 5xx, 429 and transport errors with
// capped exponential backoff, honouring Retry-After. Every call honours its
// context.
//
// # Commands
//
// The toolbox (at {toolboxProxyUrl}/{sandboxId}) offers POST
// /process/execute, which is synchronous and returns stdout and stderr
// combined. To keep the streams apart, bound them, and make commands
// cancellable, Exec runs every command through a shell wrapper (see
// exec.go): the command runs under setsid in a new session and process group
// whose id is written to /tmp/.mango-exec/TOKEN.pid; its stdout and stderr
// go through "head -c" into separate files (the rest is drained and
// dropped, so the command never sees a broken pipe); when it ends the
// wrapper prints a small envelope with the exit status and both files
// base64-encoded, which Exec decodes. On timeout or cancellation Exec
// abandons the request and issues a second execute that marks the token
// cancelled and runs kill -KILL -PGID, so the command and every child left
// in its group die; for a timeout the killer also returns the output
// captured so far. Stdin is uploaded to a temporary file first.
//
// # Files
//
// ReadFile and WriteFile check the path lexically against the workspace
// root (the toolbox's work directory), then resolve it inside the sandbox
// with readlink -f through an execute call; a path resolving outside the
// root is [sandbox.ErrPathEscape]. Bytes move through the toolbox's
// /files/download and multipart /files/upload endpoints. A command
// running concurrently can race the check by swapping a component for a
// link; the sandbox is the isolation boundary, the check keeps file access
// within the workspace.
package sandboxdaytona

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mangohq/mango/execution-worker/internal/httpcall"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/shellexec"
)

// Labels set on every sandbox.
const (
	LabelManaged      = "mango.managed"
	LabelKeyHash      = "mango.session_key_hash"
	LabelInstallation = sandbox.LabelInstallation
)

// NamePrefix prefixes the deterministic sandbox name.
const NamePrefix = "mango-"

// Provider is the Daytona provider. It is safe for concurrent use.
type Provider struct {
	cfg Config
}

// New returns a provider for cfg without contacting the service.
func New(cfg Config) (*Provider, error) {
	if cfg.APIKey == "" {
		return nil, fmt.Errorf("%s is required for the %s sandbox provider", EnvAPIKey, Name)
	}
	if err := sandbox.ValidateInstallation(cfg.Installation); err != nil {
		return nil, err
	}
	return &Provider{cfg: cfg.withDefaults()}, nil
}

// Name returns "daytona".
func (*Provider) Name() string { return Name }

// Capabilities reports pause/resume (auto-stop with filesystem kept) and
// package installation (sandboxes reach the network).
func (*Provider) Capabilities() []string {
	return []string{sandbox.CapabilityPauseResume, sandbox.CapabilityPackages}
}

// remote is the part of Daytona's Sandbox and SandboxListItem DTOs the
// provider uses.
type remote struct {
	ID              string            `json:"id"`
	Name            string            `json:"name"`
	State           string            `json:"state"`
	ErrorReason     string            `json:"errorReason"`
	Labels          map[string]string `json:"labels"`
	Env             map[string]string `json:"env"`
	ToolboxProxyURL string            `json:"toolboxProxyUrl"`
	CreatedAt       string            `json:"createdAt"`
}

type createBody struct {
	Name                string            `json:"name"`
	Snapshot            string            `json:"snapshot,omitempty"`
	Env                 map[string]string `json:"env,omitempty"`
	Labels              map[string]string `json:"labels"`
	Target              string            `json:"target,omitempty"`
	AutoStopInterval    int               `json:"autoStopInterval"`
	AutoDeleteInterval  int               `json:"autoDeleteInterval"`
	BuildInfo           *buildInfo        `json:"buildInfo,omitempty"`
	Public              bool              `json:"public"`
	AutoArchiveInterval int               `json:"autoArchiveInterval,omitempty"`
}

type buildInfo struct {
	DockerfileContent string `json:"dockerfileContent"`
}

func (p *Provider) api(path string) string { return p.cfg.APIURL + path }

// get fetches a sandbox by id or name; 404 maps to ErrNotFound.
func (p *Provider) get(ctx context.Context, idOrName string) (*remote, error) {
	data, err := p.do(ctx, request{method: http.MethodGet, url: p.api("/sandbox/" + url.PathEscape(idOrName)), idempotent: true})
	if err != nil {
		if statusOf(err) == http.StatusNotFound {
			return nil, fmt.Errorf("daytona sandbox %s: %w", idOrName, sandbox.ErrNotFound)
		}
		return nil, err
	}
	var r remote
	if err := decode("get sandbox", data, &r); err != nil {
		return nil, err
	}
	if gone(r.State) {
		return nil, fmt.Errorf("daytona sandbox %s is %s: %w", idOrName, r.State, sandbox.ErrNotFound)
	}
	return &r, nil
}

func gone(state string) bool { return state == "destroyed" || state == "destroying" }

// findByLabel lists sandboxes carrying the key hash label.
func (p *Provider) list(ctx context.Context, labels map[string]string) ([]remote, error) {
	lb, err := json.Marshal(labels)
	if err != nil {
		return nil, err
	}
	var all []remote
	cursor := ""
	for {
		q := url.Values{"labels": {string(lb)}, "limit": {"200"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		data, err := p.do(ctx, request{method: http.MethodGet, url: p.api("/sandbox?" + q.Encode()), idempotent: true})
		if err != nil {
			return nil, err
		}
		var page struct {
			Items      []remote `json:"items"`
			NextCursor *string  `json:"nextCursor"`
		}
		if err := decode("list sandboxes", data, &page); err != nil {
			return nil, err
		}
		for _, r := range page.Items {
			if !gone(r.State) {
				all = append(all, r)
			}
		}
		if page.NextCursor == nil || *page.NextCursor == "" || *page.NextCursor == cursor {
			return all, nil
		}
		cursor = *page.NextCursor
	}
}

// Create returns the sandbox of sessionKey, creating it if needed.
func (p *Provider) Create(ctx context.Context, sessionKey string, spec sandbox.Spec) (sandbox.Sandbox, sandbox.Ref, error) {
	if sessionKey == "" {
		return nil, sandbox.Ref{}, errors.New("create sandbox: empty session key")
	}
	for k := range spec.Env {
		if !shellexec.ValidEnvName(k) {
			return nil, sandbox.Ref{}, fmt.Errorf("create sandbox: invalid environment variable name %q", k)
		}
	}
	hash := sandbox.KeyHash(sessionKey)
	r, err := p.find(ctx, hash)
	if err != nil {
		return nil, sandbox.Ref{}, fmt.Errorf("create sandbox: %w", err)
	}
	if r == nil {
		r, err = p.create(ctx, hash, spec)
		if err != nil {
			return nil, sandbox.Ref{}, fmt.Errorf("create sandbox: %w", err)
		}
	}
	sb, err := p.open(ctx, r, hash)
	if err != nil {
		return nil, sandbox.Ref{}, fmt.Errorf("create sandbox: %w", err)
	}
	return sb, sb.ref, nil
}

// find returns the live sandbox of hash, or nil.
func (p *Provider) find(ctx context.Context, hash string) (*remote, error) {
	found, err := p.list(ctx, map[string]string{LabelKeyHash: hash})
	if err != nil {
		return nil, err
	}
	for _, r := range found {
		if r.Labels[LabelKeyHash] == hash && p.owns(&r) {
			return &r, nil
		}
	}
	// Listing is eventually consistent: a sandbox created a moment ago by
	// another worker is found by its name.
	r, err := p.get(ctx, NamePrefix+hash)
	if errors.Is(err, sandbox.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if r.Labels[LabelKeyHash] != hash {
		return nil, fmt.Errorf("sandbox named %s is not labelled for this session: %w", r.Name, sandbox.ErrNotOwned)
	}
	if !p.owns(r) {
		return nil, fmt.Errorf("sandbox named %s belongs to installation %s: %w", r.Name, r.Labels[LabelInstallation], sandbox.ErrNotOwned)
	}
	return r, nil
}

func (p *Provider) create(ctx context.Context, hash string, spec sandbox.Spec) (*remote, error) {
	labels := map[string]string{}
	maps.Copy(labels, p.cfg.Labels)
	labels[LabelManaged] = "true"
	labels[LabelKeyHash] = hash
	labels[LabelInstallation] = p.cfg.Installation
	body := createBody{
		Name:               NamePrefix + hash,
		Snapshot:           p.cfg.Snapshot,
		Env:                spec.Env,
		Labels:             labels,
		Target:             p.cfg.Target,
		AutoStopInterval:   p.cfg.AutoPauseMinutes,
		AutoDeleteInterval: -1,
	}
	if image := cmp.Or(spec.Image, p.cfg.Image); image != "" {
		if strings.ContainsAny(image, "\n\r") {
			return nil, fmt.Errorf("invalid image %q", image)
		}
		body.Snapshot = ""
		body.BuildInfo = &buildInfo{DockerfileContent: "FROM " + image + "\n"}
	}
	data, err := p.do(ctx, request{method: http.MethodPost, url: p.api("/sandbox"), body: httpcall.JSONBody(body), idempotent: true})
	if err != nil {
		st := statusOf(err)
		if st == http.StatusConflict || st == http.StatusBadRequest && strings.Contains(strings.ToLower(err.Error()), "already exists") {
			// Another client won the race for the name.
			r, ferr := p.find(ctx, hash)
			if ferr != nil {
				return nil, ferr
			}
			if r != nil {
				return r, nil
			}
		}
		return nil, err
	}
	var r remote
	if err := decode("create sandbox", data, &r); err != nil {
		return nil, err
	}
	if r.ID == "" {
		return nil, fmt.Errorf("daytona: create sandbox: %w: no id", errMalformed)
	}
	return &r, nil
}

// Attach reconnects to the sandbox ref names.
func (p *Provider) Attach(ctx context.Context, sessionKey string, ref sandbox.Ref) (sandbox.Sandbox, error) {
	if ref.Provider != Name {
		return nil, fmt.Errorf("attach sandbox %s: reference of provider %q, not %q: %w", ref.ID, ref.Provider, Name, sandbox.ErrNotOwned)
	}
	if ref.ID == "" {
		return nil, fmt.Errorf("attach sandbox: empty id: %w", sandbox.ErrNotFound)
	}
	hash := sandbox.KeyHash(sessionKey)
	r, err := p.get(ctx, ref.ID)
	if err != nil {
		return nil, fmt.Errorf("attach sandbox %s: %w", ref.ID, err)
	}
	if r.ID != ref.ID {
		// ref.ID named another sandbox by its name: not one of our refs.
		return nil, fmt.Errorf("attach sandbox %s: not a sandbox id: %w", ref.ID, sandbox.ErrNotOwned)
	}
	sb, err := p.open(ctx, r, hash)
	if err != nil {
		return nil, fmt.Errorf("attach sandbox %s: %w", ref.ID, err)
	}
	return sb, nil
}

// open verifies ownership, waits for the sandbox to be started and returns
// a handle.
func (p *Provider) open(ctx context.Context, r *remote, hash string) (*remoteSandbox, error) {
	if r.Labels[LabelKeyHash] != hash {
		return nil, sandbox.ErrNotOwned
	}
	if !p.owns(r) {
		return nil, fmt.Errorf("sandbox %s of installation %s, not %s: %w", r.ID, r.Labels[LabelInstallation], p.cfg.Installation, sandbox.ErrNotOwned)
	}
	r, err := p.waitStarted(ctx, r)
	if err != nil {
		return nil, err
	}
	s := &remoteSandbox{
		p:   p,
		ref: sandbox.Ref{Provider: Name, ID: r.ID},
		env: r.Env,
	}
	s.toolbox.Store(toolboxOf(r))
	root, err := s.workDir(ctx)
	if err != nil {
		return nil, err
	}
	s.root = root
	return s, nil
}

// waitStarted polls until the sandbox is started, starting it when it is
// stopped, paused or archived.
func (p *Provider) waitStarted(ctx context.Context, r *remote) (*remote, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.StartTimeout)
	defer cancel()
	interval := p.cfg.PollInterval
	started := false
	for {
		switch r.State {
		case "started":
			if r.ToolboxProxyURL == "" {
				return nil, fmt.Errorf("daytona sandbox %s: %w: no toolboxProxyUrl", r.ID, errMalformed)
			}
			return r, nil
		case "stopped", "paused", "archived":
			if !started {
				_, err := p.do(ctx, request{method: http.MethodPost, url: p.api("/sandbox/" + url.PathEscape(r.ID) + "/start"), idempotent: true})
				if err != nil && statusOf(err) != http.StatusConflict {
					if statusOf(err) == http.StatusNotFound {
						return nil, fmt.Errorf("daytona sandbox %s: %w", r.ID, sandbox.ErrNotFound)
					}
					return nil, fmt.Errorf("start sandbox %s: %w", r.ID, err)
				}
				started = true
			}
		case "error", "build_failed":
			return nil, fmt.Errorf("daytona sandbox %s is in state %s: %s", r.ID, r.State, r.ErrorReason)
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("daytona sandbox %s: waiting for state started (now %s): %w", r.ID, r.State, ctx.Err())
		case <-t.C:
		}
		interval = min(interval*2, 2*time.Second)
		next, err := p.get(ctx, r.ID)
		if err != nil {
			return nil, err
		}
		r = next
	}
}

// owns reports whether r is labelled for this installation or for none
// (legacy).
func (p *Provider) owns(r *remote) bool {
	return sandbox.OwnedBy(r.Labels[LabelInstallation], p.cfg.Installation)
}

// List returns every Mango-managed sandbox visible to the API key that is
// labelled for this installation or for none (legacy).
func (p *Provider) List(ctx context.Context) ([]sandbox.Owned, error) {
	found, err := p.list(ctx, map[string]string{LabelManaged: "true"})
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	owned := make([]sandbox.Owned, 0, len(found))
	for _, r := range found {
		h := r.Labels[LabelKeyHash]
		if r.Labels[LabelManaged] != "true" || h == "" || !p.owns(&r) {
			continue
		}
		o := sandbox.Owned{Ref: sandbox.Ref{Provider: Name, ID: r.ID}, KeyHash: h, Installation: r.Labels[LabelInstallation]}
		if t, err := time.Parse(time.RFC3339Nano, r.CreatedAt); err == nil {
			o.CreatedAt = t
		}
		owned = append(owned, o)
	}
	return owned, nil
}

// DestroyRef deletes the sandbox ref names; a missing one is not an error.
// It refuses a sandbox not managed by Mango or of another installation.
func (p *Provider) DestroyRef(ctx context.Context, ref sandbox.Ref) error {
	if ref.Provider != Name {
		return fmt.Errorf("destroy sandbox %s: reference of provider %q: %w", ref.ID, ref.Provider, sandbox.ErrNotOwned)
	}
	r, err := p.get(ctx, ref.ID)
	if errors.Is(err, sandbox.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("destroy sandbox %s: %w", ref.ID, err)
	}
	if r.ID != ref.ID || r.Labels[LabelManaged] != "true" {
		return fmt.Errorf("destroy sandbox %s: not managed by Mango: %w", ref.ID, sandbox.ErrNotOwned)
	}
	if !p.owns(r) {
		return fmt.Errorf("destroy sandbox %s: of installation %s, not %s: %w", ref.ID, r.Labels[LabelInstallation], p.cfg.Installation, sandbox.ErrNotOwned)
	}
	return p.delete(ctx, ref.ID)
}

func (p *Provider) delete(ctx context.Context, id string) error {
	_, err := p.do(ctx, request{method: http.MethodDelete, url: p.api("/sandbox/" + url.PathEscape(id)), idempotent: true})
	if err != nil && statusOf(err) != http.StatusNotFound {
		return fmt.Errorf("destroy sandbox %s: %w", id, err)
	}
	return nil
}

// toolboxURL is the toolbox base of a sandbox.
type toolboxURL struct{ base string }

func toolboxOf(r *remote) *toolboxURL {
	return &toolboxURL{base: strings.TrimRight(r.ToolboxProxyURL, "/") + "/" + url.PathEscape(r.ID)}
}

// remoteSandbox is one session's Daytona sandbox.
type remoteSandbox struct {
	p         *Provider
	ref       sandbox.Ref
	root      string
	env       map[string]string
	toolbox   atomic.Pointer[toolboxURL]
	destroyed atomic.Bool
}

func (s *remoteSandbox) Ref() sandbox.Ref { return s.ref }
func (s *remoteSandbox) Root() string     { return s.root }

// Destroy deletes the sandbox. It is idempotent.
func (s *remoteSandbox) Destroy(ctx context.Context) error {
	if err := s.p.delete(ctx, s.ref.ID); err != nil {
		return err
	}
	s.destroyed.Store(true)
	return nil
}

func (s *remoteSandbox) usable(ctx context.Context) error {
	if s.destroyed.Load() {
		return sandbox.ErrDestroyed
	}
	return ctx.Err()
}

// workDir asks the toolbox for its working directory, the workspace root.
func (s *remoteSandbox) workDir(ctx context.Context) (string, error) {
	data, err := s.call(ctx, "/work-dir", request{method: http.MethodGet, idempotent: true})
	if err != nil {
		return "", err
	}
	var wd struct {
		Dir string `json:"dir"`
	}
	if err := decode("work-dir", data, &wd); err != nil {
		return "", err
	}
	if !strings.HasPrefix(wd.Dir, "/") || strings.ContainsAny(wd.Dir, "\n\x00") {
		return "", fmt.Errorf("daytona: work-dir: %w: %q is not an absolute path", errMalformed, wd.Dir)
	}
	return path.Clean(wd.Dir), nil
}

// call runs a toolbox request. When it fails with a status the proxy uses
// for a sandbox that is not running, the sandbox's state decides: gone is
// ErrNotFound (ErrDestroyed after Destroy); stopped or paused (auto-pause)
// is started again and, unless the request is not idempotent, retried once.
func (s *remoteSandbox) call(ctx context.Context, tbPath string, req request) ([]byte, error) {
	req.url = s.toolbox.Load().base + tbPath
	data, err := s.p.do(ctx, req)
	if err == nil || ctx.Err() != nil {
		return data, err
	}
	st := statusOf(err)
	if st == 0 || st == http.StatusTooManyRequests {
		return nil, err
	}
	r, gerr := s.p.get(ctx, s.ref.ID)
	switch {
	case errors.Is(gerr, sandbox.ErrNotFound):
		if s.destroyed.Load() {
			return nil, sandbox.ErrDestroyed
		}
		return nil, fmt.Errorf("daytona sandbox %s: %w", s.ref.ID, sandbox.ErrNotFound)
	case gerr != nil || r.State == "started":
		return nil, err
	}
	r, serr := s.p.waitStarted(ctx, r)
	if serr != nil {
		return nil, serr
	}
	s.toolbox.Store(toolboxOf(r))
	req.url = s.toolbox.Load().base + tbPath
	return s.p.do(ctx, req)
}

var (
	_ sandbox.Provider  = (*Provider)(nil)
	_ sandbox.Lister    = (*Provider)(nil)
	_ sandbox.Destroyer = (*Provider)(nil)
	_ sandbox.Capable   = (*Provider)(nil)
	_ sandbox.Sandbox   = (*remoteSandbox)(nil)
)
