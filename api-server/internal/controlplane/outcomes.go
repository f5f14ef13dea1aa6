package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/mangohq/mango/api-server/internal/eventspec"
	"github.com/mangohq/mango/db"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// What the grader of an outcome reads, bounded: its context holds the
// rubric and the agent's work, not the session's whole output tree.
const (
	// MaxGradedOutputs bounds the outputs listed to the grader.
	MaxGradedOutputs = 50
	// maxOutputText bounds the text of one output given to the grader,
	// maxOutputsText the text of all of them.
	maxOutputText  = 32 << 10
	maxOutputsText = 128 << 10
)

// outcomeContext is the GetRun outcome of the session's active outcome o;
// when the run's next trigger is o's evaluation it carries the rubric's
// text and the session's outputs, which the grader reads.
func (s *Server) outcomeContext(ctx context.Context, sessionID string, o *db.Outcome, pending []db.Event) (*pb.OutcomeContext, error) {
	if o == nil {
		return nil, nil
	}
	oc := &pb.OutcomeContext{OutcomeId: o.ID, Description: o.Description, MaxIterations: int32(o.MaxIterations),
		Iteration: int32(o.Iteration)}
	if o.EvaluationStartID != nil {
		oc.EvaluationStartId = *o.EvaluationStartID
	}
	if len(pending) == 0 || pending[0].ID != oc.EvaluationStartId || oc.EvaluationStartId == "" {
		return oc, nil
	}
	var err error
	if oc.Rubric, oc.RubricError, err = s.rubricText(ctx, o.Rubric); err != nil {
		return nil, err
	}
	if oc.Outputs, err = s.gradedOutputs(ctx, sessionID); err != nil {
		return nil, err
	}
	return oc, nil
}

// rubricText reads a rubric: a text rubric's content, a file rubric's
// text (at most eventspec.MaxRubricBytes). unreadable says why a file rubric could
// not be read; err is a failure to try again.
func (s *Server) rubricText(ctx context.Context, raw json.RawMessage) (text, unreadable string, err error) {
	var r struct {
		Type    string `json:"type"`
		Content string `json:"content"`
		FileID  string `json:"file_id"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return "", "", fmt.Errorf("decode rubric: %w", err)
	}
	if r.Type != "file" {
		return r.Content, "", nil
	}
	file, err := s.store.FileGet(ctx, r.FileID)
	if errors.Is(err, db.ErrNotFound) || (err == nil && file.Expired(s.now())) {
		return "", fmt.Sprintf("the rubric file %s was deleted", r.FileID), nil
	}
	if err != nil {
		return "", "", err
	}
	b, truncated, err := s.readText(ctx, file, eventspec.MaxRubricBytes)
	if err != nil {
		return "", "", err
	}
	if !utf8.Valid(b) {
		return "", fmt.Sprintf("the rubric file %s is not UTF-8 text", r.FileID), nil
	}
	text = string(b)
	if truncated {
		text += fmt.Sprintf("\n[rubric truncated at %d bytes]", eventspec.MaxRubricBytes)
	}
	return text, "", nil
}

// gradedOutputs lists the session's outputs with their text, within the
// limits.
func (s *Server) gradedOutputs(ctx context.Context, sessionID string) ([]*pb.GradedOutput, error) {
	outs, err := s.store.OutputList(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	budget := maxOutputsText
	var graded []*pb.GradedOutput
	for i := range outs {
		if len(graded) == MaxGradedOutputs {
			break
		}
		f := &outs[i]
		g := &pb.GradedOutput{Path: f.OutputPath, SizeBytes: f.SizeBytes, MediaType: f.MimeType, Truncated: true}
		if isText(f.MimeType) && budget > 0 && s.files != nil {
			b, cut, err := s.readText(ctx, f, min(maxOutputText, budget))
			if err != nil {
				return nil, err
			}
			if utf8.Valid(b) {
				g.Content, g.Truncated = string(b), cut
				budget -= len(b)
			}
		}
		graded = append(graded, g)
	}
	return graded, nil
}

// readText reads at most limit bytes of a file; truncated reports more.
func (s *Server) readText(ctx context.Context, f *db.File, limit int) (b []byte, truncated bool, err error) {
	if s.files == nil {
		return nil, false, errNoFileStore
	}
	rc, err := s.files.Open(ctx, f.StorageKey, 0)
	if err != nil {
		return nil, false, fmt.Errorf("open file %s: %w", f.ID, err)
	}
	defer func() { _ = rc.Close() }()
	b, err = io.ReadAll(io.LimitReader(rc, int64(limit)))
	if err != nil {
		return nil, false, fmt.Errorf("read file %s: %w", f.ID, err)
	}
	return b, f.SizeBytes > int64(len(b)), nil
}

// isText reports whether a media type is text the grader can read.
func isText(mediaType string) bool {
	mt, _, _ := strings.Cut(mediaType, ";")
	mt = strings.TrimSpace(mt)
	return strings.HasPrefix(mt, "text/") || mt == "application/json" || mt == "application/xml" ||
		mt == "application/x-yaml" || mt == "application/yaml" || mt == "application/javascript" || mt == "application/x-sh"
}
