package eventspec

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/mangohq/mango/api-server/internal/jsonx"
)

// Sample payloads: just enough bytes for the magic numbers.
var (
	pngBytes  = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
	jpegBytes = []byte{0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10, 'J', 'F', 'I', 'F'}
	gifBytes  = []byte("GIF89a\x01\x00\x01\x00")
	webpBytes = []byte("RIFF\x24\x00\x00\x00WEBPVP8 ")
	pdfBytes  = []byte("%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n")
)

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// message is a send body with one user.message holding blocks.
func message(blocks ...string) string {
	return `{"events":[{"type":"user.message","content":[` + strings.Join(blocks, ",") + `]}]}`
}

func image(mediaType, data string) string {
	return fmt.Sprintf(`{"type":"image","source":{"type":"base64","media_type":%q,"data":%q}}`, mediaType, data)
}

func pdf(data string) string {
	return fmt.Sprintf(`{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":%q}}`, data)
}

func TestContentBlocksAccepted(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, body string
		// want is the stored content; empty means the blocks as sent.
		want string
	}{
		{name: "png", body: message(image("image/png", b64(pngBytes)))},
		{name: "jpeg", body: message(image("image/jpeg", b64(jpegBytes)))},
		{name: "gif", body: message(image("image/gif", b64(gifBytes)))},
		{name: "webp", body: message(image("image/webp", b64(webpBytes)))},
		{name: "image url", body: message(`{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}`)},
		{name: "image file", body: message(`{"type":"image","source":{"type":"file","file_id":"file_01abc"}}`)},
		{name: "pdf with title and context", body: message(`{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"` +
			b64(pdfBytes) + `"},"title":"Report","context":"Q3 figures"}`)},
		{name: "text document", body: message(`{"type":"document","source":{"type":"text","media_type":"text/plain","data":"plain words"}}`)},
		{name: "text document without media type", body: message(`{"type":"document","source":{"data":"x","type":"text"}}`),
			want: `[{"type":"document","source":{"type":"text","media_type":"text/plain","data":"x"}}]`},
		{name: "document url", body: message(`{"type":"document","source":{"type":"url","url":"http://example.com/a.pdf"}}`)},
		{name: "document file", body: message(`{"type":"document","source":{"type":"file","file_id":"file_02"}}`)},
		{name: "null title is dropped", body: message(`{"type":"document","source":{"type":"file","file_id":"f"},"title":null}`),
			want: `[{"type":"document","source":{"type":"file","file_id":"f"}}]`},
		{name: "members reordered", body: message(`{"source":{"data":"` + b64(pngBytes) + `","media_type":"image/png","type":"base64"},"type":"image"}`),
			want: `[` + image("image/png", b64(pngBytes)) + `]`},
		{name: "mixed", body: message(`{"type":"text","text":"Read these."}`, pdf(b64(pdfBytes)), image("image/png", b64(pngBytes)))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			events, err := ParseSend([]byte(tc.body))
			if err != nil {
				t.Fatalf("ParseSend(%s) = %v, want it accepted", tc.body, err)
			}
			var body struct {
				Content json.RawMessage `json:"content"`
			}
			if err := json.Unmarshal(events[0].Body, &body); err != nil {
				t.Fatal(err)
			}
			want := tc.want
			if want == "" {
				var in struct {
					Events []struct {
						Content json.RawMessage `json:"content"`
					} `json:"events"`
				}
				if err := json.Unmarshal([]byte(tc.body), &in); err != nil {
					t.Fatal(err)
				}
				want = string(in.Events[0].Content)
			}
			if string(body.Content) != want {
				t.Fatalf("stored content\n got %s\nwant %s", body.Content, want)
			}
		})
	}
}

func TestContentBlocksRejected(t *testing.T) {
	t.Parallel()
	big := make([]byte, MaxImageBytes+1)
	copy(big, pngBytes)
	cases := []struct {
		name, body string
		// want is the expected message: its path and what is wrong.
		want string
	}{
		{"unknown block type", message(`{"type":"audio","source":{}}`),
			`events[0].content[0].type: unsupported content block type "audio" (expected "text", "image" or "document")`},
		{"missing block type", message(`{"text":"x"}`), `events[0].content[0].type: is required`},
		{"image without source", message(`{"type":"image"}`), `events[0].content[0].source: is required`},
		{"image source without type", message(`{"type":"image","source":{}}`), `events[0].content[0].source.type: is required ("base64", "url" or "file")`},
		{"image text source", message(`{"type":"image","source":{"type":"text","data":"x"}}`),
			`events[0].content[0].source.type: unsupported source type "text" (expected "base64", "url" or "file")`},
		{"image wrong media type", message(`{"type":"text","text":"x"}`, image("image/bmp", b64(pngBytes))),
			`events[0].content[1].source.media_type: must be "image/jpeg", "image/png", "image/gif" or "image/webp", got "image/bmp"`},
		{"image media type mismatch", message(image("image/png", b64(jpegBytes))),
			`events[0].content[0].source.media_type: is "image/png" but the data is a JPEG image (image/jpeg)`},
		{"image not an image", message(image("image/gif", b64([]byte("hello world")))),
			`events[0].content[0].source.media_type: is "image/gif" but the data is not a GIF image`},
		{"bad base64", message(image("image/png", "iVBO!!!!")),
			`events[0].content[0].source.data: is not valid base64 (standard alphabet, padded, no line breaks)`},
		{"unpadded base64", message(image("image/png", strings.TrimRight(b64(pngBytes), "="))),
			`events[0].content[0].source.data: is not valid base64 (standard alphabet, padded, no line breaks)`},
		{"base64 with line breaks", message(image("image/png", b64(pngBytes)[:8]+"\n"+b64(pngBytes)[8:])),
			`events[0].content[0].source.data: is not valid base64 (standard alphabet, padded, no line breaks)`},
		{"url-safe base64", message(image("image/png", strings.NewReplacer("+", "-", "/", "_").Replace(b64(append(pngBytes, 0xfb, 0xff))))),
			`events[0].content[0].source.data: is not valid base64 (standard alphabet, padded, no line breaks)`},
		{"empty data", message(image("image/png", "")), `events[0].content[0].source.data: must not be empty`},
		{"image too large", message(image("image/png", b64(big))),
			fmt.Sprintf(`events[0].content[0].source.data: decodes to %d bytes, more than the %d allowed for image/png`, MaxImageBytes+1, MaxImageBytes)},
		{"base64 without media type", message(`{"type":"image","source":{"type":"base64","data":"AAAA"}}`),
			`events[0].content[0].source.media_type: is required`},
		{"url member in base64 source", message(`{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA","url":"https://x"}}`),
			`events[0].content[0].source.url: is not allowed in a "base64" source`},
		{"unknown source member", message(`{"type":"image","source":{"type":"file","file_id":"f","name":"x"}}`),
			`events[0].content[0].source: unknown field "name"`},
		{"ftp url", message(`{"type":"image","source":{"type":"url","url":"ftp://example.com/a.png"}}`),
			`events[0].content[0].source.url: must be an absolute http or https URL without credentials`},
		{"url with credentials", message(`{"type":"document","source":{"type":"url","url":"https://u:p@example.com/a.pdf"}}`),
			`events[0].content[0].source.url: must be an absolute http or https URL without credentials`},
		{"empty file id", message(`{"type":"image","source":{"type":"file","file_id":""}}`),
			`events[0].content[0].source.file_id: must not be empty`},
		{"odd file id", message(`{"type":"image","source":{"type":"file","file_id":"../etc"}}`),
			`events[0].content[0].source.file_id: must hold only letters, digits, '_' and '-', got "../etc"`},
		{"document not a pdf", message(pdf(b64(pngBytes))),
			`events[0].content[0].source.media_type: is "application/pdf" but the data is a PNG image (image/png)`},
		{"document other media type", message(`{"type":"document","source":{"type":"base64","media_type":"text/plain","data":"aGk="}}`),
			`events[0].content[0].source.media_type: must be "application/pdf" for a base64 document (plain text uses a "text" source), got "text/plain"`},
		{"text source wrong media type", message(`{"type":"document","source":{"type":"text","media_type":"text/html","data":"<p>"}}`),
			`events[0].content[0].source.media_type: must be "text/plain" for a text source, got "text/html"`},
		{"empty text source", message(`{"type":"document","source":{"type":"text","data":""}}`), `events[0].content[0].source.data: must not be empty`},
		{"text source without data", message(`{"type":"document","source":{"type":"text"}}`), `events[0].content[0].source.data: is required`},
		{"document citations", message(`{"type":"document","source":{"type":"file","file_id":"f"},"citations":{"enabled":true}}`),
			`events[0].content[0]: unknown field "citations"`},
		{"document title not a string", message(`{"type":"document","source":{"type":"file","file_id":"f"},"title":3}`),
			`events[0].content[0].title: expected a string, got number`},
		{"document in a tool result", `{"events":[{"type":"user.custom_tool_result","custom_tool_use_id":"sevt_1","content":[` + pdf(b64(pdfBytes)) + `]}]}`,
			`events[0].content[0].type: unsupported content block type "document" (expected "text" or "image")`},
		{"initial text still required", message(`{"type":"text"}`), `events[0].content[0].text: is required`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseSend([]byte(tc.body))
			var pub *jsonx.Error
			if !errors.As(err, &pub) {
				t.Fatalf("ParseSend = %v (%T), want the public error %q", err, err, tc.want)
			}
			if pub.Message != tc.want {
				t.Fatalf("ParseSend error\n got %q\nwant %q", pub.Message, tc.want)
			}
		})
	}
}

func TestCustomToolResultImage(t *testing.T) {
	t.Parallel()
	body := `{"events":[{"type":"user.custom_tool_result","custom_tool_use_id":"sevt_1","content":[{"type":"text","text":"chart"},` +
		image("image/png", b64(pngBytes)) + `]}]}`
	events, err := ParseSend([]byte(body))
	if err != nil {
		t.Fatalf("ParseSend = %v, want a tool result with an image accepted", err)
	}
	want := `{"content":[{"type":"text","text":"chart"},` + image("image/png", b64(pngBytes)) + `],"custom_tool_use_id":"sevt_1","is_error":false}`
	if string(events[0].Body) != want {
		t.Fatalf("stored body\n got %s\nwant %s", events[0].Body, want)
	}
}

func TestDecodedLen(t *testing.T) {
	t.Parallel()
	for n := range 10 {
		s := b64(make([]byte, n))
		if got := DecodedLen(s); got != n {
			t.Errorf("DecodedLen(%q) = %d, want %d", s, got, n)
		}
	}
}

// TestEventBodyEncodingFailureIsAnError: a body that does not encode
// makes the event builder return an error (a 500 at the handler) instead
// of panicking in the request.
func TestEventBodyEncodingFailureIsAnError(t *testing.T) {
	t.Parallel()
	var ev *Event
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("encoding an unencodable body panicked (%v); want an error", r)
			}
		}()
		ev, err = event(Event{Type: UserMessage}, map[string]any{"content": func() {}})
	}()
	if err == nil || ev != nil || !strings.Contains(err.Error(), "encode event body") {
		t.Fatalf("event with an unencodable body = %+v, %v; want no event and an error naming the encoding", ev, err)
	}
	ev, err = event(Event{Type: UserMessage}, map[string]any{"content": "<a&b>"})
	if err != nil || string(ev.Body) != `{"content":"<a&b>"}` || ev.Type != UserMessage {
		t.Fatalf("event = %+v, %v; want type %s and the body unescaped without a newline", ev, err, UserMessage)
	}
}
