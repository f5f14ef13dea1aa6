package sse

import (
	"bytes"
	"strings"
)

// WriteFrame writes one SSE frame: `id: <id>` (when id is not empty),
// `event: <typ>`, `data: <data>` and a blank line. SSE has no escaping (a
// line break ends a field, a blank line the frame), so whatever the fields
// hold the frame stays one event with these three fields: id and typ are
// written without CR and LF (and id without NUL, which makes clients ignore
// it), and data is written one data: line per line, which clients join back
// with LF. Event JSON holds no raw line break, and in JSON one could only be
// whitespace, so the event always arrives whole.
func WriteFrame(w *bytes.Buffer, id, typ string, data []byte) {
	if id = sseFieldValue(id, "\r\n\x00"); id != "" {
		w.WriteString("id: ")
		w.WriteString(id)
		w.WriteByte('\n')
	}
	w.WriteString("event: ")
	w.WriteString(sseFieldValue(typ, "\r\n"))
	for {
		line, rest, more := cutLine(data)
		w.WriteString("\ndata: ")
		w.Write(line)
		if !more {
			break
		}
		data = rest
	}
	w.WriteString("\n\n")
}

// sseFieldValue returns v without the (ASCII) bytes in drop.
func sseFieldValue(v, drop string) string {
	if !strings.ContainsAny(v, drop) {
		return v
	}
	out := make([]byte, 0, len(v))
	for i := 0; i < len(v); i++ {
		if strings.IndexByte(drop, v[i]) < 0 {
			out = append(out, v[i])
		}
	}
	return string(out)
}

// cutLine splits b at its first SSE line break (CRLF, CR or LF).
func cutLine(b []byte) (line, rest []byte, found bool) {
	i := bytes.IndexAny(b, "\r\n")
	if i < 0 {
		return b, nil, false
	}
	j := i + 1
	if b[i] == '\r' && j < len(b) && b[j] == '\n' {
		j++
	}
	return b[:i], b[j:], true
}
