// Package sandboxlocal is the "local" sandbox provider: tools run as child
// processes on the worker's own host, in a temporary directory per session.
//
// The local provider is not a security boundary. It exists for development
// and for the zero-configuration default (the offline fake model plus local
// sandbox). The worker refuses to combine it with a real, network-backed model
// unless MANGO_ALLOW_UNSAFE_LOCAL_SANDBOX=1, because such a model can be
// steered into running arbitrary commands on the host.
//
// This is currently a skeleton: the Provider only reports its name. Creating
// and attaching sandboxes, command execution and file access are added by the
// sandbox issue.
package sandboxlocal

import (
	"context"

	"github.com/mangohq/mango/execution-worker/sandbox"
)

// Name is the name the local provider is registered under.
const Name = "local"

// Factory is the registry entry for the local provider. It runs tools on the
// host and its sandboxes are bound to that host.
var Factory = sandbox.Factory{
	Traits: sandbox.Traits{RunsOnHost: true, HostBound: true},
	New: func(context.Context) (sandbox.Provider, error) {
		return &Provider{}, nil
	},
}

// Provider is the local sandbox provider.
type Provider struct{}

// Name returns "local".
func (*Provider) Name() string { return Name }

var _ sandbox.Provider = (*Provider)(nil)
