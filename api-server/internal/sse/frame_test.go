package sse

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2/packages/ssestream"
)

// FuzzWriteFrame checks that whatever an event's id, type and data hold,
// WriteFrame writes exactly one SSE event carrying them, with no field but
// id, event and data: a line break in a field cannot end it early or start
// another frame. Both a parser that follows the SSE specification and the
// official Go SDK's decoder read the frame.
func FuzzWriteFrame(f *testing.F) {
	f.Add("sevt_011CZkZTMr5ihVHjdC8Lpw3W", "agent.message", []byte(`{"id":"sevt_011CZkZTMr5ihVHjdC8Lpw3W","type":"agent.message","processed_at":"2026-01-02T03:04:05.678901Z","content":[{"type":"text","text":"hi\n"}]}`))
	f.Add("", "session.deleted", []byte(`{"id":"sevt_x","type":"session.deleted","processed_at":"2026-01-02T03:04:05Z"}`))
	f.Add("", "event_delta", []byte(`{"type":"event_delta","event_id":"sevt_x","delta":{"type":"content_delta","content":{"type":"text","text":"\u2028"},"index":0}}`))
	f.Add("sevt_1\nevent: forged", "agent.message\n\nevent: user.message\ndata: {}", []byte("{\n\"a\":\r\n1\r}\n\ndata: {}\n\n"))
	f.Add("sevt_\x00\r", " spaced : type", []byte(" {}"))
	f.Add("\n", "", []byte(""))
	f.Add("id", "retry: 1", []byte("\r\n"))
	f.Fuzz(func(t *testing.T, id, typ string, data []byte) {
		var buf bytes.Buffer
		WriteFrame(&buf, id, typ, data)
		frame := buf.String()
		wantID := strip(id, "\r\n\x00")
		wantType := strip(typ, "\r\n")
		wantData := normalizeLineBreaks(string(data))

		events, fields, rest := parseSSE(frame)
		if len(events) != 1 || rest != "" {
			t.Fatalf("frame %q parsed to %d events (%+v) and %q left over, want exactly one event", frame, len(events), events, rest)
		}
		if ev := events[0]; ev.id != wantID || ev.typ != wantType || ev.data != wantData {
			t.Fatalf("frame %q parsed to id %q type %q data %q, want %q %q %q", frame, ev.id, ev.typ, ev.data, wantID, wantType, wantData)
		}
		if got, want := strings.Join(fields, ","), wantFields(wantID != "", strings.Count(wantData, "\n")+1); got != want {
			t.Fatalf("frame %q has fields %s, want %s", frame, got, want)
		}
		if json.Valid(data) && !json.Valid([]byte(events[0].data)) {
			t.Fatalf("JSON data %q arrived as %q, which is not JSON", data, events[0].data)
		}

		dec := ssestream.NewDecoder(&http.Response{Header: http.Header{}, Body: io.NopCloser(strings.NewReader(frame))})
		var sdk []ssestream.Event
		for dec.Next() {
			sdk = append(sdk, ssestream.Event{Type: dec.Event().Type, Data: bytes.Clone(dec.Event().Data)})
		}
		if dec.Err() != nil || len(sdk) != 1 {
			t.Fatalf("SDK decoded frame %q to %d events (%v), want one", frame, len(sdk), dec.Err())
		}
		if sdk[0].Type != wantType || string(sdk[0].Data) != wantData+"\n" {
			t.Fatalf("SDK decoded frame %q to type %q data %q, want %q %q", frame, sdk[0].Type, sdk[0].Data, wantType, wantData+"\n")
		}
	})
}

type sseEvent struct{ id, typ, data string }

// parseSSE interprets stream as the SSE specification (WHATWG HTML,
// "Interpreting an event stream") does: lines end at CRLF, CR or LF, a
// blank line dispatches the event, an id with NUL is ignored. It returns
// the events, the names of the fields read, and what follows the last
// complete line.
func parseSSE(stream string) (events []sseEvent, fields []string, rest string) {
	var lastID, typ, data string
	for {
		i := strings.IndexAny(stream, "\r\n")
		if i < 0 {
			return events, fields, stream
		}
		line := stream[:i]
		if stream[i] == '\r' && i+1 < len(stream) && stream[i+1] == '\n' {
			i++
		}
		stream = stream[i+1:]
		if line == "" {
			if data != "" {
				events = append(events, sseEvent{id: lastID, typ: typ, data: strings.TrimSuffix(data, "\n")})
			}
			typ, data = "", ""
			continue
		}
		if line[0] == ':' {
			continue
		}
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		fields = append(fields, name)
		switch name {
		case "event":
			typ = value
		case "data":
			data += value + "\n"
		case "id":
			if !strings.Contains(value, "\x00") {
				lastID = value
			}
		}
	}
}

func wantFields(id bool, dataLines int) string {
	f := []string{"event"}
	if id {
		f = []string{"id", "event"}
	}
	for range dataLines {
		f = append(f, "data")
	}
	return strings.Join(f, ",")
}

// strip returns s without the bytes in chars.
func strip(s, chars string) string {
	var b strings.Builder
	for i := range len(s) {
		if !strings.Contains(chars, s[i:i+1]) {
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

func normalizeLineBreaks(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\r", "\n")
}
