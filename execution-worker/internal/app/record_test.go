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
	stop := runWorker(t, env)
	temporalBin, err := filepath.Abs("../../../bin/temporal")
	if err != nil {
		t.Fatal(err)
	}
	export := func(name, workflowID string, runID ...string) {
		t.Helper()
		args := []string{"workflow", "show", "--address", env["MANGO_TEMPORAL_HOSTPORT"], "-w", workflowID, "--output", "json"}
		if len(runID) > 0 {
			args = append(args, "--run-id", runID[0])
		}
		out, err := exec.Command(temporalBin, args...).Output()
		if err != nil {
			t.Fatalf("export %s: %v", workflowID, err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+".json"), out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	waitIdle := func(session string, n int) []listedEvent {
		return waitFor(t, srv, session, func(e []listedEvent) bool { return idleCount(e) >= n })
	}

	// turn: one bash round, then a plain reply in a second turn.
	turn := srv.NewSession(t, "local")
	sendMessage(t, srv, turn, `#tool bash {"command":"echo hi"}`)
	waitIdle(turn, 1)
	sendMessage(t, srv, turn, "#reply second")
	waitIdle(turn, 2)

	// park/resume: a custom tool.
	park := newAgentSession(t, srv, []any{map[string]any{"type": "custom", "name": "lookup", "description": "d",
		"input_schema": map[string]any{"type": "object"}}})
	sendMessage(t, srv, park, `#tool lookup {}`)
	evs := waitIdle(park, 1)
	sendEvent(t, srv, park, map[string]any{"type": "user.custom_tool_result", "custom_tool_use_id": lastOf(evs, "agent.custom_tool_use").ID,
		"content": []any{map[string]any{"type": "text", "text": "found"}}})
	waitIdle(park, 2)

	// interrupt: a long bash command interrupted, stopped by the pushed
	// interrupt (the activity completes with outcome interrupted)...
	interrupt := func() string {
		id := srv.NewSession(t, "local")
		sendMessage(t, srv, id, `#tool bash {"command":"sleep 30"}`)
		waitFor(t, srv, id, func(e []listedEvent) bool { return countType(e, "agent.tool_use") == 1 })
		sendEvent(t, srv, id, map[string]any{"type": "user.interrupt"})
		waitIdle(id, 1)
		sendMessage(t, srv, id, "#reply after")
		waitIdle(id, 2)
		return id
	}
	pushed := interrupt()
	// (interrupt_pushed_late_signal.json, recorded before
	// pushedInterruptChange, keeps a late interrupt signal cancelling the
	// next turn under replay: keep it.)
	// ... and by Temporal's cancellation alone (the activity is cancelled).
	stop()
	noPush := maps.Clone(env)
	noPush["MANGO_INTERRUPT_PUSH"] = "false"
	stop = runWorker(t, noPush)
	intr := interrupt()
	stop()
	stop = runWorker(t, env)

	// retry and exhaustion.
	retry := srv.NewSession(t, "local")
	sendMessage(t, srv, retry, "#error server 1\n#reply ok")
	waitIdle(retry, 1)
	exhausted := srv.NewSession(t, "local")
	sendMessage(t, srv, exhausted, "#error server 3\n#reply never")
	waitIdle(exhausted, 1)

	// deletion of a session with a sandbox.
	del := srv.NewSession(t, "local")
	sendMessage(t, srv, del, `#tool bash {"command":"true"}`)
	waitIdle(del, 1)
	srv.Do(t, http.MethodDelete, "/v1/sessions/"+del, nil, nil)
	cp := dialControlPlane(t, srv)
	poll.Until(t, 30*time.Second, "the deleted session to go (append answers NotFound)", func() (bool, string) {
		st := deletionState(t, cp, del)
		return st.Code() == codes.NotFound, fmt.Sprintf("append %v", st.Err())
	})

	// continue-as-new: a small history limit.
	can := srv.NewSession(t, "local")
	canRun := startSessionWorkflow(t, env, can, 20)
	for i := 1; i <= 3; i++ {
		sendMessage(t, srv, can, "#reply again")
		waitIdle(can, i)
	}

	// locality gone: every worker of the sandbox's locality stops; the
	// next turn is not picked up, CheckLocality fails it, and once the
	// locality is back the turn after runs. (host_gone.json, recorded
	// before CheckLocality, keeps the older branch under replay.)
	gone := srv.NewSession(t, "local")
	startSessionWorkflowWith(t, env, gone, &sessionv1.SessionWorkflowInput{SessionId: gone, Provider: "local", HostQueueTimeoutSeconds: 2})
	sendMessage(t, srv, gone, `#tool bash {"command":"true"}`)
	waitIdle(gone, 1)
	stop()
	other := maps.Clone(env)
	other["MANGO_LOCAL_SANDBOX_ROOT"] = t.TempDir() // another locality: cannot reach the sandbox
	stopOther := runWorker(t, other)
	sendMessage(t, srv, gone, `#tool bash {"command":"true"}`)
	waitIdle(gone, 2)
	stop = runWorker(t, env)
	sendMessage(t, srv, gone, `#tool bash {"command":"true"}`)
	waitIdle(gone, 3)
	stopOther()

	stop() // settle: histories of running workflows end at a stable point
	export("turn", turn)
	export("park_resume", park)
	export("interrupt", intr)
	export("interrupt_pushed", pushed)
	export("retry", retry)
	export("retries_exhausted", exhausted)
	export("session_deleted", del)
	export("deletion", "delete/"+del)
	export("continue_as_new", can, canRun)
	export("locality_gone", gone)
	_ = cptest.Server{}
}
