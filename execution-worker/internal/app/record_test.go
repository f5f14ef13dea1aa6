package app_test

import (
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/mangohq/mango/execution-worker/internal/cptest"
	"github.com/mangohq/mango/internal/poll"
	sessionv1 "github.com/mangohq/mango/proto/gen/mango/session/v1"
)

// TestRecordHistories records the histories the workflow replay tests
// replay (workflows/session/testdata). It runs only when
// MANGO_RECORD_HISTORIES names the output directory:
//
//	MANGO_RECORD_HISTORIES=$PWD/execution-worker/workflows/session/testdata \
//	  go test ./execution-worker/internal/app -run TestRecordHistories
//
// Re-record after a deliberate change to a workflow's commands.
func TestRecordHistories(t *testing.T) {
	dir := os.Getenv("MANGO_RECORD_HISTORIES")
	if dir == "" {
		t.Skip("MANGO_RECORD_HISTORIES is not set")
	}
	srv, env := startStack(t)
	r := &historyRecorder{srv: srv, env: env, dir: dir}
	r.stop = runWorker(t, env)
	temporalBin, err := filepath.Abs("../../../bin/temporal")
	if err != nil {
		t.Fatal(err)
	}
	r.temporalBin = temporalBin

	turn := r.recordTurn(t)
	park := r.recordParkResume(t)
	pushed, intr := r.recordInterrupts(t)
	retry, exhausted := r.recordRetries(t)
	del := r.recordDeletion(t)
	can, canRun := r.recordContinueAsNew(t)
	gone := r.recordLocalityGone(t)

	r.stop() // settle: histories of running workflows end at a stable point
	r.export(t, "turn", turn)
	r.export(t, "park_resume", park)
	r.export(t, "interrupt", intr)
	r.export(t, "interrupt_pushed", pushed)
	r.export(t, "retry", retry)
	r.export(t, "retries_exhausted", exhausted)
	r.export(t, "session_deleted", del)
	r.export(t, "deletion", "delete/"+del)
	r.export(t, "continue_as_new", can, canRun)
	r.export(t, "locality_gone", gone)
}

// historyRecorder is the state TestRecordHistories' steps share: the
// stack, the worker's environment, how to stop the running worker, and
// where the histories go.
type historyRecorder struct {
	srv         *cptest.Server
	env         map[string]string
	stop        func()
	dir         string
	temporalBin string
}

// export writes the history of the workflow (of its run, if given) as
// name.json.
func (r *historyRecorder) export(t *testing.T, name, workflowID string, runID ...string) {
	t.Helper()
	args := []string{"workflow", "show", "--address", r.env["MANGO_TEMPORAL_HOSTPORT"], "-w", workflowID, "--output", "json"}
	if len(runID) > 0 {
		args = append(args, "--run-id", runID[0])
	}
	out, err := exec.Command(r.temporalBin, args...).Output()
	if err != nil {
		t.Fatalf("export %s: %v", workflowID, err)
	}
	if err := os.WriteFile(filepath.Join(r.dir, name+".json"), out, 0o644); err != nil {
		t.Fatal(err)
	}
}

func (r *historyRecorder) waitIdle(t *testing.T, session string, n int) []listedEvent {
	t.Helper()
	return waitFor(t, r.srv, session, func(e []listedEvent) bool { return idleCount(e) >= n })
}

// recordTurn: one bash round, then a plain reply in a second turn.
func (r *historyRecorder) recordTurn(t *testing.T) string {
	t.Helper()
	turn := r.srv.NewSession(t, "local")
	sendMessage(t, r.srv, turn, `#tool bash {"command":"echo hi"}`)
	r.waitIdle(t, turn, 1)
	sendMessage(t, r.srv, turn, "#reply second")
	r.waitIdle(t, turn, 2)
	return turn
}

// recordParkResume: a custom tool.
func (r *historyRecorder) recordParkResume(t *testing.T) string {
	t.Helper()
	srv := r.srv
	park := newAgentSession(t, srv, []any{map[string]any{"type": "custom", "name": "lookup", "description": "d",
		"input_schema": map[string]any{"type": "object"}}})
	sendMessage(t, srv, park, `#tool lookup {}`)
	evs := r.waitIdle(t, park, 1)
	sendEvent(t, srv, park, map[string]any{"type": "user.custom_tool_result", "custom_tool_use_id": lastOf(evs, "agent.custom_tool_use").ID,
		"content": []any{map[string]any{"type": "text", "text": "found"}}})
	r.waitIdle(t, park, 2)
	return park
}

// interrupt: a long bash command interrupted, then a reply.
func (r *historyRecorder) interrupt(t *testing.T) string {
	t.Helper()
	srv := r.srv
	id := srv.NewSession(t, "local")
	sendMessage(t, srv, id, `#tool bash {"command":"sleep 30"}`)
	waitFor(t, srv, id, func(e []listedEvent) bool { return countType(e, "agent.tool_use") == 1 })
	sendEvent(t, srv, id, map[string]any{"type": "user.interrupt"})
	r.waitIdle(t, id, 1)
	sendMessage(t, srv, id, "#reply after")
	r.waitIdle(t, id, 2)
	return id
}

// recordInterrupts: the interrupt stopped by the pushed interrupt (the
// activity completes with outcome interrupted)...
func (r *historyRecorder) recordInterrupts(t *testing.T) (pushed, intr string) {
	t.Helper()
	pushed = r.interrupt(t)
	// (interrupt_pushed_late_signal.json, recorded before
	// pushedInterruptChange, keeps a late interrupt signal cancelling the
	// next turn under replay: keep it.)
	// ... and by Temporal's cancellation alone (the activity is cancelled).
	r.stop()
	noPush := maps.Clone(r.env)
	noPush["MANGO_INTERRUPT_PUSH"] = "false"
	r.stop = runWorker(t, noPush)
	intr = r.interrupt(t)
	r.stop()
	r.stop = runWorker(t, r.env)
	return pushed, intr
}

// recordRetries: retry and exhaustion.
func (r *historyRecorder) recordRetries(t *testing.T) (retry, exhausted string) {
	t.Helper()
	retry = r.srv.NewSession(t, "local")
	sendMessage(t, r.srv, retry, "#error server 1\n#reply ok")
	r.waitIdle(t, retry, 1)
	exhausted = r.srv.NewSession(t, "local")
	sendMessage(t, r.srv, exhausted, "#error server 3\n#reply never")
	r.waitIdle(t, exhausted, 1)
	return retry, exhausted
}

// recordDeletion: deletion of a session with a sandbox.
func (r *historyRecorder) recordDeletion(t *testing.T) string {
	t.Helper()
	srv := r.srv
	del := srv.NewSession(t, "local")
	sendMessage(t, srv, del, `#tool bash {"command":"true"}`)
	r.waitIdle(t, del, 1)
	srv.Do(t, http.MethodDelete, "/v1/sessions/"+del, nil, nil)
	cp := dialControlPlane(t, srv)
	poll.Until(t, 30*time.Second, "the deleted session to go (append answers NotFound)", func() (bool, string) {
		st := deletionState(t, cp, del)
		return st.Code() == codes.NotFound, fmt.Sprintf("append %v", st.Err())
	})
	return del
}

// recordContinueAsNew: a small history limit.
func (r *historyRecorder) recordContinueAsNew(t *testing.T) (can, canRun string) {
	t.Helper()
	can = r.srv.NewSession(t, "local")
	canRun = startSessionWorkflow(t, r.env, can, 20)
	for i := 1; i <= 3; i++ {
		sendMessage(t, r.srv, can, "#reply again")
		r.waitIdle(t, can, i)
	}
	return can, canRun
}

// recordLocalityGone: every worker of the sandbox's locality stops; the
// next turn is not picked up, CheckLocality fails it, and once the
// locality is back the turn after runs. (host_gone.json, recorded
// before CheckLocality, keeps the older branch under replay.)
func (r *historyRecorder) recordLocalityGone(t *testing.T) string {
	t.Helper()
	srv, env := r.srv, r.env
	gone := srv.NewSession(t, "local")
	startSessionWorkflowWith(t, env, gone, &sessionv1.SessionWorkflowInput{SessionId: gone, Provider: "local", HostQueueTimeoutSeconds: 2})
	sendMessage(t, srv, gone, `#tool bash {"command":"true"}`)
	r.waitIdle(t, gone, 1)
	r.stop()
	other := maps.Clone(env)
	other["MANGO_LOCAL_SANDBOX_ROOT"] = t.TempDir() // another locality: cannot reach the sandbox
	stopOther := runWorker(t, other)
	sendMessage(t, srv, gone, `#tool bash {"command":"true"}`)
	r.waitIdle(t, gone, 2)
	r.stop = runWorker(t, env)
	sendMessage(t, srv, gone, `#tool bash {"command":"true"}`)
	r.waitIdle(t, gone, 3)
	stopOther()
	return gone
}
