// Package envspec validates Environment requests and resolves their
// configuration: cloud (networking unrestricted or limited, packages per
// manager) or self_hosted.
package envspec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"strings"

	"github.com/mangohq/mango/api-server/internal/agentspec"
	"github.com/mangohq/mango/api-server/internal/jsonx"
)

// Limits of the public API.
const (
	MaxNameLen         = 256
	MaxDescriptionLen  = 2048
	MaxAllowedHosts    = 256
	MaxPackagesPerKind = 256
	MaxPackageLen      = 256
)

// PackageManagers lists the package managers a cloud config may name.
var PackageManagers = []string{"apt", "cargo", "gem", "go", "npm", "pip"}

// The config types of an environment.
const (
	// Cloud runs sessions' tools in Mango's sandboxes.
	Cloud = "cloud"
	// SelfHosted runs sessions' built-in tools on the client's own worker,
	// which takes the sessions from the environment's work queue.
	SelfHosted = "self_hosted"
)

// Config is a resolved environment configuration.
type Config struct {
	Type       string      `json:"type"`
	Networking *Networking `json:"networking,omitempty"`
	Packages   *Packages   `json:"packages,omitempty"`
}

// Networking is the cloud network policy.
type Networking struct {
	Type                 string    `json:"type"`
	AllowedHosts         *[]string `json:"allowed_hosts,omitempty"`
	AllowMCPServers      *bool     `json:"allow_mcp_servers,omitempty"`
	AllowPackageManagers *bool     `json:"allow_package_managers,omitempty"`
}

// Packages lists packages to install, per manager.
type Packages struct {
	Type  string   `json:"type"`
	Apt   []string `json:"apt"`
	Cargo []string `json:"cargo"`
	Gem   []string `json:"gem"`
	Go    []string `json:"go"`
	Npm   []string `json:"npm"`
	Pip   []string `json:"pip"`
}

// Input is a create or update request.
type Input struct {
	Name        jsonx.Opt[string]             `json:"name"`
	Description jsonx.Opt[string]             `json:"description"`
	Config      jsonx.Opt[json.RawMessage]    `json:"config"`
	Scope       jsonx.Opt[string]             `json:"scope"`
	Metadata    jsonx.Opt[map[string]*string] `json:"metadata"`
}

// Spec is the resolved, stored state of an environment.
type Spec struct {
	Name        string
	Description string
	Config      Config
	Scope       string
	Metadata    map[string]string
}

// DefaultConfig is the configuration of an environment created without
// one: cloud, unrestricted networking, no packages.
func DefaultConfig() Config {
	return Config{Type: "cloud", Networking: &Networking{Type: "unrestricted"}, Packages: emptyPackages()}
}

func emptyPackages() *Packages {
	return &Packages{Type: "packages", Apt: []string{}, Cargo: []string{}, Gem: []string{}, Go: []string{}, Npm: []string{}, Pip: []string{}}
}

// Create resolves a create request.
func Create(in *Input) (*Spec, error) {
	if !in.Name.Set || in.Name.Null {
		return nil, jsonx.Errorf("name", "is required")
	}
	s := &Spec{Config: DefaultConfig(), Scope: "organization", Metadata: map[string]string{}}
	return apply(s, in)
}

// Update applies an update request to the current state.
func Update(current *Spec, in *Input) (*Spec, error) {
	if in.Name.Set && in.Name.Null {
		return nil, jsonx.Errorf("name", "cannot be cleared")
	}
	next := *current
	next.Metadata = make(map[string]string, len(current.Metadata))
	for k, v := range current.Metadata {
		next.Metadata[k] = v
	}
	return apply(&next, in)
}

func apply(s *Spec, in *Input) (*Spec, error) {
	if in.Name.Set {
		if err := agentspec.CheckLen("name", in.Name.Value, 1, MaxNameLen); err != nil {
			return nil, err
		}
		s.Name = in.Name.Value
	}
	if in.Description.Set {
		if err := agentspec.CheckLen("description", in.Description.Value, 0, MaxDescriptionLen); err != nil {
			return nil, err
		}
		s.Description = in.Description.Value
	}
	if in.Scope.Set {
		switch {
		case in.Scope.Null:
			s.Scope = "organization"
		case in.Scope.Value == "organization" || in.Scope.Value == "account":
			s.Scope = in.Scope.Value
		default:
			return nil, jsonx.Errorf("scope", "must be \"organization\" or \"account\", got %q", in.Scope.Value)
		}
	}
	if in.Metadata.Set {
		md, err := agentspec.PatchMetadata(s.Metadata, in.Metadata.Value, in.Metadata.Null)
		if err != nil {
			return nil, err
		}
		s.Metadata = md
	}
	if in.Config.Set {
		if in.Config.Null {
			s.Config = DefaultConfig()
		} else {
			c, err := ParseConfig(in.Config.Value)
			if err != nil {
				return nil, err
			}
			s.Config = *c
		}
	}
	return s, nil
}

// ParseConfig validates and resolves an environment config object.
func ParseConfig(raw json.RawMessage) (*Config, error) {
	typ, err := jsonx.ObjectType(raw, "config")
	if err != nil {
		return nil, err
	}
	switch typ {
	case "self_hosted":
		var in struct {
			Type string `json:"type"`
		}
		if err := jsonx.Decode(raw, &in, "config"); err != nil {
			return nil, err
		}
		return &Config{Type: "self_hosted"}, nil
	case "cloud":
	case "":
		return nil, jsonx.Errorf("config.type", "is required (cloud or self_hosted)")
	default:
		return nil, jsonx.Errorf("config.type", "must be \"cloud\" or \"self_hosted\", got %q", typ)
	}
	var in struct {
		Type       string          `json:"type"`
		Networking json.RawMessage `json:"networking"`
		Packages   json.RawMessage `json:"packages"`
	}
	if err := jsonx.Decode(raw, &in, "config"); err != nil {
		return nil, err
	}
	c := &Config{Type: "cloud", Networking: &Networking{Type: "unrestricted"}, Packages: emptyPackages()}
	if present(in.Packages) {
		p, err := parsePackages(in.Packages)
		if err != nil {
			return nil, err
		}
		c.Packages = p
	}
	if present(in.Networking) {
		n, err := parseNetworking(in.Networking)
		if err != nil {
			return nil, err
		}
		c.Networking = n
	}
	// Packages with limited networking and allow_package_managers false
	// are fine: the registries are reachable only while they install.
	return c, nil
}

func present(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && !bytes.Equal(t, []byte("null"))
}

func parseNetworking(raw json.RawMessage) (*Networking, error) {
	const path = "config.networking"
	var in struct {
		Type                 string   `json:"type"`
		AllowedHosts         []string `json:"allowed_hosts"`
		AllowMCPServers      *bool    `json:"allow_mcp_servers"`
		AllowPackageManagers *bool    `json:"allow_package_managers"`
	}
	if err := jsonx.DecodeObject(raw, &in, path); err != nil {
		return nil, err
	}
	switch in.Type {
	case "unrestricted":
		if in.AllowedHosts != nil || in.AllowMCPServers != nil || in.AllowPackageManagers != nil {
			return nil, jsonx.Errorf(path, "allowed_hosts, allow_mcp_servers and allow_package_managers apply only to type limited")
		}
		return &Networking{Type: "unrestricted"}, nil
	case "limited":
	case "":
		return nil, jsonx.Errorf(path+".type", "is required (unrestricted or limited)")
	default:
		return nil, jsonx.Errorf(path+".type", "must be \"unrestricted\" or \"limited\", got %q", in.Type)
	}
	if len(in.AllowedHosts) > MaxAllowedHosts {
		return nil, jsonx.Errorf(path+".allowed_hosts", "at most %d hosts are allowed, got %d", MaxAllowedHosts, len(in.AllowedHosts))
	}
	hosts := make([]string, 0, len(in.AllowedHosts))
	for i, h := range in.AllowedHosts {
		if err := validHost(h); err != nil {
			return nil, jsonx.Errorf(fmt.Sprintf("%s.allowed_hosts[%d]", path, i), "%v", err)
		}
		hosts = append(hosts, h)
	}
	f := false
	n := &Networking{Type: "limited", AllowedHosts: &hosts, AllowMCPServers: &f, AllowPackageManagers: new(bool)}
	if in.AllowMCPServers != nil {
		n.AllowMCPServers = in.AllowMCPServers
	}
	if in.AllowPackageManagers != nil {
		n.AllowPackageManagers = in.AllowPackageManagers
	}
	return n, nil
}

// validHost accepts a host name (optionally with a leading "*." wildcard),
// an IP address, or either with a port.
func validHost(h string) error {
	if h == "" || len(h) > 253 {
		return fmt.Errorf("must be a host name of 1 to 253 characters")
	}
	if strings.ContainsAny(h, "/ \t@?#") {
		return fmt.Errorf("must be a host name, not a URL: %q", h)
	}
	host := h
	if hp, _, err := net.SplitHostPort(h); err == nil {
		host = hp
	}
	if net.ParseIP(host) != nil {
		return nil
	}
	host = strings.TrimPrefix(host, "*.")
	for _, label := range strings.Split(host, ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("invalid host name %q", h)
		}
		for _, r := range label {
			if r != '-' && (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') {
				return fmt.Errorf("invalid host name %q", h)
			}
		}
	}
	return nil
}

func parsePackages(raw json.RawMessage) (*Packages, error) {
	const path = "config.packages"
	var in struct {
		Type  *string  `json:"type"`
		Apt   []string `json:"apt"`
		Cargo []string `json:"cargo"`
		Gem   []string `json:"gem"`
		Go    []string `json:"go"`
		Npm   []string `json:"npm"`
		Pip   []string `json:"pip"`
	}
	if err := jsonx.DecodeObject(raw, &in, path); err != nil {
		return nil, err
	}
	if in.Type != nil && *in.Type != "packages" {
		return nil, jsonx.Errorf(path+".type", "must be \"packages\", got %q", *in.Type)
	}
	p := emptyPackages()
	lists := map[string]*[]string{"apt": &in.Apt, "cargo": &in.Cargo, "gem": &in.Gem, "go": &in.Go, "npm": &in.Npm, "pip": &in.Pip}
	dst := map[string]*[]string{"apt": &p.Apt, "cargo": &p.Cargo, "gem": &p.Gem, "go": &p.Go, "npm": &p.Npm, "pip": &p.Pip}
	for _, kind := range PackageManagers {
		list := *lists[kind]
		if len(list) > MaxPackagesPerKind {
			return nil, jsonx.Errorf(path+"."+kind, "at most %d packages are allowed, got %d", MaxPackagesPerKind, len(list))
		}
		for i, name := range list {
			if name == "" || len(name) > MaxPackageLen || strings.ContainsAny(name, " \t\r\n;&|`$") {
				return nil, jsonx.Errorf(fmt.Sprintf("%s.%s[%d]", path, kind, i), "invalid package specifier %q", name)
			}
		}
		if list != nil {
			*dst[kind] = list
		}
	}
	return p, nil
}

// Count returns the number of packages listed.
func (p *Packages) Count() int {
	return len(p.Apt) + len(p.Cargo) + len(p.Gem) + len(p.Go) + len(p.Npm) + len(p.Pip)
}
