package agentruntime

import (
	"bytes"
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"testing"
)

// toolSeeds are agent snapshot tools as the api-server stores them, and
// near misses.
var toolSeeds = []string{
	`[{"type":"agent_toolset_20260401","default_config":{"enabled":true,"permission_policy":{"type":"always_allow"}},"configs":[
	   {"name":"bash","type":"bash","enabled":true,"permission_policy":{"type":"always_ask"}},
	   {"name":"read","type":"read","enabled":true,"permission_policy":{"type":"always_allow"}},
	   {"name":"write","type":"write","enabled":false,"permission_policy":{"type":"always_allow"}},
	   {"name":"web_fetch","type":"web_fetch","enabled":true,"permission_policy":{"type":"always_allow"},"allowed_domains":["example.com"]},
	   {"name":"web_search","type":"web_search","enabled":true,"permission_policy":{"type":"always_allow"}}]},
	  {"type":"custom","name":"lookup","description":"Look <it> up","input_schema":{"type":"object","properties":{"q":{"type":"string"}}}},
	  {"type":"mcp_toolset","mcp_server_name":"docs","default_config":{"enabled":true,"permission_policy":{"type":"always_ask"}},
	   "configs":[{"name":"search","enabled":true,"permission_policy":{"type":"always_allow"}},{"name":"drop","enabled":false}]},
	  {"type":"mcp_toolset","mcp_server_name":"bare"}]`,
	`[]`,
	`null`,
	``,
	`[{"type":"custom","name":"a","input_schema":null},{"type":"custom","name":"a","description":"again"}]`,
	`[{"type":"custom","name":"s","input_schema":{ "type" : "object" }}]`,
	`[{"type":"agent_toolset_20260401","configs":[{"name":"bash","enabled":true}]},{"type":"agent_toolset_20260401","configs":[{"name":"bash","enabled":true,"permission_policy":{"type":"always_ask"}}]}]`,
	`[{"type":"mcp_toolset","mcp_server_name":"m","default_config":{"enabled":false,"permission_policy":{"type":""}},"configs":[{"name":"x"},{"name":"x","enabled":true}]}]`,
	`[{"type":"unknown"},{"Type":"custom","Name":"case"}]`,
	`[{"type":"agent_toolset_20260401","configs":{}}]`,
	`[{"type":"custom","name":7}]`,
	`[1]`,
	`{}`,
	`[`,
}

// FuzzParseToolConfig checks that ParseToolConfig never panics and that
// what it accepts is stable under re-encoding: the configuration written
// back in the api-server's resolved shape parses to the same configuration.
func FuzzParseToolConfig(f *testing.F) {
	for _, s := range toolSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		tc, err := ParseToolConfig(raw)
		if err != nil {
			return
		}
		encoded := encodeToolConfig(t, tc)
		again, err := ParseToolConfig(encoded)
		if err != nil {
			t.Fatalf("re-encoded configuration does not parse: %v\n%s", err, encoded)
		}
		compactSchemas(t, tc)
		if !reflect.DeepEqual(again, tc) {
			t.Fatalf("configuration changed through re-encoding:\nfirst  %#v\nsecond %#v\nencoded %s", tc, again, encoded)
		}
	})
}

// encodeToolConfig writes tc as the api-server stores an agent's tools.
func encodeToolConfig(t *testing.T, tc *ToolConfig) json.RawMessage {
	t.Helper()
	type policy struct {
		Type string `json:"type"`
	}
	type setting struct {
		Name             string `json:"name,omitempty"`
		Enabled          bool   `json:"enabled"`
		PermissionPolicy policy `json:"permission_policy"`
	}
	type entry struct {
		Type          string          `json:"type"`
		Name          string          `json:"name,omitempty"`
		Description   string          `json:"description,omitempty"`
		InputSchema   json.RawMessage `json:"input_schema,omitempty"`
		MCPServerName string          `json:"mcp_server_name,omitempty"`
		DefaultConfig *setting        `json:"default_config,omitempty"`
		Configs       []setting       `json:"configs,omitempty"`
	}
	var tools []entry
	if len(tc.Builtins) > 0 || len(tc.Web) > 0 {
		ts := entry{Type: "agent_toolset_20260401"}
		for _, name := range slices.Sorted(maps.Keys(tc.Builtins)) {
			ts.Configs = append(ts.Configs, setting{Name: name, Enabled: true, PermissionPolicy: policy{tc.Builtins[name]}})
		}
		for _, name := range tc.Web {
			ts.Configs = append(ts.Configs, setting{Name: name, Enabled: true, PermissionPolicy: policy{AlwaysAllow}})
		}
		tools = append(tools, ts)
	}
	for _, name := range tc.Order {
		ct := tc.Custom[name]
		tools = append(tools, entry{Type: "custom", Name: ct.Name, Description: ct.Description, InputSchema: ct.InputSchema})
	}
	for _, m := range tc.MCP {
		e := entry{Type: "mcp_toolset", MCPServerName: m.Server,
			DefaultConfig: &setting{Enabled: m.DefaultEnabled, PermissionPolicy: policy{m.DefaultPolicy}}}
		for _, name := range slices.Sorted(maps.Keys(m.Configs)) {
			c := m.Configs[name]
			e.Configs = append(e.Configs, setting{Name: name, Enabled: c.Enabled, PermissionPolicy: policy{c.Policy}})
		}
		tools = append(tools, e)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // keep input schemas byte for byte
	if err := enc.Encode(tools); err != nil {
		t.Fatalf("encode tools: %v", err)
	}
	return b.Bytes()
}

// compactSchemas removes the insignificant whitespace re-encoding drops.
func compactSchemas(t *testing.T, tc *ToolConfig) {
	t.Helper()
	for name, ct := range tc.Custom {
		if len(ct.InputSchema) == 0 {
			continue
		}
		var b bytes.Buffer
		if err := json.Compact(&b, ct.InputSchema); err != nil {
			t.Fatalf("custom tool %q input_schema %q: %v", name, ct.InputSchema, err)
		}
		ct.InputSchema = b.Bytes()
		tc.Custom[name] = ct
	}
}
