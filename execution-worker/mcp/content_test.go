package mcp

import (
	"encoding/json"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestCallResultContent: every SDK content kind keeps its fields.
func TestCallResultContent(t *testing.T) {
	t.Parallel()
	res, err := callResult(&sdk.CallToolResult{IsError: true, Content: []sdk.Content{
		&sdk.TextContent{Text: "hi"},
		&sdk.ImageContent{MIMEType: "image/png", Data: []byte("png")},
		&sdk.AudioContent{MIMEType: "audio/wav", Data: []byte("wav")},
		&sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "file:///a.txt", MIMEType: "text/plain", Text: "body"}},
		&sdk.ResourceLink{URI: "file:///b.txt", Name: "b"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := []Content{
		{Type: "text", Text: "hi"},
		{Type: "image", MimeType: "image/png", Data: "cG5n"},
		{Type: "audio", MimeType: "audio/wav", Data: "d2F2"},
		{Type: "resource", Resource: json.RawMessage(`{"uri":"file:///a.txt","mimeType":"text/plain","text":"body"}`)},
	}
	if !res.IsError || len(res.Content) != 5 {
		t.Fatalf("result = %+v, want 5 blocks and IsError", res)
	}
	for i, w := range want {
		g := res.Content[i]
		if g.Type != w.Type || g.Text != w.Text || g.MimeType != w.MimeType || g.Data != w.Data || string(g.Resource) != string(w.Resource) {
			t.Errorf("block %d = %+v (resource %s), want %+v (resource %s)", i, g, g.Resource, w, w.Resource)
		}
	}
	var link struct{ Type, URI, Name string }
	if err := json.Unmarshal(res.Content[4].Resource, &link); err != nil || res.Content[4].Type != "resource_link" || link.URI != "file:///b.txt" || link.Name != "b" {
		t.Errorf("resource link = %+v (%s), want type resource_link with its uri and name", res.Content[4], res.Content[4].Resource)
	}
}

// TestToolJSON: the pinned JSON of a tool keeps its shape.
func TestToolJSON(t *testing.T) {
	t.Parallel()
	tl, err := tool(&sdk.Tool{Name: "echo", Description: "Echo.", InputSchema: map[string]any{"type": "object"}})
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(tl)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"name":"echo","description":"Echo.","inputSchema":{"type":"object"}}`; string(data) != want {
		t.Errorf("tool JSON = %s, want %s", data, want)
	}
}
