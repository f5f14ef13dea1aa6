package agentruntime

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestParseToolConfig(t *testing.T) {
	t.Parallel()
	raw := json.RawMessage(`[
	  {"type":"agent_toolset_20260401","default_config":{"enabled":true,"permission_policy":{"type":"always_allow"}},
	   "configs":[
	     {"name":"bash","type":"bash","enabled":true,"permission_policy":{"type":"always_ask"}},
	     {"name":"read","type":"read","enabled":true,"permission_policy":{"type":"always_allow"}},
	     {"name":"write","type":"write","enabled":false,"permission_policy":{"type":"always_allow"}},
	     {"name":"web_search","type":"web_search","enabled":true,"permission_policy":{"type":"always_allow"}},
	     {"name":"web_fetch","type":"web_fetch","enabled":false,"permission_policy":{"type":"always_allow"}}]},
	  {"type":"custom","name":"lookup","description":"d","input_schema":{"type":"object"}},
	  {"type":"mcp_toolset","mcp_server_name":"docs","default_config":{"enabled":true,"permission_policy":{"type":"always_ask"}},
	   "configs":[{"name":"search","enabled":true,"permission_policy":{"type":"always_allow"}},{"name":"drop","enabled":false}]},
	  {"type":"mcp_toolset","mcp_server_name":"bare"}
	]`)
	tc, err := ParseToolConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"bash": AlwaysAsk, "read": AlwaysAllow}; !reflect.DeepEqual(tc.Builtins, want) {
		t.Errorf("builtins = %v, want %v (disabled write left out)", tc.Builtins, want)
	}
	if !reflect.DeepEqual(tc.Web, []string{"web_search"}) {
		t.Errorf("web = %v", tc.Web)
	}
	if _, ok := tc.Custom["lookup"]; !ok || !reflect.DeepEqual(tc.Order, []string{"lookup"}) {
		t.Errorf("custom = %v %v", tc.Custom, tc.Order)
	}
	if len(tc.MCP) != 2 || tc.MCP[0].Server != "docs" || tc.MCP[1].Server != "bare" {
		t.Fatalf("mcp toolsets = %+v", tc.MCP)
	}
	docs := tc.MCP[0]
	for tool, want := range map[string]ToolSetting{
		"search": {Enabled: true, Policy: AlwaysAllow},
		"drop":   {Enabled: false, Policy: AlwaysAsk}, // policy from the default
		"other":  {Enabled: true, Policy: AlwaysAsk},
	} {
		if got := docs.Setting(tool); got != want {
			t.Errorf("docs %s = %+v, want %+v", tool, got, want)
		}
	}
	if got := tc.MCP[1].Setting("x"); got != (ToolSetting{Enabled: true, Policy: AlwaysAsk}) {
		t.Errorf("toolset without default_config: %+v, want enabled always_ask", got)
	}
	if !tc.NeedsSandbox() || !reflect.DeepEqual(tc.BuiltinNames(), []string{"bash", "read"}) {
		t.Errorf("needs sandbox %v, names %v", tc.NeedsSandbox(), tc.BuiltinNames())
	}
	empty, err := ParseToolConfig(json.RawMessage(`[]`))
	if err != nil || empty.NeedsSandbox() {
		t.Errorf("no tools: %v %v", empty, err)
	}
	if _, err := ParseToolConfig(json.RawMessage(`{`)); err == nil {
		t.Error("malformed tools accepted")
	}
}

func TestAnswer(t *testing.T) {
	t.Parallel()
	r, journal, approved, err := Answer("user.tool_confirmation", json.RawMessage(`{"result":"deny","deny_message":"no"}`))
	if err != nil || !journal || approved || !r.IsError || r.Content == "" {
		t.Errorf("deny = %+v %v %v %v", r, journal, approved, err)
	}
	_, journal, approved, err = Answer("user.tool_confirmation", json.RawMessage(`{"result":"allow"}`))
	if err != nil || journal || !approved {
		t.Errorf("allow = %v %v %v", journal, approved, err)
	}
	r, journal, _, err = Answer("user.custom_tool_result", json.RawMessage(`{"content":[{"type":"text","text":"a"},{"type":"text","text":"b"}],"is_error":true}`))
	if err != nil || !journal || r.Content != "a\nb" || !r.IsError {
		t.Errorf("custom result = %+v %v %v", r, journal, err)
	}
}
