package eventspec

import (
	"encoding/json"
	"fmt"

	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/api-server/internal/jsonx"
)

// Limits of a user.define_outcome.
const (
	// DefaultMaxIterations is the evaluations an outcome allows when its
	// event names none; MaxMaxIterations is the most it may name.
	DefaultMaxIterations = 3
	MaxMaxIterations     = 20
	// MaxOutcomeTextLen bounds the description and a text rubric.
	MaxOutcomeTextLen = 256 << 10
	// MaxRubricBytes bounds a rubric file: the grader reads all of it.
	MaxRubricBytes = 256 << 10
)

// defineOutcome validates a user.define_outcome as the SDK types it: a
// description, a rubric as text ({"type":"text","content"}) or as a file
// ({"type":"file","file_id"}, whose existence the handler checks) and
// max_iterations (1 to 20, default 3). The stored body gains the
// outcome's server-minted outcome_id and the max_iterations in force.
func defineOutcome(raw json.RawMessage, path string) (*Event, error) {
	var in struct {
		Type          string          `json:"type"`
		Description   *string         `json:"description"`
		Rubric        json.RawMessage `json:"rubric"`
		MaxIterations *int64          `json:"max_iterations"`
	}
	if err := jsonx.Decode(raw, &in, path); err != nil {
		return nil, err
	}
	if in.Description == nil || *in.Description == "" {
		return nil, jsonx.Errorf(path+".description", "is required: what the agent should produce")
	}
	if len(*in.Description) > MaxOutcomeTextLen {
		return nil, jsonx.Errorf(path+".description", "must be at most %d bytes", MaxOutcomeTextLen)
	}
	maxIter := int64(DefaultMaxIterations)
	if in.MaxIterations != nil {
		if maxIter = *in.MaxIterations; maxIter < 1 || maxIter > MaxMaxIterations {
			return nil, jsonx.Errorf(path+".max_iterations", "must be between 1 and %d, got %d", MaxMaxIterations, maxIter)
		}
	}
	rubric, fileID, err := outcomeRubric(in.Rubric, path+".rubric")
	if err != nil {
		return nil, err
	}
	return event(Event{Type: UserDefineOutcome, RubricFileID: fileID}, map[string]any{"outcome_id": ids.New(ids.Outcome),
		"description": *in.Description, "rubric": rubric, "max_iterations": maxIter})
}

// outcomeRubric validates a rubric: text with its content, or a file.
func outcomeRubric(raw json.RawMessage, path string) (rubric map[string]string, fileID string, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, "", jsonx.Errorf(path, "is required: {\"type\":\"text\",\"content\":...} or {\"type\":\"file\",\"file_id\":...}")
	}
	typ, err := jsonx.ObjectType(raw, path)
	if err != nil {
		return nil, "", err
	}
	switch typ {
	case "text":
		var in struct {
			Type    string  `json:"type"`
			Content *string `json:"content"`
		}
		if err := jsonx.Decode(raw, &in, path); err != nil {
			return nil, "", err
		}
		if in.Content == nil || *in.Content == "" {
			return nil, "", jsonx.Errorf(path+".content", "is required: the rubric's text (markdown)")
		}
		if len(*in.Content) > MaxOutcomeTextLen {
			return nil, "", jsonx.Errorf(path+".content", "must be at most %d bytes", MaxOutcomeTextLen)
		}
		return map[string]string{"type": "text", "content": *in.Content}, "", nil
	case "file":
		var in struct {
			Type   string `json:"type"`
			FileID string `json:"file_id"`
		}
		if err := jsonx.Decode(raw, &in, path); err != nil {
			return nil, "", err
		}
		if !ids.Valid(ids.File, in.FileID) {
			return nil, "", jsonx.Errorf(path+".file_id", "must be a file id (file_...), got %q", in.FileID)
		}
		return map[string]string{"type": "file", "file_id": in.FileID}, in.FileID, nil
	case "":
		return nil, "", jsonx.Errorf(path+".type", "is required (text or file)")
	}
	return nil, "", jsonx.Errorf(path+".type", "must be \"text\" or \"file\", got %q", typ)
}

// checkDefineOutcome allows one user.define_outcome per request: a
// session has one active outcome at a time.
func checkDefineOutcome(events []Event, path string) error {
	seen := false
	for i, ev := range events {
		if ev.Type != UserDefineOutcome {
			continue
		}
		if seen {
			return jsonx.Errorf(fmt.Sprintf("%s[%d]", path, i), "at most one %s per request: a session has one active outcome at a time", UserDefineOutcome)
		}
		seen = true
	}
	return nil
}
