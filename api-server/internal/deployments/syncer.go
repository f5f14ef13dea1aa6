package deployments

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/proto/sessionwf"
)

// The database row is the truth about a deployment; its Temporal Schedule
// follows. Every change that moves the schedule's desired state (its
// cron, the paused status, the archival) bumps the row's
// schedule_version in the same transaction and announces itself on
// db.DeploymentChannel. The Syncer then makes Temporal hold that state
// (create, update, pause, delete: each idempotent) and records the
// version as synced; one syncer at a time works on a deployment, across
// replicas. A change that Temporal could not take (Temporal down, a crash
// between the commit and the call) stays unsynced and is taken again on
// the next announcement or poll. Fires of a stale schedule are harmless:
// a fire reads the row and makes no run for a paused or archived
// deployment.
//
// Only schedules named after this installation's deployment rows are ever
// touched: nothing is listed or deleted by pattern, so installations
// sharing a Temporal namespace (with distinct task queue prefixes) never
// act on each other's schedules.

// Options configure a Syncer.
type Options struct {
	Store    *db.Store
	Temporal client.Client
	// Queues names the task queues (MANGO_TASK_QUEUE_PREFIX).
	Queues sessionwf.Queues
	// CatchupWindow is how late a fire missed while Temporal was down
	// still runs (MANGO_DEPLOYMENT_CATCHUP_WINDOW); 0 is one hour.
	CatchupWindow time.Duration
	// Poll spaces the passes over unsynced deployments between
	// announcements; 0 is 30 seconds.
	Poll   time.Duration
	Logger *slog.Logger
	// Registerer, when set, receives the syncer's metrics.
	Registerer prometheus.Registerer
}

// Syncer keeps deployments' Temporal Schedules in step with the database.
type Syncer struct {
	opts     Options
	wake     chan struct{}
	unsynced prometheus.Gauge
	syncs    *prometheus.CounterVec
}

// NewSyncer returns a Syncer; Run drives its background passes.
func NewSyncer(opts Options) *Syncer {
	if opts.CatchupWindow <= 0 {
		opts.CatchupWindow = time.Hour
	}
	if opts.Poll <= 0 {
		opts.Poll = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Syncer{opts: opts, wake: make(chan struct{}, 1),
		unsynced: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mango_deployment_schedules_unsynced",
			Help: "Deployments whose Temporal Schedule lagged their state at the syncer's last pass (at most 100 are counted).",
		}),
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mango_deployment_schedule_syncs_total",
			Help: "Syncs of a deployment's Temporal Schedule by result (ok, error: retried on a later pass).",
		}, []string{"result"}),
	}
	s.syncs.WithLabelValues("ok")
	s.syncs.WithLabelValues("error")
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(s.unsynced, s.syncs)
	}
	return s
}

// ScheduleID is the id of a deployment's Temporal Schedule.
func (s *Syncer) ScheduleID(deploymentID string) string {
	return s.opts.Queues.Provider("deployment") + "." + deploymentID
}

// FireWorkflowID is the id prefix of a deployment's fire workflows
// (Temporal appends each fire's time).
func (s *Syncer) FireWorkflowID(deploymentID string) string {
	return s.opts.Queues.Provider("deployment-fire") + "." + deploymentID
}

// TaskQueue is the queue the api-server executes fires from.
func TaskQueue(q sessionwf.Queues) string { return q.Provider("api-server") }

// Wake asks for a pass over the unsynced deployments.
func (s *Syncer) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Notify implements pglisten.Handler: a commit changed a schedule.
func (s *Syncer) Notify(string) { s.Wake() }

// Gap implements pglisten.Handler: announcements may have been missed.
func (s *Syncer) Gap() { s.Wake() }

// Run syncs unsynced deployments on each wake-up and every Poll until
// ctx ends.
func (s *Syncer) Run(ctx context.Context) {
	t := time.NewTicker(s.opts.Poll)
	defer t.Stop()
	for {
		s.pass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-t.C:
		}
	}
}

func (s *Syncer) pass(ctx context.Context) {
	ids, err := s.opts.Store.DeploymentsUnsynced(ctx, 100)
	if err != nil {
		if ctx.Err() == nil {
			s.opts.Logger.WarnContext(ctx, "list deployments whose schedule is not in step", slog.Any("error", err))
		}
		return
	}
	s.unsynced.Set(float64(len(ids)))
	for _, id := range ids {
		if ctx.Err() != nil {
			return
		}
		s.Sync(ctx, id)
	}
}

// Sync brings one deployment's schedule in step; a failure is logged and
// left to a later pass.
func (s *Syncer) Sync(ctx context.Context, id string) {
	callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.opts.Store.DeploymentSync(callCtx, id, func(d *db.Deployment) error { return s.apply(callCtx, d) }); err != nil {
		s.syncs.WithLabelValues("error").Inc()
		s.opts.Logger.WarnContext(ctx, "sync deployment schedule; retried later", slog.String("deployment_id", id), slog.Any("error", err))
		return
	}
	s.syncs.WithLabelValues("ok").Inc()
}

// apply makes Temporal hold d's schedule: none (deleted) when d has no
// schedule or is archived, else its calendars, paused with d.
func (s *Syncer) apply(ctx context.Context, d *db.Deployment) error {
	h := s.opts.Temporal.ScheduleClient().GetHandle(ctx, s.ScheduleID(d.ID))
	if !d.WantsSchedule() {
		err := h.Delete(ctx)
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return nil
		}
		return err
	}
	spec, err := scheduleSpec(d.Schedule)
	if err != nil {
		return err
	}
	paused := d.Status != db.DeploymentActive
	note := "deployment " + d.Status
	action := &client.ScheduleWorkflowAction{ID: s.FireWorkflowID(d.ID), Workflow: FireWorkflowName, Args: []any{d.ID},
		TaskQueue: TaskQueue(s.opts.Queues), WorkflowExecutionTimeout: 2 * time.Hour}
	err = h.Update(ctx, client.ScheduleUpdateOptions{DoUpdate: func(in client.ScheduleUpdateInput) (*client.ScheduleUpdate, error) {
		sched := in.Description.Schedule
		sched.Spec, sched.Action = spec, action
		if sched.Policy == nil {
			sched.Policy = &client.SchedulePolicies{}
		}
		sched.Policy.Overlap, sched.Policy.CatchupWindow = enumspb.SCHEDULE_OVERLAP_POLICY_ALLOW_ALL, s.opts.CatchupWindow
		if sched.State == nil {
			sched.State = &client.ScheduleState{}
		}
		sched.State.Paused, sched.State.Note = paused, note
		return &client.ScheduleUpdate{Schedule: &sched}, nil
	}})
	var nf *serviceerror.NotFound
	if !errors.As(err, &nf) {
		return err
	}
	_, err = s.opts.Temporal.ScheduleClient().Create(ctx, client.ScheduleOptions{ID: s.ScheduleID(d.ID), Spec: *spec,
		Action: action, Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_ALLOW_ALL, CatchupWindow: s.opts.CatchupWindow,
		Paused: paused, Note: note})
	if errors.Is(err, temporal.ErrScheduleAlreadyRunning) {
		return fmt.Errorf("schedule %s was created concurrently; synced on the next pass", s.ScheduleID(d.ID))
	}
	return err
}

func scheduleSpec(sch *db.Schedule) (*client.ScheduleSpec, error) {
	c, err := ParseCron(sch.Expression)
	if err != nil {
		return nil, err
	}
	if _, err := LoadTimezone(sch.Timezone); err != nil {
		return nil, err
	}
	return &client.ScheduleSpec{Calendars: c.Calendars(), TimeZoneName: sch.Timezone}, nil
}

// Upcoming returns up to five upcoming fires of d's schedule as Temporal
// computes them; empty when d has none or Temporal cannot be asked.
func (s *Syncer) Upcoming(ctx context.Context, d *db.Deployment) []time.Time {
	out := []time.Time{}
	if !d.WantsSchedule() {
		return out
	}
	callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	desc, err := s.opts.Temporal.ScheduleClient().GetHandle(callCtx, s.ScheduleID(d.ID)).Describe(callCtx)
	if err != nil {
		s.opts.Logger.DebugContext(ctx, "describe deployment schedule", slog.String("deployment_id", d.ID), slog.Any("error", err))
		return out
	}
	for _, t := range desc.Info.NextActionTimes {
		if len(out) == 5 {
			break
		}
		out = append(out, t.UTC())
	}
	return out
}
