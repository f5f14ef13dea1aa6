package session

import (
	"slices"
	"testing"

	"github.com/mangohq/mango/execution-worker/sandbox"
)

func TestSandboxSpec(t *testing.T) {
	mcp := `[{"type":"url","name":"docs","url":"https://MCP.example.com:8443/sse"},{"type":"url","name":"b","url":"not a url"}]`
	limited := func(extra string) string {
		return `{"type":"cloud","networking":{"type":"limited","allowed_hosts":["b.example.com","a.example.com"]` + extra + `},` +
			`"packages":{"type":"packages","apt":[],"pip":["requests"]}}`
	}
	tests := []struct {
		name, env, mcp string
		hosts          []string // nil: unrestricted
		packages       bool
	}{
		{"no environment", "", mcp, nil, false},
		{"unrestricted", `{"type":"cloud","networking":{"type":"unrestricted"},"packages":{"type":"packages","pip":[]}}`, mcp, nil, false},
		{"self hosted", `{"type":"self_hosted"}`, mcp, nil, false},
		{"limited", limited(`,"allow_mcp_servers":false,"allow_package_managers":false`), mcp,
			[]string{"a.example.com", "b.example.com"}, true},
		{"limited with MCP", limited(`,"allow_mcp_servers":true,"allow_package_managers":false`), mcp,
			[]string{"a.example.com", "b.example.com", "mcp.example.com"}, true},
		{"limited with package managers", limited(`,"allow_mcp_servers":false,"allow_package_managers":true`), "[]",
			sandbox.SortHosts(append([]string{"a.example.com", "b.example.com"}, sandbox.PackageRegistries()...)), true},
		{"limited, nothing allowed", `{"type":"cloud","networking":{"type":"limited","allowed_hosts":[]}}`, "[]", []string{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec, err := sandboxSpec(tt.env, tt.mcp)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tt.hosts == nil && spec.Network != nil:
				t.Errorf("network = %+v, want unrestricted", spec.Network)
			case tt.hosts != nil && (spec.Network == nil || !slices.Equal(spec.Network.AllowedHosts, tt.hosts)):
				t.Errorf("network = %+v, want exactly %v", spec.Network, tt.hosts)
			}
			if got := spec.Packages != nil; got != tt.packages {
				t.Errorf("packages = %+v, want present %v", spec.Packages, tt.packages)
			}
			if tt.packages && !slices.Equal(spec.Packages.Pip, []string{"requests"}) {
				t.Errorf("pip = %v", spec.Packages.Pip)
			}
		})
	}
	if _, err := sandboxSpec("{", ""); err == nil {
		t.Error("a malformed environment configuration was accepted")
	}
}
