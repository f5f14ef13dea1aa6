// Package sandboxopensandbox is the "opensandbox" sandbox provider: each
// session gets a sandbox of an independently deployed OpenSandbox server
// (alibaba/OpenSandbox), reached through its published HTTP protocols with
// a hand-written client.
//
// # Lifecycle
//
// POST /v1/sandboxes answers 202 with a Pending sandbox; Create polls
// GET /v1/sandboxes/{id} until it is Running. Every sandbox carries the
// metadata mango.managed=true, mango.session_key_hash=<KeyHash> and
// mango.installation=<installation id>; the raw session key is never sent.
// Sandboxes of other installations sharing the server are never listed,
// attached or deleted; legacy ones without mango.installation are used
// only through this installation's bindings. Create first looks the key's sandbox up by
// that metadata. Concurrent creators converge: after creating, a client
// lists the key's sandboxes again, keeps the oldest (createdAt, then id) and
// deletes its own if it lost. Attach checks the metadata (mismatch:
// [sandbox.ErrNotOwned]); a missing, Stopping, Terminated or Failed sandbox
// is [sandbox.ErrNotFound]. A Paused sandbox is resumed.
//
// # Commands and files
//
// The in-sandbox daemon execd is found with GET
// /v1/sandboxes/{id}/endpoints/44772 (use_server_proxy when configured);
// the endpoint's headers are sent with every execd call. POST /command
// streams JSON events separated by blank lines; the exit code is the evalue
// of an "error" event, else 0. Commands run under setsid writing their
// process group id to /tmp/.mango-exec/TOKEN.pid; cancellation and timeouts
// kill that group from a second command. Output is spooled to files beside
// the pid file and fetched with /files/download (binary safe, capped with a
// Range request); stdin is uploaded first with /files/upload. Paths are
// checked lexically against the workspace root and then resolved inside the
// sandbox with readlink -f; a resolution leaving the root is
// [sandbox.ErrPathEscape].
//
// The workspace root is $MANGO_WORKSPACE of the sandbox (set to /workspace
// at creation), created on first use.
package sandboxopensandbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mangohq/mango/execution-worker/internal/httpcall"
	"github.com/mangohq/mango/execution-worker/sandbox"
)

// Name is the name the provider is registered under.
const Name = "opensandbox"

// Metadata keys set on every sandbox.
const (
	LabelManaged      = "mango.managed"
	LabelKeyHash      = "mango.session_key_hash"
	LabelInstallation = sandbox.LabelInstallation
)

// Ports of in-sandbox services.
const (
	ExecdPort  = 44772
	EgressPort = 18080
)

// DefaultRoot is the workspace root requested at creation.
const DefaultRoot = "/workspace"

// Factory is the registry entry of the provider: remote, not bound to the
// worker's host.
var Factory = sandbox.Factory{
	Traits:    sandbox.Traits{},
	Configure: sandbox.FromEnv(ConfigFromEnv, New, func(c *Config, id string) { c.Installation = id }),
}

// Provider is the OpenSandbox provider. It is safe for concurrent use.
type Provider struct {
	cfg  Config
	base string // scheme://host[:port][/prefix]
}

// New returns a provider; it does not contact the server.
func New(cfg Config) (*Provider, error) {
	if cfg.Domain == "" {
		return nil, fmt.Errorf("%s is required", EnvDomain)
	}
	if err := sandbox.ValidateInstallation(cfg.Installation); err != nil {
		return nil, err
	}
	u, err := baseURL(cfg.Domain)
	if err != nil {
		return nil, fmt.Errorf("%s=%q: %w", EnvDomain, cfg.Domain, err)
	}
	return &Provider{cfg: cfg.withDefaults(), base: u.String()}, nil
}

// Name returns "opensandbox".
func (*Provider) Name() string { return Name }

// Capabilities reports per-sandbox egress allow-lists ([Provider.SetEgress])
// and package installation (sandboxes reach the network unless limited).
func (*Provider) Capabilities() []string {
	return []string{sandbox.CapabilityLimitedNetworking, sandbox.CapabilityPackages}
}

// Wire types of the lifecycle API.
type (
	imageSpec struct {
		URI string `json:"uri"`
	}
	networkRule struct {
		Action string `json:"action"`
		Target string `json:"target"`
	}
	// NetworkPolicy is the egress policy of a sandbox.
	NetworkPolicy struct {
		DefaultAction string        `json:"defaultAction,omitempty"`
		Egress        []networkRule `json:"egress,omitempty"`
	}
	createRequest struct {
		Image          imageSpec         `json:"image"`
		Entrypoint     []string          `json:"entrypoint"`
		ResourceLimits map[string]string `json:"resourceLimits"`
		Env            map[string]string `json:"env,omitempty"`
		Metadata       map[string]string `json:"metadata"`
		// NetworkPolicy is set for limited networking: the server then
		// starts the egress sidecar, enforcing it from the first command.
		NetworkPolicy *NetworkPolicy `json:"networkPolicy,omitempty"`
	}
	status struct {
		State   string `json:"state"`
		Reason  string `json:"reason,omitempty"`
		Message string `json:"message,omitempty"`
	}
	remoteSandbox struct {
		ID        string            `json:"id"`
		Status    status            `json:"status"`
		Metadata  map[string]string `json:"metadata"`
		CreatedAt time.Time         `json:"createdAt"`
	}
	listResponse struct {
		Items      []remoteSandbox `json:"items"`
		Pagination struct {
			HasNextPage bool `json:"hasNextPage"`
		} `json:"pagination"`
	}
	endpointResponse struct {
		Endpoint string            `json:"endpoint"`
		Headers  map[string]string `json:"headers"`
	}
)

// gone reports states from which a sandbox never comes back.
func gone(state string) bool {
	switch state {
	case "Stopping", "Terminated", "Failed":
		return true
	}
	return false
}

func (p *Provider) metadata(hash string) map[string]string {
	m := map[string]string{}
	maps.Copy(m, p.cfg.Labels)
	m[LabelManaged] = "true"
	m[LabelKeyHash] = hash
	m[LabelInstallation] = p.cfg.Installation
	return m
}

// list returns the sandboxes whose metadata include filter (all pages),
// leaving out those of other installations.
func (p *Provider) list(ctx context.Context, filter map[string]string) ([]remoteSandbox, error) {
	f := url.Values{}
	for _, k := range slices.Sorted(maps.Keys(filter)) {
		f.Set(k, filter[k])
	}
	var out []remoteSandbox
	for page := 1; page <= 1000; page++ {
		q := url.Values{}
		q.Set("metadata", f.Encode())
		q.Set("page", strconv.Itoa(page))
		q.Set("pageSize", "100")
		var lr listResponse
		if err := p.lifecycle(ctx, "list sandboxes", http.MethodGet, "/sandboxes?"+q.Encode(), nil, &lr, true); err != nil {
			return nil, err
		}
		for _, s := range lr.Items {
			// Filter again: a server ignoring the filter must not make us
			// claim foreign sandboxes.
			if matches(s.Metadata, filter) && sandbox.OwnedBy(s.Metadata[LabelInstallation], p.cfg.Installation) {
				out = append(out, s)
			}
		}
		if !lr.Pagination.HasNextPage || len(lr.Items) == 0 {
			break
		}
	}
	return out, nil
}

func matches(md, filter map[string]string) bool {
	for k, v := range filter {
		if md[k] != v {
			return false
		}
	}
	return true
}

// oldest returns the live sandbox all creators agree on.
func oldest(items []remoteSandbox) (remoteSandbox, bool) {
	live := slices.DeleteFunc(slices.Clone(items), func(s remoteSandbox) bool { return gone(s.Status.State) })
	if len(live) == 0 {
		return remoteSandbox{}, false
	}
	return slices.MinFunc(live, func(a, b remoteSandbox) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	}), true
}

// Create returns the sandbox of sessionKey, creating it if needed.
func (p *Provider) Create(ctx context.Context, sessionKey string, spec sandbox.Spec) (sandbox.Sandbox, sandbox.Ref, error) {
	if sessionKey == "" {
		return nil, sandbox.Ref{}, errors.New("create sandbox: empty session key")
	}
	hash := sandbox.KeyHash(sessionKey)
	sb, err := p.createOrFind(ctx, hash, spec)
	if err != nil {
		return nil, sandbox.Ref{}, fmt.Errorf("create sandbox for %s: %w", hash, err)
	}
	return sb, sb.ref, nil
}

func (p *Provider) createOrFind(ctx context.Context, hash string, spec sandbox.Spec) (*remote, error) {
	owner := map[string]string{LabelManaged: "true", LabelKeyHash: hash}
	existing, err := p.list(ctx, owner)
	if err != nil {
		return nil, err
	}
	if s, ok := oldest(existing); ok {
		return p.open(ctx, s.ID, hash)
	}
	env := map[string]string{}
	maps.Copy(env, spec.Env)
	if _, ok := env["MANGO_WORKSPACE"]; !ok {
		env["MANGO_WORKSPACE"] = DefaultRoot
	}
	req := createRequest{
		Image:          imageSpec{URI: cmp.Or(spec.Image, p.cfg.Image)},
		Entrypoint:     []string{"tail", "-f", "/dev/null"},
		ResourceLimits: map[string]string{"cpu": p.cfg.CPU, "memory": p.cfg.Memory},
		Env:            env,
		Metadata:       p.metadata(hash),
	}
	if spec.Network != nil {
		pol := EgressPolicy(spec.Network.AllowedHosts)
		req.NetworkPolicy = &pol
	}
	var created remoteSandbox
	if err := p.lifecycle(ctx, "create sandbox", http.MethodPost, "/sandboxes", req, &created, false); err != nil {
		return nil, err
	}
	if created.ID == "" {
		return nil, errors.New("create sandbox: response without id")
	}
	// A concurrent creator may have won: all agree on the oldest.
	all, err := p.list(ctx, owner)
	if err != nil {
		return nil, err
	}
	if !slices.ContainsFunc(all, func(s remoteSandbox) bool { return s.ID == created.ID }) {
		all = append(all, created)
	}
	winner, _ := oldest(all)
	if winner.ID != "" && winner.ID != created.ID {
		_ = p.deleteSandbox(context.WithoutCancel(ctx), created.ID)
		return p.open(ctx, winner.ID, hash)
	}
	return p.open(ctx, created.ID, hash)
}

// get fetches one sandbox; 404 is ErrNotFound.
func (p *Provider) get(ctx context.Context, id string) (remoteSandbox, error) {
	var s remoteSandbox
	err := p.lifecycle(ctx, "get sandbox", http.MethodGet, "/sandboxes/"+url.PathEscape(id), nil, &s, true)
	if statusOf(err) == http.StatusNotFound {
		return s, fmt.Errorf("sandbox %s: %w", id, sandbox.ErrNotFound)
	}
	return s, err
}

// open waits for id to be Running, checks its owner and finds execd.
func (p *Provider) open(ctx context.Context, id, hash string) (*remote, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.ReadyTimeout)
	defer cancel()
	interval := p.cfg.PollInterval
	resumed := false
	for {
		s, err := p.get(ctx, id)
		if err != nil {
			return nil, err
		}
		if s.Metadata[LabelManaged] != "true" || s.Metadata[LabelKeyHash] != hash {
			return nil, fmt.Errorf("sandbox %s: %w", id, sandbox.ErrNotOwned)
		}
		if err := p.checkInstallation(s); err != nil {
			return nil, err
		}
		switch st := s.Status.State; {
		case st == "Running":
			return p.connect(ctx, id)
		case gone(st):
			return nil, fmt.Errorf("sandbox %s is %s (%s): %w", id, st, s.Status.Reason, sandbox.ErrNotFound)
		case st == "Paused" && !resumed:
			if err := p.lifecycle(ctx, "resume sandbox", http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/resume", nil, nil, true); err != nil && statusOf(err) != http.StatusConflict {
				return nil, err
			}
			resumed = true
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("sandbox %s not Running: %w", id, ctx.Err())
		case <-t.C:
		}
		interval = min(interval*2, time.Second)
	}
}

// endpoint discovers the URL of an in-sandbox port.
func (p *Provider) endpoint(ctx context.Context, id string, port int) (string, http.Header, error) {
	path := "/sandboxes/" + url.PathEscape(id) + "/endpoints/" + strconv.Itoa(port)
	if p.cfg.UseServerProxy {
		path += "?use_server_proxy=true"
	}
	var ep endpointResponse
	if err := p.lifecycle(ctx, "get endpoint", http.MethodGet, path, nil, &ep, true); err != nil {
		if statusOf(err) == http.StatusNotFound {
			return "", nil, fmt.Errorf("sandbox %s: %w", id, sandbox.ErrNotFound)
		}
		return "", nil, err
	}
	if ep.Endpoint == "" {
		return "", nil, fmt.Errorf("get endpoint of sandbox %s: empty endpoint", id)
	}
	u := ep.Endpoint
	if !hasScheme(u) {
		b, _ := url.Parse(p.base)
		u = b.Scheme + "://" + u
	}
	h := http.Header{}
	for k, v := range ep.Headers {
		h.Set(k, v)
	}
	return strings.TrimRight(u, "/"), h, nil
}

// hasScheme reports whether u starts with a scheme ("http://"): a colon
// among its first ten bytes, followed by "//".
func hasScheme(u string) bool {
	i := strings.IndexByte(u, ':')
	return i >= 0 && i < 10 && strings.HasPrefix(u[i+1:], "//")
}

// Attach reconnects to ref after checking its owner.
func (p *Provider) Attach(ctx context.Context, sessionKey string, ref sandbox.Ref) (sandbox.Sandbox, error) {
	if ref.Provider != Name {
		return nil, fmt.Errorf("attach sandbox %s/%s: %w", ref.Provider, ref.ID, sandbox.ErrNotOwned)
	}
	if ref.ID == "" {
		return nil, fmt.Errorf("attach sandbox: empty id: %w", sandbox.ErrNotFound)
	}
	sb, err := p.open(ctx, ref.ID, sandbox.KeyHash(sessionKey))
	if err != nil {
		return nil, fmt.Errorf("attach sandbox %s: %w", ref.ID, err)
	}
	return sb, nil
}

// List returns every Mango-owned sandbox of this installation (or of none:
// legacy) that is not terminated.
func (p *Provider) List(ctx context.Context) ([]sandbox.Owned, error) {
	filter := map[string]string{}
	maps.Copy(filter, p.cfg.Labels)
	filter[LabelManaged] = "true"
	items, err := p.list(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	out := make([]sandbox.Owned, 0, len(items))
	for _, s := range items {
		if s.Status.State == "Terminated" || s.Status.State == "Stopping" {
			continue
		}
		out = append(out, sandbox.Owned{
			Ref:          sandbox.Ref{Provider: Name, ID: s.ID},
			KeyHash:      s.Metadata[LabelKeyHash],
			Installation: s.Metadata[LabelInstallation],
			CreatedAt:    s.CreatedAt,
		})
	}
	return out, nil
}

// DestroyRef deletes ref's sandbox; a missing one is not an error. It
// refuses sandboxes without the mango.managed metadata and those of
// another installation.
func (p *Provider) DestroyRef(ctx context.Context, ref sandbox.Ref) error {
	if ref.Provider != Name {
		return fmt.Errorf("destroy sandbox %s/%s: %w", ref.Provider, ref.ID, sandbox.ErrNotOwned)
	}
	if ref.ID == "" {
		return nil
	}
	s, err := p.get(ctx, ref.ID)
	if errors.Is(err, sandbox.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("destroy sandbox %s: %w", ref.ID, err)
	}
	if s.Metadata[LabelManaged] != "true" {
		return fmt.Errorf("destroy sandbox %s: %w", ref.ID, sandbox.ErrNotOwned)
	}
	if err := p.checkInstallation(s); err != nil {
		return fmt.Errorf("destroy %w", err)
	}
	return p.deleteSandbox(ctx, ref.ID)
}

// checkInstallation reports sandbox.ErrNotOwned when s is labelled for
// another installation.
func (p *Provider) checkInstallation(s remoteSandbox) error {
	if inst := s.Metadata[LabelInstallation]; !sandbox.OwnedBy(inst, p.cfg.Installation) {
		return fmt.Errorf("sandbox %s of installation %s, not %s: %w", s.ID, inst, p.cfg.Installation, sandbox.ErrNotOwned)
	}
	return nil
}

func (p *Provider) deleteSandbox(ctx context.Context, id string) error {
	err := p.lifecycle(ctx, "delete sandbox", http.MethodDelete, "/sandboxes/"+url.PathEscape(id), nil, nil, true)
	if err != nil && statusOf(err) != http.StatusNotFound {
		return fmt.Errorf("destroy sandbox %s: %w", id, err)
	}
	return nil
}

// EgressPolicy returns the deny-by-default policy allowing exactly hosts.
func EgressPolicy(allowedHosts []string) NetworkPolicy {
	pol := NetworkPolicy{DefaultAction: "deny", Egress: []networkRule{}}
	for _, h := range allowedHosts {
		pol.Egress = append(pol.Egress, networkRule{Action: "allow", Target: h})
	}
	return pol
}

// SetEgress replaces the egress policy of ref's sandbox with a
// deny-by-default policy whose allow rules are exactly allowedHosts (FQDNs
// or *.wildcards), through the egress sidecar's /policy endpoint.
func (p *Provider) SetEgress(ctx context.Context, ref sandbox.Ref, allowedHosts []string) error {
	if ref.Provider != Name {
		return fmt.Errorf("set egress of %s/%s: %w", ref.Provider, ref.ID, sandbox.ErrNotOwned)
	}
	base, hdr, err := p.endpoint(ctx, ref.ID, EgressPort)
	if err != nil {
		return fmt.Errorf("set egress of %s: %w", ref.ID, err)
	}
	resp, err := p.do(ctx, "set egress policy", request{
		method: http.MethodPost, url: base + "/policy", header: hdr,
		body: httpcall.JSONBody(EgressPolicy(allowedHosts)), idempotent: true,
	})
	if err != nil {
		return fmt.Errorf("set egress of %s: %w", ref.ID, err)
	}
	_ = resp.Body.Close()
	return nil
}

var (
	_ sandbox.Provider  = (*Provider)(nil)
	_ sandbox.Capable   = (*Provider)(nil)
	_ sandbox.Lister    = (*Provider)(nil)
	_ sandbox.Destroyer = (*Provider)(nil)

	_ sandbox.EgressController = (*Provider)(nil)
)
