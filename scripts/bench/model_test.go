package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/mangohq/mango/execution-worker/model"
	"github.com/mangohq/mango/execution-worker/model/modelanthropic"
)

// TestScriptedModelWithWorkerClient drives the scripted Messages API with
// the worker's real model client, streamed and not, through the tool
// loop the worker runs: a user message gets one bash tool_use, its
// tool_result ends the turn with text, and a tool_result that is an error
// is counted.
func TestScriptedModelWithWorkerClient(t *testing.T) {
	m := &scriptedModel{}
	url, stop, err := serveScriptedModel("127.0.0.1:0", m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	c, err := modelanthropic.New(modelanthropic.Config{BaseURL: url, APIKey: "bench"})
	if err != nil {
		t.Fatal(err)
	}
	for _, stream := range []bool{false, true} {
		for _, toolFailed := range []bool{false, true} {
			before := m.counts()
			call := func(req *model.Request) *model.Response {
				t.Helper()
				var resp *model.Response
				var err error
				if stream {
					resp, err = c.Stream(t.Context(), req, nil)
				} else {
					resp, err = c.Create(t.Context(), req)
				}
				if err != nil {
					t.Fatalf("stream=%v: %v", stream, err)
				}
				return resp
			}
			req := &model.Request{Model: "claude-sonnet-4-5", MaxTokens: 100, Messages: []model.Message{
				{Role: "user", Content: []model.Block{{Type: "text", Text: "run one command"}}},
			}}
			resp := call(req)
			if resp.StopReason != "tool_use" || len(resp.Content) != 1 || resp.Content[0].Type != "tool_use" || resp.Content[0].Name != "bash" {
				t.Fatalf("stream=%v: first answer %+v, want one bash tool_use", stream, resp)
			}
			var in struct{ Command string }
			if err := json.Unmarshal(resp.Content[0].Input, &in); err != nil || in.Command != benchCommand {
				t.Fatalf("stream=%v: tool input %s (%v), want command %q", stream, resp.Content[0].Input, err, benchCommand)
			}
			req.Messages = append(req.Messages,
				model.Message{Role: "assistant", Content: resp.Content},
				model.Message{Role: "user", Content: []model.Block{{Type: "tool_result", ToolUseID: resp.Content[0].ID,
					IsError: toolFailed, Content: json.RawMessage(`"12345"`)}}})
			resp = call(req)
			if resp.StopReason != "end_turn" || len(resp.Content) != 1 || resp.Content[0].Type != "text" || resp.Content[0].Text == "" {
				t.Fatalf("stream=%v: answer to the tool result %+v, want end_turn with text", stream, resp)
			}
			want := modelCounts{calls: 2, toolUses: 1}
			if toolFailed {
				want.toolErrors = 1
			}
			if got := m.counts().sub(before); got != want {
				t.Errorf("stream=%v toolFailed=%v: counts %+v, want %+v", stream, toolFailed, got, want)
			}
		}
	}
}

// TestScriptedModelRefuses checks that requests the Messages API would
// refuse (no API key, no messages) are refused the same way and counted,
// and that bearer authentication is accepted as well as x-api-key.
func TestScriptedModelRefuses(t *testing.T) {
	m := &scriptedModel{}
	url, stop, err := serveScriptedModel("127.0.0.1:0", m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	c, err := modelanthropic.New(modelanthropic.Config{BaseURL: url, APIKey: "bench", Auth: modelanthropic.AuthBearer})
	if err != nil {
		t.Fatal(err)
	}
	hello := []model.Message{{Role: "user", Content: []model.Block{{Type: "text", Text: "x"}}}}
	if _, err := c.Create(t.Context(), &model.Request{Model: "m", Messages: hello}); err != nil {
		t.Fatalf("bearer: %v", err)
	}
	var me *model.Error
	if resp, err := c.Create(t.Context(), &model.Request{Model: "m"}); !errors.As(err, &me) || me.Status != http.StatusBadRequest || me.Type != "invalid_request_error" {
		t.Fatalf("no messages: %+v, %v; want a 400 invalid_request_error", resp, err)
	}
	resp, err := http.Post(url+"/v1/messages", "application/json", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"x"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no API key: status %d, want 401", resp.StatusCode)
	}
	if got := m.counts(); got.calls != 3 || got.bad != 2 || got.toolUses != 1 {
		t.Errorf("counts %+v, want 3 calls, 2 refused, 1 tool use", got)
	}
}
