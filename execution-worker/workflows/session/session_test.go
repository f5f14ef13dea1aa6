package session_test

import (
	"slices"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"

	"github.com/mangohq/mango/execution-worker/workflows/session"
)

func TestTaskQueueNames(t *testing.T) {
	t.Parallel()
	tests := []struct{ got, want string }{
		{session.TaskQueue("local"), "mango.local"},
		{session.TaskQueue("docker"), "mango.docker"},
		{session.LocalityTaskQueue("local", "0f3a9c-1b2c3d4e"), "mango.local.0f3a9c-1b2c3d4e"},
		{session.LocalityTaskQueue("docker", "n36x-gkmm"), "mango.docker.n36x-gkmm"},
		{session.WorkflowType, "SessionWorkflow"},
		{session.PingActivity, "Ping"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

func TestPing(t *testing.T) {
	t.Parallel()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	acts := &session.Activities{
		WorkerID:   "w-1",
		Provider:   "local",
		Version:    "v0.0.1",
		TaskQueues: []string{"mango.local", "mango.local.w-1"},
	}
	acts.Register(env)

	before := time.Now().UTC()
	val, err := env.ExecuteActivity(session.PingActivity, session.PingRequest{})
	if err != nil {
		t.Fatalf("ExecuteActivity(Ping) = %v", err)
	}
	var got session.PingResponse
	if err := val.Get(&got); err != nil {
		t.Fatalf("decode Ping result: %v", err)
	}
	if got.WorkerID != "w-1" || got.Provider != "local" || got.Version != "v0.0.1" ||
		!slices.Equal(got.TaskQueues, acts.TaskQueues) {
		t.Errorf("Ping() = %+v, want the worker's id, provider, version and queues from %+v", got, acts)
	}
	if got.Time.Before(before.Add(-time.Second)) {
		t.Errorf("Ping().Time = %v, want a time after %v", got.Time, before)
	}
}
