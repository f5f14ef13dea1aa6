// Package taskqueues exports the backlog of the Temporal task queues that
// run sessions' turns, as Prometheus gauges: how many workflow and
// activity tasks wait on each sandbox provider's queue, and for how long
// the oldest has waited. A growing backlog means the provider's workers
// cannot keep up (or none is running); it is what to scale workers on.
//
// The figures come from Temporal's DescribeTaskQueue (ReportStats), read
// at scrape time at most once per MaxAge and served from a cache between,
// so scrapes by several Prometheus servers or replicas cost Temporal
// little. Temporal's figures are approximate: tasks matched at once to a
// waiting poller never enter the backlog, and sticky workflow tasks are
// not counted.
package taskqueues

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	enumspb "go.temporal.io/api/enums/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/grpc"

	"github.com/mangohq/mango/proto/sessionwf"
)

// Describer is the part of Temporal's WorkflowService the collector calls
// (client.Client.WorkflowService() is one).
type Describer interface {
	DescribeTaskQueue(ctx context.Context, in *workflowservice.DescribeTaskQueueRequest,
		opts ...grpc.CallOption) (*workflowservice.DescribeTaskQueueResponse, error)
}

// Options configure a Collector. Zero values take the defaults in
// brackets.
type Options struct {
	// Service answers DescribeTaskQueue (required).
	Service Describer
	// Namespace is the Temporal namespace of the queues ["default"].
	Namespace string
	// Providers lists the sandbox providers whose session queues are
	// described (required); an error keeps the previous figures.
	Providers func(ctx context.Context) ([]string, error)
	// Queues names the providers' task queues.
	Queues sessionwf.Queues
	// MaxAge is how long figures are served before Temporal is asked
	// again [10s].
	MaxAge time.Duration
	// Timeout bounds one refresh, every call in it [2s].
	Timeout time.Duration
	// Logger receives a warning when figures cannot be read (once until
	// they can again) [slog.Default()].
	Logger *slog.Logger
	// Now tells the time [time.Now].
	Now func() time.Time
}

// Task queue types, the "type" label.
const (
	typeWorkflow = "workflow"
	typeActivity = "activity"
)

// queueTypes are the task queue types described for each queue.
var queueTypes = []struct {
	label string
	typ   enumspb.TaskQueueType
}{{typeWorkflow, enumspb.TASK_QUEUE_TYPE_WORKFLOW}, {typeActivity, enumspb.TASK_QUEUE_TYPE_ACTIVITY}}

// key identifies one series: a provider's queue and a task type.
type key struct{ provider, queue, typ string }

// reading is the backlog of one series.
type reading struct {
	backlog int64
	age     time.Duration
}

// Collector is a prometheus.Collector of mango_task_queue_backlog and
// mango_task_queue_backlog_age_seconds{provider,task_queue,type}. It is
// safe for concurrent scrapes.
type Collector struct {
	opts         Options
	backlog, age *prometheus.Desc
	mu           sync.Mutex
	readAt       time.Time // last refresh, successful or not (zero: none yet)
	readings     map[key]reading
	failing      bool // the last refresh failed and said so
}

// New returns a collector over opts; it asks Temporal nothing until the
// first scrape.
func New(opts Options) (*Collector, error) {
	if opts.Service == nil || opts.Providers == nil {
		return nil, errors.New("taskqueues: Service and Providers are required, want Temporal's WorkflowService and a provider list")
	}
	if opts.Namespace == "" {
		opts.Namespace = "default"
	}
	if opts.MaxAge <= 0 {
		opts.MaxAge = 10 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 2 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	labels := []string{"provider", "task_queue", "type"}
	return &Collector{opts: opts, readings: map[key]reading{},
		backlog: prometheus.NewDesc("mango_task_queue_backlog",
			"Approximate number of tasks waiting on a sandbox provider's Temporal task queue (type workflow: turns and wake-ups to start; activity: steps of turns), from DescribeTaskQueue.", labels, nil),
		age: prometheus.NewDesc("mango_task_queue_backlog_age_seconds",
			"Approximate age of the oldest task waiting on a sandbox provider's Temporal task queue (0 when none waits).", labels, nil),
	}, nil
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.backlog
	ch <- c.age
}

// Collect implements prometheus.Collector: the cached figures, refreshed
// first when older than MaxAge. Series never read successfully are left
// out.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.readAt.IsZero() || c.opts.Now().Sub(c.readAt) >= c.opts.MaxAge {
		c.refresh()
	}
	for k, r := range c.readings {
		ch <- prometheus.MustNewConstMetric(c.backlog, prometheus.GaugeValue, float64(r.backlog), k.provider, k.queue, k.typ)
		ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, r.age.Seconds(), k.provider, k.queue, k.typ)
	}
}

// refresh reads every series within Timeout. A series that cannot be read
// keeps its previous figures; the first failure after a success is logged
// at warn, the recovery at info.
func (c *Collector) refresh() {
	c.readAt = c.opts.Now()
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.Timeout)
	defer cancel()
	providers, err := c.opts.Providers(ctx)
	if err != nil {
		c.failed(fmt.Errorf("list providers: %w", err))
		return
	}
	next := make(map[key]reading, 2*len(providers))
	var errs []error
	for _, p := range providers {
		queue := c.opts.Queues.Provider(p)
		for _, qt := range queueTypes {
			k := key{provider: p, queue: queue, typ: qt.label}
			r, err := c.describe(ctx, queue, qt.typ)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s (%s): %w", queue, qt.label, err))
				if prev, ok := c.readings[k]; ok {
					next[k] = prev
				}
				continue
			}
			next[k] = r
		}
	}
	c.readings = next
	if len(errs) > 0 {
		c.failed(errors.Join(errs...))
		return
	}
	if c.failing {
		c.failing = false
		c.opts.Logger.Info("task queue backlog: Temporal answers again")
	}
}

// describe reads the backlog of one queue and type.
func (c *Collector) describe(ctx context.Context, queue string, typ enumspb.TaskQueueType) (reading, error) {
	resp, err := c.opts.Service.DescribeTaskQueue(ctx, &workflowservice.DescribeTaskQueueRequest{
		Namespace:     c.opts.Namespace,
		TaskQueue:     &taskqueuepb.TaskQueue{Name: queue, Kind: enumspb.TASK_QUEUE_KIND_NORMAL},
		TaskQueueType: typ,
		ReportStats:   true,
	})
	if err != nil {
		return reading{}, err
	}
	st := resp.GetStats()
	if st == nil {
		return reading{}, errors.New("the answer has no stats, want ReportStats honoured (Temporal server 1.25 or later)")
	}
	return reading{backlog: st.GetApproximateBacklogCount(), age: st.GetApproximateBacklogAge().AsDuration()}, nil
}

// failed logs err at warn unless the previous refresh failed too.
func (c *Collector) failed(err error) {
	if c.failing {
		return
	}
	c.failing = true
	c.opts.Logger.Warn("task queue backlog: cannot read it from Temporal; the metrics keep their last figures until it can (said once)",
		"err", err)
}

// Providers returns the union of configured and reported, in that order,
// without repeats: the providers a collector describes.
func Providers(configured, reported []string) []string {
	out := slices.Clone(configured)
	for _, p := range reported {
		if p != "" && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

var _ prometheus.Collector = (*Collector)(nil)
