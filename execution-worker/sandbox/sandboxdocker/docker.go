// Package sandboxdocker is the "docker" sandbox provider: each session gets a
// container of the worker host's Docker daemon, with no network by default,
// resource limits and Mango ownership labels.
//
// The provider talks to the Docker Engine API through the Moby Go client
// (github.com/moby/moby/client), never through the docker CLI. The client
// honours DOCKER_HOST, DOCKER_API_VERSION, DOCKER_CERT_PATH and
// DOCKER_TLS_VERIFY and negotiates the API version with the daemon.
//
// # Containers
//
// The container of a session is named mango-<KeyHash(sessionKey)>, so Create
// is idempotent across clients and workers: a name conflict means the
// container exists, and it is reused after its ownership label is checked.
// Containers carry the labels mango.managed=true,
// mango.session_key_hash=<KeyHash>, mango.installation=<installation id>
// and mango.created_at (RFC 3339); the raw session key is never stored.
// Installations sharing a daemon never list, attach or remove each other's
// containers; containers without mango.installation (created before
// installation ids) are used only through a binding of this installation,
// and never removed by the reconciler. They run "sleep infinity" under the
// daemon's init process (which reaps orphaned processes), with
// /workspace as the working directory, the configured network mode (none by
// default), memory, CPU and pids limits, all capabilities dropped except a
// small file-ownership set, and no-new-privileges. The Ref's ID is the
// container id; Attach finds it on the same daemon and starts it again if it
// was stopped.
//
// # Commands
//
// Exec runs each command as
//
//	/bin/sh -c WRAPPER mango-exec COMMAND TOKEN
//
// where WRAPPER starts a child "setsid /bin/sh" that writes its own pid (the
// id of its new session and process group) to /tmp/.mango-exec/TOKEN.pid,
// checks for a cancellation marker, and execs the command. On timeout or
// cancellation a second exec writes the marker and runs kill -KILL -PGID, so
// the command and every child that stayed in its process group die; the
// marker closes the window in which the command has not yet started. The
// image therefore needs /bin/sh, setsid, kill and cat (busybox has them).
//
// # Files
//
// ReadFile, WriteFile and the [sandbox.FileTransfer] methods use the
// archive endpoints (tar, streamed through a pipe for uploads). A path is
// first checked lexically (it must stay under /workspace, [sandbox.SessionDir]
// or [sandbox.MemoryDir]), then resolved component by component with the stat
// endpoint, which reports the fully resolved target of every symbolic link
// inside the container; a link that resolves outside those directories is
// refused with [sandbox.ErrPathEscape]. ListFiles runs find and stat in the
// container (busybox find has no -printf), RemoveAll runs rm -rf. Writes go to
// the resolved location, so a link inside the workspace is followed and
// never replaced. A command running concurrently in the sandbox can still
// race the check by swapping a component for a link; the container is the
// isolation boundary, the check only keeps file access within the
// workspace.
//
// # Images
//
// When the image is absent, Create pulls it through the Engine API with
// credentials from the Docker config (see [ResolveAuth]).
//
// # Warm pool
//
// With [Config.WarmPool] (MANGO_DOCKER_WARM_POOL) above 0, the provider
// keeps that many ready containers of the default image, made as Create
// makes a session's (same options; labelled [LabelWarm] with a hash of
// them instead of a session's key hash), named mango-warm-<random>,
// started and then paused. Create for a session with the default image
// and no environment variables adopts one instead of creating a
// container: it unpauses it (the claim: of concurrent unpauses of one
// container, from any worker, exactly one succeeds) and renames it to the
// session's container name (the adoption: the daemon refuses a name that
// exists, so concurrent Creates for one key end with one container).
// Labels cannot change after creation, so an adopted container is owned
// by the session its name is made from: [Provider.Attach], Create and
// [Provider.List] judge it by its name. A background loop refills the
// pool after every adoption and every 30 seconds; Close stops it. The
// pool is the daemon's, not the worker's: every worker reaching the
// daemon with the same settings adopts from, refills and trims the same
// containers, so they should agree on MANGO_DOCKER_WARM_POOL (the
// smallest wins, and warm containers made with other settings, for
// example during a rolling upgrade, are removed).
//
// List reports containers not yet adopted as spares ([sandbox.Owned]),
// which the reconciler leaves to [Provider.TrimSpares]: it removes ready
// containers beyond the pool's size or made with other settings
// (claiming each first, so one being adopted is never removed), and
// those a worker that died left claimed but not renamed, or created but
// not paused, once seen so for a minute. A worker dying after the rename
// leaves the session's container, which the next Create finds by name.
package sandboxdocker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/mangohq/mango/execution-worker/sandbox"
)

// Name is the name the Docker provider is registered under.
const Name = "docker"

// Labels set on every container the provider creates.
const (
	// LabelManaged marks a Mango-owned container ("true").
	LabelManaged = "mango.managed"
	// LabelKeyHash holds sandbox.KeyHash of the session key.
	LabelKeyHash = "mango.session_key_hash"
	// LabelInstallation holds the installation id.
	LabelInstallation = sandbox.LabelInstallation
	// LabelCreatedAt holds the creation time in RFC 3339 (UTC).
	LabelCreatedAt = "mango.created_at"
)

// Root is the workspace directory inside every container.
const Root = "/workspace"

// keepAlive is the container's main command. The daemon's init process
// (HostConfig.Init) runs as pid 1, forwards stop signals to it and reaps
// processes orphaned by killed commands.
var keepAlive = []string{"sleep", "infinity"}

// Factory is the registry entry for the Docker provider. Tools run inside a
// container, not on the host, but the containers belong to the worker host's
// daemon, so sandboxes are bound to that host. Configure reads its
// configuration from the environment (see [ConfigFromEnv]); its Build fails
// when the daemon is unreachable.
var Factory = sandbox.Factory{
	Traits: sandbox.Traits{RunsOnHost: false, HostBound: true},
	Configure: func(getenv func(string) string) (sandbox.Build, error) {
		cfg, err := ConfigFromEnv(getenv)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, installation string) (sandbox.Provider, error) {
			cfg := cfg
			cfg.Installation = installation
			return New(ctx, cfg)
		}, nil
	},
}

// Provider is the Docker sandbox provider. It is safe for concurrent use.
type Provider struct {
	cli  *client.Client
	cfg  Config
	pool *warmPool
}

// New connects to the Docker daemon (configured by the DOCKER_* environment
// variables), negotiates the API version and returns a provider.
func New(ctx context.Context, cfg Config) (*Provider, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	if _, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		_ = cli.Close()
		return nil, fmt.Errorf("connect to docker daemon at %s: %w", cli.DaemonHost(), err)
	}
	p := &Provider{cli: cli, cfg: cfg}
	p.pool = newWarmPool(p)
	p.pool.start()
	return p, nil
}

// Name returns "docker".
func (*Provider) Name() string { return Name }

// Client returns the Moby client the provider uses.
func (p *Provider) Client() *client.Client { return p.cli }

// Config returns the provider's effective configuration.
func (p *Provider) Config() Config { return p.cfg }

// Locality names the Docker daemon the containers live on by its own ID
// (Engine API system info), so every worker that talks to this daemon (a
// restarted one, a second replica, another pod with the same DOCKER_HOST)
// serves the same sessions.
func (p *Provider) Locality(ctx context.Context) (string, error) {
	info, err := p.cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return "", fmt.Errorf("docker daemon info at %s: %w", p.cli.DaemonHost(), err)
	}
	id := sandbox.SanitizeLocality(info.Info.ID, sandbox.MaxLocalityLen)
	if id == "" {
		return "", fmt.Errorf("docker daemon at %s reports no ID", p.cli.DaemonHost())
	}
	return id, nil
}

// Close stops the warm pool's refills and releases the client's idle
// connections. Sandboxes, and warm containers, keep running.
func (p *Provider) Close() error {
	p.pool.close()
	return p.cli.Close()
}

// Capabilities reports package installation when containers have a
// network (MANGO_DOCKER_NETWORK=bridge); egress allow-lists and
// pause/resume are not implemented.
func (p *Provider) Capabilities() []string {
	if p.cfg.Network == "none" {
		return []string{}
	}
	return []string{sandbox.CapabilityPackages}
}

// ContainerName returns the deterministic container name of a session key.
func ContainerName(sessionKey string) string {
	return "mango-" + sandbox.KeyHash(sessionKey)
}

// Create returns the container of sessionKey, creating (and if necessary
// pulling its image) or starting it as needed.
func (p *Provider) Create(ctx context.Context, sessionKey string, spec sandbox.Spec) (sandbox.Sandbox, sandbox.Ref, error) {
	image := cmp.Or(spec.Image, p.cfg.Image)
	hash := sandbox.KeyHash(sessionKey)
	name := ContainerName(sessionKey)
	if sb, ref, ok, err := p.adopt(ctx, name, image, spec.Env); ok || err != nil {
		return sb, ref, err
	}
	opts := p.createOptions(name, hash, image, spec.Env)

	id, err := p.createOrFind(ctx, name, hash, image, opts)
	if err != nil {
		return nil, sandbox.Ref{}, fmt.Errorf("create sandbox %s: %w", name, err)
	}
	if err := p.ensureRunning(ctx, id); err != nil {
		return nil, sandbox.Ref{}, fmt.Errorf("create sandbox %s: %w", name, err)
	}
	ref := sandbox.Ref{Provider: Name, ID: id}
	return p.newSandbox(ref), ref, nil
}

// createOrFind creates the container, or finds the one created earlier or
// concurrently under the same name, and returns its id. A name taken by a
// container that cannot be inspected yet is tried again every 20ms, 101
// tries in all.
func (p *Provider) createOrFind(ctx context.Context, name, hash, image string, opts client.ContainerCreateOptions) (string, error) {
	pulled := false
	return backoff.Retry(ctx, func() (string, error) {
		res, err := p.cli.ContainerCreate(ctx, opts)
		if cerrdefs.IsNotFound(err) && !pulled {
			// The image is absent: pull it and try again.
			if err := p.pull(ctx, image); err != nil {
				return "", backoff.Permanent(err)
			}
			pulled = true
			res, err = p.cli.ContainerCreate(ctx, opts)
		}
		switch {
		case err == nil:
			return res.ID, nil
		case !cerrdefs.IsConflict(err):
			return "", backoff.Permanent(err)
		}
		// The name is taken: by this session's container, or by one being
		// created right now (the daemon reserves the name before the
		// container can be inspected), or being removed.
		insp, ierr := p.cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
		if ierr == nil {
			if err := p.checkOwner(ownerView(insp.Container), hash); err != nil {
				return "", backoff.Permanent(fmt.Errorf("container %s exists without this session's labels: %w", name, err))
			}
			return insp.Container.ID, nil
		}
		err = fmt.Errorf("inspect existing container: %w", ierr)
		if !cerrdefs.IsNotFound(ierr) {
			return "", backoff.Permanent(err)
		}
		return "", err
	}, backoff.WithBackOff(backoff.NewConstantBackOff(20*time.Millisecond)), backoff.WithMaxTries(101), backoff.WithMaxElapsedTime(0))
}

func (p *Provider) createOptions(name, hash, image string, env map[string]string) client.ContainerCreateOptions {
	labels := maps.Clone(p.cfg.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelManaged] = "true"
	labels[LabelKeyHash] = hash
	labels[LabelInstallation] = p.cfg.Installation
	labels[LabelCreatedAt] = time.Now().UTC().Format(time.RFC3339)

	init := true
	pids := p.cfg.Pids
	if pids == 0 {
		pids = -1 // unlimited
	}
	res := container.Resources{
		Memory:    p.cfg.Memory,
		NanoCPUs:  int64(p.cfg.CPUs * 1e9),
		PidsLimit: &pids,
	}
	if p.cfg.Memory > 0 {
		res.MemorySwap = p.cfg.Memory // no swap beyond the memory limit
	}
	return client.ContainerCreateOptions{
		Name: name,
		Config: &container.Config{
			Image:      image,
			Cmd:        keepAlive,
			WorkingDir: Root,
			Env:        envList(env),
			Labels:     labels,
		},
		HostConfig: &container.HostConfig{
			NetworkMode: container.NetworkMode(p.cfg.Network),
			Resources:   res,
			Init:        &init,
			AutoRemove:  false,
			CapDrop:     []string{"ALL"},
			// Enough for ordinary file work as root inside the container
			// (chown, overriding permissions, setuid tools such as package
			// managers' sandbox users). No network or system capabilities.
			CapAdd:      []string{"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID"},
			SecurityOpt: []string{"no-new-privileges"},
		},
	}
}

// Attach returns the sandbox of ref after checking that it is a Mango
// container created for sessionKey by this installation (or by a version
// before installation ids), starting it if it was stopped.
func (p *Provider) Attach(ctx context.Context, sessionKey string, ref sandbox.Ref) (sandbox.Sandbox, error) {
	if ref.Provider != Name {
		return nil, fmt.Errorf("attach sandbox %s/%s: %w", ref.Provider, ref.ID, sandbox.ErrNotOwned)
	}
	if ref.ID == "" {
		return nil, fmt.Errorf("attach sandbox: empty container id: %w", sandbox.ErrNotFound)
	}
	insp, err := p.cli.ContainerInspect(ctx, ref.ID, client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return nil, fmt.Errorf("attach sandbox %s: %w", shortID(ref.ID), sandbox.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("attach sandbox %s: %w", shortID(ref.ID), err)
	}
	if insp.Container.ID != ref.ID {
		// Refs hold full ids; a prefix or a name that happens to match is
		// not the persisted container.
		return nil, fmt.Errorf("attach sandbox %s: %w", shortID(ref.ID), sandbox.ErrNotFound)
	}
	if err := p.checkOwner(ownerView(insp.Container), sandbox.KeyHash(sessionKey)); err != nil {
		return nil, fmt.Errorf("attach sandbox %s: %w", shortID(ref.ID), err)
	}
	if err := p.startIfStopped(ctx, insp.Container); err != nil {
		return nil, fmt.Errorf("attach sandbox %s: %w", shortID(ref.ID), err)
	}
	return p.newSandbox(ref), nil
}

// checkOwner reports sandbox.ErrNotOwned unless cfg carries the Mango labels
// of the session whose key hash is hash, and this installation's label or
// none (a container of a version before installation ids).
func (p *Provider) checkOwner(cfg *container.Config, hash string) error {
	if cfg == nil || cfg.Labels[LabelManaged] != "true" || cfg.Labels[LabelKeyHash] != hash {
		return sandbox.ErrNotOwned
	}
	return p.checkInstallation(cfg.Labels)
}

// checkInstallation reports sandbox.ErrNotOwned when labels name another
// installation.
func (p *Provider) checkInstallation(labels map[string]string) error {
	if inst := labels[LabelInstallation]; !sandbox.OwnedBy(inst, p.cfg.Installation) {
		return fmt.Errorf("container of installation %s, not %s: %w", inst, p.cfg.Installation, sandbox.ErrNotOwned)
	}
	return nil
}

func (p *Provider) ensureRunning(ctx context.Context, id string) error {
	insp, err := p.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return fmt.Errorf("inspect container: %w", err)
	}
	return p.startIfStopped(ctx, insp.Container)
}

func (p *Provider) startIfStopped(ctx context.Context, c container.InspectResponse) error {
	if c.State == nil {
		return errors.New("container has no state")
	}
	switch {
	case c.State.Paused:
		if _, err := p.cli.ContainerUnpause(ctx, c.ID, client.ContainerUnpauseOptions{}); err != nil {
			return fmt.Errorf("unpause container: %w", err)
		}
	case c.State.Running:
	default:
		// Starting an already running container (a concurrent start) is
		// not an error for the daemon.
		if _, err := p.cli.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
			return fmt.Errorf("start container: %w", err)
		}
	}
	return nil
}

// List returns every Mango-owned container of the daemon, running or not,
// labelled for this installation or for none (legacy); other
// installations' containers are left out.
func (p *Provider) List(ctx context.Context) ([]sandbox.Owned, error) {
	// Scoped by the configured extra labels too, so that tests (and
	// installations labelling their containers) only see their own.
	filters := client.Filters{}.Add("label", LabelManaged+"=true")
	for k, v := range p.cfg.Labels {
		filters = filters.Add("label", k+"="+v)
	}
	res, err := p.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: filters})
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	out := make([]sandbox.Owned, 0, len(res.Items))
	for _, c := range res.Items {
		if p.checkInstallation(c.Labels) != nil {
			continue
		}
		o := sandbox.Owned{
			Ref:          sandbox.Ref{Provider: Name, ID: c.ID},
			KeyHash:      c.Labels[LabelKeyHash],
			Installation: c.Labels[LabelInstallation],
		}
		if t, err := time.Parse(time.RFC3339, c.Labels[LabelCreatedAt]); err == nil {
			o.CreatedAt = t
		} else if c.Created > 0 {
			o.CreatedAt = time.Unix(c.Created, 0).UTC()
		}
		out = append(out, warmOwned(c, o))
	}
	slices.SortFunc(out, func(a, b sandbox.Owned) int { return strings.Compare(a.Ref.ID, b.Ref.ID) })
	return out, nil
}

// DestroyRef removes the container of ref; a missing container is not an
// error. It refuses containers without the mango.managed label and those
// of another installation.
func (p *Provider) DestroyRef(ctx context.Context, ref sandbox.Ref) error {
	if ref.Provider != Name {
		return fmt.Errorf("destroy sandbox %s/%s: %w", ref.Provider, ref.ID, sandbox.ErrNotOwned)
	}
	if ref.ID == "" {
		return nil
	}
	insp, err := p.cli.ContainerInspect(ctx, ref.ID, client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("destroy sandbox %s: %w", shortID(ref.ID), err)
	}
	if insp.Container.ID != ref.ID || insp.Container.Config == nil || insp.Container.Config.Labels[LabelManaged] != "true" {
		return fmt.Errorf("destroy sandbox %s: %w", shortID(ref.ID), sandbox.ErrNotOwned)
	}
	if err := p.checkInstallation(insp.Container.Config.Labels); err != nil {
		return fmt.Errorf("destroy sandbox %s: %w", shortID(ref.ID), err)
	}
	return p.remove(ctx, ref.ID)
}

func (p *Provider) remove(ctx context.Context, id string) error {
	_, err := p.cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		// A removal already in progress (a concurrent Destroy) counts as done.
		if cerrdefs.IsConflict(err) && strings.Contains(err.Error(), "already in progress") {
			return nil
		}
		return fmt.Errorf("destroy sandbox %s: %w", shortID(id), err)
	}
	return nil
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func envList(env map[string]string) []string {
	if len(env) == 0 {
		return nil
	}
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}

var (
	_ sandbox.Provider  = (*Provider)(nil)
	_ sandbox.Capable   = (*Provider)(nil)
	_ sandbox.Lister    = (*Provider)(nil)
	_ sandbox.Destroyer = (*Provider)(nil)
	_ sandbox.Located   = (*Provider)(nil)
)
