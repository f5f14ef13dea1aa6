package session

import (
	"encoding/json"
	"fmt"

	"github.com/mangohq/mango/execution-worker/model"
)

// contentBlocks projects the content of a user event (validated by the
// api-server) into model blocks: a text block as text, any other block
// (image, document) as its JSON, kept in Raw so that it reaches the model
// and the transcript exactly as the client sent it.
func contentBlocks(content []json.RawMessage) ([]model.Block, error) {
	out := make([]model.Block, 0, len(content))
	for i, raw := range content {
		var b model.Block
		if err := json.Unmarshal(raw, &b); err != nil {
			return nil, fmt.Errorf("content block %d: %w", i, err)
		}
		if b.Type == "" {
			return nil, fmt.Errorf("content block %d: no type", i)
		}
		if b.Type == "text" {
			b = model.Block{Type: "text", Text: b.Text}
		} else if len(b.Raw) == 0 {
			return nil, fmt.Errorf("content block %d: type %q cannot be sent to the model", i, b.Type)
		}
		out = append(out, b)
	}
	return out, nil
}
