// Package sandboxlocal is the "local" sandbox provider: tools run as child
// processes on the worker's own host, in a private directory per session.
//
// # Not a security boundary
//
// The local provider shares the worker's user, process table, network and
// filesystem namespaces. A command can read and write anything the worker
// can, signal the worker's other processes and reach the network. The
// confinement below protects against accidents, not against a hostile or
// steered model. Never use it to execute untrusted code. It exists for
// development and for the zero-configuration default (the offline fake model
// plus local sandbox); the worker refuses to combine it with a real,
// network-backed model unless MANGO_ALLOW_UNSAFE_LOCAL_SANDBOX=1.
//
// # What it does
//
//   - Each session gets the directory <root>/<KeyHash(sessionKey)> (mode
//     0700, under a root of mode 0700). The [sandbox.Ref] ID is that path;
//     sandboxes survive a worker restart and are reattached by path on the
//     same host.
//   - Ownership is recorded in a marker file beside the workspace,
//     <root>/<KeyHash>.json (mode 0600), holding the key hash, the
//     installation id, the creation time and Spec.Env. Attach verifies
//     it; List enumerates the markers.
//   - Several installations (and their workers) may share one root:
//     each sees only the workspaces whose marker names its installation,
//     plus legacy ones whose marker names none (created before
//     installation ids), which it uses only when one of its bindings
//     leads to them. Create and Attach refuse, and DestroyRef never
//     removes, a workspace of another installation
//     ([sandbox.ErrNotOwned]).
//   - [sandbox.Sandbox.ReadFile] and WriteFile, and the
//     [sandbox.FileTransfer] and [sandbox.TreePutter] methods, go through
//     [os.Root]: paths leaving the workspace, lexically or through symbolic
//     links, fail with [sandbox.ErrPathEscape].
//   - The absolute paths of container providers are mapped into the
//     workspace, lexically: /workspace/X names X, and the session
//     directories /mnt/session/X live at mnt/session/X and the memory
//     directory /mnt/memory/X at mnt/memory/X (commands see them as
//     ./mnt/session/X and ./mnt/memory/X from their working directory,
//     and at their absolute paths where the host allows a private mount
//     namespace).
//   - Commands run as /bin/sh -c in the workspace with an environment that
//     is cleared and rebuilt: PATH=/usr/local/bin:/usr/bin:/bin, HOME=the
//     workspace, LANG=C.UTF-8, then Spec.Env, then the request's Env.
//   - Each command runs in its own process group. On cancellation or timeout
//     the whole group is killed with SIGKILL. Processes a command leaves
//     running in the background are killed when it exits, so nothing
//     outlives the Exec call that started it (except processes that leave
//     the group deliberately, for example with setsid).
//   - Output is captured up to MaxOutput bytes per stream; the rest is read
//     and discarded, so a chatty command never blocks.
//
// # Configuration
//
// [Factory] reads MANGO_LOCAL_SANDBOX_ROOT (default
// $TMPDIR/mango-sandboxes), MANGO_SANDBOX_EXEC_TIMEOUT (default 2m) and
// MANGO_SANDBOX_MAX_OUTPUT (bytes, default 1048576).
package sandboxlocal

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/mangohq/mango/execution-worker/internal/defaults"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/shellsession"
)

// Name is the name the local provider is registered under.
const Name = "local"

// Environment variables read by [ConfigFromEnv].
const (
	EnvRoot        = "MANGO_LOCAL_SANDBOX_ROOT"
	EnvExecTimeout = sandbox.EnvExecTimeout
	EnvMaxOutput   = sandbox.EnvMaxOutput
)

// Defaults for a zero [Config] field or an unset variable.
const (
	DefaultExecTimeout = sandbox.DefaultExecTimeout
	DefaultMaxOutput   = sandbox.DefaultMaxOutput
)

// DefaultRoot returns the default directory holding the workspaces,
// $TMPDIR/mango-sandboxes.
func DefaultRoot() string { return filepath.Join(os.TempDir(), "mango-sandboxes") }

// Factory is the registry entry for the local provider. It runs tools on the
// host and its sandboxes are bound to that host. Configure reads
// [ConfigFromEnv]; its Build creates the root directory.
var Factory = sandbox.Factory{
	Traits: sandbox.Traits{RunsOnHost: true, HostBound: true},
	Configure: func(getenv func(string) string) (sandbox.Build, error) {
		cfg, err := ConfigFromEnv(getenv)
		if err != nil {
			return nil, err
		}
		return func(_ context.Context, installation string) (sandbox.Provider, error) {
			cfg := cfg
			cfg.Installation = installation
			p, err := New(cfg)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", EnvRoot, err)
			}
			return p, nil
		}, nil
	},
}

// Config configures the local provider.
type Config struct {
	// Root is the directory holding the workspaces and their ownership
	// markers (empty: [DefaultRoot]). It is created with mode 0700 if
	// missing, and must not be writable by group or others.
	Root string
	// ExecTimeout is the default command timeout (0: [DefaultExecTimeout]).
	ExecTimeout time.Duration
	// MaxOutput is the default cap of stdout and stderr, each, in bytes
	// (0: [DefaultMaxOutput]).
	MaxOutput int
	// Installation is the installation id recorded in every ownership
	// marker (required; see [sandbox.ValidateInstallation]).
	Installation string
}

// ConfigFromEnv reads the configuration from environment variables through
// getenv (usually [os.Getenv]). Unset variables take their defaults. The
// error names every invalid variable.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	cfg := Config{Root: DefaultRoot(), ExecTimeout: DefaultExecTimeout, MaxOutput: DefaultMaxOutput}
	v := struct {
		Root string `env:"MANGO_LOCAL_SANDBOX_ROOT"`
	}{Root: cfg.Root}
	errs := sandbox.ReadEnv(&v, getenv, nil, nil)
	if v.Root != cfg.Root && !filepath.IsAbs(v.Root) { // the default is not checked, as before
		errs = append(errs, fmt.Errorf("%s: %q is not an absolute path", EnvRoot, v.Root))
	}
	cfg.Root = v.Root
	errs = append(errs, sandbox.ReadLimits(getenv, &cfg.ExecTimeout, &cfg.MaxOutput))
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// Provider is the local sandbox provider. It holds no per-session state:
// every client configured with the same root sees the same sandboxes.
type Provider struct {
	root         string // absolute, symlinks resolved
	installation string
	execTimeout  time.Duration
	maxOutput    int
	view         sessionView // how shells see /mnt/session and /mnt/memory
}

// New returns a provider for cfg, creating cfg.Root if needed.
func New(cfg Config) (*Provider, error) {
	if cfg.ExecTimeout < 0 || cfg.MaxOutput < 0 {
		return nil, fmt.Errorf("negative ExecTimeout (%v) or MaxOutput (%d)", cfg.ExecTimeout, cfg.MaxOutput)
	}
	if err := sandbox.ValidateInstallation(cfg.Installation); err != nil {
		return nil, err
	}
	root, err := prepareRoot(cmp.Or(cfg.Root, DefaultRoot()))
	if err != nil {
		return nil, err
	}
	return &Provider{
		root:         root,
		installation: cfg.Installation,
		execTimeout:  cmp.Or(cfg.ExecTimeout, DefaultExecTimeout),
		maxOutput:    cmp.Or(cfg.MaxOutput, DefaultMaxOutput),
	}, nil
}

// prepareRoot creates root with mode 0700 if needed and returns its
// canonical path. It refuses a root that is not a directory, belongs to
// another user or is writable by group or others: whoever can write there
// can plant workspaces or markers.
func prepareRoot(root string) (string, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", fmt.Errorf("sandbox root %q: %w", root, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return "", fmt.Errorf("create sandbox root: %w", err)
	}
	canon, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("sandbox root %s: %w", abs, err)
	}
	fi, err := os.Stat(canon)
	if err != nil {
		return "", fmt.Errorf("sandbox root %s: %w", canon, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("sandbox root %s is not a directory", canon)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return "", fmt.Errorf("sandbox root %s belongs to uid %d, not to this process (uid %d)", canon, st.Uid, os.Geteuid())
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return "", fmt.Errorf("sandbox root %s is writable by group or others (mode %v)", canon, fi.Mode().Perm())
	}
	return canon, nil
}

// Name returns "local".
func (*Provider) Name() string { return Name }

// Root returns the directory holding the workspaces.
func (p *Provider) Root() string { return p.root }

// Locality names the filesystem the workspaces live on: the host's
// identity ([sandbox.HostIdentity]) and a short hash of the canonical root,
// so workers on one host with different roots never serve each other's
// sessions, and a restarted worker with the same root serves them at once.
func (p *Provider) Locality(context.Context) (string, error) {
	host, err := sandbox.HostIdentity()
	if err != nil {
		return "", err
	}
	return host + "-" + sandbox.ShortHash(p.root), nil
}

// marker is the ownership record stored beside a workspace. Installation
// is empty in the markers of versions before installation ids.
type marker struct {
	KeyHash      string            `json:"key_hash"`
	Installation string            `json:"installation,omitempty"`
	CreatedAt    time.Time         `json:"created_at"`
	Env          map[string]string `json:"env,omitempty"`
}

func (p *Provider) markerPath(dir string) string { return dir + ".json" }

// Create returns the sandbox of sessionKey, creating its workspace and
// ownership marker if needed. It is idempotent and safe for concurrent use
// by any number of clients sharing the root. When the sandbox already
// exists, the Spec.Env recorded at its creation applies, not spec's.
func (p *Provider) Create(ctx context.Context, sessionKey string, spec sandbox.Spec) (sandbox.Sandbox, sandbox.Ref, error) {
	if err := ctx.Err(); err != nil {
		return nil, sandbox.Ref{}, err
	}
	if sessionKey == "" {
		return nil, sandbox.Ref{}, errors.New("create sandbox: empty session key")
	}
	for k, v := range spec.Env {
		if err := checkEnv(k, v); err != nil {
			return nil, sandbox.Ref{}, fmt.Errorf("create sandbox: spec: %w", err)
		}
	}
	hash := sandbox.KeyHash(sessionKey)
	dir := filepath.Join(p.root, hash)
	// The marker comes first: a workspace never exists without a record
	// of its owner, and a crash in between leaves a marker List reports.
	want := marker{KeyHash: hash, Installation: p.installation, CreatedAt: time.Now().UTC().Truncate(time.Millisecond), Env: spec.Env}
	if err := p.writeMarker(p.markerPath(dir), want); err != nil {
		return nil, sandbox.Ref{}, fmt.Errorf("create sandbox %s: %w", dir, err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, sandbox.Ref{}, fmt.Errorf("create sandbox %s: %w", dir, err)
	}
	sb, err := p.open(dir, hash)
	if err != nil {
		return nil, sandbox.Ref{}, fmt.Errorf("create sandbox %s: %w", dir, err)
	}
	return sb, sb.ref, nil
}

// writeMarker publishes m at path unless a marker is already there. The
// marker is written to a temporary file and hard-linked into place, so
// readers never see a partial marker and exactly one concurrent writer wins.
func (p *Provider) writeMarker(path string, m marker) error {
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(p.root, ".tmp-marker-*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(data); err != nil {
		closeFile(tmp)
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

func readMarker(path string) (marker, error) {
	var m marker
	data, err := os.ReadFile(path)
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("ownership marker %s: %w", path, err)
	}
	return m, nil
}

// Attach reconnects to the workspace ref names. The workspace must exist
// (else [sandbox.ErrNotFound]) under this provider's root and carry the
// ownership marker of sessionKey and of this installation or none (else
// [sandbox.ErrNotOwned]).
func (p *Provider) Attach(ctx context.Context, sessionKey string, ref sandbox.Ref) (sandbox.Sandbox, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dir, err := p.workspace(ref)
	if err != nil {
		return nil, fmt.Errorf("attach sandbox %s: %w", ref.ID, err)
	}
	sb, err := p.open(dir, sandbox.KeyHash(sessionKey))
	if err != nil {
		return nil, fmt.Errorf("attach sandbox %s: %w", ref.ID, err)
	}
	return sb, nil
}

var hashName = regexp.MustCompile(`^[0-9a-f]{32}$`)

// workspace returns the directory ref names after checking that it is one
// of this provider's: a key-hash-named directory directly under the root.
func (p *Provider) workspace(ref sandbox.Ref) (string, error) {
	if ref.Provider != Name {
		return "", fmt.Errorf("reference of provider %q, not %q: %w", ref.Provider, Name, sandbox.ErrNotOwned)
	}
	base := filepath.Base(ref.ID)
	if !hashName.MatchString(base) || ref.ID != filepath.Join(p.root, base) {
		return "", fmt.Errorf("not a workspace under the sandbox root %s: %w", p.root, sandbox.ErrNotOwned)
	}
	return ref.ID, nil
}

// open returns the sandbox of dir after checking that it exists and that
// its marker names keyHash and this installation (or none: legacy).
func (p *Provider) open(dir, keyHash string) (*localSandbox, error) {
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, sandbox.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("workspace is not a directory: %w", sandbox.ErrNotOwned)
	}
	m, err := readMarker(p.markerPath(dir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no ownership marker: %w", sandbox.ErrNotOwned)
	}
	if err != nil {
		return nil, err
	}
	if m.KeyHash != keyHash || filepath.Base(dir) != keyHash {
		return nil, sandbox.ErrNotOwned
	}
	if !sandbox.OwnedBy(m.Installation, p.installation) {
		return nil, fmt.Errorf("workspace of installation %s, not %s: %w", m.Installation, p.installation, sandbox.ErrNotOwned)
	}
	life, kill := context.WithCancel(context.Background())
	return &localSandbox{
		p:    p,
		dir:  dir,
		ref:  sandbox.Ref{Provider: Name, ID: dir},
		env:  m.Env,
		life: life,
		kill: kill,
	}, nil
}

// List returns every workspace that has an ownership marker of this
// installation (or a legacy one naming none) under the root, including a
// marker whose workspace is already gone (a Create or Destroy interrupted
// by a crash); DestroyRef removes both. Other installations' workspaces
// are left out.
func (p *Provider) List(ctx context.Context) ([]sandbox.Owned, error) {
	entries, err := os.ReadDir(p.root)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	var owned []sandbox.Owned
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		name := e.Name()
		if strings.HasPrefix(name, ".trash-") {
			p.sweep(name)
			continue
		}
		hash, ok := strings.CutSuffix(name, ".json")
		if !ok || !hashName.MatchString(hash) || !e.Type().IsRegular() {
			continue
		}
		m, err := readMarker(filepath.Join(p.root, name))
		if err != nil || m.KeyHash != hash || !sandbox.OwnedBy(m.Installation, p.installation) {
			continue // not a marker we wrote; claim nothing
		}
		owned = append(owned, sandbox.Owned{
			Ref:          sandbox.Ref{Provider: Name, ID: filepath.Join(p.root, hash)},
			KeyHash:      m.KeyHash,
			Installation: m.Installation,
			CreatedAt:    m.CreatedAt,
		})
	}
	return owned, nil
}

// trashGrace is how old a trash directory must be before List removes it:
// younger ones may still be being removed by a Destroy in progress.
const trashGrace = 10 * time.Minute

// sweep removes a trash directory left by an interrupted Destroy.
func (p *Provider) sweep(name string) {
	fi, err := os.Lstat(filepath.Join(p.root, name))
	if err != nil || !fi.IsDir() || time.Since(fi.ModTime()) < trashGrace {
		return
	}
	_ = removeTree(filepath.Join(p.root, name))
}

// DestroyRef removes the workspace ref names and its marker. A missing
// workspace is not an error; one whose marker names another installation
// is [sandbox.ErrNotOwned].
func (p *Provider) DestroyRef(ctx context.Context, ref sandbox.Ref) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	dir, err := p.workspace(ref)
	if err != nil {
		return fmt.Errorf("destroy sandbox %s: %w", ref.ID, err)
	}
	m, err := readMarker(p.markerPath(dir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("destroy sandbox %s: %w", ref.ID, err)
	}
	if err == nil && !sandbox.OwnedBy(m.Installation, p.installation) {
		return fmt.Errorf("destroy sandbox %s: workspace of installation %s, not %s: %w", ref.ID, m.Installation, p.installation, sandbox.ErrNotOwned)
	}
	if err := p.remove(dir); err != nil {
		return fmt.Errorf("destroy sandbox %s: %w", ref.ID, err)
	}
	return nil
}

// remove deletes a workspace and its marker. The workspace is first renamed
// to a trash name, atomically, so that it is either attachable and whole
// or gone; the slow recursive removal happens afterwards.
func (p *Provider) remove(dir string) error {
	trash := filepath.Join(p.root, fmt.Sprintf(".trash-%s-%s", filepath.Base(dir), randomHex()))
	renamed := true
	if err := os.Rename(dir, trash); errors.Is(err, fs.ErrNotExist) {
		renamed = false
	} else if err != nil {
		return err
	}
	if err := os.Remove(p.markerPath(dir)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if !renamed {
		return nil
	}
	return removeTree(trash)
}

func randomHex() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // never fails on supported platforms
	return hex.EncodeToString(b)
}

// removeTree removes dir recursively, first granting the owner access to
// every directory in it so read-only directories do not block removal.
// A few retries cover files created meanwhile by dying processes.
func removeTree(dir string) error {
	_, err := backoff.Retry(context.Background(), func() (struct{}, error) {
		_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				if fi, err := d.Info(); err == nil && fi.Mode().Perm()&0o700 != 0o700 {
					_ = os.Chmod(path, fi.Mode().Perm()|0o700)
				}
			}
			return nil // best effort: RemoveAll reports what is left
		})
		return struct{}{}, os.RemoveAll(dir)
	}, backoff.WithBackOff(backoff.NewConstantBackOff(50*time.Millisecond)), backoff.WithMaxTries(3))
	return err
}

// localSandbox is one workspace directory.
type localSandbox struct {
	p    *Provider
	dir  string
	ref  sandbox.Ref
	env  map[string]string // Spec.Env from the marker
	life context.Context   // cancelled by Destroy; kills running commands
	kill context.CancelFunc

	shellOnce sync.Once
	sh        *shellsession.Keyed // the persistent shells, per shell key; nil until used
}

func (s *localSandbox) Ref() sandbox.Ref { return s.ref }
func (s *localSandbox) Root() string     { return s.dir }

func (s *localSandbox) destroyed() bool { return s.life.Err() != nil }

// gone returns the error for a workspace that has disappeared.
func (s *localSandbox) gone() error {
	if s.destroyed() {
		return sandbox.ErrDestroyed
	}
	return sandbox.ErrNotFound
}

// Destroy kills the commands this value is running, then removes the
// workspace and its marker. It is idempotent.
func (s *localSandbox) Destroy(context.Context) error {
	s.kill()
	_ = s.Close()
	if err := s.p.remove(s.dir); err != nil {
		return fmt.Errorf("destroy sandbox %s: %w", s.dir, err)
	}
	return nil
}

// runnable reports why no command may start now: the sandbox was
// destroyed, ctx is done, or the workspace was removed behind Mango's back
// (a vanished sandbox, not a command failure).
func (s *localSandbox) runnable(ctx context.Context) error {
	if s.destroyed() {
		return sandbox.ErrDestroyed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, err := os.Stat(s.dir); errors.Is(err, fs.ErrNotExist) {
		return s.gone()
	}
	return nil
}

// pipeGrace bounds how long Exec waits for output after the command's
// process group is dead: only a process that left the group can still hold
// the pipes open, and its output is not waited for.
const pipeGrace = 500 * time.Millisecond

func (s *localSandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (*sandbox.ExecResult, error) {
	if err := s.runnable(ctx); err != nil {
		return nil, err
	}
	env, err := s.environ(req.Env)
	if err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	timeout := defaults.Positive(req.Timeout, s.p.execTimeout)
	limit := defaults.Positive(req.MaxOutput, s.p.maxOutput)

	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	stopOnDestroy := context.AfterFunc(s.life, cancel)
	defer stopOnDestroy()

	cmd := exec.CommandContext(runCtx, "/bin/sh", "-c", req.Command)
	cmd.Dir = s.dir
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var killed atomic.Bool
	cmd.Cancel = func() error {
		killed.Store(true)
		return killGroup(cmd.Process.Pid)
	}

	// The pipes are ours rather than os/exec's so that Wait returns as
	// soon as the shell exits; the group is killed before draining them.
	var pp pipes
	defer pp.closeAll()
	outR, errR, stdin, err := pp.attach(cmd, req.Stdin != nil)
	if err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}

	start := time.Now()
	err = cmd.Start()
	// The child holds its own copies of its ends; only ours remain open.
	closeFile(cmd.Stdout.(*os.File))
	closeFile(cmd.Stderr.(*os.File))
	if inR, ok := cmd.Stdin.(*os.File); ok {
		closeFile(inR)
	}
	if err != nil {
		if _, serr := os.Lstat(s.dir); errors.Is(serr, fs.ErrNotExist) {
			return nil, fmt.Errorf("exec: %w", s.gone())
		}
		return nil, fmt.Errorf("exec: %w", err)
	}

	out := sandbox.NewOutput(limit)
	var copies sync.WaitGroup
	copies.Go(func() { _, _ = io.Copy(&out.Stdout, outR) })
	copies.Go(func() { _, _ = io.Copy(&out.Stderr, errR) })
	if stdin != nil {
		copies.Go(func() {
			_, _ = stdin.Write(req.Stdin) // EPIPE when the command ignores its input
			closeFile(stdin)
		})
	}

	waitErr := cmd.Wait()
	duration := time.Since(start)
	// Background processes do not outlive the command.
	_ = killGroup(cmd.Process.Pid)
	drain(&copies, outR, errR, stdin)

	if killed.Load() {
		switch {
		case s.destroyed():
			return nil, sandbox.ErrDestroyed
		case ctx.Err() != nil:
			return nil, ctx.Err()
		}
	}
	res := out.Result(-1, killed.Load() && errors.Is(runCtx.Err(), context.DeadlineExceeded), duration)
	var exitErr *exec.ExitError
	switch {
	case res.TimedOut:
	case waitErr == nil || errors.As(waitErr, &exitErr):
		res.ExitCode = cmd.ProcessState.ExitCode() // -1 when killed by a signal
	default:
		return nil, fmt.Errorf("exec: %w", waitErr)
	}
	return res, nil
}

// drain waits for the copies of the command's output (and input, stdin
// not nil) to end, at most pipeGrace before it cuts them short.
func drain(copies *sync.WaitGroup, outR, errR, stdin *os.File) {
	drained := make(chan struct{})
	go func() { copies.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(pipeGrace):
		// Deadlines unblock the copies; Close would race with them.
		deadline := time.Now()
		_ = outR.SetReadDeadline(deadline)
		_ = errR.SetReadDeadline(deadline)
		if stdin != nil {
			_ = stdin.SetWriteDeadline(deadline)
		}
		<-drained
	}
}

// pipes tracks the pipe ends Exec opens so that all are closed on return.
type pipes []*os.File

// attach gives cmd a stdout, a stderr and, withStdin, a stdin pipe, and
// returns the ends the caller reads (outR, errR) and writes (stdin).
func (pp *pipes) attach(cmd *exec.Cmd, withStdin bool) (outR, errR, stdin *os.File, err error) {
	outR, outW, err := pp.pipe()
	if err != nil {
		return nil, nil, nil, err
	}
	errR, errW, err := pp.pipe()
	if err != nil {
		return nil, nil, nil, err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	if withStdin {
		var inR *os.File
		if inR, stdin, err = pp.pipe(); err != nil {
			return nil, nil, nil, err
		}
		cmd.Stdin = inR
	}
	return outR, errR, stdin, nil
}

func (pp *pipes) pipe() (r, w *os.File, err error) {
	r, w, err = os.Pipe()
	if err == nil {
		*pp = append(*pp, r, w)
	}
	return r, w, err
}

// closeAll closes every end; closing an end twice is harmless.
func (pp *pipes) closeAll() {
	for _, f := range *pp {
		closeFile(f)
	}
}

// closeFile closes f where its close error carries no information: a pipe
// end, or a file abandoned after an earlier error.
func closeFile(f *os.File) { _ = f.Close() }

// killGroup sends SIGKILL to the process group led by pid. A group that no
// longer exists is not an error.
func killGroup(pid int) error {
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// environ builds a command's environment from scratch: nothing of the
// worker's own environment is inherited.
func (s *localSandbox) environ(extra map[string]string) ([]string, error) {
	vars := map[string]string{
		"PATH": "/usr/local/bin:/usr/bin:/bin",
		"HOME": s.dir,
		"LANG": "C.UTF-8",
	}
	for _, layer := range []map[string]string{s.env, extra} {
		for k, v := range layer {
			if err := checkEnv(k, v); err != nil {
				return nil, err
			}
			vars[k] = v
		}
	}
	env := make([]string, 0, len(vars))
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	return env, nil
}

func checkEnv(k, v string) error {
	if k == "" || strings.ContainsAny(k, "=\x00") || strings.Contains(v, "\x00") {
		return fmt.Errorf("invalid environment variable %q", k)
	}
	return nil
}

// rel maps a sandbox path to a clean path relative to the workspace,
// rejecting lexical escapes. Accepted are paths relative to the workspace,
// absolute paths under it, and the absolute paths container providers use:
// /workspace/X names X, /mnt/session/X names mnt/session/X and
// /mnt/memory/X names mnt/memory/X (a lexical mapping; the workspace is the
// only directory ever touched). Escapes
// through symbolic links are caught by os.Root when the path is used.
func (s *localSandbox) rel(name string) (string, error) {
	if name == "" {
		return "", errors.New("empty path")
	}
	if !filepath.IsAbs(name) {
		if !filepath.IsLocal(name) {
			return "", sandbox.ErrPathEscape
		}
		return filepath.Clean(name), nil
	}
	clean := filepath.Clean(name)
	if r, err := filepath.Rel(s.dir, clean); err == nil && filepath.IsLocal(r) {
		return r, nil
	}
	switch {
	case clean == sandbox.WorkspaceDir:
		return ".", nil
	case strings.HasPrefix(clean, sandbox.WorkspaceDir+"/"):
		return strings.TrimPrefix(clean, sandbox.WorkspaceDir+"/"), nil
	}
	if _, ok := sandbox.SessionRoot(clean); ok {
		return filepath.FromSlash(strings.TrimPrefix(clean, "/")), nil
	}
	return "", sandbox.ErrPathEscape
}

// openRoot opens the workspace for confined file access.
func (s *localSandbox) openRoot(ctx context.Context, name string) (*os.Root, string, error) {
	if s.destroyed() {
		return nil, "", sandbox.ErrDestroyed
	}
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	rel, err := s.rel(name)
	if err != nil {
		return nil, "", err
	}
	root, err := os.OpenRoot(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", s.gone()
	}
	if err != nil {
		return nil, "", err
	}
	return root, rel, nil
}

func (s *localSandbox) ReadFile(ctx context.Context, name string) ([]byte, error) {
	root, rel, err := s.openRoot(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	defer func() { _ = root.Close() }()
	data, err := root.ReadFile(rel)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, s.fileError(err, rel))
	}
	return data, nil
}

// WriteFile writes name, creating missing parent directories with mode
// 0755. perm applies when the file is created (0 means 0644); an existing
// file keeps its mode.
func (s *localSandbox) WriteFile(ctx context.Context, name string, data []byte, perm fs.FileMode) error {
	root, rel, err := s.openRoot(ctx, name)
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	defer func() { _ = root.Close() }()
	perm = cmp.Or(perm, 0o644)
	if dir := filepath.Dir(rel); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("write %s: %w", name, s.fileError(err, rel))
		}
	}
	if err := root.WriteFile(rel, data, perm.Perm()); err != nil {
		return fmt.Errorf("write %s: %w", name, s.fileError(err, rel))
	}
	return nil
}

// fileError maps an os.Root error to ErrPathEscape when the path left the
// workspace through a symbolic link. os.Root does not export its escape
// error, so it is recognised by its text and, should that text change, by
// resolving the path's existing prefix.
func (s *localSandbox) fileError(err error, rel string) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Err.Error() == "path escapes from parent" {
		return sandbox.ErrPathEscape
	}
	if s.resolvesOutside(rel) {
		return sandbox.ErrPathEscape
	}
	return err
}

// resolvesOutside reports whether rel, resolved component by component
// through symbolic links as far as it exists, leaves the workspace.
func (s *localSandbox) resolvesOutside(rel string) bool {
	cur := s.dir
	for part := range strings.SplitSeq(rel, string(filepath.Separator)) {
		next := filepath.Join(cur, part)
		fi, err := os.Lstat(next)
		if err != nil {
			return false
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			target, err := filepath.EvalSymlinks(next)
			if err != nil {
				// A dangling link: judge by where it points.
				link, lerr := os.Readlink(next)
				if lerr != nil {
					return false
				}
				if !filepath.IsAbs(link) {
					link = filepath.Join(cur, link)
				}
				target = filepath.Clean(link)
			}
			next = target
		}
		if r, err := filepath.Rel(s.dir, next); err != nil || !filepath.IsLocal(r) && r != "." {
			return true
		}
		cur = next
	}
	return false
}

var (
	_ sandbox.Provider  = (*Provider)(nil)
	_ sandbox.Lister    = (*Provider)(nil)
	_ sandbox.Destroyer = (*Provider)(nil)
	_ sandbox.Located   = (*Provider)(nil)
	_ sandbox.Sandbox   = (*localSandbox)(nil)
)
