// Package e2bproto is the client of the E2B sandbox protocol shared by the
// "e2b" and "cube" providers: the REST control plane (create, connect, get,
// list, kill, timeout) and envd, the in-sandbox agent on port 49983
// (process.Process/Start over Connect with the JSON codec, files over
// /files). The provider packages only translate their configuration into a
// [Config].
package e2bproto

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mangohq/mango/execution-worker/internal/httpcall"
	"github.com/mangohq/mango/execution-worker/sandbox"
)

// Metadata keys holding the ownership labels.
const (
	// LabelKeyHash holds sandbox.KeyHash of the session key.
	LabelKeyHash = "mango.session_key_hash"
	// LabelInstallation holds the installation id (absent on sandboxes
	// created before installation ids).
	LabelInstallation = sandbox.LabelInstallation
)

// EnvdPort is the port envd listens on inside a sandbox.
const EnvdPort = 49983

// Auth selects how the API key is sent.
type Auth int

const (
	// AuthAPIKey sends X-API-Key (E2B).
	AuthAPIKey Auth = iota
	// AuthBearer sends Authorization: Bearer.
	AuthBearer
)

// Defaults of [Config].
const (
	DefaultIdleTimeout   = 15 * time.Minute
	DefaultExecTimeout   = sandbox.DefaultExecTimeout
	DefaultMaxOutput     = sandbox.DefaultMaxOutput
	DefaultEnvdUser      = "user"
	DefaultRetryAttempts = 1 + httpcall.DefaultRetries
	DefaultRetryBase     = httpcall.DefaultBase
	DefaultRetryMax      = httpcall.DefaultMax
	DefaultRetryAfterMax = 30 * time.Second
)

// Config configures a provider speaking the E2B protocol.
type Config struct {
	// Name is the provider name ("e2b", "cube").
	Name string
	// Installation is the installation id recorded in every sandbox's
	// metadata (required; see [sandbox.ValidateInstallation]).
	Installation string
	// APIURL is the control plane base URL, without a trailing slash.
	APIURL string
	// APIKey authenticates the control plane (empty: no authentication).
	APIKey string
	// Auth selects the header carrying APIKey.
	Auth Auth
	// TemplateID is the sandbox template.
	TemplateID string
	// Domain is the sandbox domain used when the service does not return
	// one: envd is reached at <EnvdScheme>://49983-<sandboxID>.<Domain>.
	Domain string
	// EnvdScheme is "https" (default) or "http".
	EnvdScheme string
	// EnvdProxyAddr, when set, is the host:port every envd request is sent
	// to, with the sandbox host (49983-<id>.<domain>) in the Host header:
	// for deployments without wildcard DNS, and for offline fakes.
	EnvdProxyAddr string
	// EnvdUser is the user envd runs commands as (default "user").
	EnvdUser string
	// IdleTimeout is the sandbox time to live after the last activity.
	IdleTimeout time.Duration
	// AutoPause pauses instead of killing a sandbox at its timeout.
	AutoPause bool
	// UseConnect attaches with POST /sandboxes/{id}/connect (resuming a
	// paused sandbox); otherwise GET /sandboxes/{id} plus POST timeout.
	UseConnect bool
	// ListPath is the list endpoint ("/v2/sandboxes" or "/sandboxes").
	ListPath string
	// Capabilities are reported through sandbox.Capable.
	Capabilities []string
	// ExecTimeout and MaxOutput are command defaults.
	ExecTimeout time.Duration
	MaxOutput   int
	// Retries of idempotent calls.
	RetryAttempts int
	RetryBase     time.Duration
	RetryMax      time.Duration
	RetryAfterMax time.Duration
	// HTTPClient is used for every call (default: a client without a
	// global timeout; every call is bounded by its context).
	HTTPClient *http.Client
}

func (c Config) withDefaults() Config {
	c.APIURL = strings.TrimRight(c.APIURL, "/")
	c.EnvdScheme = cmp.Or(c.EnvdScheme, "https")
	c.EnvdUser = cmp.Or(c.EnvdUser, DefaultEnvdUser)
	c.IdleTimeout = cmp.Or(c.IdleTimeout, DefaultIdleTimeout)
	c.ListPath = cmp.Or(c.ListPath, "/v2/sandboxes")
	c.ExecTimeout = cmp.Or(c.ExecTimeout, DefaultExecTimeout)
	c.MaxOutput = cmp.Or(c.MaxOutput, DefaultMaxOutput)
	c.RetryAttempts = max(1, cmp.Or(c.RetryAttempts, DefaultRetryAttempts))
	c.RetryBase = cmp.Or(c.RetryBase, DefaultRetryBase)
	c.RetryMax = cmp.Or(c.RetryMax, DefaultRetryMax)
	c.RetryAfterMax = cmp.Or(c.RetryAfterMax, DefaultRetryAfterMax)
	c.HTTPClient = cmp.Or(c.HTTPClient, &http.Client{})
	return c
}

// EnvdEndpoint returns the base URL of a sandbox's envd and the Host header
// to send (empty: the URL's own host). Without a proxy it is
// <scheme>://49983-<id>.<domain>, the address the real services publish.
func (c *Config) EnvdEndpoint(sandboxID, domain string) (baseURL, host string) {
	domain = cmp.Or(domain, c.Domain)
	h := fmt.Sprintf("%d-%s.%s", EnvdPort, sandboxID, domain)
	if c.EnvdProxyAddr != "" {
		return c.EnvdScheme + "://" + c.EnvdProxyAddr, h
	}
	return c.EnvdScheme + "://" + h, ""
}

// Provider is a sandbox provider speaking the E2B protocol. It keeps no
// per-session state: every client of one service sees the same sandboxes.
type Provider struct {
	cfg Config
}

// New returns a provider for cfg.
func New(cfg Config) (*Provider, error) {
	cfg = cfg.withDefaults()
	var missing []string
	if cfg.Name == "" {
		missing = append(missing, "Name")
	}
	if cfg.APIURL == "" {
		missing = append(missing, "APIURL")
	}
	if cfg.TemplateID == "" {
		missing = append(missing, "TemplateID")
	}
	if cfg.Domain == "" {
		missing = append(missing, "Domain")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("e2b protocol: missing %s", strings.Join(missing, ", "))
	}
	if err := sandbox.ValidateInstallation(cfg.Installation); err != nil {
		return nil, fmt.Errorf("e2b protocol: %w", err)
	}
	if _, err := url.Parse(cfg.APIURL); err != nil {
		return nil, fmt.Errorf("e2b protocol: API URL: %w", err)
	}
	return &Provider{cfg: cfg}, nil
}

// Config returns the effective configuration.
func (p *Provider) Config() Config { return p.cfg }

// Name returns the configured provider name.
func (p *Provider) Name() string { return p.cfg.Name }

// Capabilities returns the configured capabilities.
func (p *Provider) Capabilities() []string { return slices.Clone(p.cfg.Capabilities) }

// sandboxInfo is the union of the service's Sandbox, SandboxDetail and
// ListedSandbox.
type sandboxInfo struct {
	SandboxID       string            `json:"sandboxID"`
	TemplateID      string            `json:"templateID"`
	StartedAt       time.Time         `json:"startedAt"`
	EndAt           time.Time         `json:"endAt"`
	State           string            `json:"state"`
	Metadata        map[string]string `json:"metadata"`
	EnvdAccessToken string            `json:"envdAccessToken"`
	Domain          *string           `json:"domain"`
}

func (s sandboxInfo) domain() string {
	if s.Domain != nil {
		return *s.Domain
	}
	return ""
}

func (p *Provider) timeoutSeconds() int {
	return max(1, int(p.cfg.IdleTimeout/time.Second))
}

func sandboxPath(id string) string { return "/sandboxes/" + url.PathEscape(id) }

// list returns the sandboxes carrying all of the given metadata (all Mango
// ones when filter is empty), running or paused, oldest first, leaving out
// those of other installations.
func (p *Provider) list(ctx context.Context, filter map[string]string) ([]sandboxInfo, error) {
	var all []sandboxInfo
	next := ""
	for page := 0; page < 1000; page++ {
		q := url.Values{}
		if len(filter) > 0 {
			m := url.Values{}
			for k, v := range filter {
				m.Set(k, v)
			}
			q.Set("metadata", m.Encode())
		}
		if p.cfg.ListPath == "/v2/sandboxes" {
			q.Set("state", "running,paused")
			q.Set("limit", "100")
			if next != "" {
				q.Set("nextToken", next)
			}
		}
		var items []sandboxInfo
		h, err := p.cfg.apiJSON(ctx, "list sandboxes", retrySafe, http.MethodGet, p.cfg.ListPath+"?"+q.Encode(), nil, &items)
		if err != nil {
			return nil, err
		}
		for _, it := range items {
			if matches(it.Metadata, filter) && hashLabel.MatchString(it.Metadata[LabelKeyHash]) &&
				sandbox.OwnedBy(it.Metadata[LabelInstallation], p.cfg.Installation) {
				all = append(all, it)
			}
		}
		next = h.Get("X-Next-Token")
		if next == "" || len(items) == 0 || p.cfg.ListPath != "/v2/sandboxes" {
			break
		}
	}
	slices.SortStableFunc(all, func(a, b sandboxInfo) int {
		if c := a.StartedAt.Compare(b.StartedAt); c != 0 {
			return c
		}
		return strings.Compare(a.SandboxID, b.SandboxID)
	})
	return all, nil
}

var hashLabel = regexp.MustCompile(`^[0-9a-f]{32}$`)

func matches(md, filter map[string]string) bool {
	for k, v := range filter {
		if md[k] != v {
			return false
		}
	}
	return true
}

// Create returns the sandbox of sessionKey: the oldest sandbox labelled
// with its key hash, or a new one. Concurrent creators converge: after
// creating, each lists again and keeps the oldest labelled sandbox, killing
// its own if it lost.
func (p *Provider) Create(ctx context.Context, sessionKey string, spec sandbox.Spec) (sandbox.Sandbox, sandbox.Ref, error) {
	if err := ctx.Err(); err != nil {
		return nil, sandbox.Ref{}, err
	}
	if sessionKey == "" {
		return nil, sandbox.Ref{}, errors.New("create sandbox: empty session key")
	}
	hash := sandbox.KeyHash(sessionKey)
	filter := map[string]string{LabelKeyHash: hash}
	found, err := p.list(ctx, filter)
	if err != nil {
		return nil, sandbox.Ref{}, fmt.Errorf("create sandbox: %w", err)
	}
	if len(found) > 0 {
		return p.openRef(ctx, found[0].SandboxID, hash)
	}

	req := map[string]any{
		"templateID": p.cfg.TemplateID,
		"timeout":    p.timeoutSeconds(),
		"metadata":   map[string]string{LabelKeyHash: hash, LabelInstallation: p.cfg.Installation},
	}
	if p.cfg.AutoPause {
		req["autoPause"] = true
	}
	if len(spec.Env) > 0 {
		req["envVars"] = spec.Env
	}
	var created sandboxInfo
	if _, err := p.cfg.apiJSON(ctx, "create sandbox", retryUnprocessed, http.MethodPost, "/sandboxes", req, &created); err != nil {
		return nil, sandbox.Ref{}, err
	}
	if created.SandboxID == "" {
		return nil, sandbox.Ref{}, errors.New("create sandbox: answer without sandboxID")
	}

	found, err = p.list(ctx, filter)
	if err != nil {
		return nil, sandbox.Ref{}, fmt.Errorf("create sandbox: %w", errors.Join(err, p.kill(created.SandboxID)))
	}
	if len(found) > 0 && found[0].SandboxID != created.SandboxID {
		// Another client created this key's sandbox first: use it, once
		// this one is gone (a sandbox left running is billed).
		if err := p.kill(created.SandboxID); err != nil {
			return nil, sandbox.Ref{}, fmt.Errorf("create sandbox: lost the race to %s: %w", found[0].SandboxID, err)
		}
		return p.openRef(ctx, found[0].SandboxID, hash)
	}
	sb, err := p.open(ctx, created)
	if err != nil {
		return nil, sandbox.Ref{}, err
	}
	return sb, sb.ref, nil
}

func (p *Provider) openRef(ctx context.Context, id, hash string) (sandbox.Sandbox, sandbox.Ref, error) {
	sb, err := p.attach(ctx, id, hash)
	if err != nil {
		return nil, sandbox.Ref{}, fmt.Errorf("create sandbox: %w", err)
	}
	return sb, sb.ref, nil
}

// kill removes a sandbox this client created and lost a race with, on its
// own context: the caller's may be done. Its error names the sandbox,
// which may be left running (and billed) until its timeout.
func (p *Provider) kill(id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.deleteSandbox(ctx, id); err != nil {
		return fmt.Errorf("remove the sandbox %s created meanwhile: %w", id, err)
	}
	return nil
}

func (p *Provider) deleteSandbox(ctx context.Context, id string) error {
	_, err := p.cfg.apiJSON(ctx, "kill sandbox "+id, retrySafe, http.MethodDelete, sandboxPath(id), nil, nil)
	if statusOf(err) == http.StatusNotFound {
		return nil
	}
	return err
}

// Attach reconnects to ref after checking its ownership label.
func (p *Provider) Attach(ctx context.Context, sessionKey string, ref sandbox.Ref) (sandbox.Sandbox, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if ref.Provider != p.cfg.Name {
		return nil, fmt.Errorf("attach sandbox %s: reference of provider %q, not %q: %w", ref.ID, ref.Provider, p.cfg.Name, sandbox.ErrNotOwned)
	}
	if ref.ID == "" {
		return nil, fmt.Errorf("attach sandbox: empty id: %w", sandbox.ErrNotFound)
	}
	sb, err := p.attach(ctx, ref.ID, sandbox.KeyHash(sessionKey))
	if err != nil {
		return nil, fmt.Errorf("attach sandbox %s: %w", ref.ID, err)
	}
	return sb, nil
}

// attach verifies the label of sandbox id (before resuming anything), then
// connects to it.
func (p *Provider) attach(ctx context.Context, id, hash string) (*remoteSandbox, error) {
	var detail sandboxInfo
	_, err := p.cfg.apiJSON(ctx, "get sandbox "+id, retrySafe, http.MethodGet, sandboxPath(id), nil, &detail)
	if statusOf(err) == http.StatusNotFound {
		return nil, sandbox.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	if detail.Metadata[LabelKeyHash] != hash {
		return nil, sandbox.ErrNotOwned
	}
	if inst := detail.Metadata[LabelInstallation]; !sandbox.OwnedBy(inst, p.cfg.Installation) {
		return nil, fmt.Errorf("sandbox of installation %s, not %s: %w", inst, p.cfg.Installation, sandbox.ErrNotOwned)
	}
	info, err := p.connect(ctx, id)
	if err != nil {
		return nil, err
	}
	if info.EnvdAccessToken == "" {
		info.EnvdAccessToken = detail.EnvdAccessToken
	}
	if info.Domain == nil {
		info.Domain = detail.Domain
	}
	return p.open(ctx, info)
}

// connect resumes a paused sandbox and extends its time to live; it returns
// the sandbox's envd coordinates.
func (p *Provider) connect(ctx context.Context, id string) (sandboxInfo, error) {
	body := map[string]int{"timeout": p.timeoutSeconds()}
	var info sandboxInfo
	var err error
	if p.cfg.UseConnect {
		_, err = p.cfg.apiJSON(ctx, "connect sandbox "+id, retrySafe, http.MethodPost, sandboxPath(id)+"/connect", body, &info)
	} else {
		_, err = p.cfg.apiJSON(ctx, "set sandbox timeout "+id, retrySafe, http.MethodPost, sandboxPath(id)+"/timeout", body, nil)
		if err == nil {
			_, err = p.cfg.apiJSON(ctx, "get sandbox "+id, retrySafe, http.MethodGet, sandboxPath(id), nil, &info)
		}
	}
	if statusOf(err) == http.StatusNotFound {
		return info, sandbox.ErrNotFound
	}
	if err != nil {
		return info, err
	}
	info.SandboxID = cmp.Or(info.SandboxID, id)
	return info, nil
}

// open builds the sandbox value and discovers its workspace root.
func (p *Provider) open(ctx context.Context, info sandboxInfo) (*remoteSandbox, error) {
	s := &remoteSandbox{
		p:   p,
		ref: sandbox.Ref{Provider: p.cfg.Name, ID: info.SandboxID},
	}
	s.setEnvd(info)
	s.touched.Store(time.Now().UnixNano())
	root, err := s.probeRoot(ctx)
	if err != nil {
		return nil, err
	}
	s.root = root
	return s, nil
}

// List returns every sandbox carrying a Mango ownership label and this
// installation's id or none (legacy).
func (p *Provider) List(ctx context.Context) ([]sandbox.Owned, error) {
	found, err := p.list(ctx, nil)
	if err != nil {
		return nil, err
	}
	owned := make([]sandbox.Owned, 0, len(found))
	for _, f := range found {
		owned = append(owned, sandbox.Owned{
			Ref:          sandbox.Ref{Provider: p.cfg.Name, ID: f.SandboxID},
			KeyHash:      f.Metadata[LabelKeyHash],
			Installation: f.Metadata[LabelInstallation],
			CreatedAt:    f.StartedAt,
		})
	}
	return owned, nil
}

// DestroyRef kills the sandbox ref names; a missing one is not an error.
// It refuses a sandbox of another installation.
func (p *Provider) DestroyRef(ctx context.Context, ref sandbox.Ref) error {
	if ref.Provider != p.cfg.Name {
		return fmt.Errorf("destroy sandbox %s: reference of provider %q: %w", ref.ID, ref.Provider, sandbox.ErrNotOwned)
	}
	var detail sandboxInfo
	_, err := p.cfg.apiJSON(ctx, "get sandbox "+ref.ID, retrySafe, http.MethodGet, sandboxPath(ref.ID), nil, &detail)
	switch {
	case statusOf(err) == http.StatusNotFound:
		return nil
	case err != nil:
		return fmt.Errorf("destroy sandbox %s: %w", ref.ID, err)
	case !sandbox.OwnedBy(detail.Metadata[LabelInstallation], p.cfg.Installation):
		return fmt.Errorf("destroy sandbox %s: sandbox of installation %s, not %s: %w",
			ref.ID, detail.Metadata[LabelInstallation], p.cfg.Installation, sandbox.ErrNotOwned)
	}
	return p.deleteSandbox(ctx, ref.ID)
}

// envdState holds a sandbox's envd coordinates, refreshed by connect.
type envdState struct {
	mu      sync.Mutex
	baseURL string
	host    string
	token   string
}

var (
	_ sandbox.Provider  = (*Provider)(nil)
	_ sandbox.Lister    = (*Provider)(nil)
	_ sandbox.Destroyer = (*Provider)(nil)
	_ sandbox.Capable   = (*Provider)(nil)
)
