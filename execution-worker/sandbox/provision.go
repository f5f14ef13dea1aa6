package sandbox

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Network is a sandbox's egress policy: deny by default, allowing exactly
// AllowedHosts. A nil *Network in a [Spec] means unrestricted networking.
type Network struct {
	// AllowedHosts are the only hosts commands may reach: FQDNs or
	// *.wildcards, sorted, without duplicates. Empty: no egress at all.
	AllowedHosts []string `json:"allowed_hosts"`
}

// Packages lists packages to install at provisioning, per package manager.
// Specifiers are passed to the manager as single arguments (for example
// "requests==2.32.3" for pip, "golang.org/x/tools/cmd/goimports@latest"
// for go).
type Packages struct {
	Apt   []string `json:"apt,omitempty"`
	Cargo []string `json:"cargo,omitempty"`
	Gem   []string `json:"gem,omitempty"`
	Go    []string `json:"go,omitempty"`
	Npm   []string `json:"npm,omitempty"`
	Pip   []string `json:"pip,omitempty"`
}

// Empty reports that p installs nothing.
func (p *Packages) Empty() bool {
	return p == nil || len(p.Apt)+len(p.Cargo)+len(p.Gem)+len(p.Go)+len(p.Npm)+len(p.Pip) == 0
}

// packageManager is how one manager installs and where it downloads from.
type packageManager struct {
	name string
	list func(*Packages) []string
	// command installs the (shell-quoted) specifiers.
	command func(args string) string
	// registries are the hosts the manager downloads from.
	registries []string
}

var packageManagers = []packageManager{
	{"apt", func(p *Packages) []string { return p.Apt },
		func(a string) string {
			return "apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends " + a
		},
		[]string{"deb.debian.org", "security.debian.org", "archive.ubuntu.com", "security.ubuntu.com", "ports.ubuntu.com"}},
	{"cargo", func(p *Packages) []string { return p.Cargo },
		func(a string) string { return "cargo install --locked " + a },
		[]string{"crates.io", "index.crates.io", "static.crates.io"}},
	{"gem", func(p *Packages) []string { return p.Gem },
		func(a string) string { return "gem install --no-document " + a },
		[]string{"rubygems.org", "index.rubygems.org"}},
	{"go", func(p *Packages) []string { return p.Go },
		func(a string) string { return "go install " + a },
		[]string{"proxy.golang.org", "sum.golang.org"}},
	{"npm", func(p *Packages) []string { return p.Npm },
		func(a string) string { return "npm install -g --no-fund --no-audit " + a },
		[]string{"registry.npmjs.org"}},
	{"pip", func(p *Packages) []string { return p.Pip },
		func(a string) string { return "python3 -m pip install --no-input --disable-pip-version-check " + a },
		[]string{"pypi.org", "files.pythonhosted.org"}},
}

// PackageRegistries returns the hosts every supported package manager
// downloads from, sorted: what an environment's allow_package_managers
// adds to its allowed hosts.
func PackageRegistries() []string {
	var hosts []string
	for _, m := range packageManagers {
		hosts = append(hosts, m.registries...)
	}
	return SortHosts(hosts)
}

// Registries returns the hosts the managers p uses download from, sorted.
func (p *Packages) Registries() []string {
	var hosts []string
	for _, m := range packageManagers {
		if len(m.list(p)) > 0 {
			hosts = append(hosts, m.registries...)
		}
	}
	return SortHosts(hosts)
}

// InstallStep is one package manager's install command.
type InstallStep struct {
	// Manager is the package manager's name ("apt", "pip", ...).
	Manager string
	// Command is the shell command, its specifiers quoted.
	Command string
}

// InstallSteps returns the commands that install p, one per manager with
// packages, in a fixed order (apt first: the others may need its tools).
func (p *Packages) InstallSteps() []InstallStep {
	if p.Empty() {
		return nil
	}
	var steps []InstallStep
	for _, m := range packageManagers {
		list := m.list(p)
		if len(list) == 0 {
			continue
		}
		quoted := make([]string, len(list))
		for i, s := range list {
			quoted[i] = ShellQuote(s)
		}
		steps = append(steps, InstallStep{Manager: m.name, Command: m.command(strings.Join(quoted, " "))})
	}
	return steps
}

// ShellQuote quotes s as one POSIX shell word.
func ShellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// SortHosts returns hosts lowercased, sorted and without duplicates or
// empty entries.
func SortHosts(hosts []string) []string {
	out := make([]string, 0, len(hosts))
	for _, h := range hosts {
		if h = strings.ToLower(strings.TrimSpace(h)); h != "" {
			out = append(out, h)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// EgressController is implemented by providers that enforce a [Network]
// per sandbox (they report [CapabilityLimitedNetworking]). Their Create
// applies Spec.Network before the sandbox runs anything.
type EgressController interface {
	// SetEgress replaces the egress policy of ref's sandbox with one that
	// denies everything but allowedHosts.
	SetEgress(ctx context.Context, ref Ref, allowedHosts []string) error
}

// DefaultInstallTimeout bounds one package manager's install command.
const DefaultInstallTimeout = 15 * time.Minute

// ProvisionError reports that a session's sandbox cannot be set up as its
// environment asks (a package that does not install, a provider without a
// needed capability). Retrying the same turn would fail the same way.
type ProvisionError struct {
	SessionID string
	Reason    string
}

func (e *ProvisionError) Error() string {
	return fmt.Sprintf("the sandbox of session %s cannot be provisioned: %s", e.SessionID, e.Reason)
}

// hasCapability reports whether p lists capability c.
func hasCapability(p Provider, c string) bool {
	cp, ok := p.(Capable)
	return ok && slices.Contains(cp.Capabilities(), c)
}
