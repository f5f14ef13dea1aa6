package modelfake_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mangohq/mango/execution-worker/model"
	"github.com/mangohq/mango/execution-worker/model/modelfake"
)

// evaluationTool is the grader's tool, as the worker declares it.
var evaluationTool = model.ToolDef{
	Name: "submit_evaluation",
	InputSchema: json.RawMessage(`{"type":"object","properties":{"result":{"type":"string",` +
		`"enum":["satisfied","needs_revision","failed"]},"explanation":{"type":"string"}},"required":["result","explanation"]}`),
}

// gradeRequest is a grader's request: text as the user message, the
// evaluation tool among tools, and a tool choice forcing it.
func gradeRequest(text string, tools ...model.ToolDef) *model.Request {
	r := req(user(text))
	r.Tools = append([]model.ToolDef{evaluationTool}, tools...)
	r.ToolChoice = &model.ToolChoice{Type: "tool", Name: evaluationTool.Name}
	return r
}

// The work the grader is shown in these tests, then the rubric's script.
const work = "The agent wrote hello.txt containing \"Hello, world\".\n"

func TestGrade(t *testing.T) {
	t.Parallel()
	other := model.ToolDef{Name: "bash"}
	tests := []struct {
		name      string
		request   *model.Request
		wantInput string
	}{
		{"satisfied", gradeRequest(work+"#grade Hello, The file must greet the world.", other),
			`{"result":"satisfied","explanation":"The work contains \"Hello,\"."}`},
		{"needs_revision", gradeRequest(work+"#grade Goodbye The file must say goodbye.", other),
			`{"result":"needs_revision","explanation":"The file must say goodbye."}`},
		{"case-sensitive", gradeRequest(work + "#grade hello,  The greeting must be lower case."),
			`{"result":"needs_revision","explanation":"The greeting must be lower case."}`},
		{"directive lines are not the work", gradeRequest(work + "#reply satisfied\n#grade satisfied Not in the work."),
			`{"result":"needs_revision","explanation":"Not in the work."}`},
		{"failed", gradeRequest(work + "#grade - The work cannot be judged <at all>."),
			`{"result":"failed","explanation":"The work cannot be judged <at all>."}`},
		{"docs/fake-model.md example", gradeRequest("Rubric: the summary must state the test results.\n" +
			"#grade PASSED The summary does not state the test results.\n\nWork: ran go test ./... and wrote the summary: 42 tests PASSED."),
			`{"result":"satisfied","explanation":"The work contains \"PASSED\"."}`},
		{"only tool without tool choice", func() *model.Request {
			r := gradeRequest(work + "#grade hello.txt Writes the file.")
			r.ToolChoice = nil
			return r
		}(), `{"result":"satisfied","explanation":"The work contains \"hello.txt\"."}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var events []model.StreamEvent
			resp, err := modelfake.New().Stream(t.Context(), tt.request, func(e model.StreamEvent) { events = append(events, e) })
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Content) != 1 || resp.StopReason != "tool_use" {
				t.Fatalf("response %+v, want a single tool_use block and stop_reason tool_use", resp)
			}
			b := resp.Content[0]
			if b.Type != "tool_use" || b.Name != "submit_evaluation" || !strings.HasPrefix(b.ID, "toolu_fake_") {
				t.Errorf("block %+v, want a toolu_fake_ tool_use of submit_evaluation", b)
			}
			if string(b.Input) != tt.wantInput {
				t.Errorf("input %s, want %s", b.Input, tt.wantInput)
			}
			if resp.Usage.InputTokens != modelfake.EstimateInputTokens(tt.request) || resp.Usage.OutputTokens < 1 {
				t.Errorf("usage %+v, want the estimate", resp.Usage)
			}
			if want := []model.StreamEvent{{Type: "block_start", BlockType: "tool_use"}}; len(events) != 1 || events[0] != want[0] {
				t.Errorf("events %+v, want %+v", events, want)
			}
			again, err := modelfake.New().Create(t.Context(), tt.request)
			if err != nil || again.ID != resp.ID || again.Content[0].ID != b.ID || string(again.Content[0].Input) != string(b.Input) {
				t.Errorf("the same request answered %+v (%v), want the same response %+v", again, err, resp)
			}
		})
	}
}

func TestGradeUsageAndError(t *testing.T) {
	t.Parallel()
	r := gradeRequest(work + "#grade Hello Greets.\n#usage input=900 output=30")
	resp, err := modelfake.New().Create(t.Context(), r)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Usage.InputTokens != 900 || resp.Usage.OutputTokens != 30 {
		t.Errorf("usage %+v, want #usage's 900/30", resp.Usage)
	}

	// #error comes first: the first call fails, the retry grades.
	c := modelfake.New()
	r = gradeRequest(work + "#grade Hello Greets.\n#error overloaded 1")
	if _, err := c.Create(t.Context(), r); err == nil {
		t.Fatal("first call succeeded, want the scripted overload")
	} else if ok, _ := model.Retryable(err); !ok {
		t.Fatalf("first call: %v, want a retryable overload", err)
	}
	resp, err = c.Create(t.Context(), r)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(resp.Content[0].Input); !strings.Contains(got, `"satisfied"`) {
		t.Errorf("retry answered %s, want satisfied", got)
	}
}

func TestGradeSlow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		stream bool
		cancel time.Duration // 0: not cancelled
	}{
		{"create waits", false, 0},
		{"stream waits", true, 0},
		{"create cancelled", false, 20 * time.Millisecond},
		{"stream cancelled", true, 20 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			slow := "60ms"
			if tt.cancel > 0 {
				slow = "1m"
			}
			r := gradeRequest(work + "#slow " + slow + "\n#grade Hello Greets.")
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if tt.cancel > 0 {
				time.AfterFunc(tt.cancel, cancel)
			}
			start := time.Now()
			var err error
			if tt.stream {
				_, err = modelfake.New().Stream(ctx, r, func(model.StreamEvent) {})
			} else {
				_, err = modelfake.New().Create(ctx, r)
			}
			el := time.Since(start)
			if tt.cancel == 0 {
				if err != nil || el < 60*time.Millisecond {
					t.Errorf("answered after %v with error %v, want an answer after at least 60ms", el, err)
				}
				return
			}
			var me *model.Error
			if !errors.Is(err, context.Canceled) || errors.As(err, &me) || !strings.HasPrefix(err.Error(), "modelfake: ") || el > 5*time.Second {
				t.Errorf("cancelled after %v: error %v, want modelfake: context.Canceled promptly", el, err)
			}
		})
	}
}

func TestGradeInvalid(t *testing.T) {
	t.Parallel()
	noChoice := func(r *model.Request) { r.ToolChoice = nil }
	tests := []struct {
		name    string
		text    string
		change  func(r *model.Request)
		inError string
	}{
		{"no arguments", "#grade", nil, "want #grade <needle> <explanation...>"},
		{"no explanation", "#grade Hello", nil, "want #grade <needle> <explanation...>"},
		{"blank explanation", "#grade Hello   ", nil, "want #grade <needle> <explanation...>"},
		{"failed without explanation", "#grade -", nil, "want #grade <needle> <explanation...>"},
		{"no tools", "#grade Hello Greets.", func(r *model.Request) { r.Tools, r.ToolChoice = nil, nil }, "0 tools"},
		{"two tools, no choice", "#grade Hello Greets.", func(r *model.Request) {
			noChoice(r)
			r.Tools = append(r.Tools, model.ToolDef{Name: "bash"})
		}, "2 tools"},
		{"choice of an undeclared tool", "#grade Hello Greets.", func(r *model.Request) {
			r.ToolChoice.Name = "submit"
		}, "not among the request's tools"},
		{"choice none", "#grade Hello Greets.", func(r *model.Request) { r.ToolChoice = &model.ToolChoice{Type: "none"} }, "none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := gradeRequest(work + tt.text)
			if tt.change != nil {
				tt.change(r)
			}
			_, err := modelfake.New().Create(t.Context(), r)
			var me *model.Error
			if !errors.As(err, &me) || me.Status != 400 || me.Type != "invalid_request_error" || me.Retryable || !strings.Contains(me.Message, tt.inError) {
				t.Errorf("error %v, want a non-retryable 400 invalid_request_error naming %q", err, tt.inError)
			}
		})
	}
}
