// Package sandbox defines how the execution worker reaches the place where an
// agent's tools run, and the registry that maps a provider name (the value of
// MANGO_SANDBOX) to the code that builds it.
//
// The chain at run time is
//
//	Temporal activity -> SessionManager -> Provider -> Sandbox
//
// A [Provider] creates and re-attaches sandboxes; a [Sandbox] runs commands
// and reads and writes files inside one. Optional capabilities are separate
// interfaces a Provider or Sandbox may also implement. Each implementation
// lives in its own subpackage (sandboxlocal, sandboxdocker, ...) and runs
// the importable conformance suite sandboxtest.
package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"time"
)

// Errors shared by every provider.
var (
	// ErrNotFound reports that a persisted reference names a resource that
	// no longer exists. SessionManager never replaces such a sandbox with an
	// empty one: the session fails explicitly.
	ErrNotFound = errors.New("sandbox not found")
	// ErrNotOwned reports a reference that exists but belongs to another
	// session, another provider or another installation.
	ErrNotOwned = errors.New("sandbox belongs to another session, provider or installation")
	// ErrPathEscape reports a path that leaves the workspace, lexically or
	// through a symbolic link.
	ErrPathEscape = errors.New("path escapes the sandbox workspace")
	// ErrDestroyed reports use of a sandbox (Exec, ReadFile, WriteFile)
	// after Destroy was called on it.
	ErrDestroyed = errors.New("sandbox destroyed")
)

// Ref is the opaque, persistable reference to a sandbox: the provider's
// name and its own identifier (a directory, a container id, a remote id).
// It holds no secret.
type Ref struct {
	// Provider is the Name of the provider that created the sandbox.
	Provider string `json:"provider"`
	// ID is the provider's identifier of the resource.
	ID string `json:"id"`
}

// Spec describes the sandbox a session needs. Its hash is stored in the
// binding so a changed spec can be detected.
type Spec struct {
	// Image is the container image (container providers; empty: default).
	Image string `json:"image,omitempty"`
	// Env holds extra environment variables for commands.
	Env map[string]string `json:"env,omitempty"`
	// Network limits egress (nil: unrestricted). Only providers that are
	// an [EgressController] accept it.
	Network *Network `json:"network,omitempty"`
	// Packages are installed once, when the sandbox is provisioned. Only
	// providers reporting [CapabilityPackages] accept them.
	Packages *Packages `json:"packages,omitempty"`
}

// Provider is a sandbox backend.
//
// A provider is built for one installation (see [ValidateInstallation])
// and labels everything it creates with that installation's id. It never
// uses a resource labelled for another installation: Create and Attach
// refuse it with ErrNotOwned, List leaves it out and DestroyRef refuses
// it. A resource without an installation label (created before
// installation ids) is legacy: Create and Attach accept it for the
// session it was created for, since only a binding or intent of this
// installation leads them there.
type Provider interface {
	// Name returns the stable lowercase name the provider is registered
	// under ("local", "docker", ...). It appears in task queue names and in
	// bindings, so it never changes.
	Name() string
	// Create returns the sandbox of sessionKey, creating it if needed. It is
	// idempotent: concurrent or repeated calls for one key, from any client
	// of the provider, yield the same Ref and the same workspace.
	Create(ctx context.Context, sessionKey string, spec Spec) (Sandbox, Ref, error)
	// Attach reconnects to a persisted reference, for example after a
	// worker restart. It returns ErrNotFound when the resource is gone and
	// ErrNotOwned when ref belongs to another session or provider.
	Attach(ctx context.Context, sessionKey string, ref Ref) (Sandbox, error)
}

// ExecRequest is one command.
type ExecRequest struct {
	// Command is run by /bin/sh -c in the workspace.
	Command string
	// Stdin, when set, is the command's standard input; when nil the
	// command reads end-of-file at once.
	Stdin []byte
	// Timeout bounds the command's duration (0: the provider's default).
	Timeout time.Duration
	// MaxOutput caps stdout and stderr, each, in bytes (0: the provider's
	// default). Output beyond it is dropped and Truncated is set.
	MaxOutput int
	// Env holds extra environment variables for this command only.
	Env map[string]string
}

// ExecResult is what a command did.
type ExecResult struct {
	// ExitCode is the command's exit status; -1 when it was killed.
	ExitCode int
	// Stdout and Stderr hold the (possibly truncated) output.
	Stdout, Stderr []byte
	// Truncated reports that output was cut at MaxOutput.
	Truncated bool
	// TimedOut reports that the command was killed at its timeout.
	TimedOut bool
	// Duration is how long the command ran.
	Duration time.Duration
}

// Sandbox is one session's isolated workspace.
type Sandbox interface {
	// Ref returns the sandbox's persistable reference.
	Ref() Ref
	// Root returns the workspace root as commands see it (for example
	// /workspace in a container).
	Root() string
	// Exec runs a command. Cancelling ctx kills it (its whole process
	// group) and Exec returns ctx.Err(); a ctx already done when Exec is
	// called starts nothing. A timeout is a result, not an error
	// (TimedOut, ExitCode -1, with the output produced until then).
	Exec(ctx context.Context, req ExecRequest) (*ExecResult, error)
	// ReadFile reads a file; path is relative to Root, or absolute under
	// Root, under WorkspaceDir, under SessionDir or under MemoryDir (see
	// [InSessionPaths]; the local provider maps those into its workspace).
	// Anything else, lexically or through a symbolic link, returns
	// ErrPathEscape; a missing file returns an error matching
	// fs.ErrNotExist (not ErrNotFound, which means the sandbox itself is
	// gone).
	ReadFile(ctx context.Context, path string) ([]byte, error)
	// WriteFile writes a file, creating parent directories. Escapes return
	// ErrPathEscape.
	WriteFile(ctx context.Context, path string, data []byte, perm fs.FileMode) error
	// Destroy releases the resource. It is idempotent; after it, Attach to
	// the same Ref returns ErrNotFound.
	Destroy(ctx context.Context) error
}

// Shell is implemented by sandboxes that keep persistent shells for the
// bash tool: shells started in the workspace on first use, to which every
// call's command is written in turn, so that the working directory,
// variables and functions a command leaves behind are there for the next
// call (while the worker process lives: a restarted worker starts a new
// shell).
//
// ShellExec, RestartShell and StartShell act on the persistent shell named
// by the context's shell key ([WithShellKey], [ShellKey]). Each key has its
// own shell (its own working directory, environment and process), created
// on first use in the workspace, so that the session threads of one
// sandbox neither share a shell's state nor wait for each other: calls of
// one key are serialized, calls of different keys run concurrently. The
// key "" (a context without one) names the sandbox's default shell. A
// sandbox value keeps at most [MaxShellKeys] shells besides the default
// one: beyond that the least recently used keyed shell is closed, and the
// next call of its key starts a new shell (reported as
// ShellResult.NewShell). Closing the sandbox value (io.Closer, as the
// SessionManager does) ends every persistent shell of every key.
type Shell interface {
	// ShellExec runs req.Command in the persistent shell of ctx's shell
	// key (req.Stdin must be nil). Timeout and output limits are as for
	// [Sandbox.Exec]. A timeout or a cancellation kills the shell and
	// everything it started; the next call starts a new shell in the last
	// working directory known (ShellResult.NewShell), as it does after a
	// command ended the shell.
	ShellExec(ctx context.Context, req ExecRequest) (*ShellResult, error)
	// RestartShell kills the persistent shell of ctx's shell key and
	// everything it started; the next ShellExec of that key starts a new
	// one in the workspace.
	RestartShell(ctx context.Context) error
	// StartShell starts the persistent shell of ctx's shell key now unless
	// it runs, so that the first call does not wait for it (a turn calls
	// it while the model is still thinking).
	StartShell(ctx context.Context) error
}

// MaxShellKeys is how many keyed persistent shells (besides the default
// one) a [Shell] sandbox value keeps; see [Shell].
const MaxShellKeys = 32

// shellKeyContext is the context key of the shell key.
type shellKeyContext struct{}

// WithShellKey returns a copy of ctx whose [Shell] calls act on the
// persistent shell named key ("" names the sandbox's default shell). The
// worker gives each session thread its own key.
func WithShellKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, shellKeyContext{}, key)
}

// ShellKey returns the shell key of ctx set by [WithShellKey], or "" (the
// default shell).
func ShellKey(ctx context.Context) string {
	key, _ := ctx.Value(shellKeyContext{}).(string)
	return key
}

// ShellIdleTimeout is how long a persistent shell no call has used is kept:
// an idle session's shell holds a process and its memory. The next call
// starts a new one in the last working directory (ShellResult.NewShell).
const ShellIdleTimeout = 30 * time.Minute

// ShellResult is the outcome of a [Shell.ShellExec].
type ShellResult struct {
	ExecResult
	// NewShell reports that the call ran in a shell started to replace one
	// that had ended (timed out, killed, exited): variables, functions and
	// background jobs of earlier calls are gone; the working directory was
	// kept when it still existed.
	NewShell bool
	// ShellEnded reports that the shell ended during the call (a timeout,
	// or the command ended it, as exit or a failure under set -e do).
	ShellEnded bool
	// Dir is the shell's working directory after the call ("" when the
	// shell ended).
	Dir string
}

// Capability names reported by workers and checked at admission.
const (
	// CapabilityLimitedNetworking: per-sandbox egress allow-lists.
	CapabilityLimitedNetworking = "limited_networking"
	// CapabilityPackages: installing packages at provisioning.
	CapabilityPackages = "packages"
	// CapabilityPauseResume: pausing an idle sandbox.
	CapabilityPauseResume = "pause_resume"
)

// Capable is implemented by providers with optional capabilities.
type Capable interface {
	// Capabilities lists the capability names the provider supports.
	Capabilities() []string
}

// Lister is implemented by providers that can enumerate the resources
// they created, for the reconciler.
type Lister interface {
	// List returns references of the Mango-owned resources of this
	// provider that carry this installation's id, and of legacy ones
	// that carry none (Owned.Installation empty). Resources of other
	// installations are never listed.
	List(ctx context.Context) ([]Owned, error)
}

// Owned is a provider resource with its ownership labels.
type Owned struct {
	// Ref is the resource.
	Ref Ref
	// KeyHash is the KeyHash of the session key it was created for.
	KeyHash string
	// Installation is the installation id the resource is labelled with:
	// the provider's own, or empty for a legacy resource created before
	// installation ids. The reconciler destroys only resources of its
	// own installation, never legacy ones.
	Installation string
	// CreatedAt is when it was created, if known.
	CreatedAt time.Time
	// Spare reports a resource made ahead of any session (a warm pool's
	// ready container): it belongs to no session yet, and the reconciler
	// leaves it to the provider's [SpareTrimmer].
	Spare bool
}

// SpareTrimmer is implemented by providers that keep spare resources
// ready for sessions not yet created (a warm pool). The reconciler calls
// TrimSpares in every pass.
type SpareTrimmer interface {
	// TrimSpares removes the spares the provider no longer wants (beyond
	// its pool's size, made with other settings, or left half made or
	// half adopted by a worker that died) and returns them. It never
	// removes one that a session is adopting or has adopted.
	TrimSpares(ctx context.Context) ([]Ref, error)
}

// Destroyer is implemented by providers that can remove a resource by
// reference without attaching (the reconciler's orphan removal).
type Destroyer interface {
	// DestroyRef removes the resource; missing is not an error. It
	// refuses a resource labelled for another installation with
	// ErrNotOwned. A legacy resource (no installation label) is removed:
	// callers destroy one only when a binding or intent of their
	// installation references it.
	DestroyRef(ctx context.Context, ref Ref) error
}

// LabelInstallation is the label (metadata key, marker field) under which
// providers record the installation id on what they create.
const LabelInstallation = "mango.installation"

// maxInstallationLen is the longest installation id: a Kubernetes label
// value.
const maxInstallationLen = 63

// ValidateInstallation checks an installation id: 1 to 63 characters of
// lowercase letters, digits and '-', starting and ending with a letter or
// digit, so that every provider can store it as a label value (the
// api-server's ids are UUIDs).
func ValidateInstallation(id string) error {
	ok := id != "" && len(id) <= maxInstallationLen && id[0] != '-' && id[len(id)-1] != '-'
	for _, c := range id {
		ok = ok && (c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-')
	}
	if !ok {
		return fmt.Errorf("installation id %q: want 1 to %d lowercase letters, digits and inner '-'", id, maxInstallationLen)
	}
	return nil
}

// OwnedBy reports whether a resource whose installation label is label may
// be used by installation: it carries installation's id, or none (a legacy
// resource, which the caller adopts only for a session of its own).
func OwnedBy(label, installation string) bool {
	return label == installation || label == ""
}

// KeyHash returns the fixed-length ownership label of a session key: the
// hex SHA-256 of the key, truncated to 32 characters. Providers label
// resources with it, never with the raw key.
func KeyHash(sessionKey string) string {
	sum := sha256.Sum256([]byte("mango-sandbox:" + sessionKey))
	return hex.EncodeToString(sum[:16])
}

// SpecHash returns the hash stored in a binding for spec.
func SpecHash(spec Spec) string {
	b, _ := json.Marshal(spec) // a Spec always marshals
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// Traits are the properties of a provider that the worker needs to know
// before any sandbox exists: at configuration time and for task queue
// routing.
type Traits struct {
	// RunsOnHost reports that tools run as ordinary processes on the worker's
	// own host, with no isolation boundary between them and the worker. A
	// network-backed model is refused with such a provider unless the
	// operator explicitly accepts the risk.
	RunsOnHost bool

	// HostBound reports that a provider's sandboxes live on the worker's host
	// (local processes, containers of the local Docker daemon), so only that
	// worker can reach them again. Workers of such providers also poll a
	// per-worker host task queue, and later sandbox activities of a session
	// are routed there.
	HostBound bool
}

// Factory builds a Provider lazily: registering a provider costs nothing,
// and only the provider the worker is configured for is ever constructed.
type Factory struct {
	// Traits describes the provider this factory builds.
	Traits Traits

	// Configure reads the provider-specific configuration through getenv,
	// without contacting the backend, and returns the function that
	// builds the provider. Configuration errors (naming the variables)
	// come from Configure, so the worker reports them before it connects
	// anywhere.
	Configure func(getenv func(string) string) (Build, error)
}

// Build constructs the provider of installation (the id the api-server
// answers; see [ValidateInstallation]), which it records on every resource
// it creates. It may contact the backend; ctx bounds that work.
type Build func(ctx context.Context, installation string) (Provider, error)

// New configures and builds the provider of installation in one step (for
// callers that need no configuration check ahead of building).
func (f Factory) New(ctx context.Context, installation string, getenv func(string) string) (Provider, error) {
	build, err := f.Configure(getenv)
	if err != nil {
		return nil, err
	}
	return build(ctx, installation)
}
