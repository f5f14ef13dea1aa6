package faults

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/mangohq/mango/internal/freeport"
	"github.com/mangohq/mango/internal/testbin"
)

// system is a whole Mango of real processes on loopback ports: its own
// PostgreSQL cluster and Temporal dev server, an api-server, a local
// worker and, with Docker, a docker worker; and an SDK client of it.
type system struct {
	api, local, dockerWorker, temporal *proc
	pg                                 *postgres
	temporalAddr                       string
	withDocker                         bool
	sandboxes                          string // the local worker's sandbox root
	runID                              string // labels the docker worker's containers
	cli                                anthropic.Client
	apiURL, apiKey                     string // the api-server's base URL and API key, for raw HTTP
	localMetrics                       string // the local worker's /metrics URL
	startAPI                           func()
	startWorker                        func(*proc)
}

// startSystem builds the binaries and starts every process with the
// configuration an operator gets (no worker id, default locality); they
// stop when t ends. The logs and state stay on failure or with
// MANGO_FAULTS_KEEP=1.
func startSystem(t *testing.T, withDocker bool) *system {
	t.Helper()
	root := repoRoot(t)
	dir, err := os.MkdirTemp("", "mango-faults-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("MANGO_FAULTS_KEEP") == "1" {
			t.Logf("logs and state kept in %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	apiBin := testbin.Build(t, "api-server/cmd/api-server")
	workerBin := testbin.Build(t, "execution-worker/cmd/execution-worker")

	s := &system{withDocker: withDocker, runID: randHex(4), sandboxes: filepath.Join(dir, "sandboxes")}
	s.pg = startPostgres(t, dir)
	s.temporal, s.temporalAddr = temporalServer(t, root, dir)

	apiKey := "mango-faults-" + randHex(16)
	token := "worker-" + randHex(16)
	ports := freeport.Ports(t, 3)
	httpAddr, grpcAddr := fmt.Sprintf("127.0.0.1:%d", ports), fmt.Sprintf("127.0.0.1:%d", ports+1)
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", ports+2)
	s.localMetrics = "http://" + metricsAddr + "/metrics"
	providers := "local"
	if withDocker {
		providers = "local,docker"
	}
	base := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		base = append(base, "DOCKER_HOST="+h)
	}
	s.api = newProc("api-server", dir, append(slices.Clone(base),
		"MANGO_DATABASE_URL="+s.pg.url("mango"), "MANGO_TEMPORAL_HOSTPORT="+s.temporalAddr,
		"MANGO_HTTP_ADDR="+httpAddr, "MANGO_GRPC_ADDR="+grpcAddr, "MANGO_API_KEY="+apiKey, "MANGO_WORKER_TOKEN="+token,
		"MANGO_AUTO_MIGRATE=1", "MANGO_SANDBOX_PROVIDERS="+providers, "MANGO_LOG_LEVEL=warn"), apiBin)
	workerEnv := append(slices.Clone(base), "MANGO_TEMPORAL_HOSTPORT="+s.temporalAddr, "MANGO_CONTROLPLANE_ADDR="+grpcAddr,
		"MANGO_WORKER_TOKEN="+token, "MANGO_MODEL=fake", "MANGO_LOG_LEVEL=info")
	s.local = newProc("worker-local", dir, append(slices.Clone(workerEnv), "MANGO_SANDBOX=local",
		"MANGO_LOCAL_SANDBOX_ROOT="+s.sandboxes, "MANGO_METRICS_ADDR="+metricsAddr), workerBin)
	s.dockerWorker = newProc("worker-docker", dir, append(slices.Clone(workerEnv), "MANGO_SANDBOX=docker",
		"MANGO_DOCKER_LABELS=mango.faults="+s.runID), workerBin)

	s.startAPI = func() {
		s.api.start(t)
		waitHTTP(t, s.api, "http://"+httpAddr+"/readyz", 60*time.Second)
	}
	s.startWorker = func(w *proc) {
		off := w.logSize()
		w.start(t)
		w.waitLog(t, off, "msg=polling", 60*time.Second)
	}
	s.startAPI()
	t.Cleanup(func() { s.api.stop(t) })
	s.startWorker(s.local)
	t.Cleanup(func() { s.local.stop(t) })
	if withDocker {
		s.startWorker(s.dockerWorker)
		t.Cleanup(func() { s.dockerWorker.stop(t) })
		t.Cleanup(func() { removeContainers(s.runID) })
	}
	s.apiURL, s.apiKey = "http://"+httpAddr, apiKey
	s.cli = anthropic.NewClient(option.WithBaseURL("http://"+httpAddr), option.WithAPIKey(apiKey),
		option.WithMaxRetries(0), option.WithRequestTimeout(10*time.Second))
	return s
}
