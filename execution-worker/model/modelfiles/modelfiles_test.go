package modelfiles

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/mangohq/mango/execution-worker/model"
)

var (
	pngBytes = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR fake png")
	pdfBytes = []byte("%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n")
)

type file struct {
	data      []byte
	mediaType string
	// size overrides the reported size when not 0.
	size int64
}

// memOpener serves files of one session from memory and counts opens.
type memOpener struct {
	mu      sync.Mutex
	session string
	files   map[string]file
	opens   int
	fail    error
}

func (o *memOpener) Open(_ context.Context, sessionID, fileID string) (io.ReadCloser, Meta, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.opens++
	if o.fail != nil {
		return nil, Meta{}, o.fail
	}
	f, ok := o.files[fileID]
	if !ok || sessionID != o.session {
		return nil, Meta{}, fmt.Errorf("file %s: %w", fileID, ErrNotFound)
	}
	size := int64(len(f.data))
	if f.size != 0 {
		size = f.size
	}
	return io.NopCloser(bytes.NewReader(f.data)), Meta{MediaType: f.mediaType, Size: size}, nil
}

func (o *memOpener) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.opens
}

// recorder is the next client: it keeps the requests it gets.
type recorder struct {
	mu   sync.Mutex
	reqs []*model.Request
}

func (r *recorder) Create(_ context.Context, req *model.Request) (*model.Response, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs = append(r.reqs, req)
	return &model.Response{StopReason: "end_turn"}, nil
}

func (r *recorder) Stream(ctx context.Context, req *model.Request, _ func(model.StreamEvent)) (*model.Response, error) {
	return r.Create(ctx, req)
}

func (r *recorder) last(t *testing.T) *model.Request {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.reqs) == 0 {
		t.Fatal("the next client got no request")
	}
	return r.reqs[len(r.reqs)-1]
}

func block(t *testing.T, s string) model.Block {
	t.Helper()
	var b model.Block
	if err := json.Unmarshal([]byte(s), &b); err != nil {
		t.Fatalf("decode block %s: %v", s, err)
	}
	return b
}

func userReq(blocks ...model.Block) *model.Request {
	return &model.Request{Model: "m", MaxTokens: 10, Messages: []model.Message{{Role: "user", Content: blocks}}}
}

// sameJSON fails unless got and want are the same JSON value.
func sameJSON(t *testing.T, what string, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: %s is not JSON: %v", what, got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	if !bytes.Equal(gb, wb) {
		t.Fatalf("%s:\n got %s\nwant %s", what, gb, wb)
	}
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func newOpener() *memOpener {
	return &memOpener{session: "sesn_1", files: map[string]file{
		"file_png":  {data: pngBytes, mediaType: "image/png"},
		"file_pdf":  {data: pdfBytes, mediaType: "application/pdf"},
		"file_txt":  {data: []byte("plain <words>\n"), mediaType: "text/plain; charset=utf-8"},
		"file_csv":  {data: []byte("a,b\n"), mediaType: "text/csv"},
		"file_bin":  {data: []byte{0xff, 0xfe, 'x'}, mediaType: "text/plain"},
		"file_big":  {data: append(append([]byte(nil), pngBytes...), make([]byte, MaxImageBytes)...), mediaType: "image/png", size: -1},
		"file_huge": {data: pngBytes, mediaType: "image/png", size: MaxDocumentBytes + 1},
	}}
}

func TestResolveRewritesFileSources(t *testing.T) {
	t.Parallel()
	ctx := WithSession(context.Background(), "sesn_1")
	next := &recorder{}
	c := Resolve(next, newOpener())
	text := model.Block{Type: "text", Text: "read these"}
	req := userReq(text,
		block(t, `{"type":"image","source":{"type":"file","file_id":"file_png"}}`),
		block(t, `{"type":"document","source":{"type":"file","file_id":"file_pdf"},"title":"Report"}`),
		block(t, `{"type":"document","source":{"type":"file","file_id":"file_txt"}}`),
		block(t, `{"type":"image","source":{"type":"base64","media_type":"image/png","data":"`+b64(pngBytes)+`"}}`),
	)
	orig, _ := json.Marshal(req)
	if _, err := c.Create(ctx, req); err != nil {
		t.Fatalf("Create = %v, want the request sent", err)
	}
	got := next.last(t).Messages[0].Content
	if got[0].Type != "text" || got[0].Text != "read these" {
		t.Errorf("block 0 = %+v, want the text unchanged", got[0])
	}
	want := []string{
		`{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + b64(pngBytes) + `"}}`,
		`{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"` + b64(pdfBytes) + `"},"title":"Report"}`,
		`{"type":"document","source":{"type":"text","media_type":"text/plain","data":"plain <words>\n"}}`,
		`{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + b64(pngBytes) + `"}}`,
	}
	for i, w := range want {
		b, _ := json.Marshal(got[i+1])
		sameJSON(t, fmt.Sprintf("block %d", i+1), b, w)
	}
	if after, _ := json.Marshal(req); !bytes.Equal(after, orig) {
		t.Errorf("the caller's request changed:\n before %s\n after  %s", orig, after)
	}
}

func TestResolveToolResultImages(t *testing.T) {
	t.Parallel()
	ctx := WithSession(context.Background(), "sesn_1")
	next := &recorder{}
	c := Resolve(next, newOpener())
	content := `[{"type":"text","text":"chart"},{"type":"image","source":{"type":"file","file_id":"file_png"}}]`
	req := &model.Request{Messages: []model.Message{
		{Role: "user", Content: []model.Block{{Type: "text", Text: "go"}}},
		{Role: "assistant", Content: []model.Block{{Type: "tool_use", ID: "toolu_1", Name: "chart", Input: json.RawMessage(`{}`)}}},
		{Role: "user", Content: []model.Block{{Type: "tool_result", ToolUseID: "toolu_1", Content: json.RawMessage(content)}}},
	}}
	if _, err := c.Stream(ctx, req, func(model.StreamEvent) {}); err != nil {
		t.Fatalf("Stream = %v, want the request sent", err)
	}
	sent := next.last(t)
	if &sent.Messages[0] == &req.Messages[0] {
		t.Error("the request's messages were not copied")
	}
	res := sent.Messages[2].Content[0]
	sameJSON(t, "tool_result content", res.Content,
		`[{"type":"text","text":"chart"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"`+b64(pngBytes)+`"}}]`)
	if string(req.Messages[2].Content[0].Content) != content {
		t.Errorf("the caller's tool_result changed to %s", req.Messages[2].Content[0].Content)
	}
}

func TestResolveWithoutFilesPassesRequestOn(t *testing.T) {
	t.Parallel()
	next := &recorder{}
	op := newOpener()
	c := Resolve(next, op)
	req := userReq(model.Block{Type: "text", Text: "hi"},
		block(t, `{"type":"document","source":{"type":"url","url":"https://example.com/a.pdf"}}`))
	// No session is needed when nothing refers to a file.
	if _, err := c.Create(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if next.last(t) != req {
		t.Error("a request without file sources was copied, want it passed on as is")
	}
	if n := op.count(); n != 0 {
		t.Errorf("opened %d files, want none", n)
	}
}

func TestResolveRefusals(t *testing.T) {
	t.Parallel()
	ctx := WithSession(context.Background(), "sesn_1")
	for _, tc := range []struct {
		name, block, want string
	}{
		{"not found", `{"type":"image","source":{"type":"file","file_id":"file_nope"}}`,
			"messages[0].content[0]: file file_nope was not found"},
		{"image that is a pdf", `{"type":"image","source":{"type":"file","file_id":"file_pdf"}}`,
			"messages[0].content[0]: file file_pdf is not a JPEG, PNG, GIF or WebP image"},
		{"document that is a png", `{"type":"document","source":{"type":"file","file_id":"file_png"}}`,
			"messages[0].content[0]: file file_png is neither a PDF nor a text/plain document"},
		{"csv document", `{"type":"document","source":{"type":"file","file_id":"file_csv"}}`,
			"messages[0].content[0]: file file_csv is neither a PDF nor a text/plain document"},
		{"binary text", `{"type":"document","source":{"type":"file","file_id":"file_bin"}}`,
			"messages[0].content[0]: file file_bin is text/plain but not valid UTF-8"},
		{"image too large, size unknown", `{"type":"image","source":{"type":"file","file_id":"file_big"}}`,
			fmt.Sprintf("messages[0].content[0]: file file_big is more than the %d bytes allowed for an image", MaxImageBytes)},
		{"document too large by its metadata", `{"type":"document","source":{"type":"file","file_id":"file_huge"}}`,
			fmt.Sprintf("messages[0].content[0]: file file_huge is %d bytes, more than the %d allowed for a document", MaxDocumentBytes+1, MaxDocumentBytes)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			next := &recorder{}
			if _, err := Resolve(next, newOpener()).Create(ctx, userReq(block(t, tc.block))); err != nil {
				t.Fatalf("Create = %v, want the request sent with a note in place of the block", err)
			}
			sent := next.last(t).Messages[0].Content[0]
			_, reason, _ := strings.Cut(tc.want, ": file ")
			_, reason, _ = strings.Cut(reason, " ")
			if sent.Type != "text" || !strings.Contains(sent.Text, "could not be included: it "+reason) {
				t.Fatalf("the model got %+v, want a text note saying the file %s", sent, reason)
			}
		})
	}
}

func TestResolveOtherSessionCannotRead(t *testing.T) {
	t.Parallel()
	ctx := WithSession(context.Background(), "sesn_other")
	next := &recorder{}
	if _, err := Resolve(next, newOpener()).Create(ctx, userReq(block(t, `{"type":"image","source":{"type":"file","file_id":"file_png"}}`))); err != nil {
		t.Fatal(err)
	}
	if sent := next.last(t).Messages[0].Content[0]; sent.Type != "text" || !strings.Contains(sent.Text, "not found") {
		t.Fatalf("as another session the model got %+v, want a note that the file was not found", sent)
	}
}

func TestResolveTransientAndWiringErrors(t *testing.T) {
	t.Parallel()
	req := userReq(block(t, `{"type":"image","source":{"type":"file","file_id":"file_png"}}`))
	op := newOpener()
	op.fail = errors.New("control plane unavailable")
	_, err := Resolve(&recorder{}, op).Create(WithSession(context.Background(), "sesn_1"), req)
	var me *model.Error
	if err == nil || errors.As(err, &me) || !strings.Contains(err.Error(), "control plane unavailable") {
		t.Fatalf("Create with a failing Opener = %v, want its error as is (not a model error, so the turn is retried)", err)
	}
	_, err = Resolve(&recorder{}, newOpener()).Create(context.Background(), req)
	if err == nil || errors.As(err, &me) || !strings.Contains(err.Error(), "WithSession") {
		t.Fatalf("Create without a session = %v, want an error naming WithSession", err)
	}
}

func TestResolveCaches(t *testing.T) {
	t.Parallel()
	ctx := WithSession(context.Background(), "sesn_1")
	op := newOpener()
	c := Resolve(&recorder{}, op).(*client)
	req := userReq(block(t, `{"type":"image","source":{"type":"file","file_id":"file_png"}}`),
		block(t, `{"type":"document","source":{"type":"file","file_id":"file_pdf"}}`))
	for range 3 {
		if _, err := c.Create(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if n := op.count(); n != 2 {
		t.Errorf("opened files %d times over 3 requests, want 2 (each file once)", n)
	}
	if entries, _ := c.cache.stats(); entries != 2 {
		t.Errorf("cache holds %d entries, want 2", entries)
	}
}

func TestCacheEvictsByBytes(t *testing.T) {
	t.Parallel()
	c := newCache(10)
	c.put("a", json.RawMessage("aaaa"))
	c.put("b", json.RawMessage("bbbb"))
	if _, ok := c.get("a"); !ok { // a is now the most recently used
		t.Fatal("a missing")
	}
	c.put("c", json.RawMessage("cccc"))
	if _, ok := c.get("b"); ok {
		t.Error("b still cached, want it evicted as least recently used")
	}
	for _, k := range []string{"a", "c"} {
		if _, ok := c.get(k); !ok {
			t.Errorf("%s evicted, want it kept", k)
		}
	}
	c.put("big", json.RawMessage("0123456789x"))
	if _, ok := c.get("big"); ok {
		t.Error("an entry larger than the capacity was cached")
	}
	if entries, size := c.stats(); entries != 2 || size != 8 {
		t.Errorf("cache has %d entries, %d bytes; want 2 and 8", entries, size)
	}
	off := newCache(0)
	off.put("a", json.RawMessage("a"))
	if _, ok := off.get("a"); ok {
		t.Error("a zero-capacity cache kept an entry")
	}
}
