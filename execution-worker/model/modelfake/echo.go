package modelfake

import (
	"encoding/json"
	"strings"

	"github.com/mangohq/mango/execution-worker/model"
)

// echoBlocks is the #echo-blocks reply: the content blocks of the script
// message, and of each tool result in the last message after it, one line
// each: "blocks: text; image base64 image/png; document file file_01" and
// "tool_result <name>: text; image base64 image/png".
func echoBlocks(msgs []model.Message) string {
	idx := scriptIndex(msgs)
	if idx < 0 {
		return "blocks:"
	}
	lines := []string{"blocks: " + describeBlocks(msgs[idx].Content)}
	if last := len(msgs) - 1; last > idx && msgs[last].Role == "user" {
		names := map[string]string{}
		if last > 0 {
			for _, b := range msgs[last-1].Content {
				if b.Type == "tool_use" {
					names[b.ID] = b.Name
				}
			}
		}
		for _, b := range msgs[last].Content {
			if b.Type != "tool_result" {
				continue
			}
			name := names[b.ToolUseID]
			if name == "" {
				name = b.ToolUseID
			}
			var inner []model.Block
			if err := json.Unmarshal(b.Content, &inner); err != nil {
				// A string result is one text block.
				inner = []model.Block{{Type: "text"}}
			}
			lines = append(lines, "tool_result "+name+": "+describeBlocks(inner))
		}
	}
	return strings.Join(lines, "\n")
}

// describeBlocks names each block by its type and, for a block with a
// source (image, document), the source's type and its media type, file id
// or URL.
func describeBlocks(blocks []model.Block) string {
	parts := make([]string, 0, len(blocks))
	for _, b := range blocks {
		parts = append(parts, describeBlock(b))
	}
	return strings.Join(parts, "; ")
}

func describeBlock(b model.Block) string {
	if len(b.Raw) == 0 {
		return b.Type
	}
	var in struct {
		Source *struct {
			Type      string `json:"type"`
			MediaType string `json:"media_type"`
			FileID    string `json:"file_id"`
			URL       string `json:"url"`
		} `json:"source"`
	}
	if err := json.Unmarshal(b.Raw, &in); err != nil || in.Source == nil {
		return b.Type
	}
	s := b.Type + " " + in.Source.Type
	for _, v := range []string{in.Source.MediaType, in.Source.FileID, in.Source.URL} {
		if v != "" {
			s += " " + v
		}
	}
	return s
}
