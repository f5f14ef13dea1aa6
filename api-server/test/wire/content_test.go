package wire

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/mangohq/mango/api-server/internal/testserver"
)

// tinyPDF is a complete one-page PDF.
const tinyPDF = "%PDF-1.4\n" +
	"1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n" +
	"2 0 obj<</Type/Pages/Kids[3 0 R]/Count 1>>endobj\n" +
	"3 0 obj<</Type/Page/Parent 2 0 R/MediaBox[0 0 72 72]>>endobj\n" +
	"xref\n0 4\n0000000000 65535 f \n0000000009 00000 n \n0000000052 00000 n \n0000000101 00000 n \n" +
	"trailer<</Size 4/Root 1 0 R>>\nstartxref\n164\n%%EOF\n"

// tinyPNG is a 2×2 PNG.
func tinyPNG(t *testing.T) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 2, 2))
	img.Set(0, 0, color.RGBA{R: 255, A: 255})
	img.Set(1, 1, color.RGBA{B: 255, A: 255})
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// messagesAPI is a Messages API on 127.0.0.1 that records the request
// bodies and answers with a stream: a tool_use of tool <name> when the
// last message is a user text "call <name>" (with input {}, or the JSON
// after the name in "call <name> <json>"), else an end_turn text.
type messagesAPI struct {
	srv    *httptest.Server
	mu     sync.Mutex
	bodies [][]byte
}

func newMessagesAPI(t *testing.T) *messagesAPI {
	t.Helper()
	m := &messagesAPI{}
	m.srv = httptest.NewServer(http.HandlerFunc(m.serve))
	t.Cleanup(m.srv.Close)
	return m
}

// apiMessage is a message of a recorded request, its blocks kept raw.
type apiMessage struct {
	Role    string            `json:"role"`
	Content []json.RawMessage `json:"content"`
}

func (m *messagesAPI) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/messages" {
		http.NotFound(w, r)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	m.mu.Lock()
	m.bodies = append(m.bodies, body)
	n := len(m.bodies)
	m.mu.Unlock()
	var req struct {
		Messages []apiMessage `json:"messages"`
	}
	if err := json.Unmarshal(body, &req); err != nil || len(req.Messages) == 0 {
		http.Error(w, "bad request body", http.StatusBadRequest)
		return
	}
	tool, input := "", "{}"
	if lastMsg := req.Messages[len(req.Messages)-1]; lastMsg.Role == "user" {
		for _, raw := range lastMsg.Content {
			var b struct{ Type, Text string }
			_ = json.Unmarshal(raw, &b)
			if call, ok := strings.CutPrefix(b.Text, "call "); ok && b.Type == "text" {
				// "call <name>" or "call <name> <input as JSON>"
				tool = call
				if name, in, ok := strings.Cut(call, " "); ok {
					tool, input = name, in
				}
			}
		}
	}
	w.Header().Set("content-type", "text/event-stream")
	send := func(event string, v any) {
		b, _ := json.Marshal(v)
		_, _ = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
	}
	send("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": fmt.Sprintf("msg_content_%d", n), "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
		"content": []any{}, "stop_reason": nil, "usage": map[string]any{"input_tokens": 100, "output_tokens": 1}}})
	stop := "end_turn"
	if tool != "" {
		stop = "tool_use"
		send("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
			"content_block": map[string]any{"type": "tool_use", "id": fmt.Sprintf("toolu_content_%d", n), "name": tool, "input": map[string]any{}}})
		send("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "input_json_delta", "partial_json": input}})
	} else {
		send("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
			"content_block": map[string]any{"type": "text", "text": ""}})
		send("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "text_delta", "text": "Read them."}})
	}
	send("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	send("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": 5}})
	send("message_stop", map[string]any{"type": "message_stop"})
}

// lastUserMessage is the last message of the last recorded request.
func (m *messagesAPI) lastUserMessage(t *testing.T) apiMessage {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.bodies) == 0 {
		t.Fatal("the Messages API got no request")
	}
	var req struct {
		Messages []apiMessage `json:"messages"`
	}
	if err := json.Unmarshal(m.bodies[len(m.bodies)-1], &req); err != nil {
		t.Fatal(err)
	}
	msg := req.Messages[len(req.Messages)-1]
	if msg.Role != "user" {
		t.Fatalf("the last message of the last request is %s, want user", msg.Role)
	}
	return msg
}

// lastSystem is the system prompt of the last recorded request: its text,
// or its text blocks joined by newlines.
func (m *messagesAPI) lastSystem(t *testing.T) string {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.bodies) == 0 {
		t.Fatal("the Messages API got no request")
	}
	var req struct {
		System json.RawMessage `json:"system"`
	}
	if err := json.Unmarshal(m.bodies[len(m.bodies)-1], &req); err != nil {
		t.Fatal(err)
	}
	var text string
	if json.Unmarshal(req.System, &text) == nil {
		return text
	}
	var blocks []struct{ Text string }
	if err := json.Unmarshal(req.System, &blocks); err != nil {
		t.Fatalf("system of the last request is neither a string nor text blocks: %s", req.System)
	}
	parts := make([]string, 0, len(blocks))
	for _, b := range blocks {
		parts = append(parts, b.Text)
	}
	return strings.Join(parts, "\n")
}

// withoutCacheControl is the JSON value of raw without its cache_control
// member (the model client marks the last blocks for prompt caching),
// re-encoded in a canonical form.
func withoutCacheControl(t *testing.T, raw []byte) string {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("block %s: %v", raw, err)
	}
	delete(v, "cache_control")
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func canonical(t *testing.T, raw []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// modelEnv is a server, a worker using the real Anthropic model client
// against a recording Messages API, and an SDK client.
func newModelEnv(t *testing.T) (*turnEnv, *messagesAPI) {
	t.Helper()
	api := newMessagesAPI(t)
	e := newTurnEnvWithoutWorker(t)
	e.worker = startWorkerWith(t, e.srv, "content-w1", e.root, map[string]string{
		"MANGO_MODEL": "anthropic", "MANGO_MODEL_BASE_URL": api.srv.URL, "MANGO_MODEL_API_KEY": "sk-content-test",
		"MANGO_ALLOW_UNSAFE_LOCAL_SANDBOX": "1",
	})
	return e, api
}

// TestContentBlocksReachModelThroughSDK: a user.message with a text, a
// base64 PDF document and a base64 PNG image, sent through the SDK, reaches
// the Messages API with the document and image blocks in their native
// form, byte for byte; listed and streamed, the event decodes through the
// SDK's unions with the blocks intact. A custom tool result carrying an
// image reaches the model as a tool_result holding the image.
func TestContentBlocksReachModelThroughSDK(t *testing.T) {
	t.Parallel()
	e, api := newModelEnv(t)
	ctx := context.Background()
	agent, err := e.client.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: "content",
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "claude-sonnet-4-5"},
		Tools: []anthropic.BetaAgentNewParamsToolUnion{{OfCustom: &anthropic.BetaManagedAgentsCustomToolParams{Name: "chart",
			Description: "draws a chart", InputSchema: anthropic.BetaManagedAgentsCustomToolInputSchemaParam{Properties: map[string]any{}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	env, err := e.client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: fmt.Sprintf("content-%d", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)}, EnvironmentID: env.ID})
	if err != nil {
		t.Fatal(err)
	}
	events := e.watch(t, s.ID)

	pdfData := base64.StdEncoding.EncodeToString([]byte(tinyPDF))
	pngData := base64.StdEncoding.EncodeToString(tinyPNG(t))
	_, err = e.client.Beta.Sessions.Events.Send(ctx, s.ID, anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{{OfUserMessage: &anthropic.BetaManagedAgentsUserMessageEventParams{
			Content: []anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{
				{OfText: &anthropic.BetaManagedAgentsTextBlockParam{Text: "What do these show?"}},
				{OfDocument: &anthropic.BetaManagedAgentsDocumentBlockParam{Title: anthropic.String("Tiny report"), Context: anthropic.String("one blank page"),
					Source: anthropic.BetaManagedAgentsDocumentBlockSourceUnionParam{OfBase64: &anthropic.BetaManagedAgentsBase64DocumentSourceParam{
						Data: pdfData, MediaType: "application/pdf"}}}},
				{OfImage: &anthropic.BetaManagedAgentsImageBlockParam{Source: anthropic.BetaManagedAgentsImageBlockSourceUnionParam{
					OfBase64: &anthropic.BetaManagedAgentsBase64ImageSourceParam{Data: pngData, MediaType: "image/png"}}}},
			}}}}})
	if err != nil {
		t.Fatalf("send a message with a document and an image: %v", err)
	}
	// A file id that names no file is refused at send time, naming the
	// block, rather than failing the turn.
	_, err = e.client.Beta.Sessions.Events.Send(ctx, s.ID, anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{{OfUserMessage: &anthropic.BetaManagedAgentsUserMessageEventParams{
			Content: []anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{
				{OfImage: &anthropic.BetaManagedAgentsImageBlockParam{Source: anthropic.BetaManagedAgentsImageBlockSourceUnionParam{
					OfFile: &anthropic.BetaManagedAgentsFileImageSourceParam{FileID: "file_doesnotexist"}}}},
			}}}}})
	if e := apiErrorWithStatus(t, err, http.StatusBadRequest); !strings.Contains(e.RawJSON(), "events[0].content[0].source.file_id") {
		t.Errorf("unknown file source: %s, want an error naming events[0].content[0].source.file_id", e.RawJSON())
	}
	evs := until(t, events, "session.status_idle", 60*time.Second)
	if msg := resultText(last(evs, "agent.message")); msg != "Read them." {
		t.Fatalf("agent.message %q, want the Messages API's answer %q (events %v)", msg, "Read them.", typesOf(evs))
	}

	wantImage := `{"source":{"data":"` + pngData + `","media_type":"image/png","type":"base64"},"type":"image"}`
	checkBlocksReachedModel(t, api.lastUserMessage(t), pdfData, pngData, wantImage)
	// Streamed and listed, the message decodes through the SDK's unions.
	checkUserMessageDecodes(t, e, s.ID, evs, pdfData, pngData)
	customToolImageResult(t, e, api, events, s.ID, pngData, wantImage)
}

// checkBlocksReachedModel: the last user message the model got holds the
// text, the document and the image in their native form, byte for byte.
func checkBlocksReachedModel(t *testing.T, sent apiMessage, pdfData, pngData, wantImage string) {
	t.Helper()
	wantDoc := `{"context":"one blank page","source":{"data":"` + pdfData + `","media_type":"application/pdf","type":"base64"},"title":"Tiny report","type":"document"}`
	if len(sent.Content) != 3 {
		t.Fatalf("the model got %d blocks in the last user message, want 3: %s", len(sent.Content), sent.Content)
	}
	if got := canonical(t, sent.Content[0]); got != `{"text":"What do these show?","type":"text"}` {
		t.Errorf("block 0 reached the model as %s, want the text", got)
	}
	if got := withoutCacheControl(t, sent.Content[1]); got != wantDoc {
		t.Errorf("the document reached the model as\n %s\nwant\n %s", got, wantDoc)
	}
	if got := withoutCacheControl(t, sent.Content[2]); got != wantImage {
		t.Errorf("the image reached the model as\n %s\nwant\n %s", got, wantImage)
	}
	for i, data := range map[int]string{1: pdfData, 2: pngData} {
		if !bytes.Contains(sent.Content[i], []byte(`"data":"`+data+`"`)) {
			t.Errorf("block %d does not carry the base64 data byte for byte: %.200s", i, sent.Content[i])
		}
	}
}

// checkUserMessageBlocks checks that m holds the text, the PDF document
// and the PNG image, decoded through the SDK's unions.
func checkUserMessageBlocks(t *testing.T, where string, m anthropic.BetaManagedAgentsUserMessageEvent, pdfData, pngData string) {
	t.Helper()
	if len(m.Content) != 3 {
		t.Fatalf("%s: user.message has %d blocks, want 3: %s", where, len(m.Content), m.RawJSON())
	}
	if txt := m.Content[0].AsText(); txt.Text != "What do these show?" {
		t.Errorf("%s: block 0 = %s, want the text", where, m.Content[0].RawJSON())
	}
	doc, ok := m.Content[1].AsAny().(anthropic.BetaManagedAgentsDocumentBlock)
	if !ok {
		t.Fatalf("%s: block 1 decodes as %T, want a document block", where, m.Content[1].AsAny())
	}
	src, ok := doc.Source.AsAny().(anthropic.BetaManagedAgentsBase64DocumentSource)
	if !ok || src.Data != pdfData || src.MediaType != "application/pdf" || doc.Title != "Tiny report" || doc.Context != "one blank page" {
		t.Errorf("%s: document = %s, want the PDF with its title and context", where, doc.RawJSON())
	}
	img, ok := m.Content[2].AsAny().(anthropic.BetaManagedAgentsImageBlock)
	if !ok {
		t.Fatalf("%s: block 2 decodes as %T, want an image block", where, m.Content[2].AsAny())
	}
	if isrc, ok := img.Source.AsAny().(anthropic.BetaManagedAgentsBase64ImageSource); !ok || isrc.Data != pngData || isrc.MediaType != "image/png" {
		t.Errorf("%s: image = %s, want the PNG", where, img.RawJSON())
	}
}

// checkUserMessageDecodes: streamed and listed, the user.message decodes
// through the SDK's unions with the blocks intact.
func checkUserMessageDecodes(t *testing.T, e *turnEnv, sessionID string, evs []streamed, pdfData, pngData string) {
	t.Helper()
	var streamedMsg anthropic.BetaManagedAgentsStreamSessionEventsUnion
	for _, ev := range evs {
		if ev.Type == "user.message" {
			if err := json.Unmarshal([]byte(ev.Raw), &streamedMsg); err != nil {
				t.Fatal(err)
			}
		}
	}
	um, ok := streamedMsg.AsAny().(anthropic.BetaManagedAgentsUserMessageEvent)
	if !ok {
		t.Fatalf("streamed user.message decodes as %T", streamedMsg.AsAny())
	}
	checkUserMessageBlocks(t, "streamed", um, pdfData, pngData)
	listed := listAll(t, e, sessionID, anthropic.BetaSessionEventListParams{})
	found := false
	for _, ev := range listed {
		if ev.Type == "user.message" {
			checkUserMessageBlocks(t, "listed", ev.AsUserMessage(), pdfData, pngData)
			found = true
		}
	}
	if !found {
		t.Fatalf("no user.message listed among %d events", len(listed))
	}
}

// customToolImageResult: a custom tool's result with an image reaches the
// model as a tool_result holding the text and the image.
func customToolImageResult(t *testing.T, e *turnEnv, api *messagesAPI, events <-chan streamed, sessionID, pngData, wantImage string) {
	t.Helper()
	ctx := context.Background()
	e.say(t, sessionID, "call chart")
	evs := until(t, events, "session.status_idle", 60*time.Second)
	typ, ids := stopReason(last(evs, "session.status_idle"))
	if typ != "requires_action" || len(ids) != 1 {
		t.Fatalf("after asking for the chart: stop %q %v, want requires_action for one custom tool use (%v)", typ, ids, typesOf(evs))
	}
	_, err := e.client.Beta.Sessions.Events.Send(ctx, sessionID, anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{{OfUserCustomToolResult: &anthropic.BetaManagedAgentsUserCustomToolResultEventParams{
			CustomToolUseID: ids[0].(string),
			Content: []anthropic.BetaManagedAgentsUserCustomToolResultEventParamsContentUnion{
				{OfText: &anthropic.BetaManagedAgentsTextBlockParam{Text: "the chart"}},
				{OfImage: &anthropic.BetaManagedAgentsImageBlockParam{Source: anthropic.BetaManagedAgentsImageBlockSourceUnionParam{
					OfBase64: &anthropic.BetaManagedAgentsBase64ImageSourceParam{Data: pngData, MediaType: "image/png"}}}},
			}}}}})
	if err != nil {
		t.Fatalf("send a custom tool result with an image: %v", err)
	}
	until(t, events, "session.status_idle", 60*time.Second)
	sent := api.lastUserMessage(t)
	if len(sent.Content) != 1 {
		t.Fatalf("the tool result message has %d blocks, want 1: %s", len(sent.Content), sent.Content)
	}
	var result struct {
		Type    string            `json:"type"`
		Content []json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(sent.Content[0], &result); err != nil || result.Type != "tool_result" || len(result.Content) != 2 {
		t.Fatalf("the model got %s, want a tool_result with a text and an image", sent.Content[0])
	}
	if got := withoutCacheControl(t, result.Content[1]); got != wantImage {
		t.Errorf("the tool result's image reached the model as\n %s\nwant\n %s", got, wantImage)
	}
	if got := canonical(t, result.Content[0]); got != `{"text":"the chart","type":"text"}` {
		t.Errorf("the tool result's text reached the model as %s", got)
	}
}

// TestContentBlockFileSourceThroughSDK: an image block whose source is a
// file uploaded through the Files API reaches the model inline.
// The transcript and the event keep the file reference.
func TestContentBlockFileSourceThroughSDK(t *testing.T) {
	t.Parallel()
	e, api := newModelEnv(t)
	ctx := context.Background()
	img := tinyPNG(t)
	pngFile, err := e.client.Beta.Files.Upload(ctx, anthropic.BetaFileUploadParams{File: anthropic.File(bytes.NewReader(img), "dot.png", "image/png")})
	if err != nil {
		t.Fatalf("upload the image: %v", err)
	}
	txtFile, err := e.client.Beta.Files.Upload(ctx, anthropic.BetaFileUploadParams{File: anthropic.File(strings.NewReader("plain notes\n"), "notes.txt", "text/plain")})
	if err != nil {
		t.Fatalf("upload the notes: %v", err)
	}
	agent, envID := fixture(t, e.client)
	s, err := e.client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)}, EnvironmentID: envID})
	if err != nil {
		t.Fatal(err)
	}
	events := e.watch(t, s.ID)
	_, err = e.client.Beta.Sessions.Events.Send(ctx, s.ID, anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{{OfUserMessage: &anthropic.BetaManagedAgentsUserMessageEventParams{
			Content: []anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{
				{OfText: &anthropic.BetaManagedAgentsTextBlockParam{Text: "Look."}},
				{OfImage: &anthropic.BetaManagedAgentsImageBlockParam{Source: anthropic.BetaManagedAgentsImageBlockSourceUnionParam{
					OfFile: &anthropic.BetaManagedAgentsFileImageSourceParam{FileID: pngFile.ID}}}},
				{OfDocument: &anthropic.BetaManagedAgentsDocumentBlockParam{Source: anthropic.BetaManagedAgentsDocumentBlockSourceUnionParam{
					OfFile: &anthropic.BetaManagedAgentsFileDocumentSourceParam{FileID: txtFile.ID}}}},
			}}}}})
	if err != nil {
		t.Fatalf("send file-source blocks: %v", err)
	}
	evs := until(t, events, "session.status_idle", 60*time.Second)
	if msg := resultText(last(evs, "agent.message")); msg != "Read them." {
		t.Fatalf("agent.message %q, want %q (events %v)", msg, "Read them.", typesOf(evs))
	}
	sent := api.lastUserMessage(t)
	if len(sent.Content) != 3 {
		t.Fatalf("the model got %d blocks, want 3: %s", len(sent.Content), sent.Content)
	}
	wantImage := `{"source":{"data":"` + base64.StdEncoding.EncodeToString(img) + `","media_type":"image/png","type":"base64"},"type":"image"}`
	if got := withoutCacheControl(t, sent.Content[1]); got != wantImage {
		t.Errorf("the file image reached the model as\n %s\nwant\n %s", got, wantImage)
	}
	wantDoc := `{"source":{"data":"plain notes\n","media_type":"text/plain","type":"text"},"type":"document"}`
	if got := withoutCacheControl(t, sent.Content[2]); got != wantDoc {
		t.Errorf("the file document reached the model as\n %s\nwant\n %s", got, wantDoc)
	}
	for _, ev := range listAll(t, e, s.ID, anthropic.BetaSessionEventListParams{}) {
		if ev.Type != "user.message" {
			continue
		}
		m := ev.AsUserMessage()
		if len(m.Content) != 3 || m.Content[1].AsImage().Source.AsFile().FileID != pngFile.ID || m.Content[2].AsDocument().Source.AsFile().FileID != txtFile.ID {
			t.Errorf("listed user.message %s, want the file references kept", m.RawJSON())
		}
	}
}

// TestContentBlocksBadInputThroughSDK: invalid blocks are refused with 400
// and a message naming the JSON path, whether sent as events or as a
// session's initial events.
func TestContentBlocksBadInputThroughSDK(t *testing.T) {
	t.Parallel()
	e := newTurnEnvWithoutWorker(t)
	agent, envID := fixture(t, e.client)
	ctx := context.Background()
	s, err := e.client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)}, EnvironmentID: envID})
	if err != nil {
		t.Fatal(err)
	}
	pngData := base64.StdEncoding.EncodeToString(tinyPNG(t))
	image := func(mediaType, data string) anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion {
		return anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{OfImage: &anthropic.BetaManagedAgentsImageBlockParam{
			Source: anthropic.BetaManagedAgentsImageBlockSourceUnionParam{OfBase64: &anthropic.BetaManagedAgentsBase64ImageSourceParam{Data: data, MediaType: mediaType}}}}
	}
	text := anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{OfText: &anthropic.BetaManagedAgentsTextBlockParam{Text: "look"}}
	big := make([]byte, 5<<20+1)
	copy(big, tinyPNG(t))
	for _, tc := range []struct {
		name    string
		content []anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion
		want    string
	}{
		{"wrong media type", []anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{text, image("image/jpeg", pngData)},
			`events[0].content[1].source.media_type: is "image/jpeg" but the data is a PNG image (image/png)`},
		{"unsupported media type", []anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{image("image/tiff", pngData)},
			`events[0].content[0].source.media_type: must be "image/jpeg", "image/png", "image/gif" or "image/webp", got "image/tiff"`},
		{"bad base64", []anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{image("image/png", "not base64!")},
			`events[0].content[0].source.data: is not valid base64`},
		{"too large", []anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{image("image/png", base64.StdEncoding.EncodeToString(big))},
			fmt.Sprintf(`events[0].content[0].source.data: decodes to %d bytes, more than the %d allowed for image/png`, len(big), 5<<20)},
		{"document not a pdf", []anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{{OfDocument: &anthropic.BetaManagedAgentsDocumentBlockParam{
			Source: anthropic.BetaManagedAgentsDocumentBlockSourceUnionParam{OfBase64: &anthropic.BetaManagedAgentsBase64DocumentSourceParam{
				Data: pngData, MediaType: "application/pdf"}}}}},
			`events[0].content[0].source.media_type: is "application/pdf" but the data is a PNG image (image/png)`},
	} {
		_, err := e.client.Beta.Sessions.Events.Send(ctx, s.ID, anthropic.BetaSessionEventSendParams{
			Events: []anthropic.BetaManagedAgentsEventParamsUnion{{OfUserMessage: &anthropic.BetaManagedAgentsUserMessageEventParams{Content: tc.content}}}})
		apiErr := apiErrorWithStatus(t, err, http.StatusBadRequest)
		if msg := errorMessage(t, []byte(apiErr.RawJSON())); !strings.Contains(msg, tc.want) {
			t.Errorf("%s: error %q, want a message containing %q", tc.name, msg, tc.want)
		}
	}

	// What the SDK cannot send: an unknown block type, in events and in a
	// session's initial events.
	r := do(t, e.srv, http.MethodPost, "/v1/sessions/"+s.ID+"/events", "application/json",
		[]byte(`{"events":[{"type":"user.message","content":[{"type":"text","text":"x"},{"type":"audio","source":{}}]}]}`), nil)
	if want := `events[0].content[1].type: unsupported content block type "audio"`; r.status != 400 || !strings.Contains(errorMessage(t, r.body), want) {
		t.Errorf("unknown block type: %d %s, want 400 with %s", r.status, r.body, want)
	}
	r = do(t, e.srv, http.MethodPost, "/v1/sessions", "application/json", []byte(fmt.Sprintf(
		`{"agent":%q,"environment_id":%q,"initial_events":[{"type":"user.message","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"%s"}}]}]}`,
		agent.ID, envID, "AAAA")), nil)
	if want := `initial_events[0].content[0].source.media_type: is "image/png" but the data is not a PNG image`; r.status != 400 || !strings.Contains(errorMessage(t, r.body), want) {
		t.Errorf("bad image in initial events: %d %s, want 400 with %s", r.status, r.body, want)
	}
}

// errorMessage is the error.message of an API error body.
func errorMessage(t *testing.T, body []byte) string {
	t.Helper()
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("error body %s: %v", body, err)
	}
	return e.Error.Message
}

// newTurnEnvWithoutWorker is a server and an SDK client; the caller starts
// the worker it needs.
func newTurnEnvWithoutWorker(t *testing.T) *turnEnv {
	t.Helper()
	srv := testserver.Start(t)
	return &turnEnv{srv: srv, client: newClient(t, srv), root: t.TempDir()}
}
