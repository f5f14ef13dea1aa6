package app_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/mangohq/mango/execution-worker/internal/app"
	"github.com/mangohq/mango/execution-worker/internal/cptest"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxlocal"
	"github.com/mangohq/mango/execution-worker/workflows/session"
	"github.com/mangohq/mango/internal/poll"
	"github.com/mangohq/mango/internal/temporaltest"
)

func envFunc(env map[string]string) func(string) string {
	return func(k string) string {
		if v, ok := env[k]; ok {
			return v
		}
		if k == "MANGO_WORKER_TOKEN" {
			return "test-token"
		}
		return ""
	}
}

// TestRunRejectsConfigBeforeDialing checks that configuration errors end Run
// before it contacts Temporal: the address points at a port nothing listens
// on, and the error must be the configuration error, not a dial error.
func TestRunRejectsConfigBeforeDialing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  map[string]string
		want string
		is   error
	}{
		{
			name: "unknown provider",
			env:  map[string]string{"MANGO_SANDBOX": "nonsense"},
			want: `MANGO_SANDBOX: unknown sandbox provider "nonsense" (known: `,
			is:   sandbox.ErrUnknownProvider,
		},
		{
			name: "real model with local sandbox",
			env:  map[string]string{"MANGO_MODEL": "anthropic", "MANGO_MODEL_API_KEY": "k", "MANGO_SANDBOX": "local"},
			want: "MANGO_ALLOW_UNSAFE_LOCAL_SANDBOX=1",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.env["MANGO_TEMPORAL_HOSTPORT"] = "127.0.0.1:1"
			var logs cptest.LockedBuffer
			err := app.Run(context.Background(), envFunc(tt.env), &logs)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Run() = %v, want an error containing %q", err, tt.want)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("errors.Is(%v, %v) = false, want true", err, tt.is)
			}
			if strings.Contains(err.Error(), "connect to Temporal") || logs.String() != "" {
				t.Errorf("Run() got past configuration: error %q, logs %q", err, logs.String())
			}
		})
	}
}

func TestRunTemporalUnreachable(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"MANGO_TEMPORAL_HOSTPORT":        "127.0.0.1:1",
		"MANGO_TEMPORAL_CONNECT_TIMEOUT": "1s",
	}
	start := time.Now()
	err := app.Run(context.Background(), envFunc(env), &cptest.LockedBuffer{})
	if err == nil || !strings.Contains(err.Error(), "MANGO_TEMPORAL_HOSTPORT=127.0.0.1:1") {
		t.Fatalf("Run() = %v, want an error naming MANGO_TEMPORAL_HOSTPORT=127.0.0.1:1", err)
	}
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Errorf("Run() took %s to give up, want about the 1s connect timeout", elapsed)
	}
}

// TestRunControlPlaneUnreachable: a worker whose api-server does not
// answer keeps asking for the installation id within
// MANGO_CONTROLPLANE_RETRY, then fails naming what it needed and where it
// looked, without building its sandbox provider (the local root stays
// uncreated).
func TestRunControlPlaneUnreachable(t *testing.T) {
	t.Parallel()
	root := filepath.Join(t.TempDir(), "never-created")
	env := map[string]string{
		"MANGO_TEMPORAL_HOSTPORT":  temporaltest.HostPort(t),
		"MANGO_CONTROLPLANE_ADDR":  "127.0.0.1:1",
		"MANGO_CONTROLPLANE_RETRY": "1s",
		"MANGO_LOCAL_SANDBOX_ROOT": root,
	}
	start := time.Now()
	err := app.Run(context.Background(), envFunc(env), &cptest.LockedBuffer{})
	for _, want := range []string{"installation id", "MANGO_CONTROLPLANE_ADDR=127.0.0.1:1", "Unavailable"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Run() = %v, want an error containing %q", err, want)
		}
	}
	// Retries back off from 50ms and stop before the next wait would pass
	// the budget: at about 750ms.
	if elapsed := time.Since(start); elapsed < 500*time.Millisecond || elapsed > 15*time.Second {
		t.Errorf("Run() gave up after %s, want it to retry for most of the 1s budget", elapsed)
	}
	if _, err := os.Stat(root); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("sandbox root after the failed start: %v, want it never created", err)
	}
}

// pingWorkflow is a test-only workflow that runs the Ping activity on the
// task queue it is given. The production worker registers no workflow yet.
func pingWorkflow(ctx workflow.Context, taskQueue string) (session.PingResponse, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:              taskQueue,
		ScheduleToCloseTimeout: 20 * time.Second,
	})
	var res session.PingResponse
	err := workflow.ExecuteActivity(ctx, session.PingActivity, session.PingRequest{}).Get(ctx, &res)
	return res, err
}

// TestRunPollsTemporal starts the worker in-process against a real Temporal
// server and a real ControlPlane with the fake model and the local sandbox,
// as an operator would: no worker id and no locality configured. It checks through the Temporal
// API that the worker polls mango.local and its locality's queue (named
// for the host and the sandbox root, not for the process) under its
// default identity, runs Ping on the locality queue, then cancels it and
// checks that it shuts down cleanly.
func TestRunPollsTemporal(t *testing.T) {
	hostPort := temporaltest.HostPort(t)
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	workerID := fmt.Sprintf("%s-%d", host, os.Getpid()) // the default identity
	root := t.TempDir()
	srv := cptest.Start(t)
	env := map[string]string{
		"MANGO_CONTROLPLANE_ADDR":  srv.GRPCAddr,
		"MANGO_WORKER_TOKEN":       srv.WorkerToken,
		"MANGO_TEMPORAL_HOSTPORT":  hostPort,
		"MANGO_SANDBOX":            "local",
		"MANGO_MODEL":              "fake",
		"MANGO_LOCAL_SANDBOX_ROOT": root,
		"MANGO_SHUTDOWN_GRACE":     "10s",
		"MANGO_LOG_LEVEL":          "debug",
	}
	local, err := sandboxlocal.New(sandboxlocal.Config{Root: root, Installation: serverInstallation(t, srv)})
	if err != nil {
		t.Fatal(err)
	}
	locality, err := local.Locality(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs cptest.LockedBuffer
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, envFunc(env), &logs) }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("worker logs:\n%s", logs.String())
		}
	})

	c, err := client.Dial(client.Options{HostPort: hostPort})
	if err != nil {
		t.Fatalf("dial Temporal at %s: %v", hostPort, err)
	}
	defer c.Close()

	sharedQueue := session.TaskQueue("local")
	hostQueue := session.LocalityTaskQueue("local", locality)
	if strings.Contains(hostQueue, fmt.Sprint(os.Getpid())) {
		t.Errorf("locality queue %s names the process", hostQueue)
	}
	for _, q := range []string{sharedQueue, hostQueue} {
		waitForPoller(t, c, q, workerID, done)
	}

	// Run Ping through Temporal: a test workflow on its own queue schedules
	// the activity on the worker's host queue.
	testQueue := fmt.Sprintf("apptest-%d", time.Now().UnixNano())
	tw := worker.New(c, testQueue, worker.Options{})
	tw.RegisterWorkflow(pingWorkflow)
	if err := tw.Start(); err != nil {
		t.Fatalf("start test worker: %v", err)
	}
	defer tw.Stop()
	runCtx, runCancel := context.WithTimeout(ctx, 30*time.Second)
	defer runCancel()
	run, err := c.ExecuteWorkflow(runCtx, client.StartWorkflowOptions{
		ID:        "ping-" + testQueue,
		TaskQueue: testQueue,
	}, pingWorkflow, hostQueue)
	if err != nil {
		t.Fatalf("start ping workflow: %v", err)
	}
	var pong session.PingResponse
	if err := run.Get(runCtx, &pong); err != nil {
		t.Fatalf("ping workflow: %v", err)
	}
	if pong.WorkerID != workerID || pong.Provider != "local" || pong.TaskQueue != hostQueue ||
		len(pong.TaskQueues) != 2 || pong.TaskQueues[0] != sharedQueue || pong.TaskQueues[1] != hostQueue {
		t.Errorf("Ping = %+v, want worker %s, provider local, run on %s, polling [%s %s]",
			pong, workerID, hostQueue, sharedQueue, hostQueue)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run() after cancel = %v, want nil", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run() did not return within 15s of cancellation (shutdown timeout 10s)")
	}
	if !strings.Contains(logs.String(), "msg="+app.PollingMessage) {
		t.Errorf("logs do not contain msg=%s:\n%s", app.PollingMessage, logs.String())
	}
}

// waitForPoller waits until DescribeTaskQueue lists an activity poller with
// the given identity on queue.
func waitForPoller(t *testing.T, c client.Client, queue, identity string, done <-chan error) {
	t.Helper()
	var seen []string
	poll.Until(t, 20*time.Second, fmt.Sprintf("an activity poller with identity %q on %s", identity, queue), func() (bool, string) {
		select {
		case err := <-done:
			t.Fatalf("Run() returned %v before polling %s", err, queue)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := c.DescribeTaskQueue(ctx, queue, enumspb.TASK_QUEUE_TYPE_ACTIVITY)
		cancel()
		if err == nil {
			seen = seen[:0]
			for _, p := range resp.GetPollers() {
				if p.GetIdentity() == identity {
					return true, ""
				}
				seen = append(seen, p.GetIdentity())
			}
		}
		return false, fmt.Sprintf("pollers seen: %v (describe: %v)", seen, err)
	})
}
