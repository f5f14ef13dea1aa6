package app_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mangohq/mango/execution-worker/internal/app"
	"github.com/mangohq/mango/execution-worker/internal/controlplane"
	"github.com/mangohq/mango/execution-worker/internal/cptest"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxlocal"
	"github.com/mangohq/mango/internal/poll"
	"github.com/mangohq/mango/internal/temporaltest"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
	"github.com/mangohq/mango/proto/sessionwf"
)

// runWorker runs an execution worker in-process until stop is called.
func runWorker(t *testing.T, env map[string]string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	logs := &cptest.LockedBuffer{}
	go func() { done <- app.Run(ctx, envFunc(env), logs) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("worker: %v\n%s", err, logs.String())
			}
		case <-time.After(30 * time.Second):
			t.Errorf("worker did not stop within 30s")
		}
	}
	t.Cleanup(stop)
	return stop
}

// TestDeletionWithWorkerDown deletes a session whose local sandbox lives on
// a worker that is down: the session stays fenced (404 to clients, binding
// and workspace kept) until the worker returns, which then tears the
// sandbox down, removes the binding and finalizes the deletion.
func TestDeletionWithWorkerDown(t *testing.T) {
	t.Parallel()
	hostPort := temporaltest.HostPort(t)
	srv := cptest.Start(t)
	if srv.TemporalHostPort != hostPort {
		t.Fatalf("control plane uses Temporal %s, want %s", srv.TemporalHostPort, hostPort)
	}
	root := t.TempDir()
	env := map[string]string{
		"MANGO_TEMPORAL_HOSTPORT":  hostPort,
		"MANGO_CONTROLPLANE_ADDR":  srv.GRPCAddr,
		"MANGO_WORKER_TOKEN":       srv.WorkerToken,
		"MANGO_TASK_QUEUE_PREFIX":  srv.TaskQueuePrefix,
		"MANGO_SANDBOX":            "local",
		"MANGO_LOCAL_SANDBOX_ROOT": root,
		"MANGO_SHUTDOWN_GRACE":     "10s",
		"MANGO_RECONCILE_INTERVAL": "1h",
	}
	ctx := context.Background()
	session := srv.NewSession(t, "local")

	// Provision the session's sandbox the way this worker's first tool call
	// does: through its SessionManager, recording its locality queue.
	cp, err := controlplane.Dial(srv.GRPCAddr, srv.WorkerToken)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cp.Close() }()
	bindings := controlplane.NewBindings(cp)
	provider, err := sandboxlocal.New(sandboxlocal.Config{Root: root, Installation: serverInstallation(t, srv)})
	if err != nil {
		t.Fatal(err)
	}
	locality, err := provider.Locality(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hostQueue := sessionwf.Queues{Prefix: srv.TaskQueuePrefix}.Locality("local", locality)
	sb, err := sandbox.NewSessionManager(provider, bindings, hostQueue).Acquire(ctx, session, sandbox.Spec{})
	if err != nil {
		t.Fatalf("provision: %v", err)
	}
	if err := sb.WriteFile(ctx, "work.txt", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	workspace := sb.Ref().ID

	// The worker is down while the client deletes the session.
	srv.Do(t, http.MethodDelete, "/v1/sessions/"+session, nil, nil)
	resp, err := http.Get(srv.BaseURL + "/v1/sessions/" + session)
	if err == nil {
		_ = resp.Body.Close()
	}
	// Nothing but a worker can finish a deletion, and no event tells that
	// the api-server is done with it: watch for a while that nothing moves.
	poll.Never(t, 2*time.Second, "deletion progress while the worker is down", func() (bool, string) {
		if _, err := os.Stat(workspace); err != nil {
			return true, fmt.Sprintf("workspace gone without a worker: %v", err)
		}
		if _, err := bindings.GetBinding(ctx, session); err != nil {
			return true, fmt.Sprintf("binding gone without a worker: %v", err)
		}
		if st := deletionState(t, cp, session); st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), "session is being deleted") {
			return true, fmt.Sprintf("append while the worker is down: %v, want FailedPrecondition \"session is being deleted\" (fenced)", st.Err())
		}
		return false, ""
	})

	// The worker returns and finishes the deletion.
	stop := runWorker(t, env)
	defer stop()
	poll.Until(t, 60*time.Second, "the deletion to finish after the worker returned (no workspace, no binding, no row)", func() (bool, string) {
		_, statErr := os.Stat(workspace)
		_, bindErr := bindings.GetBinding(ctx, session)
		st := deletionState(t, cp, session)
		return errors.Is(statErr, os.ErrNotExist) && errors.Is(bindErr, sandbox.ErrNoBinding) && st.Code() == codes.NotFound,
			fmt.Sprintf("workspace %v, binding %v, append %v (want NotFound: session gone)", statErr, bindErr, st.Err())
	})
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		var names []string
		for _, e := range entries {
			names = append(names, filepath.Join(root, e.Name()))
		}
		t.Errorf("left behind in the sandbox root: %v", names)
	}
}

// deletionState tells where a session's deletion stands as a worker meets
// it through the ControlPlane: an append to a session being deleted is
// refused (FailedPrecondition, "session is being deleted": its row is
// kept, fenced), an append to a deleted one finds nothing (NotFound: its
// row is gone). In either state the probe appends nothing.
func deletionState(t *testing.T, cp pb.ControlPlaneClient, id string) *status.Status {
	t.Helper()
	_, err := cp.AppendEvents(context.Background(), &pb.AppendEventsRequest{SessionId: id,
		Events: []*pb.NewEvent{{Key: "deletion-probe", Type: "agent.message", Body: `{"content":[{"type":"text","text":"probe"}]}`}}})
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("append to session %s: want a gRPC status, got %v", id, err)
	}
	return st
}

// dialControlPlane connects to srv's ControlPlane as a worker does, until
// the test ends.
func dialControlPlane(t *testing.T, srv *cptest.Server) *controlplane.Client {
	t.Helper()
	cp, err := controlplane.Dial(srv.GRPCAddr, srv.WorkerToken)
	if err != nil {
		t.Fatalf("dial the control plane: %v", err)
	}
	t.Cleanup(func() { _ = cp.Close() })
	return cp
}
