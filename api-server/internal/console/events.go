package console

import (
	"strings"
	"time"
)

// entry is one event of a session as the timeline shows it. It is built
// from the event's JSON alone (entryOf), so the page and the live stream
// render an event the same way.
type entry struct {
	// Session is the session's id (for the actions' URLs).
	Session string
	ID      string
	Type    string
	Kind    string // user, agent, thinking, tool, result, confirm, status, error, span, thread, other
	At      string // processed_at, as sent
	Thread  string // session_thread_id, for a child thread's events
	Title   string
	// Markdown is message text, rendered as sanitized markdown.
	Markdown string
	// Text is preformatted content (tool output), shown clipped.
	Text string
	// Input is a tool call's input, shown as indented JSON.
	Input any
	// Files are attachments and file references of a message.
	Files []string
	// Facts are short details: latency, tokens, stop reason, permission.
	Facts   []string
	IsError bool
	// Action is what a pending call needs: "confirm" (an always_ask tool
	// call) or "custom" (a custom tool's result); Pending says the
	// session waits on it now.
	Action  string
	Pending bool
	// Ref is the tool call a result or confirmation answers.
	Ref string
	// Raw is the event, for the JSON view.
	Raw map[string]any
}

// entryOf builds the timeline entry of ev. pending holds the ids of the
// events the session waits on (requires_action).
func entryOf(session string, ev map[string]any, pending map[string]bool) entry {
	e := entry{Session: session, ID: str(ev["id"]), Type: str(ev["type"]), At: str(ev["processed_at"]), Thread: str(ev["session_thread_id"]), Raw: ev}
	e.Title = e.Type
	switch e.Type {
	case "user.message":
		e.Kind, e.Title = "user", "User"
		e.Markdown, e.Files = contentText(ev["content"])
	case "agent.message":
		e.Kind, e.Title = "agent", "Agent"
		e.Markdown, e.Files = contentText(ev["content"])
	case "agent.thinking":
		e.Kind, e.Title = "thinking", "Thinking"
		e.Text = str(ev["thinking"])
		if e.Text == "" {
			e.Text, _ = contentText(ev["content"])
		}
	case "agent.tool_use", "agent.mcp_tool_use", "agent.custom_tool_use":
		e.Kind, e.Input = "tool", ev["input"]
		e.Title = "Tool call: " + str(ev["name"])
		if s := str(ev["mcp_server_name"]); s != "" {
			e.Title = "MCP call: " + s + " / " + str(ev["name"])
		}
		if p := str(ev["evaluated_permission"]); p != "" {
			e.Facts = append(e.Facts, "permission: "+p)
		}
		switch {
		case e.Type == "agent.custom_tool_use":
			e.Title, e.Action = "Custom tool call: "+str(ev["name"]), "custom"
		case str(ev["evaluated_permission"]) == "ask":
			e.Action = "confirm"
		}
		e.Pending = pending[e.ID]
	case "agent.tool_result", "agent.mcp_tool_result", "user.custom_tool_result":
		e.Kind, e.Title = "result", "Tool result"
		e.Ref = str(ev["tool_use_id"]) + str(ev["mcp_tool_use_id"]) + str(ev["custom_tool_use_id"])
		e.Text, e.Files = contentText(ev["content"])
		e.IsError = ev["is_error"] == true
		if e.IsError {
			e.Title = "Tool result (error)"
		}
		if e.Type == "user.custom_tool_result" {
			e.Title = "Custom tool result"
		}
	case "user.tool_confirmation":
		e.Kind, e.Ref = "confirm", str(ev["tool_use_id"])
		e.Title = "Tool call " + str(ev["result"]) + "ed"
		if m := str(ev["deny_message"]); m != "" {
			e.Text = m
		}
	case "user.interrupt":
		e.Kind, e.Title = "status", "Interrupt sent"
	case "session.error":
		e.Kind, e.IsError = "error", true
		er, _ := ev["error"].(map[string]any)
		e.Title = "Error: " + str(er["type"])
		e.Text = str(er["message"])
		if rs, ok := er["retry_status"].(map[string]any); ok {
			e.Facts = append(e.Facts, "retry: "+str(rs["type"]))
		}
	case "span.model_request_start":
		e.Kind, e.Title = "span", "Model request"
	case "span.model_request_end":
		e.Kind, e.Title = "span", "Model request done"
		e.Ref = str(ev["model_request_start_id"])
		e.IsError = ev["is_error"] == true
		if u, ok := ev["model_usage"].(map[string]any); ok {
			e.Facts = append(e.Facts, "in "+str(u["input_tokens"])+" · out "+str(u["output_tokens"])+
				" · cache read "+str(u["cache_read_input_tokens"])+" · cache write "+str(u["cache_creation_input_tokens"]))
		}
	default:
		e.Kind = "other"
		switch {
		case strings.HasPrefix(e.Type, "session.status_"):
			e.Kind, e.Title = "status", "Status: "+strings.TrimPrefix(e.Type, "session.status_")
			if sr, ok := ev["stop_reason"].(map[string]any); ok {
				e.Facts = append(e.Facts, "stop reason: "+str(sr["type"]))
			}
		case strings.Contains(e.Type, "thread"):
			e.Kind = "thread"
		}
	}
	return e
}

// contentText joins the text blocks of a content list (or a plain
// string) and names the other blocks (images, documents).
func contentText(v any) (string, []string) {
	if s, ok := v.(string); ok {
		return s, nil
	}
	blocks, _ := v.([]any)
	var text []string
	var files []string
	for _, b := range blocks {
		m, _ := b.(map[string]any)
		switch str(m["type"]) {
		case "text":
			text = append(text, str(m["text"]))
		default:
			src, _ := m["source"].(map[string]any)
			ref := str(m["type"])
			if id := str(src["file_id"]); id != "" {
				ref += " " + id
			} else if t := str(src["type"]); t != "" {
				ref += " (" + t + ")"
			}
			files = append(files, ref)
		}
	}
	return strings.Join(text, "\n\n"), files
}

// spanLatency fills, for each span.model_request_end, the time since its
// start (both in entries, by processed_at).
func spanLatency(es []entry) {
	starts := map[string]time.Time{}
	for i := range es {
		t, err := time.Parse(time.RFC3339Nano, es[i].At)
		if err != nil {
			continue
		}
		switch es[i].Type {
		case "span.model_request_start":
			starts[es[i].ID] = t
		case "span.model_request_end":
			if s, ok := starts[es[i].Ref]; ok {
				es[i].Facts = append([]string{"latency " + t.Sub(s).Round(time.Millisecond).String()}, es[i].Facts...)
			}
		}
	}
}

// pendingOf returns the events an idle session waits on: the event_ids of
// its last session.status_idle when that stopped for requires_action.
func pendingOf(events []map[string]any, status string) map[string]bool {
	out := map[string]bool{}
	if status != "idle" {
		return out
	}
	for i := len(events) - 1; i >= 0; i-- {
		if str(events[i]["type"]) != "session.status_idle" {
			continue
		}
		sr, _ := events[i]["stop_reason"].(map[string]any)
		if str(sr["type"]) == "requires_action" {
			ids, _ := sr["event_ids"].([]any)
			for _, id := range ids {
				out[str(id)] = true
			}
		}
		break
	}
	return out
}
