package console

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// liveFrame is what the browser's EventSource receives for one event.
type liveFrame struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	// HTML is the server-rendered timeline entry (escaped, sanitized).
	HTML string `json:"html,omitempty"`
	// Ref is the tool call a result or confirmation answers: the page
	// removes that call's action form.
	Ref string `json:"ref,omitempty"`
	// Pending lists, for an idle requiring action, the calls awaited.
	Pending []string `json:"pending,omitempty"`
	// Status is the session's status (summary frames).
	Status string `json:"status,omitempty"`
	// Usage is the session's usage line (summary frames).
	Usage string `json:"usage,omitempty"`
	// Text is preview text (event_start / event_delta).
	Text string `json:"text,omitempty"`
	// Kind is the previewed event's type (agent.message, agent.thinking).
	Kind string `json:"kind,omitempty"`
	// Outputs is the outputs list, rendered (summary frames after an
	// idle).
	Outputs string `json:"outputs,omitempty"`
}

// sessionLive is the page's EventSource: the session's event stream from
// the API, each committed event rendered as the page renders it, with the
// previews of messages and thinking as they are generated. It continues
// after the event named by Last-Event-ID (the browser sends it when it
// reconnects) or by ?after (the newest event the page showed); with
// neither it sends the whole log first.
func (c *Console) sessionLive(w http.ResponseWriter, r *http.Request, v *visit) error {
	id := r.PathValue("id")
	after := r.Header.Get("Last-Event-ID")
	if after == "" {
		after = r.FormValue("after")
	}
	q := url.Values{"event_deltas[]": {"agent.message", "agent.thinking"}}
	req, err := v.api.request(r.Context(), http.MethodGet, "/v1/sessions/"+url.PathEscape(id)+"/events/stream", q, nil, "")
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	if after != "" {
		req.Header.Set("Last-Event-ID", after)
	}
	resp, err := v.api.do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	l := &live{c: c, v: v, id: id, w: w, rc: rc, seen: map[string]bool{}, starts: map[string]time.Time{}}
	if after == "" {
		// The stream is open (it subscribes before answering), so the log
		// read now misses nothing; what both carry is sent once.
		if err := l.backlog(r.Context()); err != nil {
			return nil // the response has started: the browser reconnects
		}
	}
	_ = rc.Flush()
	return l.relay(r.Context(), resp.Body)
}

// live is one open EventSource.
type live struct {
	c      *Console
	v      *visit
	id     string
	w      io.Writer
	rc     *http.ResponseController
	seen   map[string]bool      // events sent (backlog and stream overlap)
	starts map[string]time.Time // model request starts, for latencies
}

// backlog sends the whole log, oldest first.
func (l *live) backlog(ctx context.Context) error {
	q := url.Values{"limit": {"1000"}}
	for {
		var page list[map[string]any]
		if err := l.v.api.get(ctx, "/v1/sessions/"+url.PathEscape(l.id)+"/events", q, &page); err != nil {
			return err
		}
		for _, ev := range page.Data {
			if err := l.event(ctx, ev, false); err != nil {
				return err
			}
		}
		if page.NextPage == "" {
			return nil
		}
		q.Set("page", page.NextPage)
	}
}

// relay reads the API's stream and sends each frame on.
func (l *live) relay(ctx context.Context, body io.Reader) error {
	br := bufio.NewReaderSize(body, 64<<10)
	var typ string
	var data strings.Builder
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return nil // the API ended the stream or the browser left
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if data.Len() > 0 {
				if err := l.frame(ctx, typ, data.String()); err != nil {
					return nil
				}
			}
			typ = ""
			data.Reset()
		case strings.HasPrefix(line, ":"):
			if _, err := io.WriteString(l.w, ": ping\n\n"); err != nil {
				return nil
			}
			_ = l.rc.Flush()
		case strings.HasPrefix(line, "event:"):
			typ = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
}

// frame handles one frame of the API's stream.
func (l *live) frame(ctx context.Context, typ, data string) error {
	dec := json.NewDecoder(strings.NewReader(data))
	dec.UseNumber()
	var ev map[string]any
	if err := dec.Decode(&ev); err != nil {
		return nil // not for us
	}
	switch typ {
	case "event_start":
		inner, _ := ev["event"].(map[string]any)
		return l.send("", "preview_start", liveFrame{ID: str(inner["id"]), Kind: str(inner["type"])})
	case "event_delta":
		d, _ := ev["delta"].(map[string]any)
		content, _ := d["content"].(map[string]any)
		text := str(content["text"]) + str(content["thinking"])
		return l.send("", "preview", liveFrame{ID: str(ev["event_id"]), Text: clip(text)})
	}
	return l.event(ctx, ev, true)
}

// event renders and sends one committed event (once).
func (l *live) event(ctx context.Context, ev map[string]any, fromStream bool) error {
	id := str(ev["id"])
	if id == "" || l.seen[id] {
		return nil
	}
	l.seen[id] = true
	pending := map[string]bool{}
	f := liveFrame{ID: id, Type: str(ev["type"])}
	if sr, ok := ev["stop_reason"].(map[string]any); ok && str(sr["type"]) == "requires_action" {
		ids, _ := sr["event_ids"].([]any)
		for _, x := range ids {
			f.Pending = append(f.Pending, str(x))
			pending[str(x)] = true
		}
	}
	e := entryOf(l.id, ev, pending)
	if t, err := time.Parse(time.RFC3339Nano, e.At); err == nil {
		switch e.Type {
		case "span.model_request_start":
			l.starts[e.ID] = t
		case "span.model_request_end":
			if s, ok := l.starts[e.Ref]; ok {
				e.Facts = append([]string{"latency " + t.Sub(s).Round(time.Millisecond).String()}, e.Facts...)
			}
		}
	}
	f.Ref = e.Ref
	html, err := l.c.fragment("entry", e)
	if err != nil {
		return err
	}
	f.HTML = html
	if err := l.send(id, "event", f); err != nil {
		return err
	}
	if fromStream && (e.Kind == "status" || e.Type == "span.model_request_end") {
		return l.summary(ctx, e.Type == "session.status_idle")
	}
	return nil
}

// summary sends the session's status and usage (and, with outputs, its
// outputs list) as they are now: after the event that changed them, so
// the event itself is not held up by the reads.
func (l *live) summary(ctx context.Context, outputs bool) error {
	var s map[string]any
	if err := l.v.api.get(ctx, "/v1/sessions/"+url.PathEscape(l.id), nil, &s); err != nil {
		return nil // the next change sends it again
	}
	f := liveFrame{Status: str(s["status"]), Usage: usageLine(s)}
	if outputs {
		var files list[map[string]any]
		if err := l.v.api.get(ctx, "/v1/files", url.Values{"scope_id": {l.id}, "limit": {"100"}}, &files); err == nil {
			html, err := l.c.fragment("outputs", files.Data)
			if err != nil {
				return err
			}
			f.Outputs = html
		}
	}
	return l.send("", "summary", f)
}

// send writes one SSE frame to the browser (id: only for committed
// events, so a reconnect resumes after the last one).
func (l *live) send(id, typ string, f liveFrame) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	var sb strings.Builder
	if id != "" {
		fmt.Fprintf(&sb, "id: %s\n", id)
	}
	fmt.Fprintf(&sb, "event: %s\ndata: %s\n\n", typ, b)
	if _, err := io.WriteString(l.w, sb.String()); err != nil {
		return err
	}
	return l.rc.Flush()
}

// usageLine is a session's running usage and list cost, as shown.
func usageLine(s map[string]any) string {
	u, _ := s["usage"].(map[string]any)
	lc, _ := u["list_cost"].(map[string]any)
	cc, _ := u["cache_creation"].(map[string]any)
	return fmt.Sprintf("in %d · out %d · cache read %d · cache write %d · list cost %s",
		num(u["input_tokens"]), num(u["output_tokens"]), num(u["cache_read_input_tokens"]),
		num(cc["ephemeral_5m_input_tokens"])+num(cc["ephemeral_1h_input_tokens"]), cents(lc["amount"]))
}
