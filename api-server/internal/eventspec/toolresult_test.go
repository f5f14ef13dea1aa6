package eventspec

import (
	"testing"
)

func TestToolResult(t *testing.T) {
	t.Parallel()
	const text = `{"type":"text","text":"ok"}`
	search := `{"type":"search_result","source":"https://example.com","title":"T","content":[` + text + `],"citations":{"enabled":false}}`
	cases := []struct {
		name, body string
		// want is the stored body, or wantErr the message of the refusal.
		want, wantErr string
	}{
		{name: "text", body: `{"type":"user.tool_result","tool_use_id":"sevt_1","content":[` + text + `]}`,
			want: `{"content":[{"type":"text","text":"ok"}],"is_error":false,"tool_use_id":"sevt_1"}`},
		{name: "error without content", body: `{"type":"user.tool_result","tool_use_id":"sevt_1","is_error":true}`,
			want: `{"content":[],"is_error":true,"tool_use_id":"sevt_1"}`},
		{name: "every block type", body: `{"type":"user.tool_result","tool_use_id":"u","content":[` + text + `,` + image("image/png", b64(pngBytes)) +
			`,{"type":"document","source":{"type":"text","media_type":"text/plain","data":"d"}},` + search + `]}`},
		{name: "search result without citations", body: `{"type":"user.tool_result","tool_use_id":"u","content":[{"type":"search_result","source":"s","title":"t","content":[` + text + `]}]}`,
			want: `{"content":[{"type":"search_result","source":"s","title":"t","content":[{"type":"text","text":"ok"}]}],"is_error":false,"tool_use_id":"u"}`},
		{name: "missing tool_use_id", body: `{"type":"user.tool_result","content":[]}`,
			wantErr: `events[0].tool_use_id: is required (the id of the agent.tool_use event this answers)`},
		{name: "search result without title", body: `{"type":"user.tool_result","tool_use_id":"u","content":[{"type":"search_result","source":"s","content":[` + text + `]}]}`,
			wantErr: `events[0].content[0].title: is required (a non-empty string)`},
		{name: "search result with an image", body: `{"type":"user.tool_result","tool_use_id":"u","content":[{"type":"search_result","source":"s","title":"t","content":[` + image("image/png", b64(pngBytes)) + `]}]}`,
			wantErr: `events[0].content[0].content[0].type: unsupported content block type "image" (expected "text")`},
		{name: "search result without content", body: `{"type":"user.tool_result","tool_use_id":"u","content":[{"type":"search_result","source":"s","title":"t","content":[]}]}`,
			wantErr: `events[0].content[0].content: must contain at least one content block`},
		{name: "unknown member", body: `{"type":"user.tool_result","tool_use_id":"u","output":"x"}`, wantErr: `events[0]: unknown field "output"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			evs, err := ParseSend([]byte(`{"events":[` + tc.body + `]}`))
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error = %v, want %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseSend: %v", err)
			}
			if evs[0].Type != UserToolResult || evs[0].ToolUseID == "" {
				t.Errorf("event = %+v, want a user.tool_result naming its tool use", evs[0])
			}
			if tc.want != "" && string(evs[0].Body) != tc.want {
				t.Errorf("body = %s\nwant   %s", evs[0].Body, tc.want)
			}
		})
	}
}
