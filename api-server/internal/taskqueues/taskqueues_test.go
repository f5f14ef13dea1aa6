package taskqueues_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	enumspb "go.temporal.io/api/enums/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/mangohq/mango/api-server/internal/taskqueues"
	"github.com/mangohq/mango/internal/poll"
	"github.com/mangohq/mango/internal/temporaltest"
	"github.com/mangohq/mango/proto/sessionwf"
)

// fakeService answers DescribeTaskQueue from backlogs by "queue/type",
// failing the queues in fail, and counts the calls.
type fakeService struct {
	mu       sync.Mutex
	backlogs map[string]int64
	fail     map[string]bool
	calls    int
}

func (f *fakeService) DescribeTaskQueue(_ context.Context, in *workflowservice.DescribeTaskQueueRequest, _ ...grpc.CallOption) (*workflowservice.DescribeTaskQueueResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	typ := map[enumspb.TaskQueueType]string{enumspb.TASK_QUEUE_TYPE_WORKFLOW: "workflow", enumspb.TASK_QUEUE_TYPE_ACTIVITY: "activity"}[in.GetTaskQueueType()]
	k := in.GetTaskQueue().GetName() + "/" + typ
	if !in.GetReportStats() || in.GetNamespace() != "mango-ns" {
		return nil, fmt.Errorf("request %v, want ReportStats in namespace mango-ns", in)
	}
	if f.fail[k] {
		return nil, errors.New("unavailable: " + k)
	}
	n := f.backlogs[k]
	return &workflowservice.DescribeTaskQueueResponse{Stats: &taskqueuepb.TaskQueueStats{
		ApproximateBacklogCount: n, ApproximateBacklogAge: durationpb.New(time.Duration(n) * time.Second)}}, nil
}

func (f *fakeService) set(k string, n int64, fail bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.backlogs[k], f.fail[k] = n, fail
}

func (f *fakeService) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// values scrapes c: each series as "name provider/type" (task_queue
// checked to be the provider's queue) and its value.
func values(t *testing.T, c prometheus.Collector, queues sessionwf.Queues) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if want := queues.Provider(labels["provider"]); labels["task_queue"] != want {
				t.Errorf("series %v: task_queue %q, want %q", labels, labels["task_queue"], want)
			}
			out[mf.GetName()+" "+labels["provider"]+"/"+labels["type"]] = m.GetGauge().GetValue()
		}
	}
	return out
}

// compare checks that c's series are backlogs ("provider/type" → count,
// the age count seconds), and only those.
func compare(t *testing.T, c prometheus.Collector, backlogs map[string]int64) {
	t.Helper()
	want := map[string]float64{}
	for k, n := range backlogs {
		want["mango_task_queue_backlog "+k] = float64(n)
		want["mango_task_queue_backlog_age_seconds "+k] = float64(n)
	}
	if got := values(t, c, sessionwf.Queues{}); !maps.Equal(got, want) {
		t.Errorf("scraped %v, want %v", got, want)
	}
}

// TestCollectorCaches: Temporal is asked once per MaxAge whatever the
// number of scrapes; a queue it cannot describe keeps its last figures
// and the failure is logged once, until it answers again.
func TestCollectorCaches(t *testing.T) {
	t.Parallel()
	svc := &fakeService{backlogs: map[string]int64{"mango.docker/workflow": 3, "mango.docker/activity": 1}, fail: map[string]bool{}}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var logs bytes.Buffer
	providersErr := error(nil)
	c, err := taskqueues.New(taskqueues.Options{Service: svc, Namespace: "mango-ns",
		Providers: func(context.Context) ([]string, error) { return []string{"docker", "local"}, providersErr },
		Now:       func() time.Time { return now }, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"docker/workflow": 3, "docker/activity": 1, "local/workflow": 0, "local/activity": 0}
	compare(t, c, want)
	now = now.Add(9 * time.Second)
	compare(t, c, want)
	if n := svc.callCount(); n != 4 {
		t.Fatalf("DescribeTaskQueue calls after two scrapes within MaxAge = %d, want 4 (2 queues x 2 types, once)", n)
	}

	// docker's workflow queue fails: it keeps 3; the others move.
	svc.set("mango.docker/workflow", 7, true)
	svc.set("mango.docker/activity", 5, false)
	now = now.Add(time.Second)
	want["docker/activity"] = 5
	compare(t, c, want)
	now = now.Add(10 * time.Second)
	compare(t, c, want)
	if n := svc.callCount(); n != 12 {
		t.Errorf("DescribeTaskQueue calls after two more refreshes = %d, want 12", n)
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 || !strings.Contains(logs.String(), "unavailable: mango.docker/workflow") {
		t.Errorf("logs after two failed refreshes:\n%s\nwant one warning naming mango.docker/workflow", logs.String())
	}

	// It answers again; then the provider list fails: figures stay.
	svc.set("mango.docker/workflow", 7, false)
	now = now.Add(10 * time.Second)
	want["docker/workflow"] = 7
	compare(t, c, want)
	if !strings.Contains(logs.String(), "level=INFO") {
		t.Errorf("logs after the recovery:\n%s\nwant an info line", logs.String())
	}
	providersErr = errors.New("database down")
	now = now.Add(10 * time.Second)
	compare(t, c, want)
	if n := strings.Count(logs.String(), "level=WARN"); n != 2 || !strings.Contains(logs.String(), "database down") {
		t.Errorf("logs after the provider list failed:\n%s\nwant a second warning naming it", logs.String())
	}
}

// TestCollectorAgainstTemporal: a workflow started on a provider's queue
// with no worker shows in the backlog that Temporal reports.
func TestCollectorAgainstTemporal(t *testing.T) {
	t.Parallel()
	tc := temporaltest.Dial(t, temporaltest.HostPort(t))
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	queues := sessionwf.Queues{Prefix: "tq-" + hex.EncodeToString(b)}
	ctx := context.Background()
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: queues.Provider("probe")}, "NoWorkerPolls")
	if err != nil {
		t.Fatalf("start a workflow on %s: %v", queues.Provider("probe"), err)
	}
	t.Cleanup(func() { _ = tc.TerminateWorkflow(ctx, run.GetID(), run.GetRunID(), "test over") })
	c, err := taskqueues.New(taskqueues.Options{Service: tc.WorkflowService(), Queues: queues, MaxAge: time.Nanosecond,
		Providers: func(context.Context) ([]string, error) { return []string{"probe"}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, "the workflow task in the reported backlog", func() (bool, string) {
		got := values(t, c, queues)
		return got["mango_task_queue_backlog probe/workflow"] >= 1 && got["mango_task_queue_backlog_age_seconds probe/workflow"] > 0 &&
			len(got) == 4, fmt.Sprint(got)
	})
}
