// Package app wires the execution worker together: it reads the
// configuration, builds the sandbox provider, connects to Temporal, polls the
// provider's task queues and shuts down cleanly. cmd/execution-worker is a
// thin wrapper around [Run] so that the whole startup path can be tested
// in-process.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/mangohq/mango/execution-worker/agentruntime"
	"github.com/mangohq/mango/execution-worker/internal/config"
	"github.com/mangohq/mango/execution-worker/internal/controlplane"
	"github.com/mangohq/mango/execution-worker/internal/metrics"
	"github.com/mangohq/mango/execution-worker/interrupts"
	"github.com/mangohq/mango/execution-worker/mcp"
	"github.com/mangohq/mango/execution-worker/model/modelconfig"
	"github.com/mangohq/mango/execution-worker/model/modelfiles"
	"github.com/mangohq/mango/execution-worker/preview"
	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxcube"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxdaytona"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxdocker"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxe2b"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxk8s"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxlocal"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxopensandbox"
	"github.com/mangohq/mango/execution-worker/sessionfiles"
	"github.com/mangohq/mango/execution-worker/workflows/session"
	"github.com/mangohq/mango/internal/buildinfo"
	"github.com/mangohq/mango/internal/pprofserve"
	"github.com/mangohq/mango/internal/telemetry"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
	"github.com/mangohq/mango/proto/sessionwf"
)

// Version is the worker's build version (package buildinfo), reported in
// its heartbeat, by the Ping activity and in logs.
var Version = buildinfo.Get().Version

// PollingMessage is the log message written once every worker polls its
// task queue. Tests and operators can wait for it.
const PollingMessage = "polling"

// Providers returns a registry holding every sandbox provider compiled into
// the worker.
func Providers() *sandbox.Registry {
	reg := &sandbox.Registry{}
	reg.Register(sandboxlocal.Name, sandboxlocal.Factory)
	reg.Register(sandboxdocker.Name, sandboxdocker.Factory)
	reg.Register(sandboxopensandbox.Name, sandboxopensandbox.Factory)
	reg.Register(sandboxe2b.Name, sandboxe2b.Factory)
	reg.Register(sandboxcube.Name, sandboxcube.Factory)
	reg.Register(sandboxdaytona.Name, sandboxdaytona.Factory)
	reg.Register(sandboxk8s.Name, sandboxk8s.Factory)
	return reg
}

// Run validates the configuration read through getenv, then runs the worker
// until ctx is cancelled or a worker fails. Logs go to logOut. Configuration
// errors, the sandbox provider's included, are returned before anything
// connects to Temporal. The sandbox provider is built once the
// ControlPlane has answered the installation id, so it never creates,
// lists or destroys anything without it. After
// ctx is cancelled, Run stops polling and waits for running activities up
// to MANGO_SHUTDOWN_TIMEOUT; it returns nil after a clean shutdown.
//
// Run builds (connections, then the process's parts), then runs: the
// background tasks start together, the Temporal workers serve, and on
// shutdown the background tasks are joined before the parts and then the
// connections close (the defers run in reverse).
func Run(ctx context.Context, getenv func(string) string, logOut io.Writer) error {
	cfg, err := config.FromEnv(getenv, Providers())
	if err != nil {
		return err
	}
	build, err := cfg.SandboxFactory.Configure(getenv)
	if err != nil {
		return fmt.Errorf("create sandbox provider %s: %w", cfg.Sandbox, err)
	}

	logger := newLogger(cfg, logOut)
	logger.InfoContext(ctx, "starting execution worker", "version", Version, "config", cfg)
	tcfg, err := telemetry.Load(getenv)
	if err != nil {
		return err
	}
	tracing, err := telemetry.Start(ctx, tcfg, "mango-execution-worker", Version, logger)
	if err != nil {
		return err
	}
	defer func() {
		flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tracing.Shutdown(flushCtx); err != nil {
			logger.WarnContext(ctx, "tracing: spans not flushed at exit", "err", err)
		}
	}()
	if cfg.UnsafeLocalSandbox() {
		logger.WarnContext(ctx, "a network-backed model is running with a sandbox that executes tools directly on this host; "+
			"this is unsafe outside development",
			"model", cfg.Model, "sandbox", cfg.Sandbox, "override", config.EnvAllowUnsafeLocal)
	}

	c, err := dial(ctx, cfg, logger, tracing)
	if err != nil {
		return err
	}
	defer c.Close()

	cpOpts := []grpc.DialOption{grpc.WithChainUnaryInterceptor(controlplane.RetryUnavailable(cfg.ControlPlaneRetry))}
	if tracing.Enabled {
		cpOpts = append(cpOpts, grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tracing.Provider()))))
	}
	cp, err := dialControlPlane(cfg, logger, cpOpts...)
	if err != nil {
		return err
	}
	defer func() { _ = cp.Close() }()

	p, err := assemble(ctx, cfg, logger, cp, build, tracing)
	if err != nil {
		return err
	}
	defer p.close()
	return p.run(ctx, c)
}

// process holds what Run builds once connected: the provider, the
// activities and workflow the Temporal workers register, the background
// tasks, and what to close at the end.
type process struct {
	cfg     *config.Config
	logger  *slog.Logger
	tracing *telemetry.Tracing

	queues       []string
	bindingQueue string
	workflow     *session.Workflow
	acts         *session.Activities
	sandboxActs  *session.SandboxActivities
	turnActs     *session.TurnActivities

	// background runs until the context it is given ends; run starts them
	// together and joins them on shutdown.
	background []func(context.Context)
	// closers run in reverse order once the background tasks returned.
	closers []func()
}

// close runs the closers, last added first.
func (p *process) close() {
	for _, c := range slices.Backward(p.closers) {
		c()
	}
}

// assemble builds the process's parts on the connected ControlPlane: the
// sandbox provider, the task queues, the activities and the background
// tasks. On error it closes what it built.
func assemble(ctx context.Context, cfg *config.Config, logger *slog.Logger, cp *controlplane.Client, build sandbox.Build, tracing *telemetry.Tracing) (_ *process, err error) {
	p := &process{cfg: cfg, logger: logger, tracing: tracing}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	provider, installation, err := newProvider(ctx, cfg, cp, build)
	if err != nil {
		return nil, err
	}
	if c, ok := provider.(io.Closer); ok {
		// Stops what the provider runs in the background (the docker
		// warm pool), after everything that uses it.
		p.closers = append(p.closers, func() { _ = c.Close() })
	}
	logger.InfoContext(ctx, "sandbox provider ready", "sandbox", cfg.Sandbox, "installation", installation)

	queueNames := sessionwf.Queues{Prefix: cfg.TaskQueuePrefix}
	if p.queues, p.bindingQueue, err = taskQueues(ctx, cfg, provider, queueNames); err != nil {
		return nil, err
	}
	// A turn of a session bound to this worker's locality runs eagerly
	// on the worker that runs its workflow (session.Workflow.Serves).
	serves := func(queue string) bool { return slices.Contains(p.queues, queue) }
	p.workflow = &session.Workflow{Serves: serves}
	bindings := controlplane.NewBindings(cp)
	manager := sandbox.NewSessionManager(provider, bindings, p.bindingQueue)
	p.sandboxActs = &session.SandboxActivities{Manager: manager, ControlPlane: bindings, ProviderQueue: queueNames.Provider(cfg.Sandbox)}
	p.acts = &session.Activities{WorkerID: cfg.WorkerID, Provider: cfg.Sandbox, Version: Version, TaskQueues: p.queues}
	previews, watcher, err := p.buildTurns(cp, manager, serves)
	if err != nil {
		return nil, err
	}
	reconciler := &sandbox.Reconciler{Provider: provider, Bindings: bindings, TaskQueue: p.bindingQueue, Installation: installation,
		Grace: cfg.ReconcileGrace, Interval: cfg.ReconcileInterval, Logger: logger.With("component", "reconciler")}
	if cfg.SandboxFactory.Traits.HostBound {
		reconciler.QueueLive = queueLive(cp)
	}
	if err := p.observe(ctx, previews, watcher, reconciler); err != nil {
		return nil, err
	}
	var capabilities []string
	if c, ok := provider.(sandbox.Capable); ok {
		capabilities = c.Capabilities()
	}
	beat := &pb.RecordWorkerHeartbeatRequest{WorkerId: cfg.WorkerID, Provider: cfg.Sandbox,
		TaskQueues: p.queues, Capabilities: capabilities, Version: Version}
	p.background = append(p.background, reconciler.Run, previews.Run,
		func(ctx context.Context) { heartbeats(ctx, cp, beat, logger) })
	if watcher != nil {
		p.background = append(p.background, watcher.Run)
	}
	return p, nil
}

// buildTurns builds the turn activities: the model client, file access,
// MCP pool, preview stream and (with interrupt push) the interrupt
// watcher, which it returns for the background tasks.
func (p *process) buildTurns(cp *controlplane.Client, manager *sandbox.SessionManager, serves func(string) bool) (*preview.Streamer, *interrupts.Watcher, error) {
	cfg, logger := p.cfg, p.logger
	modelClient, err := modelconfig.FromConfig(string(cfg.Model), cfg.ModelBaseURL, cfg.ModelAPIKey, string(cfg.ModelAuth), cfg.ModelID)
	if err != nil {
		return nil, nil, fmt.Errorf("model client: %w", err)
	}
	// File bytes (resources, file sources of content blocks, outputs)
	// travel through the ControlPlane; the model sees file sources inline.
	files := controlplane.NewFiles(cp.FilesClient, nil)
	// MCP servers get each session's credential, fetched when needed.
	mcpPool := mcp.NewPool(mcp.Options{ClientName: "mango/" + Version, AllowPrivate: cfg.MCPAllowPrivate,
		Credentials: controlplane.NewMCPCredentials(cp.CredentialsClient)})
	p.closers = append(p.closers, func() { _ = mcpPool.Close() })
	modelClient = modelfiles.Resolve(modelClient, fileOpener{files})
	// One long-lived preview stream per worker; turns never wait for it.
	previews := preview.NewStreamer(cp, logger.With("component", "previews"))
	// And one interrupt stream: pushed interrupts stop running turns at
	// once; without it Temporal's cancellation still does, a heartbeat
	// round trip later.
	var turns *interrupts.Registry
	var watcher *interrupts.Watcher
	if cfg.InterruptPush {
		turns = interrupts.NewRegistry()
		watcher = interrupts.NewWatcher(cp, cfg.WorkerID, turns, logger.With("component", "interrupts"))
	}
	p.turnActs = &session.TurnActivities{ControlPlane: cp, Manager: manager, Model: modelClient, ModelID: cfg.ModelID, Serves: serves,
		Tracer: p.tracing.Provider().Tracer(telemetry.Scope("agentruntime")), CaptureContent: p.tracing.CaptureContent,
		Snapshots: cp, Context: agentruntime.ContextConfig{Window: cfg.ModelContextWindow, Threshold: cfg.CompactionThreshold, CompactionModel: cfg.CompactionModel},
		Previews: func(sid string) session.Previewer { return previews.Session(sid) }, MCP: mcpPool,
		Resources:  &sessionfiles.Materializer{Resources: cp, Memory: cp.SessionMemoryClient, Files: files, Clone: sessionfiles.GitClone, Logger: logger.With("component", "resources")},
		Outputs:    &sessionfiles.Publisher{Store: files, MaxFiles: cfg.OutputsMaxFiles, MaxBytes: cfg.OutputsMaxBytes},
		Interrupts: turns, Transcripts: session.NewTranscriptCache(cfg.TranscriptCacheBytes), Calls: session.NewCalls(),
		SelfHostedToolTimeout: cfg.SelfHostedToolTimeout, Threads: cp.SessionThreadsClient, GraderModel: cfg.OutcomeGraderModel}
	return previews, watcher, nil
}

// observe sets up the metrics endpoint (served as a background task) and
// the pprof endpoint, when configured.
func (p *process) observe(ctx context.Context, previews *preview.Streamer, watcher *interrupts.Watcher, reconciler *sandbox.Reconciler) error {
	cfg := p.cfg
	if cfg.MetricsAddr != "" {
		l, err := metrics.Listen(cfg.MetricsAddr)
		if err != nil {
			return fmt.Errorf("%s=%s: %w", config.EnvMetricsAddr, cfg.MetricsAddr, err)
		}
		m := metrics.New(cfg.Sandbox, Version, previews)
		p.turnActs.OnTurn, p.turnActs.OnStart, p.turnActs.Metrics = m.Turn, m.TurnScheduleToStart, m
		m.TranscriptCache(p.turnActs.Transcripts)
		m.SandboxReconciler(reconciler)
		if watcher != nil {
			m.WatchInterrupts(watcher)
		}
		log := p.logger.With("component", "metrics")
		p.background = append(p.background, func(ctx context.Context) { m.Serve(ctx, l, log) })
	}
	if cfg.PprofAddr != "" {
		if _, err := pprofserve.Start(ctx, cfg.PprofAddr, p.logger.With("component", "pprof")); err != nil {
			return err
		}
	}
	return nil
}

// run starts the background tasks together, serves until ctx ends or a
// worker fails, and joins the background tasks before it returns (so
// before anything they use is closed).
func (p *process) run(ctx context.Context, c client.Client) error {
	bgCtx, stop := context.WithCancel(ctx)
	var g errgroup.Group
	for _, task := range p.background {
		g.Go(func() error {
			task(bgCtx)
			return nil
		})
	}
	defer func() {
		stop()
		_ = g.Wait()
	}()
	return p.serve(ctx, c)
}

// serve polls the task queues until ctx ends or a worker fails, then stops
// the workers within the shutdown grace and ends the tool calls left
// running.
func (p *process) serve(ctx context.Context, c client.Client) error {
	cfg, logger := p.cfg, p.logger
	fatal := make(chan error, len(p.queues))
	workers, err := p.startWorkers(c, fatal)
	if err != nil {
		return err
	}
	logger.InfoContext(ctx, PollingMessage, "task_queues", p.queues, "binding_queue", p.bindingQueue, "worker_id", cfg.WorkerID, "sandbox", cfg.Sandbox)

	var runErr error
	select {
	case <-ctx.Done():
		logger.InfoContext(ctx, "shutting down: polling stopped, running turns get the grace period", "grace", cfg.ShutdownGrace.String())
	case runErr = <-fatal:
		logger.ErrorContext(ctx, "worker failed, shutting down", "error", runErr)
	}
	// Stop waits up to the grace for running activities, then cancels
	// them; a cancelled turn fails its attempt, so Temporal retries it on
	// another worker at once. The extra time lets those failures be
	// reported.
	if !stopAll(workers, cfg.ShutdownGrace+stopReportTime) {
		return errors.Join(runErr, fmt.Errorf("shutdown did not finish within %s=%s", config.EnvShutdownGrace, cfg.ShutdownGrace))
	}
	// Tool calls that abandoned attempts left running end with the worker.
	stopCtx, stopCalls := context.WithTimeout(context.Background(), stopReportTime)
	p.turnActs.Calls.Stop(stopCtx)
	stopCalls()
	logger.InfoContext(ctx, "stopped")
	return runErr
}

// startWorkers starts one Temporal worker per task queue; a worker's
// fatal error is sent on fatal. On error it stops those already started.
func (p *process) startWorkers(c client.Client, fatal chan<- error) ([]worker.Worker, error) {
	cfg := p.cfg
	var workers []worker.Worker
	for _, q := range p.queues {
		w := worker.New(c, q, worker.Options{
			Identity:          cfg.WorkerID,
			WorkerStopTimeout: cfg.ShutdownGrace,
			// Separate pollers for the queue and the worker's sticky queue.
			// The default (one pool for both) polls only the sticky queue
			// while it has a backlog, so under load the first workflow task
			// of a new session waited on the queue until the load eased
			// (measured: 60 s with 32 busy sessions).
			WorkflowTaskPollerBehavior: worker.NewPollerBehaviorAutoscaling(worker.PollerBehaviorAutoscalingOptions{}),
			// Autoscaling activity pollers too: with the default two, a
			// turn scheduled on a locality queue under load rarely found a
			// poller waiting (15% matched at once, measured with 16 busy
			// sessions), so Temporal wrote it to its store and read it back;
			// with these, 69%.
			ActivityTaskPollerBehavior: worker.NewPollerBehaviorAutoscaling(worker.PollerBehaviorAutoscalingOptions{}),
			OnFatalError: func(err error) {
				select {
				case fatal <- fmt.Errorf("worker on task queue %s: %w", q, err):
				default: // a failure is already being handled
				}
			},
		})
		p.acts.Register(w)
		p.sandboxActs.Register(w)
		p.turnActs.Register(w)
		w.RegisterWorkflowWithOptions(p.workflow.Run, workflow.RegisterOptions{Name: sessionwf.WorkflowType})
		if err := w.Start(); err != nil {
			stopAll(workers, cfg.ShutdownGrace)
			return nil, fmt.Errorf("start worker on task queue %s (%s=%s): %w", q, config.EnvTemporalNamespace, cfg.TemporalNamespace, err)
		}
		workers = append(workers, w)
	}
	return workers, nil
}

// newProvider asks the ControlPlane for the installation id (retried while
// the api-server is unavailable, within MANGO_CONTROLPLANE_RETRY) and
// builds the sandbox provider of that installation.
func newProvider(ctx context.Context, cfg *config.Config, cp pb.ControlPlaneClient, build sandbox.Build) (sandbox.Provider, string, error) {
	installation, err := controlplane.Installation(ctx, cp)
	if err != nil {
		return nil, "", fmt.Errorf("%w: the worker labels every sandbox with the installation id of its api-server "+
			"and does not start without it (is the api-server at %s=%s up, and its database migrated?)",
			err, config.EnvControlPlaneAddr, cfg.ControlPlaneAddr)
	}
	provider, err := build(ctx, installation)
	if err != nil {
		return nil, "", fmt.Errorf("create sandbox provider %s: %w", cfg.Sandbox, err)
	}
	if provider.Name() != cfg.Sandbox {
		return nil, "", fmt.Errorf("sandbox provider registered as %q reports name %q", cfg.Sandbox, provider.Name())
	}
	return provider, installation, nil
}

// stopReportTime is how long a stopping worker waits, after the grace, for
// cancelled activities to report their failure.
const stopReportTime = 5 * time.Second

// taskQueues returns the queues the worker polls and the queue it records
// in new bindings. Every worker polls its provider's queue. A host-bound
// provider's worker also polls its locality's queue (named for where the
// sandboxes live, the same for every worker that reaches them), which new
// bindings record. A worker whose MANGO_WORKER_ID is set explicitly also
// polls the per-worker queue "<prefix>.<provider>.<worker-id>" that
// versions before locality queues recorded in bindings, so sessions bound
// then keep being served.
func taskQueues(ctx context.Context, cfg *config.Config, provider sandbox.Provider, names sessionwf.Queues) (queues []string, binding string, err error) {
	providerQueue := names.Provider(cfg.Sandbox)
	if !cfg.SandboxFactory.Traits.HostBound {
		return []string{providerQueue}, providerQueue, nil
	}
	locality, err := sandbox.LocalityOf(ctx, provider, cfg.SandboxLocality)
	if err != nil {
		return nil, "", err
	}
	binding = names.Locality(cfg.Sandbox, locality)
	queues = []string{providerQueue, binding}
	if legacy := names.Locality(cfg.Sandbox, cfg.WorkerID); cfg.WorkerIDSet && legacy != binding {
		queues = append(queues, legacy)
	}
	return queues, binding, nil
}

// dial connects to Temporal, bounded by the connect timeout; with
// tracing on, workflows and activities carry the trace of whatever
// started or signalled them (the SDK's OpenTelemetry interceptor).
func dial(ctx context.Context, cfg *config.Config, logger *slog.Logger, tracing *telemetry.Tracing) (client.Client, error) {
	opts, err := temporalOptions(cfg, logger)
	if err != nil {
		return nil, err
	}
	if tracing.Enabled {
		ti, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{Tracer: tracing.Provider().Tracer(telemetry.Scope("temporal"))})
		if err != nil {
			return nil, fmt.Errorf("tracing: temporal interceptor: %w", err)
		}
		opts.Interceptors = append(opts.Interceptors, ti)
	}
	dialCtx, cancel := context.WithTimeout(ctx, cfg.TemporalConnectTimeout)
	defer cancel()
	c, err := client.DialContext(dialCtx, opts)
	if err != nil {
		return nil, fmt.Errorf("connect to Temporal at %s=%s (timeout %s): %w",
			config.EnvTemporalHostPort, cfg.TemporalHostPort, cfg.TemporalConnectTimeout, err)
	}
	return c, nil
}

// stopAll stops the workers concurrently and reports whether they all
// stopped within timeout. Worker.Stop itself waits up to WorkerStopTimeout
// for running activities; the extra bound here also covers a stuck poll.
func stopAll(workers []worker.Worker, timeout time.Duration) bool {
	done := make(chan struct{}, len(workers))
	for _, w := range workers {
		go func() {
			w.Stop()
			done <- struct{}{}
		}()
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for range workers {
		select {
		case <-done:
		case <-deadline.C:
			return false
		}
	}
	return true
}

func newLogger(cfg *config.Config, out io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.LogLevel}
	if cfg.LogFormat == config.LogJSON {
		return slog.New(telemetry.LogHandler(slog.NewJSONHandler(out, opts)))
	}
	return slog.New(telemetry.LogHandler(slog.NewTextHandler(out, opts)))
}

// heartbeatInterval spaces the worker's heartbeats to the ControlPlane.
const heartbeatInterval = 10 * time.Second

// queueLiveWindow is how recent a heartbeat of a worker polling a queue
// must be for the reconciler to leave bindings naming that queue alone:
// six missed heartbeats.
const queueLiveWindow = 6 * heartbeatInterval

// queueLive reports, through the ControlPlane, whether a worker polling a
// task queue has heartbeated within queueLiveWindow.
func queueLive(cp pb.ControlPlaneClient) func(ctx context.Context, queue string) (bool, error) {
	return func(ctx context.Context, queue string) (bool, error) {
		h, err := cp.GetTaskQueueHealth(ctx, &pb.GetTaskQueueHealthRequest{TaskQueue: queue})
		if err != nil {
			return false, err
		}
		last := h.GetLastHeartbeatAt()
		return last != nil && h.GetServerTime().AsTime().Sub(last.AsTime()) < queueLiveWindow, nil
	}
}

// heartbeats tells the ControlPlane, now and then every heartbeatInterval,
// that this worker is alive, which queues it polls and which sandbox
// capabilities its provider has.
func heartbeats(ctx context.Context, cp pb.ControlPlaneClient, req *pb.RecordWorkerHeartbeatRequest, log *slog.Logger) {
	t := time.NewTimer(0)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := cp.RecordWorkerHeartbeat(callCtx, req)
		cancel()
		switch {
		case err != nil && !failing && ctx.Err() == nil:
			log.WarnContext(ctx, "heartbeat to the ControlPlane failed", "err", err)
			failing = true
		case err == nil && failing:
			log.InfoContext(ctx, "heartbeats to the ControlPlane resumed")
			failing = false
		}
		t.Reset(heartbeatInterval)
	}
}
