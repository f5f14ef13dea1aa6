package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/api-server/internal/eventspec"
	"github.com/mangohq/mango/db"
)

// checkFileSources refuses events whose image or document blocks name, as
// their source, a file that does not exist (or expired): found at send
// time, the mistake is a 400 naming the block, not a failed turn later.
// where is the JSON path of the events ("events", "initial_events").
func (a *API) checkFileSources(ctx context.Context, events []eventspec.Event, where string) error {
	now := a.now()
	for i, ev := range events {
		if ev.RubricFileID != "" {
			if err := a.checkRubricFile(ctx, ev.RubricFileID, fmt.Sprintf("%s[%d].rubric.file_id", where, i)); err != nil {
				return err
			}
		}
		var body struct {
			Content []struct {
				Source *struct {
					Type   string `json:"type"`
					FileID string `json:"file_id"`
				} `json:"source"`
			} `json:"content"`
		}
		if json.Unmarshal(ev.Body, &body) != nil {
			continue
		}
		for j, c := range body.Content {
			if c.Source == nil || c.Source.Type != "file" {
				continue
			}
			f, err := a.deps.Store.FileGet(ctx, c.Source.FileID)
			if errors.Is(err, db.ErrNotFound) || (err == nil && f.Expired(now)) {
				return apierror.Invalid("%s: file %q not found", fmt.Sprintf("%s[%d].content[%d].source.file_id", where, i, j), c.Source.FileID)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// checkRubricFile refuses an outcome's rubric file that does not exist
// (or expired) or is not text the grader can read.
func (a *API) checkRubricFile(ctx context.Context, fileID, path string) error {
	f, err := a.deps.Store.FileGet(ctx, fileID)
	if errors.Is(err, db.ErrNotFound) || (err == nil && f.Expired(a.now())) {
		return apierror.Invalid("%s: file %q not found", path, fileID)
	}
	if err != nil {
		return err
	}
	if f.SizeBytes > eventspec.MaxRubricBytes {
		return apierror.Invalid("%s: file %q is %d bytes; a rubric file may have at most %d", path, fileID, f.SizeBytes, eventspec.MaxRubricBytes)
	}
	return nil
}
