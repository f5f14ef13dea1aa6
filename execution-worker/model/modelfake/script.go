package modelfake

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/mangohq/mango/execution-worker/model"
)

// MaxSlow is the longest pause #slow accepts between two text deltas.
const MaxSlow = time.Minute

// script is the parsed form of a scripted user message.
type script struct {
	// text is the user text without directive lines, trimmed.
	text string
	// reply is the final answer set by #reply lines, joined by newlines.
	reply    string
	hasReply bool
	// tools are the #tool calls in order.
	tools    []toolCall
	parallel bool
	loop     bool
	// think is the thinking text set by #think lines, joined by newlines.
	think string
	slow  time.Duration
	// fail is the scripted failure (#error), nil if none.
	fail *failure
	// stop overrides the stop reason of the final answer.
	stop string
	// usage holds the #usage lines in order: round R of the turn reports
	// usage[min(R, len-1)].
	usage []usageSpec
	// echoBlocks makes the final reply list the content blocks received
	// (#echo-blocks).
	echoBlocks bool
	// grade makes the answer a grader's verdict (#grade), nil if none.
	grade *grade
}

// grade is a #grade directive: the verdict is "satisfied" when the
// script's text contains needle, else "needs_revision" with explanation;
// needle "-" always fails with explanation.
type grade struct {
	needle, explanation string
}

// usageSpec is one #usage line. A nil count keeps the default: the size
// estimate for input and output, 0 for the cache counts.
type usageSpec struct {
	input, output, cacheRead, cacheWrite *int64
}

type toolCall struct {
	name  string
	input json.RawMessage
}

// failure is an #error directive: kind fails the first times calls of a
// conversation, or every call when times is 0.
type failure struct {
	kind  string
	times int
}

// stopReasons are the stop reasons #stop accepts.
var stopReasons = map[string]bool{
	"end_turn": true, "max_tokens": true, "stop_sequence": true,
	"pause_turn": true, "refusal": true,
}

// directives are the recognised directive names. A line starting with '#'
// and a letter whose first word is not one of these is ordinary text, so
// pasted code ("#include <stdio.h>") and hashtags stay text.
var directives = map[string]bool{
	"reply": true, "tool": true, "parallel": true, "think": true,
	"slow": true, "error": true, "loop": true, "stop": true,
	"usage": true, "echo-blocks": true, "grade": true,
}

// parseScript reads the directives of a user message. A known directive
// with malformed arguments is an error, reported to the caller as an
// invalid request so that a typo does not go unnoticed.
func parseScript(text string) (*script, error) {
	s := &script{}
	var plain, reply, think []string
	for i, line := range strings.Split(text, "\n") {
		name, args, ok := directive(line)
		if !ok {
			plain = append(plain, line)
			continue
		}
		lineErr := func(format string, a ...any) error {
			return fmt.Errorf("line %d: #%s: %s", i+1, name, fmt.Sprintf(format, a...))
		}
		switch name {
		case "reply":
			reply = append(reply, args)
			s.hasReply = true
		case "think":
			think = append(think, args)
		case "tool":
			toolName, input, _ := strings.Cut(args, " ")
			if toolName == "" {
				return nil, lineErr("want #tool <name> [<json object>]")
			}
			raw, err := toolInput(input)
			if err != nil {
				return nil, lineErr("%v", err)
			}
			s.tools = append(s.tools, toolCall{name: toolName, input: raw})
		case "parallel":
			if args != "" {
				return nil, lineErr("takes no arguments")
			}
			s.parallel = true
		case "loop":
			if args != "" {
				return nil, lineErr("takes no arguments")
			}
			s.loop = true
		case "echo-blocks":
			if args != "" {
				return nil, lineErr("takes no arguments")
			}
			s.echoBlocks = true
		case "slow":
			d, err := time.ParseDuration(args)
			if err != nil || d < 0 || d > MaxSlow {
				return nil, lineErr("want a duration between 0s and %v, like 200ms", MaxSlow)
			}
			s.slow = d
		case "error":
			f, err := parseFailure(args)
			if err != nil {
				return nil, lineErr("%v", err)
			}
			s.fail = f
		case "usage":
			u, err := parseUsage(args)
			if err != nil {
				return nil, lineErr("%v", err)
			}
			s.usage = append(s.usage, u)
		case "grade":
			fields := strings.Fields(args)
			if len(fields) < 2 {
				return nil, lineErr("want #grade <needle> <explanation...>")
			}
			s.grade = &grade{needle: fields[0], explanation: strings.TrimSpace(args[len(fields[0]):])}
		case "stop":
			if !stopReasons[args] {
				return nil, lineErr("want one of end_turn, max_tokens, stop_sequence, pause_turn, refusal")
			}
			s.stop = args
		}
	}
	s.text = strings.TrimSpace(strings.Join(plain, "\n"))
	s.reply = strings.Join(reply, "\n")
	if s.hasReply && strings.TrimSpace(s.reply) == "" {
		return nil, fmt.Errorf("#reply: needs text")
	}
	s.think = strings.Join(think, "\n")
	return s, nil
}

// directive splits a directive line into its name and trimmed arguments.
func directive(line string) (name, args string, ok bool) {
	line = strings.TrimSpace(line)
	if len(line) < 2 || line[0] != '#' {
		return "", "", false
	}
	name, args = line[1:], ""
	if i := strings.IndexFunc(name, unicode.IsSpace); i >= 0 {
		name, args = name[:i], name[i:]
	}
	if !directives[name] {
		return "", "", false
	}
	return name, strings.TrimSpace(args), true
}

// toolInput parses the JSON input of #tool; empty means {}.
func toolInput(s string) (json.RawMessage, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return json.RawMessage(`{}`), nil
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(s), &obj); err != nil || obj == nil {
		return nil, fmt.Errorf("input must be a JSON object, got %q", s)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(s)); err != nil {
		return nil, fmt.Errorf("input must be a JSON object, got %q", s)
	}
	return buf.Bytes(), nil
}

// parseUsage parses the arguments of #usage: one or more key=N pairs,
// keys input, output, cache_read, cache_write, each at most once, N a
// non-negative integer.
func parseUsage(args string) (usageSpec, error) {
	var u usageSpec
	fields := strings.Fields(args)
	if len(fields) == 0 {
		return u, fmt.Errorf("want #usage input=N output=N cache_read=N cache_write=N (any of them)")
	}
	for _, f := range fields {
		k, v, ok := strings.Cut(f, "=")
		n, err := strconv.ParseInt(v, 10, 64)
		if !ok || err != nil || n < 0 {
			return u, fmt.Errorf("want key=N with N a non-negative integer, got %q", f)
		}
		var dst **int64
		switch k {
		case "input":
			dst = &u.input
		case "output":
			dst = &u.output
		case "cache_read":
			dst = &u.cacheRead
		case "cache_write":
			dst = &u.cacheWrite
		default:
			return u, fmt.Errorf("unknown key %q, want input, output, cache_read or cache_write", k)
		}
		if *dst != nil {
			return u, fmt.Errorf("key %q given twice", k)
		}
		*dst = &n
	}
	return u, nil
}

// apply overrides the counts u names.
func (u usageSpec) apply(usage *model.Usage) {
	if u.input != nil {
		usage.InputTokens = *u.input
	}
	if u.output != nil {
		usage.OutputTokens = *u.output
	}
	if u.cacheRead != nil {
		usage.CacheReadInputTokens = *u.cacheRead
	}
	if u.cacheWrite != nil {
		usage.CacheCreationInputTokens = *u.cacheWrite
	}
}

// failureKinds are the kinds #error accepts.
var failureKinds = map[string]bool{
	"rate_limited": true, "overloaded": true, "server": true, "invalid": true, "timeout": true,
}

func parseFailure(args string) (*failure, error) {
	fields := strings.Fields(args)
	if len(fields) == 0 || len(fields) > 2 || !failureKinds[fields[0]] {
		return nil, fmt.Errorf("want #error <rate_limited|overloaded|server|invalid|timeout> [times]")
	}
	f := &failure{kind: fields[0]}
	if len(fields) == 2 {
		n, err := strconv.Atoi(fields[1])
		if err != nil || n < 1 {
			return nil, fmt.Errorf("times must be a positive integer, got %q", fields[1])
		}
		f.times = n
	}
	return f, nil
}

// modelError is the *model.Error a failure kind produces, shaped like the
// real provider's.
func (f *failure) modelError() *model.Error {
	switch f.kind {
	case "rate_limited":
		return &model.Error{Status: 429, Type: "rate_limit_error", Message: "fake: scripted rate limit", Retryable: true, RetryAfter: time.Second}
	case "overloaded":
		return &model.Error{Status: 529, Type: "overloaded_error", Message: "fake: scripted overload", Retryable: true}
	case "server":
		return &model.Error{Status: 500, Type: "api_error", Message: "fake: scripted server error", Retryable: true}
	case "timeout":
		return &model.Error{Type: "timeout", Message: "fake: scripted timeout", Retryable: true}
	default:
		return &model.Error{Status: 400, Type: "invalid_request_error", Message: "fake: scripted invalid request"}
	}
}

// verdict is the input of the grader's tool call for the script's text:
// {"result": ..., "explanation": ...}.
func (g *grade) verdict(text string) json.RawMessage {
	v := struct {
		Result      string `json:"result"`
		Explanation string `json:"explanation"`
	}{"needs_revision", g.explanation}
	switch {
	case g.needle == "-":
		v.Result = "failed"
	case strings.Contains(text, g.needle):
		v.Result, v.Explanation = "satisfied", `The work contains "`+g.needle+`".`
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // strings only: cannot fail
	return bytes.TrimRight(buf.Bytes(), "\n")
}
