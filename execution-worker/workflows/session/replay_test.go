package session_test

import (
	"path/filepath"
	"testing"

	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/mangohq/mango/execution-worker/workflows/session"
	"github.com/mangohq/mango/proto/sessionwf"
)

// TestReplayRecordedHistories replays every history recorded from real
// runs (testdata/*.json, see TestRecordHistories in internal/app) against
// the current workflow code: a change that would break running workflows
// fails here.
func TestReplayRecordedHistories(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/*.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 7 {
		t.Fatalf("found %d recorded histories, want at least 7 (turn, park/resume, interrupt, retry, exhaustion, deletion)", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflowWithOptions(session.SessionWorkflow, workflow.RegisterOptions{Name: sessionwf.WorkflowType})
			r.RegisterWorkflowWithOptions(session.DeletionWorkflow, workflow.RegisterOptions{Name: sessionwf.DeletionWorkflowType})
			if err := r.ReplayWorkflowHistoryFromJSONFile(nil, f); err != nil {
				t.Fatalf("replay %s: %v", f, err)
			}
		})
	}
}
