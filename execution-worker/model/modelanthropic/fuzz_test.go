package modelanthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mangohq/mango/execution-worker/model"
)

// FuzzReadStream feeds arbitrary bytes to the Messages API stream decoder.
// It must return promptly (no hang), either a response or a classified
// *model.Error (the reader itself never fails here), and bounded output:
// at most one preview event per input line, preview text and the encoded
// response no larger than a small multiple of the input.
func FuzzReadStream(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.sse"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no recorded streams in testdata (%v)", err)
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		"",
		"data: [DONE]\n\n",
		"event: message_stop\ndata: {}\n\n",
		"event: content_block_delta\ndata: {\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\n",
		"data: {\"type\":\"content_block_start\",\"index\":-1,\"content_block\":{\"type\":\"tool_use\",\"input\":{}}}\r\n\r\n" +
			"data: {\"type\":\"content_block_delta\",\"index\":-1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"a\\\":\"}}\r\n\r\n" +
			"data: {\"type\":\"message_stop\"}\r\n\r\n",
		"event: content_block_start\ndata: {\"index\":9223372036854775807,\"content_block\":{\"type\":\"text\",\"text\":\"\\u003c\\ud800\"}}\n\nevent: message_stop\ndata: {}\n\n",
		"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
		"event: error\ndata: {\"type\":\"error\"}\n\n",
		"data: {\"type\":\"message_start\"\ndata: ,\"message\":{\"id\":\"msg\"}}\n\n",
		": ping\n\n: ping\n",
		"event: message_start\ndata: {\"message\":{\"usage\":{\"input_tokens\":1e3}}}\n\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, stream []byte) {
		type result struct {
			resp                  *model.Response
			err                   error
			previews, previewText int
		}
		done := make(chan result, 1)
		go func() {
			var r result
			r.resp, r.err = readStream(bytes.NewReader(stream), func(e model.StreamEvent) {
				r.previews++
				r.previewText += len(e.Text)
			})
			done <- r
		}()
		var r result
		select {
		case r = <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("readStream did not return within 10s on %d bytes", len(stream))
		}

		lines := bytes.Count(stream, []byte("\n")) + bytes.Count(stream, []byte("\r"))
		if r.previews > lines {
			t.Fatalf("%d preview events from %d input lines", r.previews, lines)
		}
		if r.previewText > 3*len(stream) {
			t.Fatalf("%d bytes of preview text from %d input bytes", r.previewText, len(stream))
		}
		if r.err != nil {
			var me *model.Error
			if !errors.As(r.err, &me) || me.Type == "" || r.resp != nil {
				t.Fatalf("readStream error %T (%v) with response %v, want a *model.Error with a type and no response", r.err, r.err, r.resp)
			}
			return
		}
		if r.resp == nil {
			t.Fatal("readStream returned neither a response nor an error")
		}
		if len(r.resp.Content) > lines {
			t.Fatalf("%d content blocks from %d input lines", len(r.resp.Content), lines)
		}
		for i, b := range r.resp.Content {
			if b.Type == "" {
				t.Fatalf("content block %d has no type", i)
			}
		}
		out, err := json.Marshal(r.resp)
		if err != nil {
			t.Fatalf("response does not encode for the transcript: %v", err)
		}
		if len(out) > 8*len(stream)+256 {
			t.Fatalf("response encodes to %d bytes from %d input bytes", len(out), len(stream))
		}
	})
}
