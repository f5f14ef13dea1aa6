// Package sandboxk8s is the "k8s" sandbox provider: each session gets a
// Kubernetes SIG Agent Sandbox (sigs.k8s.io/agent-sandbox), made through
// the Kubernetes API with client-go's dynamic client and reached through
// the project's sandbox router.
//
// # Resources
//
// With MANGO_K8S_IMAGE the provider creates an agents.x-k8s.io/v1beta1
// Sandbox whose pod runs that image (one container serving the runtime on
// MANGO_K8S_RUNTIME_PORT, a readiness probe on GET /, no service account
// token). With MANGO_K8S_WARM_POOL it creates an
// extensions.agents.x-k8s.io/v1beta1 SandboxClaim against that
// SandboxWarmPool; the pool names the SandboxTemplate, and the claim
// controller binds a warm Sandbox or cold-starts one from the template
// (v1beta1 claims reference a warm pool, not a template; a pool with zero
// replicas only names its template). Spec.Env goes into the container
// environment (the claim's spec.env, which the template must allow).
//
// The resource of a session is named mango-<KeyHash(sessionKey)> in
// MANGO_K8S_NAMESPACE and labelled app.kubernetes.io/managed-by=mango,
// mango.session_key_hash=<KeyHash> and mango.installation=<installation
// id>; the raw session key is never sent. Resources of other
// installations sharing the namespace are never listed, attached or
// deleted; legacy ones without mango.installation are used only through
// this installation's bindings.
// Create first lists by the hash label, then gets the deterministic name,
// and only then creates; a concurrent Create loses with AlreadyExists and
// adopts the winner's resource. Create and Attach poll until the Ready
// condition is True (for a claim: Ready and status.sandbox.name set),
// within MANGO_K8S_READY_TIMEOUT. Attach verifies both labels (else
// [sandbox.ErrNotOwned]); a resource that is gone, being deleted, finished
// or expired is [sandbox.ErrNotFound]. The Ref ID is "sandbox/NAME" or
// "sandboxclaim/NAME". Destroy deletes the resource with background
// propagation (the controller's owner references remove the pod, service
// and, for a claim, the Sandbox). List pages through the managed resources
// of the configured kind with limit and continue.
//
// Kubernetes calls are retried on 429, 5xx and transport errors with
// capped exponential backoff (honouring Retry-After); all of them are
// idempotent, creation included since the name is deterministic.
//
// # Commands and files
//
// Data-plane requests go to MANGO_K8S_ROUTER_URL with the router's
// headers X-Sandbox-ID (the Sandbox name), X-Sandbox-Namespace,
// X-Sandbox-Port and, when the status reports one, X-Sandbox-Pod-IP; the
// router proxies them to the runtime in the pod. The runtime API is the
// one agent-sandbox's clients speak (examples/python-runtime-sandbox):
// POST /execute {"command"} runs the shlex-split command without a shell
// in the runtime's directory and answers {"stdout","stderr","exit_code"}
// as text; POST /upload takes a multipart "file" part whose file name is
// the path relative to the runtime's root; GET /download/{path} returns
// the bytes. The runtime has no stdin, no cancellation, no output cap, no
// per-call timeout (only its own SANDBOX_EXEC_TIMEOUT_SECONDS, default
// 300s) and no binary-safe output, so Exec sends "/bin/sh -c 'echo
// BASE64 | base64 -d | /bin/sh'" running the wrapper of
// sandbox/internal/shellexec: the command runs under setsid in its own
// process group, stdout and stderr are capped with head -c and come back
// base64-encoded in an envelope with the exit status, and a timeout or
// cancellation kills the group from a second /execute. Stdin and scripts
// too long for one argument are uploaded first as hidden files in the
// workspace root and removed when used. The workspace root is the
// runtime's working directory (pwd); the runtime's file root must be the
// same directory, as it is in the reference runtime (/app).
//
// ReadFile and WriteFile check the path lexically, then resolve it in the
// sandbox with readlink -f through /execute (escapes are
// [sandbox.ErrPathEscape]), then move the bytes with /download and
// /upload. The router proxies each request within its own timeout (180s
// by default), which bounds one command as well.
package sandboxk8s

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"path"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/shellexec"
)

// Labels set on every resource.
const (
	LabelManaged = "app.kubernetes.io/managed-by"
	LabelKeyHash = "mango.session_key_hash"
	// LabelInstallation holds the installation id.
	LabelInstallation = sandbox.LabelInstallation
	// ManagedBy is the value of LabelManaged.
	ManagedBy = "mango"
	// labelCreatedBy is agent-sandbox's label for the creating client.
	labelCreatedBy = "agents.x-k8s.io/created-by"
)

// NamePrefix prefixes the deterministic resource name.
const NamePrefix = "mango-"

// Provider is the Kubernetes Agent Sandbox provider. It is safe for
// concurrent use.
type Provider struct {
	cfg  Config
	kube *kube
	// kind is what Create makes: a Sandbox or a SandboxClaim.
	kind *kind
}

// New returns a provider for cfg. It loads the cluster configuration but
// does not contact the cluster or the router.
func New(cfg Config) (*Provider, error) {
	if cfg.RouterURL == "" {
		return nil, fmt.Errorf("%s is required for the %s sandbox provider", EnvRouterURL, Name)
	}
	if cfg.WarmPool == "" && cfg.Image == "" {
		return nil, fmt.Errorf("%s or %s is required for the %s sandbox provider", EnvWarmPool, EnvImage, Name)
	}
	if err := sandbox.ValidateInstallation(cfg.Installation); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	rc, err := cfg.restConfig()
	if err != nil {
		return nil, err
	}
	if rc.QPS == 0 {
		rc.QPS, rc.Burst = 50, 100
	}
	rc.UserAgent = "mango-execution-worker (" + Name + " sandbox provider)"
	rc.WarningHandlerWithContext = warningLogger{}
	client, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client for the %s sandbox provider: %w", Name, err)
	}
	p := &Provider{cfg: cfg, kind: sandboxKind}
	if cfg.WarmPool != "" {
		p.kind = claimKind
	}
	p.kube = &kube{client: client, namespace: cfg.Namespace, p: p}
	return p, nil
}

// warningLogger logs the API server's warnings (deprecations) with slog.
type warningLogger struct{}

func (warningLogger) HandleWarningHeaderWithContext(ctx context.Context, code int, _ string, message string) {
	if code == 299 && message != "" {
		slog.WarnContext(ctx, "kubernetes API warning", "provider", Name, "warning", message)
	}
}

var _ rest.WarningHandlerWithContext = warningLogger{}

// Name returns "k8s".
func (*Provider) Name() string { return Name }

// Capabilities reports package installation: it runs as commands in the
// pod, which reaches the network unless the cluster's policies forbid it.
// Pausing (the Sandbox's Suspended operating mode) and egress control (a
// template's network policy) are not driven by the provider.
func (*Provider) Capabilities() []string { return []string{sandbox.CapabilityPackages} }

// Create returns the sandbox of sessionKey, creating it if needed.
func (p *Provider) Create(ctx context.Context, sessionKey string, spec sandbox.Spec) (sandbox.Sandbox, sandbox.Ref, error) {
	if sessionKey == "" {
		return nil, sandbox.Ref{}, errors.New("create sandbox: empty session key")
	}
	for k, v := range spec.Env {
		if !shellexec.ValidEnvName(k) || strings.ContainsRune(v, 0) {
			return nil, sandbox.Ref{}, fmt.Errorf("create sandbox: invalid environment variable %q", k)
		}
	}
	if p.kind == claimKind && spec.Image != "" {
		return nil, sandbox.Ref{}, fmt.Errorf("create sandbox: image %q: the image of a claimed sandbox comes from its warm pool's template", spec.Image)
	}
	hash := sandbox.KeyHash(sessionKey)
	o, err := p.find(ctx, hash)
	if err == nil && o == nil {
		o, err = p.create(ctx, hash, spec)
	}
	if err != nil {
		return nil, sandbox.Ref{}, fmt.Errorf("create sandbox: %w", err)
	}
	sb, err := p.open(ctx, p.kind, o, hash)
	if err != nil {
		return nil, sandbox.Ref{}, fmt.Errorf("create sandbox %s: %w", p.kind.refID(o.Metadata.Name), err)
	}
	return sb, sb.ref, nil
}

// find returns the resource of hash, or nil.
func (p *Provider) find(ctx context.Context, hash string) (*object, error) {
	found, err := p.kube.list(ctx, p.kind, LabelManaged+"="+ManagedBy+","+LabelKeyHash+"="+hash)
	if err != nil {
		return nil, err
	}
	for _, o := range found {
		if !o.deleting() && p.owns(o) {
			return o, nil
		}
	}
	// A resource made a moment ago by another worker is found by name
	// (and one labelled for someone else is refused, not adopted).
	name := NamePrefix + hash
	o, err := p.kube.get(ctx, p.kind, name)
	switch {
	case isNotFound(err):
		return nil, nil
	case err != nil:
		return nil, err
	case o.deleting():
		return nil, fmt.Errorf("%s %s is being deleted; try again once it is gone", p.kind.name, name)
	case o.Metadata.Labels[LabelKeyHash] != hash:
		return nil, fmt.Errorf("%s %s is not labelled for this session: %w", p.kind.name, name, sandbox.ErrNotOwned)
	case !p.owns(o):
		return nil, fmt.Errorf("%s %s belongs to installation %s: %w", p.kind.name, name, o.Metadata.Labels[LabelInstallation], sandbox.ErrNotOwned)
	}
	return o, nil
}

func (p *Provider) create(ctx context.Context, hash string, spec sandbox.Spec) (*object, error) {
	name := NamePrefix + hash
	labels := map[string]string{}
	maps.Copy(labels, p.cfg.Labels)
	labels[LabelManaged] = ManagedBy
	labels[LabelKeyHash] = hash
	labels[LabelInstallation] = p.cfg.Installation
	labels[labelCreatedBy] = ManagedBy
	meta := map[string]any{"name": name, "namespace": p.cfg.Namespace, "labels": stringMap(labels)}
	var body map[string]any
	if p.kind == claimKind {
		claimSpec := map[string]any{"warmPoolRef": map[string]any{"name": p.cfg.WarmPool}}
		if env := envList(spec.Env); len(env) > 0 {
			claimSpec["env"] = env
		}
		body = map[string]any{"apiVersion": claimKind.apiVersion, "kind": claimKind.name, "metadata": meta, "spec": claimSpec}
	} else {
		image := cmp.Or(spec.Image, p.cfg.Image)
		body = map[string]any{"apiVersion": sandboxKind.apiVersion, "kind": sandboxKind.name, "metadata": meta, "spec": p.sandboxSpec(image, spec.Env)}
	}
	o, err := p.kube.create(ctx, p.kind, body)
	if isAlreadyExists(err) {
		// Another client won the race for the name.
		if o, err = p.find(ctx, hash); err == nil && o == nil {
			err = fmt.Errorf("%s %s exists and vanished again", p.kind.name, name)
		}
	}
	return o, err
}

// sandboxSpec is the spec of a Sandbox running image: one container
// serving the runtime, ready once it answers GET /, without a service
// account token (commands must not act on the cluster).
func (p *Provider) sandboxSpec(image string, env map[string]string) map[string]any {
	port := int64(p.cfg.RuntimePort)
	container := map[string]any{
		"name":  "runtime",
		"image": image,
		"ports": []any{map[string]any{"containerPort": port}},
		"readinessProbe": map[string]any{
			"httpGet":       map[string]any{"path": "/", "port": port},
			"periodSeconds": int64(2),
		},
	}
	if e := envList(env); len(e) > 0 {
		container["env"] = e
	}
	return map[string]any{
		"podTemplate": map[string]any{
			"metadata": map[string]any{"labels": map[string]any{LabelManaged: ManagedBy}},
			"spec": map[string]any{
				"automountServiceAccountToken": false,
				"containers":                   []any{container},
			},
		},
	}
}

// envList renders variables as a Kubernetes env list, sorted by name.
func envList(env map[string]string) []any {
	out := make([]any, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, map[string]any{"name": k, "value": env[k]})
	}
	return out
}

func stringMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Attach reconnects to the resource ref names.
func (p *Provider) Attach(ctx context.Context, sessionKey string, ref sandbox.Ref) (sandbox.Sandbox, error) {
	if ref.Provider != Name {
		return nil, fmt.Errorf("attach sandbox %s: reference of provider %q, not %q: %w", ref.ID, ref.Provider, Name, sandbox.ErrNotOwned)
	}
	k, name, ok := parseRefID(ref.ID)
	if !ok {
		return nil, fmt.Errorf("attach sandbox %q: not a %s reference: %w", ref.ID, Name, sandbox.ErrNotFound)
	}
	o, err := p.kube.get(ctx, k, name)
	if err == nil && o.deleting() {
		err = fmt.Errorf("%s %s is being deleted: %w", k.name, name, sandbox.ErrNotFound)
	}
	if isNotFound(err) {
		err = fmt.Errorf("%s %s: %w", k.name, name, sandbox.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("attach sandbox %s: %w", ref.ID, err)
	}
	sb, err := p.open(ctx, k, o, sandbox.KeyHash(sessionKey))
	if err != nil {
		return nil, fmt.Errorf("attach sandbox %s: %w", ref.ID, err)
	}
	return sb, nil
}

// owned reports whether o carries the provider's labels for hash.
func owned(o *object, hash string) bool {
	return o.Metadata.Labels[LabelManaged] == ManagedBy && o.Metadata.Labels[LabelKeyHash] == hash
}

// owns reports whether o is labelled for this installation or for none
// (legacy).
func (p *Provider) owns(o *object) bool {
	return sandbox.OwnedBy(o.Metadata.Labels[LabelInstallation], p.cfg.Installation)
}

// open verifies ownership, waits for readiness and returns a handle.
func (p *Provider) open(ctx context.Context, k *kind, o *object, hash string) (*remoteSandbox, error) {
	if !owned(o, hash) {
		return nil, sandbox.ErrNotOwned
	}
	if !p.owns(o) {
		return nil, fmt.Errorf("%s %s of installation %s, not %s: %w", k.name, o.Metadata.Name, o.Metadata.Labels[LabelInstallation], p.cfg.Installation, sandbox.ErrNotOwned)
	}
	rt, err := p.waitReady(ctx, k, o)
	if err != nil {
		return nil, err
	}
	s := &remoteSandbox{p: p, kind: k, name: o.Metadata.Name, ref: sandbox.Ref{Provider: Name, ID: k.refID(o.Metadata.Name)}}
	s.route.Store(rt)
	root, err := s.workDir(ctx)
	if err != nil {
		return nil, err
	}
	s.root = root
	return s, nil
}

// Reasons of a claim's Ready=False that never change (agent-sandbox's
// Python client lists the same).
var terminalClaimReasons = map[string]bool{
	"InvalidMetadata": true, "EnvVarsInjectionRejected": true, "VolumeClaimTemplatesError": true,
}

// Reasons meaning the sandbox expired: its workspace is gone.
var expiredReasons = map[string]bool{"ClaimExpired": true, "SandboxExpired": true}

// readiness says whether o is ready to serve, and where its requests go.
// A finished or expired resource is ErrNotFound.
func readiness(k *kind, o *object) (*route, error) {
	ready, _ := o.condition("Ready")
	if expiredReasons[ready.Reason] {
		return nil, fmt.Errorf("%s %s expired: %w", k.name, o.Metadata.Name, sandbox.ErrNotFound)
	}
	if fin, ok := o.condition("Finished"); ok && fin.Status == "True" {
		return nil, fmt.Errorf("%s %s finished (%s): %w", k.name, o.Metadata.Name, fin.Reason, sandbox.ErrNotFound)
	}
	if k == claimKind && ready.Status != "True" && terminalClaimReasons[ready.Reason] {
		return nil, fmt.Errorf("%s %s cannot become ready: %s", k.name, o.Metadata.Name, o.conditions())
	}
	if ready.Status != "True" {
		return nil, nil
	}
	if k == claimKind {
		if o.Status.Sandbox.Name == "" {
			return nil, nil
		}
		return &route{id: o.Status.Sandbox.Name, podIP: podIP(o.Status.Sandbox.PodIPs)}, nil
	}
	return &route{id: o.Metadata.Name, podIP: podIP(o.Status.PodIPs)}, nil
}

// podIP picks the address the router should dial: the first IPv4
// address, else the first valid one (as agent-sandbox's clients do).
func podIP(ips []string) string {
	first := ""
	for _, s := range ips {
		ip := net.ParseIP(strings.TrimSpace(s))
		switch {
		case ip == nil:
		case ip.To4() != nil:
			return ip.To4().String()
		case first == "":
			first = ip.String()
		}
	}
	return first
}

// waitReady polls o until it is ready, within ReadyTimeout.
func (p *Provider) waitReady(ctx context.Context, k *kind, o *object) (*route, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.ReadyTimeout)
	defer cancel()
	interval := p.cfg.PollInterval
	for {
		rt, err := readiness(k, o)
		if err != nil || rt != nil {
			return rt, err
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%s %s not ready within %v (conditions: %s): %w", k.name, o.Metadata.Name, p.cfg.ReadyTimeout, o.conditions(), ctx.Err())
		case <-t.C:
		}
		interval = min(interval*2, 2*time.Second)
		next, err := p.kube.get(ctx, k, o.Metadata.Name)
		switch {
		case isNotFound(err):
			return nil, fmt.Errorf("%s %s: %w", k.name, o.Metadata.Name, sandbox.ErrNotFound)
		case err != nil:
			return nil, err
		case next.deleting():
			return nil, fmt.Errorf("%s %s is being deleted: %w", k.name, o.Metadata.Name, sandbox.ErrNotFound)
		}
		o = next
	}
}

// List returns the Mango-managed resources of the configured kind in the
// namespace, labelled for this installation or for none (legacy), except
// those being deleted.
func (p *Provider) List(ctx context.Context) ([]sandbox.Owned, error) {
	found, err := p.kube.list(ctx, p.kind, LabelManaged+"="+ManagedBy+","+LabelKeyHash)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	out := make([]sandbox.Owned, 0, len(found))
	for _, o := range found {
		h := o.Metadata.Labels[LabelKeyHash]
		if o.deleting() || h == "" || o.Metadata.Labels[LabelManaged] != ManagedBy || !p.owns(o) {
			continue
		}
		ow := sandbox.Owned{Ref: sandbox.Ref{Provider: Name, ID: p.kind.refID(o.Metadata.Name)}, KeyHash: h,
			Installation: o.Metadata.Labels[LabelInstallation]}
		if t, err := time.Parse(time.RFC3339, o.Metadata.CreationTimestamp); err == nil {
			ow.CreatedAt = t
		}
		out = append(out, ow)
	}
	return out, nil
}

// DestroyRef deletes the resource ref names; a missing one is not an error.
// It refuses a resource not managed by Mango or of another installation.
func (p *Provider) DestroyRef(ctx context.Context, ref sandbox.Ref) error {
	if ref.Provider != Name {
		return fmt.Errorf("destroy sandbox %s: reference of provider %q: %w", ref.ID, ref.Provider, sandbox.ErrNotOwned)
	}
	k, name, ok := parseRefID(ref.ID)
	if !ok {
		return fmt.Errorf("destroy sandbox %q: not a %s reference: %w", ref.ID, Name, sandbox.ErrNotOwned)
	}
	o, err := p.kube.get(ctx, k, name)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("destroy sandbox %s: %w", ref.ID, err)
	}
	if o.Metadata.Labels[LabelManaged] != ManagedBy {
		return fmt.Errorf("destroy sandbox %s: not managed by Mango: %w", ref.ID, sandbox.ErrNotOwned)
	}
	if !p.owns(o) {
		return fmt.Errorf("destroy sandbox %s: of installation %s, not %s: %w", ref.ID, o.Metadata.Labels[LabelInstallation], p.cfg.Installation, sandbox.ErrNotOwned)
	}
	if err := p.kube.delete(ctx, k, name); err != nil {
		return fmt.Errorf("destroy sandbox %s: %w", ref.ID, err)
	}
	return nil
}

// remoteSandbox is one session's sandbox.
type remoteSandbox struct {
	p         *Provider
	kind      *kind
	name      string
	ref       sandbox.Ref
	root      string
	route     atomic.Pointer[route]
	destroyed atomic.Bool
}

func (s *remoteSandbox) Ref() sandbox.Ref { return s.ref }
func (s *remoteSandbox) Root() string     { return s.root }

// Destroy deletes the resource. It is idempotent.
func (s *remoteSandbox) Destroy(ctx context.Context) error {
	if err := s.p.kube.delete(ctx, s.kind, s.name); err != nil {
		return fmt.Errorf("destroy sandbox %s: %w", s.ref.ID, err)
	}
	s.destroyed.Store(true)
	return nil
}

// workDir asks the runtime for its working directory, the workspace root.
func (s *remoteSandbox) workDir(ctx context.Context) (string, error) {
	out, err := s.execute(ctx, "pwd", 30*time.Second)
	if err != nil {
		return "", err
	}
	dir := strings.TrimSuffix(out, "\n")
	if !path.IsAbs(dir) || strings.ContainsAny(dir, "\n\x00") {
		return "", fmt.Errorf("sandbox runtime: working directory: %w: %q is not an absolute path", errMalformed, dir)
	}
	return path.Clean(dir), nil
}

// call sends a request through the router. When the router cannot reach
// the pod (5xx), the resource decides: gone is ErrNotFound (ErrDestroyed
// after Destroy); not ready (a restarted pod) is waited for; and an
// idempotent request is sent again once to the current route.
func (s *remoteSandbox) call(ctx context.Context, req request) ([]byte, error) {
	data, err := s.p.send(ctx, *s.route.Load(), req)
	if err == nil || ctx.Err() != nil || statusOf(err) < 500 {
		return data, err
	}
	o, gerr := s.p.kube.get(ctx, s.kind, s.name)
	switch {
	case isNotFound(gerr) || gerr == nil && o.deleting():
		if s.destroyed.Load() {
			return nil, sandbox.ErrDestroyed
		}
		return nil, fmt.Errorf("%s %s: %w", s.kind.name, s.name, sandbox.ErrNotFound)
	case gerr != nil:
		return nil, err
	}
	rt, rerr := s.p.waitReady(ctx, s.kind, o)
	if rerr != nil {
		return nil, rerr
	}
	s.route.Store(rt)
	if !req.idempotent {
		return nil, err
	}
	return s.p.send(ctx, *rt, req)
}

var (
	_ sandbox.Provider  = (*Provider)(nil)
	_ sandbox.Lister    = (*Provider)(nil)
	_ sandbox.Destroyer = (*Provider)(nil)
	_ sandbox.Capable   = (*Provider)(nil)
	_ sandbox.Sandbox   = (*remoteSandbox)(nil)
)
