package model_test

import (
	"encoding/json"
	"testing"

	"github.com/mangohq/mango/execution-worker/model"
)

func TestBlockRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		wantRaw bool
	}{
		{`{"type":"text","text":"hi"}`, false},
		{`{"type":"text","text":"hi","citations":null}`, false},
		{`{"type":"text","text":"hi","citations":[{"type":"web_search_result_location","url":"https://x"}]}`, true},
		{`{"type":"thinking","thinking":"t","signature":"s"}`, false},
		{`{"type":"redacted_thinking","data":"abc"}`, true},
		{`{"type":"tool_use","id":"toolu_1","name":"bash","input":{"command":"ls"}}`, false},
		{`{"type":"tool_result","tool_use_id":"toolu_1","content":"ok","is_error":true}`, false},
		{`{"type":"tool_result","tool_use_id":"toolu_1","content":"ok","cache_control":{"type":"ephemeral"}}`, true},
		{`{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"q"}}`, true},
		{`{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBOR"}}`, true},
	}
	for _, tt := range tests {
		var b model.Block
		if err := json.Unmarshal([]byte(tt.in), &b); err != nil {
			t.Fatalf("unmarshal %s: %v", tt.in, err)
		}
		if (len(b.Raw) > 0) != tt.wantRaw {
			t.Errorf("%s: Raw %q, want kept=%v", tt.in, b.Raw, tt.wantRaw)
		}
		out, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		var a, z any
		_ = json.Unmarshal([]byte(tt.in), &a)
		_ = json.Unmarshal(out, &z)
		ja, _ := json.Marshal(a)
		jz, _ := json.Marshal(z)
		// null members may be dropped; everything else must survive.
		if tt.wantRaw && string(ja) != string(jz) {
			t.Errorf("round trip of %s gave %s", tt.in, out)
		}
		if !tt.wantRaw && b.Type == "" {
			t.Errorf("%s: type lost", tt.in)
		}
	}
	// Decoded fields stay usable alongside Raw.
	var b model.Block
	_ = json.Unmarshal([]byte(`{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}}`), &b)
	if b.ID != "srvtoolu_1" || b.Name != "web_search" {
		t.Errorf("server_tool_use decoded as %+v", b)
	}
}
