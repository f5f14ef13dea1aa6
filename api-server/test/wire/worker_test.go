package wire

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mangohq/mango/api-server/internal/testserver"
	"github.com/mangohq/mango/internal/poll"
	"github.com/mangohq/mango/internal/temporaltest"
	"github.com/mangohq/mango/internal/testbin"
)

// buildWorker returns the execution-worker binary: the api-server never
// imports worker code, so these tests build the worker and run it as a
// process, as in production.
func buildWorker(t *testing.T) string {
	t.Helper()
	return testbin.Build(t, "execution-worker/cmd/execution-worker")
}

// worker is a running execution-worker process.
type worker struct {
	cmd  *exec.Cmd
	logs *lockedBuffer
	done chan struct{}
}

// startWorker runs a worker for srv with the local sandbox rooted at root;
// id only names it in the test's logs.
func startWorker(t *testing.T, srv *testserver.Server, id, root string) *worker {
	t.Helper()
	return startWorkerWith(t, srv, id, root, nil)
}

// startWorkerWith is startWorker with extra environment (e.g. another
// MANGO_SANDBOX).
func startWorkerWith(t *testing.T, srv *testserver.Server, id, root string, extra map[string]string) *worker {
	t.Helper()
	temporal := temporaltest.HostPort(t)
	cmd := exec.Command(buildWorker(t))
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"MANGO_TEMPORAL_HOSTPORT=" + temporal, "MANGO_CONTROLPLANE_ADDR=" + srv.GRPCAddr,
		"MANGO_WORKER_TOKEN=" + srv.WorkerToken, "MANGO_TASK_QUEUE_PREFIX=" + srv.TaskQueuePrefix,
		"MANGO_SANDBOX=local", "MANGO_MODEL=fake", "MANGO_LOCAL_SANDBOX_ROOT=" + root,
		// No MANGO_WORKER_ID and no locality: the defaults an operator
		// gets. A worker restarted with the same root serves the same
		// sessions because the locality queue is named for the host and
		// the root, not for the process.
		"MANGO_SHUTDOWN_GRACE=5s", "MANGO_LOG_LEVEL=warn", "MANGO_RECONCILE_INTERVAL=1h",
	}
	for k, v := range extra {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	w := &worker{cmd: cmd, logs: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = w.logs, w.logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start worker: %v", err)
	}
	go func() { _ = cmd.Wait(); close(w.done) }()
	t.Cleanup(func() {
		w.stop(syscall.SIGTERM) // returns once the process and its output copy are done
		if label := extra["MANGO_DOCKER_LABELS"]; label != "" {
			removeLabelled(t, label)
		}
		switch out := w.logs.String(); {
		case strings.Contains(out, "WARNING: DATA RACE"):
			t.Errorf("worker %s reported a data race; its output:\n%s", id, out)
		case t.Failed():
			t.Logf("worker %s output:\n%s", id, out)
		}
	})
	return w
}

// removeLabelled removes the docker containers labelled label (this
// test's own: the label names its server's unique task queue prefix), so
// that no sandbox of a finished test outlives it on the daemon.
func removeLabelled(t *testing.T, label string) {
	out, err := exec.Command("docker", "ps", "-aq", "--filter", "label="+label).Output()
	if err != nil {
		t.Logf("list containers labelled %s: %v", label, err)
		return
	}
	if ids := strings.Fields(string(out)); len(ids) > 0 {
		if out, err := exec.Command("docker", append([]string{"rm", "-f"}, ids...)...).CombinedOutput(); err != nil {
			t.Logf("remove containers labelled %s: %v: %s", label, err, out)
		}
	}
}

// lockedBuffer is a bytes.Buffer the process's output copier writes while
// the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// polling waits until the worker polls its task queues (it logs
// "msg=polling" at info level; the tests' workers log at warn, so this
// needs MANGO_LOG_LEVEL=info in the worker's environment).
func (w *worker) polling(t *testing.T) {
	t.Helper()
	poll.Until(t, 60*time.Second, "the worker to log msg=polling", func() (bool, string) {
		select {
		case <-w.done:
			t.Fatalf("worker exited before polling; output:\n%s", w.logs.String())
		default:
		}
		out := w.logs.String()
		return strings.Contains(out, "msg=polling"), "output:\n" + out
	})
}

func (w *worker) stop(sig syscall.Signal) {
	select {
	case <-w.done:
		return
	default:
	}
	_ = w.cmd.Process.Signal(sig)
	select {
	case <-w.done:
	case <-time.After(15 * time.Second):
		_ = w.cmd.Process.Kill()
		<-w.done
	}
}
