// Package sandboxdocker is the "docker" sandbox provider: each session gets a
// container of the worker host's Docker daemon, with no network by default,
// resource limits and Mango ownership labels.
//
// This is currently a skeleton: the Provider only reports its name and does
// not contact the Docker daemon yet. Container lifecycle, exec and file access
// are added by the sandbox issue.
package sandboxdocker

import (
	"context"

	"github.com/mangohq/mango/execution-worker/sandbox"
)

// Name is the name the Docker provider is registered under.
const Name = "docker"

// Factory is the registry entry for the Docker provider. Tools run inside a
// container, not on the host, but the containers belong to the worker host's
// daemon, so sandboxes are bound to that host.
var Factory = sandbox.Factory{
	Traits: sandbox.Traits{RunsOnHost: false, HostBound: true},
	New: func(context.Context) (sandbox.Provider, error) {
		return &Provider{}, nil
	},
}

// Provider is the Docker sandbox provider.
type Provider struct{}

// Name returns "docker".
func (*Provider) Name() string { return Name }

var _ sandbox.Provider = (*Provider)(nil)
