// Package sandbox defines how the execution worker reaches the place where an
// agent's tools run, and the registry that maps a provider name (the value of
// MANGO_SANDBOX) to the code that builds it.
//
// The chain at run time is
//
//	Temporal activity -> SessionManager -> Provider -> Sandbox
//
// This package currently holds only the skeleton of that chain: a minimal
// [Provider] interface (its name) and the [Registry]. The full Provider
// contract (Create, Attach, the Sandbox interface, optional capabilities) and
// the SessionManager arrive with the sandbox issue; each implementation lives
// in its own subpackage (sandboxlocal, sandboxdocker, …) and runs the
// importable conformance suite sandboxtest.
//
// A worker serves exactly one provider. An unknown name is a startup error;
// the worker never falls back to running tools on the host.
package sandbox

import "context"

// Provider is a sandbox backend.
//
// This is the minimal form used while the worker's plumbing is built: a
// Provider only reports its name. Name must return the stable lowercase name
// the provider is registered under (for example "local" or "docker"); it is
// used in task queue names and in sandbox bindings, so it never changes.
type Provider interface {
	Name() string
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

	// New constructs the provider. It may read provider-specific
	// configuration and contact the backend; ctx bounds that work.
	New func(ctx context.Context) (Provider, error)
}
