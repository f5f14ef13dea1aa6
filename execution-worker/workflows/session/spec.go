package session

import (
	"encoding/json"
	"fmt"
	"net/url"

	"github.com/mangohq/mango/execution-worker/sandbox"
)

// envConfig is the part of an environment's configuration the sandbox
// enforces (the api-server validated and resolved it).
type envConfig struct {
	Networking *struct {
		Type                 string   `json:"type"`
		AllowedHosts         []string `json:"allowed_hosts"`
		AllowMCPServers      bool     `json:"allow_mcp_servers"`
		AllowPackageManagers bool     `json:"allow_package_managers"`
	} `json:"networking"`
	Packages *sandbox.Packages `json:"packages"`
}

// sandboxSpec derives what a session's sandbox must enforce from its
// environment's configuration (JSON; empty: none) and its agent's MCP
// servers (a JSON array): the packages to install and, for limited
// networking, the exact allowed hosts: the environment's own, the MCP
// servers' when allow_mcp_servers, and the package registries when
// allow_package_managers. It is computed for every turn, so a session
// update that changes the MCP servers changes the policy of the next one.
func sandboxSpec(environment, mcpServers string) (sandbox.Spec, error) {
	var spec sandbox.Spec
	if environment == "" {
		return spec, nil
	}
	var cfg envConfig
	if err := json.Unmarshal([]byte(environment), &cfg); err != nil {
		return spec, fmt.Errorf("decode environment configuration: %w", err)
	}
	if !cfg.Packages.Empty() {
		spec.Packages = cfg.Packages
	}
	n := cfg.Networking
	if n == nil || n.Type != "limited" {
		return spec, nil
	}
	hosts := append([]string{}, n.AllowedHosts...)
	if n.AllowMCPServers && mcpServers != "" {
		var servers []struct {
			URL string `json:"url"`
		}
		if err := json.Unmarshal([]byte(mcpServers), &servers); err != nil {
			return spec, fmt.Errorf("decode MCP servers: %w", err)
		}
		for _, s := range servers {
			if u, err := url.Parse(s.URL); err == nil && u.Hostname() != "" {
				hosts = append(hosts, u.Hostname())
			}
		}
	}
	if n.AllowPackageManagers {
		hosts = append(hosts, sandbox.PackageRegistries()...)
	}
	spec.Network = &sandbox.Network{AllowedHosts: sandbox.SortHosts(hosts)}
	return spec, nil
}
