package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// Binding is the durable record of a session's sandbox. ExternalID is empty
// while it is only a provisioning intent: stored before the provider
// creates anything, so a crash between Create and the binding leaves a
// trace the reconciler can finish.
type Binding struct {
	SessionID  string
	Provider   string
	ExternalID string
	SpecHash   string
	// TaskQueue is the queue every later sandbox activity of the session
	// must run on: the host queue for host-bound providers.
	TaskQueue string
}

// ErrNoBinding reports a session without binding or intent.
var ErrNoBinding = errors.New("no sandbox binding")

// Bindings persists bindings; the execution worker implements it over the
// ControlPlane (it has no database access of its own).
type Bindings interface {
	// GetBinding returns the session's binding or intent, or ErrNoBinding.
	GetBinding(ctx context.Context, sessionID string) (*Binding, error)
	// PutIntent stores an intent unless a binding exists, and returns
	// what is stored.
	PutIntent(ctx context.Context, b Binding) (*Binding, error)
	// PutBinding atomically replaces the intent with the binding.
	PutBinding(ctx context.Context, b Binding) (*Binding, error)
	// DeleteBinding removes the binding; missing is not an error.
	DeleteBinding(ctx context.Context, sessionID string) error
}

// VanishedError reports that a session's bound sandbox no longer exists.
// The session fails explicitly: its workspace is not silently replaced
// with an empty one.
type VanishedError struct {
	SessionID string
	Ref       Ref
}

func (e *VanishedError) Error() string {
	return fmt.Sprintf("the %s sandbox %s of session %s no longer exists; its workspace is lost and will not be replaced",
		e.Ref.Provider, e.Ref.ID, e.SessionID)
}

// Unwrap makes errors.Is(err, ErrNotFound) hold.
func (e *VanishedError) Unwrap() error { return ErrNotFound }

// SessionManager gives each session one logical sandbox. It provisions on
// first use (intent, Create, binding), reuses the cached client later, and
// after a restart re-attaches through the persisted binding. The in-memory
// map is only a cache: the binding is the truth.
//
// It also enforces the environment's part of a [Spec]: packages are
// installed while egress is temporarily widened to their registries, then
// the final egress policy is applied, and only then is the binding
// published, so tool execution sees only the final policy. The policy is
// applied again whenever it changes (an MCP-affecting session update) and
// after every re-attach (a worker restart).
type SessionManager struct {
	provider  Provider
	bindings  Bindings
	taskQueue string

	installSteps   func(*Packages) []InstallStep
	installTimeout time.Duration

	mu    sync.Mutex
	cache map[string]*cached
	group singleflight.Group
}

// cached is a session's sandbox client and the egress policy it is known
// to enforce.
type cached struct {
	sb Sandbox

	mu     sync.Mutex
	egress string // egressKey of the applied policy; "" when unknown
}

// NewSessionManager returns a manager for one provider. taskQueue is the
// queue recorded in new bindings (the worker's host queue for host-bound
// providers, the provider queue otherwise).
func NewSessionManager(p Provider, b Bindings, taskQueue string) *SessionManager {
	return &SessionManager{provider: p, bindings: b, taskQueue: taskQueue, cache: map[string]*cached{},
		installSteps: (*Packages).InstallSteps, installTimeout: DefaultInstallTimeout}
}

// SetInstaller replaces the package install commands and their timeout
// (for images with their own tooling, and for tests); it must be called
// before the manager is used.
func (m *SessionManager) SetInstaller(steps func(*Packages) []InstallStep, timeout time.Duration) {
	m.installSteps, m.installTimeout = steps, timeout
}

// Acquire returns the session's sandbox, provisioning it on first use, and
// makes sure it enforces spec.Network. Concurrent calls for one session
// share one provisioning.
func (m *SessionManager) Acquire(ctx context.Context, sessionID string, spec Spec) (Sandbox, error) {
	sb, _, err := m.AcquireProvisioned(ctx, sessionID, spec)
	return sb, err
}

// AcquireProvisioned is Acquire, also reporting whether the sandbox was
// provisioned: created, or re-attached through its binding (after a
// restart, or on a worker new to the session), by this call or the
// concurrent one it joined, rather than the client the manager holds.
func (m *SessionManager) AcquireProvisioned(ctx context.Context, sessionID string, spec Spec) (sb Sandbox, provisioned bool, err error) {
	if _, ok := m.provider.(EgressController); spec.Network != nil && !ok {
		return nil, false, &ProvisionError{SessionID: sessionID,
			Reason: fmt.Sprintf("its environment limits networking, but the %s provider cannot enforce egress rules", m.provider.Name())}
	}
	m.mu.Lock()
	c, held := m.cache[sessionID]
	m.mu.Unlock()
	if !held {
		v, err, _ := m.group.Do(sessionID, func() (any, error) {
			c, err := m.acquire(ctx, sessionID, spec)
			if err != nil {
				return nil, err
			}
			m.mu.Lock()
			m.cache[sessionID] = c
			m.mu.Unlock()
			return c, nil
		})
		if err != nil {
			return nil, false, err
		}
		c = v.(*cached)
	}
	if err := m.applyEgress(ctx, sessionID, c, spec.Network); err != nil {
		return nil, false, err
	}
	return c.sb, !held, nil
}

func (m *SessionManager) acquire(ctx context.Context, sessionID string, spec Spec) (*cached, error) {
	b, err := m.bindings.GetBinding(ctx, sessionID)
	switch {
	case errors.Is(err, ErrNoBinding):
		b = nil
	case err != nil:
		return nil, fmt.Errorf("read sandbox binding of session %s: %w", sessionID, err)
	}
	if b != nil && b.Provider != m.provider.Name() {
		return nil, fmt.Errorf("session %s is bound to the %s provider, but this worker serves %s", sessionID, b.Provider, m.provider.Name())
	}
	if b != nil && b.ExternalID != "" {
		ref := Ref{Provider: b.Provider, ID: b.ExternalID}
		sb, err := m.provider.Attach(ctx, sessionID, ref)
		if errors.Is(err, ErrNotFound) {
			return nil, &VanishedError{SessionID: sessionID, Ref: ref}
		}
		if err != nil {
			return nil, fmt.Errorf("attach sandbox %s of session %s: %w", ref.ID, sessionID, err)
		}
		// The policy it enforces is not known here: Acquire applies it.
		return &cached{sb: sb}, nil
	}
	if !spec.Packages.Empty() && !hasCapability(m.provider, CapabilityPackages) {
		return nil, &ProvisionError{SessionID: sessionID,
			Reason: fmt.Sprintf("its environment lists packages, but the %s provider does not install packages", m.provider.Name())}
	}
	intent := Binding{SessionID: sessionID, Provider: m.provider.Name(), SpecHash: SpecHash(spec), TaskQueue: m.taskQueue}
	stored, err := m.bindings.PutIntent(ctx, intent)
	if err != nil {
		return nil, fmt.Errorf("record provisioning intent of session %s: %w", sessionID, err)
	}
	if stored.ExternalID != "" {
		// Another worker finished provisioning meanwhile.
		return m.acquire(ctx, sessionID, spec)
	}
	c, ref, err := m.provision(ctx, sessionID, spec)
	if err != nil {
		return nil, err
	}
	intent.ExternalID = ref.ID
	intent.TaskQueue = stored.TaskQueue
	if _, err := m.bindings.PutBinding(ctx, intent); err != nil {
		// The resource exists but is not bound: the intent stays, and the
		// reconciler (or the next Acquire, as Create is idempotent) binds it.
		return nil, fmt.Errorf("bind sandbox %s to session %s: %w", ref.ID, sessionID, err)
	}
	return c, nil
}

// provision creates the sandbox, installs its packages and applies its
// final egress policy. During the install, egress is widened to the
// package registries. Every step is repeated when a crash left an
// unbound sandbox (Create finds it again; installs are idempotent).
func (m *SessionManager) provision(ctx context.Context, sessionID string, spec Spec) (*cached, Ref, error) {
	steps := m.installSteps(spec.Packages)
	create := spec
	var widened *Network
	if spec.Network != nil && len(steps) > 0 {
		widened = &Network{AllowedHosts: SortHosts(append(slices.Clone(spec.Network.AllowedHosts), spec.Packages.Registries()...))}
		create.Network = widened
	}
	sb, ref, err := m.provider.Create(ctx, sessionID, create)
	if err != nil {
		return nil, Ref{}, fmt.Errorf("create %s sandbox for session %s: %w", m.provider.Name(), sessionID, err)
	}
	c := &cached{sb: sb}
	if len(steps) > 0 {
		// A sandbox found again after a crash may already enforce the
		// final policy: widen explicitly.
		if err := m.applyEgress(ctx, sessionID, c, widened); err != nil {
			return nil, Ref{}, err
		}
		if err := m.install(ctx, sessionID, sb, steps); err != nil {
			return nil, Ref{}, err
		}
	}
	if err := m.applyEgress(ctx, sessionID, c, spec.Network); err != nil {
		return nil, Ref{}, err
	}
	return c, ref, nil
}

// install runs the package install commands in order.
func (m *SessionManager) install(ctx context.Context, sessionID string, sb Sandbox, steps []InstallStep) error {
	for _, st := range steps {
		res, err := sb.Exec(ctx, ExecRequest{Command: st.Command, Timeout: m.installTimeout, MaxOutput: 64 << 10})
		if err != nil {
			return fmt.Errorf("install %s packages for session %s: %w", st.Manager, sessionID, err)
		}
		switch {
		case res.TimedOut:
			return &ProvisionError{SessionID: sessionID, Reason: fmt.Sprintf("installing its %s packages did not finish within %s", st.Manager, m.installTimeout)}
		case res.ExitCode != 0:
			out := res.Stderr
			if len(bytes.TrimSpace(out)) == 0 {
				out = res.Stdout
			}
			return &ProvisionError{SessionID: sessionID,
				Reason: fmt.Sprintf("installing its %s packages failed with exit code %d: %s", st.Manager, res.ExitCode, lastLines(out, 5))}
		}
	}
	return nil
}

// lastLines returns up to n trailing non-empty lines of out.
func lastLines(out []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// applyEgress makes c's sandbox enforce n unless it is known to already
// (nil: leave the policy alone).
func (m *SessionManager) applyEgress(ctx context.Context, sessionID string, c *cached, n *Network) error {
	if n == nil {
		return nil
	}
	key := egressKey(n)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.egress == key {
		return nil
	}
	if err := m.provider.(EgressController).SetEgress(ctx, c.sb.Ref(), n.AllowedHosts); err != nil {
		return fmt.Errorf("apply the egress policy of session %s: %w", sessionID, err)
	}
	c.egress = key
	return nil
}

func egressKey(n *Network) string {
	return "deny-except:" + strings.Join(n.AllowedHosts, ",")
}

// Forget drops the cached client of a session (its sandbox stays) and
// releases what the client holds, such as its persistent shell.
func (m *SessionManager) Forget(sessionID string) {
	m.mu.Lock()
	c := m.cache[sessionID]
	delete(m.cache, sessionID)
	m.mu.Unlock()
	if c == nil {
		return
	}
	if closer, ok := c.sb.(io.Closer); ok {
		_ = closer.Close()
	}
}

// Teardown destroys a session's sandbox and removes its binding. It is
// idempotent and safe to retry: a missing resource or binding is fine, and
// an intent without binding is resolved by re-creating (Create is
// idempotent per session key, so this finds a resource left by a crash)
// and destroying.
func (m *SessionManager) Teardown(ctx context.Context, sessionID string) error {
	m.Forget(sessionID)
	b, err := m.bindings.GetBinding(ctx, sessionID)
	if errors.Is(err, ErrNoBinding) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read sandbox binding of session %s: %w", sessionID, err)
	}
	if b.Provider != m.provider.Name() {
		return fmt.Errorf("session %s is bound to the %s provider, but this worker serves %s", sessionID, b.Provider, m.provider.Name())
	}
	var sb Sandbox
	if b.ExternalID != "" {
		sb, err = m.provider.Attach(ctx, sessionID, Ref{Provider: b.Provider, ID: b.ExternalID})
		if err != nil && !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("attach sandbox %s of session %s for teardown: %w", b.ExternalID, sessionID, err)
		}
	} else if err := m.destroyUnbound(ctx, sessionID); err != nil {
		return err
	}
	if sb != nil {
		if err := sb.Destroy(ctx); err != nil {
			return fmt.Errorf("destroy sandbox of session %s: %w", sessionID, err)
		}
	}
	if err := m.bindings.DeleteBinding(ctx, sessionID); err != nil {
		return fmt.Errorf("delete sandbox binding of session %s: %w", sessionID, err)
	}
	return nil
}

// destroyUnbound removes whatever the provider may have created for a
// session whose intent was never bound (a crash between Create and
// PutBinding). Providers that can list their resources are searched by the
// session's key hash; others are asked to Create, which returns the
// existing resource or an empty one, and that is destroyed.
func (m *SessionManager) destroyUnbound(ctx context.Context, sessionID string) error {
	lister, canList := m.provider.(Lister)
	destroyer, canDestroy := m.provider.(Destroyer)
	if canList && canDestroy {
		owned, err := lister.List(ctx)
		if err != nil {
			return fmt.Errorf("list %s sandboxes: %w", m.provider.Name(), err)
		}
		hash := KeyHash(sessionID)
		for _, o := range owned {
			if o.KeyHash == hash {
				if err := destroyer.DestroyRef(ctx, o.Ref); err != nil {
					return fmt.Errorf("destroy unbound sandbox %s of session %s: %w", o.Ref.ID, sessionID, err)
				}
			}
		}
		return nil
	}
	sb, _, err := m.provider.Create(ctx, sessionID, Spec{})
	if err != nil {
		return fmt.Errorf("resolve unbound sandbox of session %s for teardown: %w", sessionID, err)
	}
	if err := sb.Destroy(ctx); err != nil {
		return fmt.Errorf("destroy unbound sandbox of session %s: %w", sessionID, err)
	}
	return nil
}
