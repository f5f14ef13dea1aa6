package agentspec

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"

	"github.com/mangohq/mango/api-server/internal/jsonx"
)

// createSeeds are POST /v1/agents bodies centred on tools and mcp_servers:
// valid ones and near misses.
var createSeeds = []string{
	`{"name":"a","model":"claude-sonnet-4-5"}`,
	`{"name":"a","model":{"type":"model_config","id":"m","speed":"fast","effort":"high","inference_geo":"us"}}`,
	`{"name":"a","model":"m","tools":[{"type":"agent_toolset_20260401"}]}`,
	`{"name":"a","model":"m","tools":[{"type":"agent_toolset_20260401","default_config":{"enabled":false,"permission_policy":{"type":"always_ask"}},
		"configs":[{"name":"bash","enabled":true},{"name":"read","type":"read","permission_policy":{"type":"always_allow"}},
		{"name":"web_fetch","allowed_domains":["example.com"],"max_content_tokens":1000,"url_sources":{"type":"any"}},
		{"name":"web_search","blocked_domains":["x.test"],"user_location":{"type":"approximate","city":"Paris"}}]}]}`,
	`{"name":"a","model":"m","mcp_servers":[{"type":"url","name":"docs","url":"https://mcp.example.com/mcp"}],
		"tools":[{"type":"mcp_toolset","mcp_server_name":"docs","default_config":{"permission_policy":{"type":"always_allow"}},
		"configs":[{"name":"search","enabled":false},{"name":"fetch","permission_policy":{"type":"always_ask"}}]}]}`,
	`{"name":"a","model":"m","tools":[{"type":"custom","name":"get_weather","description":"Weather <b>now</b> & later",
		"input_schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}]}`,
	`{"name":"a","model":"m","tools":[{"type":"custom","name":"t","description":"","input_schema":{ "type" : "object" , "x":"\u2028<>"}}]}`,
	`{"name":"a","model":"m","metadata":{"k":"v"},"skills":[{"type":"anthropic","skill_id":"pdf"}],"execution_identity":{"type":"aws_role","role_arn":"arn:aws:iam::1:role/r"},"multiagent":null}`,
	`{"name":"a","model":"m","multiagent":{"type":"coordinator","agents":["agent_a",{"type":"agent","id":"agent_b","version":3},{"type":"self"}]}}`,
	`{"name":"a","model":"m","multiagent":{"type":"multiagent_20261001","subagents":{"type":"enabled","predefined_agents":["agent_a",{"type":"self"}],"inline_agents":null},"advisor":null,"workflows":{"type":"disabled"}}}`,
	`{"name":"a","model":"m","multiagent":{"type":"multiagent_20261001","subagents":{"type":"disabled"}}}`,
	`{"name":"a","model":"m","multiagent":{"type":"multiagent_20261001","workflows":{"type":"enabled"}}}`,
	`{"name":"a","model":"m","multiagent":{"type":"coordinator","agents":["x","x"]}}`,
	`{"name":"a","model":"m","tools":[{"type":"agent_toolset_20260401"},{"type":"agent_toolset_20260401"}]}`,
	`{"name":"a","model":"m","tools":[{"type":"agent_toolset_20260401","configs":[{"name":"web_fetch","permission_policy":{"type":"always_ask"}}]}]}`,
	`{"name":"a","model":"m","tools":[{"type":"agent_toolset_20260401","configs":[{"name":"bash","allowed_domains":[]}]}]}`,
	`{"name":"a","model":"m","tools":[{"type":"agent_toolset_20260401","configs":[{"name":"bash"},{"name":"bash"}]}]}`,
	`{"name":"a","model":"m","tools":[{"type":"mcp_toolset","mcp_server_name":"nope"}]}`,
	`{"name":"a","model":"m","mcp_servers":[{"name":"s","url":"ftp://h"}],"tools":[{"type":"mcp_toolset","mcp_server_name":"s"}]}`,
	`{"name":"a","model":"m","mcp_servers":[{"name":"s","url":"https://h"}]}`,
	`{"name":"a","model":"m","tools":[{"type":"custom","name":"bad name","description":"d","input_schema":{"type":"object"}}]}`,
	`{"name":"a","model":"m","tools":[{"type":"custom","name":"t","description":"d","input_schema":{"type":"array"}}]}`,
	"{\"name\":\"a\",\"model\":\"m\",\"tools\":[{\"type\":\"custom\",\"name\":\"t\",\"description\":\"d\",\"input_schema\":{\"type\":\"object\",\"title\":\"\xff\"}}]}",
	"{\"name\":\"a\",\"model\":\"m\",\"tools\":[{\"type\":\"agent_toolset_20260401\",\"configs\":[{\"name\":\"web_fetch\",\"url_sources\":{\"x\":\"\xc3\"}}]}]}",
	`{"name":"a","model":"m","tools":[{"type":"web_search_20250305"}]}`,
	`{"name":"a","model":"m","tools":[{}]}`,
	`{"name":"a","model":"m","version":1}`,
	`{"name":"","model":"m"}`,
	`{"model":"m"}`,
	`[]`,
	``,
}

// FuzzCreate checks that resolving an agent create request never panics,
// that every rejection is a public *jsonx.Error, and that an accepted spec is
// stable under re-encoding: it is valid UTF-8 JSON (stored in a json
// column), it survives the store's JSON round trip unchanged, and sent back
// as a create request it resolves to the same spec (resolution is a fixed
// point).
func FuzzCreate(f *testing.F) {
	for _, s := range createSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		spec, err := create(body)
		if err != nil {
			if pub := (*jsonx.Error)(nil); !errors.As(err, &pub) {
				t.Fatalf("create(%q) error %T (%v), want a public *jsonx.Error", body, err, err)
			}
			return
		}
		stored, err := json.Marshal(spec)
		if err != nil {
			t.Fatalf("accepted spec does not encode: %v", err)
		}
		if !utf8.Valid(stored) {
			t.Fatalf("accepted spec is not valid UTF-8: %q", stored)
		}
		var read Spec
		if err := json.Unmarshal(stored, &read); err != nil {
			t.Fatalf("stored spec does not decode: %v\n%s", err, stored)
		}
		if again, _ := json.Marshal(&read); !bytes.Equal(again, stored) {
			t.Fatalf("spec changed through the store:\nwrote %s\nread  %s", stored, again)
		}
		resolved, err := create(stored)
		if err != nil {
			t.Fatalf("resolved spec is not accepted as a request: %v\n%s", err, stored)
		}
		if !Equal(resolved, spec) {
			again, _ := json.Marshal(resolved)
			t.Fatalf("resolving the resolved spec changed it:\nfirst  %s\nsecond %s", stored, again)
		}
	})
}

func create(body []byte) (*Spec, error) {
	in, err := ParseInput(body)
	if err != nil {
		return nil, err
	}
	return Create(in)
}
