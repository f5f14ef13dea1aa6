// Package app wires the api-server together: configuration, PostgreSQL,
// Temporal, the HTTP API and graceful shutdown. cmd/api-server is a thin
// wrapper around Run and Migrate.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/worker"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/mangohq/mango/api-server/internal/auth"
	"github.com/mangohq/mango/api-server/internal/broadcast"
	"github.com/mangohq/mango/api-server/internal/config"
	"github.com/mangohq/mango/api-server/internal/console"
	"github.com/mangohq/mango/api-server/internal/deployments"
	"github.com/mangohq/mango/api-server/internal/eventhub"
	"github.com/mangohq/mango/api-server/internal/filestore"
	"github.com/mangohq/mango/api-server/internal/filestore/filestores3"
	"github.com/mangohq/mango/api-server/internal/httpapi"
	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/api-server/internal/interrupts"
	"github.com/mangohq/mango/api-server/internal/metrics"
	"github.com/mangohq/mango/api-server/internal/outbox"
	"github.com/mangohq/mango/api-server/internal/pglisten"
	"github.com/mangohq/mango/api-server/internal/preview"
	"github.com/mangohq/mango/api-server/internal/skillcatalog"
	"github.com/mangohq/mango/api-server/internal/webhooks"
	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/internal/buildinfo"
	"github.com/mangohq/mango/internal/telemetry"
	"github.com/mangohq/mango/proto/sessionwf"
)

// NewLogger returns the process logger for cfg, writing to w.
func NewLogger(cfg *config.Config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.LogLevel}
	if cfg.LogFormat == "json" {
		return slog.New(telemetry.LogHandler(slog.NewJSONHandler(w, opts)))
	}
	return slog.New(telemetry.LogHandler(slog.NewTextHandler(w, opts)))
}

// Migrate applies the database migrations and returns.
func Migrate(ctx context.Context, cfg *config.Config) error {
	pool, err := openPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	return db.Migrate(ctx, pool)
}

func openPool(ctx context.Context, cfg *config.Config) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("MANGO_DATABASE_URL: %w", err)
	}
	pcfg.MaxConns = cfg.DatabaseMaxConns
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to PostgreSQL at MANGO_DATABASE_URL: %w", err)
	}
	return pool, nil
}

// Server is a running api-server.
type Server struct {
	cfg      *config.Config
	log      *slog.Logger
	pool     *pgxpool.Pool
	tracing  *telemetry.Tracing
	temporal client.Client
	http     *http.Server
	httpLn   net.Listener
	listener *pglisten.Listener
	hub      *eventhub.Hub
	// eventWaits wakes the ControlPlane's AwaitToolResult calls by
	// session when its events change (db.NotifyChannel, as hub).
	eventWaits *broadcast.Keyed
	previews   *preview.Hub
	// interrupts relays committed interrupts to the workers' streams.
	interrupts *interrupts.Hub
	// work wakes long polls of a self-hosted environment's work queue.
	work  *broadcast.Keyed
	relay *outbox.Relay
	// webhooks delivers webhook events (nil without the vault keys,
	// which seal the endpoints' secrets).
	webhooks *webhooks.Relay
	// schedules keeps deployments' Temporal Schedules in step; fires
	// executes their fires.
	schedules *deployments.Syncer
	fires     worker.Worker
	cp        controlPlane
	sweeper   *fileSweeper
	unused    newConns
}

// providers lists the enabled sandbox providers, the default first.
func providers(cfg *config.Config) []string {
	out := []string{cfg.DefaultSandbox}
	for _, p := range cfg.SandboxProviders {
		if p != cfg.DefaultSandbox {
			out = append(out, p)
		}
	}
	return out
}

// New connects to the dependencies and binds the listeners, so that the
// caller knows the server's addresses before Serve.
func New(ctx context.Context, cfg *config.Config, log *slog.Logger) (*Server, error) {
	pool, err := openPool(ctx, cfg)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: log, pool: pool}
	if s.tracing, err = telemetry.Start(ctx, cfg.Tracing, "mango-api-server", buildinfo.Get().Version, log); err != nil {
		pool.Close()
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			s.close()
		}
	}()
	store, err := prepareStore(ctx, cfg, pool)
	if err != nil {
		return nil, err
	}
	// The Temporal client connects lazily so that the API keeps accepting
	// requests while Temporal is down; readiness reports its state.
	topts, err := temporalOptions(cfg, log)
	if err != nil {
		return nil, err
	}
	if s.tracing.Enabled {
		ti, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{Tracer: s.tracing.Provider().Tracer(telemetry.Scope("temporal"))})
		if err != nil {
			return nil, fmt.Errorf("tracing: temporal interceptor: %w", err)
		}
		topts.Interceptors = append(topts.Interceptors, ti)
	}
	s.temporal, err = client.NewLazyClient(topts)
	if err != nil {
		return nil, fmt.Errorf("MANGO_TEMPORAL_HOSTPORT: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		metrics.BuildInfo("api-server"))
	keys := auth.NewVerifier(func(ctx context.Context, hash []byte) (string, error) {
		id, err := store.APIKeyLookup(ctx, hash)
		if errors.Is(err, db.ErrNotFound) {
			return "", auth.ErrInvalidKey
		}
		return id, err
	}, 10*time.Second)
	s.buildHubs(reg)
	// Wake-ups owed to Session Workflows: Deliver signals right after the
	// commit, the relay (run by Serve) retries what that missed.
	s.relay = outbox.New(store, s.temporal, outbox.Options{Logger: log, Registerer: reg, Queues: sessionwf.Queues{Prefix: cfg.TaskQueuePrefix},
		HostGoneAfter: cfg.HostGoneAfter, Tracer: s.tracing.Provider().Tracer(telemetry.Scope("outbox"))})
	if err := registerTaskQueues(reg, cfg, store, s.temporal, log); err != nil {
		return nil, err
	}
	if s.webhooks = newWebhookRelay(cfg, store, log, reg, s.tracing.Provider().Tracer(telemetry.Scope("webhooks"))); s.webhooks != nil {
		// Commits that wrote deliveries wake the relay (on every replica).
		s.listener.Handle(db.WebhookChannel, webhookWake{s.webhooks})
	}
	files, err := openFiles(ctx, cfg, store, log)
	if err != nil {
		return nil, err
	}
	if err := importSkills(ctx, cfg, store, files, log); err != nil {
		return nil, err
	}
	s.sweeper = &fileSweeper{store: store, files: files, log: log.With("component", "file-sweeper"), every: time.Minute,
		orphanBlobs: cfg.FilesS3 == nil}
	s.sweeper.listed, _ = files.(filestore.Lister) // S3
	s.schedules = deployments.NewSyncer(deployments.Options{Store: store, Temporal: s.temporal,
		Queues: sessionwf.Queues{Prefix: cfg.TaskQueuePrefix}, CatchupWindow: cfg.DeploymentCatchupWindow,
		Logger: log.With("component", "deployments"), Registerer: reg})
	s.listener.Handle(db.DeploymentChannel, s.schedules)
	api := httpapi.New(httpapi.Deps{
		Store: store, Keys: keys, Ready: s.ready, Logger: log, Registry: reg, MaxBodyBytes: cfg.MaxBodyBytes,
		Hub: s.hub, HeartbeatInterval: cfg.StreamPingInterval, Previews: s.previews, Providers: providers(cfg), Wake: s.relay.Wake, RequireLiveWorker: cfg.RequireLiveWorker,
		Prices: cfg.Prices, Secrets: cfg.Secrets, AllowPrivate: cfg.AllowPrivate, WebhookAllowPrivate: cfg.WebhookAllowPrivate,
		Files: files, FilesMaxBytes: cfg.FilesMaxBytes, FilesDownloadUploads: cfg.FilesDownloadUploads,
		SkillsMaxBytes: cfg.SkillsMaxBytes, SkillsMaxFiles: cfg.SkillsMaxFiles,
		Work: s.work, WorkLeaseTTL: cfg.WorkLeaseTTL, WorkMaxLeaseTTL: cfg.WorkMaxLeaseTTL, Schedules: s.schedules,
	})
	s.fires = deployments.NewWorker(s.temporal, deployments.TaskQueue(sessionwf.Queues{Prefix: cfg.TaskQueuePrefix}), api)
	handler, err := withConsole(cfg, api.Handler(), store, log)
	if err != nil {
		return nil, err
	}
	if s.tracing.Enabled {
		handler = telemetry.HTTPHandler(handler, s.tracing.Provider())
	}
	s.http = &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ConnState:         s.unused.track,
	}
	s.httpLn, err = net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("MANGO_HTTP_ADDR: listen on %s: %w", cfg.HTTPAddr, err)
	}
	s.cp.eventWaits, s.cp.wake = s.eventWaits, s.relay.Wake
	var grpcOpts []grpc.ServerOption
	if s.tracing.Enabled {
		grpcOpts = append(grpcOpts, grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(s.tracing.Provider()))))
	}
	if err := s.cp.listen(cfg, store, files, s.previews, s.interrupts, reg, log, grpcOpts...); err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

// prepareStore migrates the database (when configured), ensures the
// bootstrap API key and checks the vault keys against the stored secrets.
func prepareStore(ctx context.Context, cfg *config.Config, pool *pgxpool.Pool) (*db.Store, error) {
	if cfg.AutoMigrate {
		if err := db.Migrate(ctx, pool); err != nil {
			return nil, err
		}
	}
	store := db.NewStore(pool)
	if cfg.APIKey != "" {
		// The bootstrap key's id is derived from its hash, so restarts and
		// replicas agree on it.
		h := auth.Hash(cfg.APIKey)
		if err := store.APIKeyEnsure(ctx, fmt.Sprintf("%s%x", ids.APIKey, h[:12]), "MANGO_API_KEY", h); err != nil {
			return nil, fmt.Errorf("bootstrap MANGO_API_KEY: %w", err)
		}
	}
	if err := checkSecrets(ctx, store, cfg.Secrets); err != nil {
		return nil, err
	}
	return store, nil
}

// buildHubs builds the hubs and the one connection that LISTENs for them:
// commits wake event streams, previews arrive from the other replicas,
// committed interrupts go to the workers' interrupt streams, new work
// items wake the long polls of their environment's queue.
func (s *Server) buildHubs(reg *prometheus.Registry) {
	s.listener = pglisten.New(s.pool.Config().ConnConfig, s.log.With("component", "pg-listener"))
	s.hub = eventhub.New(reg, s.cfg.StreamMaxLag)
	s.previews = preview.NewHub(s.pool, s.log.With("component", "preview-hub"), reg)
	s.eventWaits = &broadcast.Keyed{}
	s.listener.Handle(db.NotifyChannel, broadcast.Tee(s.hub, s.eventWaits))
	s.listener.Handle(preview.Channel, s.previews)
	s.interrupts = interrupts.NewHub(s.log.With("component", "interrupt-hub"), reg)
	s.listener.Handle(interrupts.Channel, s.interrupts)
	s.work = &broadcast.Keyed{}
	s.listener.Handle(db.WorkChannel, s.work)
}

// openFiles returns the store of File bytes: the S3 bucket of
// MANGO_FILES_S3_*, checked to be reachable, else PostgreSQL.
func openFiles(ctx context.Context, cfg *config.Config, store *db.Store, log *slog.Logger) (filestore.Blobs, error) {
	if cfg.FilesS3 == nil {
		log.InfoContext(ctx, "file store", "backend", "postgresql")
		return filestore.Postgres(store), nil
	}
	s3, err := filestores3.New(*cfg.FilesS3)
	if err != nil {
		return nil, fmt.Errorf("MANGO_FILES_S3_ENDPOINT: %w", err)
	}
	checkCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s3.Check(checkCtx); err != nil {
		return nil, fmt.Errorf("file store: %w", err)
	}
	log.InfoContext(ctx, "file store", "backend", "s3", "s3", *cfg.FilesS3)
	return s3, nil
}

// importSkills imports the Anthropic skills catalog, when one is
// configured; a catalog that cannot be read or holds an invalid skill
// stops the start.
func importSkills(ctx context.Context, cfg *config.Config, store *db.Store, files filestore.Blobs, log *slog.Logger) error {
	if cfg.SkillsCatalog == "" {
		return nil
	}
	src, err := skillcatalog.Open(cfg.SkillsCatalog, cfg.FilesS3)
	if err != nil {
		return err
	}
	im := &skillcatalog.Importer{Store: store, Files: files, MaxBytes: cfg.SkillsMaxBytes, MaxFiles: cfg.SkillsMaxFiles,
		Log: log.With("component", "skills-catalog"), Now: time.Now}
	if _, err := im.Import(ctx, src); err != nil {
		return fmt.Errorf("%s: %w", skillcatalog.EnvCatalog, err)
	}
	return nil
}

// HTTPAddr returns the bound HTTP address.
func (s *Server) HTTPAddr() string { return s.httpLn.Addr().String() }

func (s *Server) ready(ctx context.Context) error {
	// The returned messages are shown on /readyz; causes go to the log.
	if err := s.pool.Ping(ctx); err != nil {
		s.log.WarnContext(ctx, "readiness: postgresql unreachable", "err", err)
		return errors.New("postgresql unreachable")
	}
	if _, err := s.temporal.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
		s.log.WarnContext(ctx, "readiness: temporal unreachable", "hostport", s.cfg.TemporalHostPort, "err", err)
		return errors.New("temporal unreachable")
	}
	return nil
}

// Serve serves until ctx is cancelled, then drains in-flight requests for
// up to the configured shutdown timeout and releases every resource: the
// background tasks are joined before the connections they use (the
// listener's, the pool, Temporal's) close.
func (s *Server) Serve(ctx context.Context) error {
	defer s.close()
	bg := startBackground(
		[]func(context.Context){
			// listener.Run returns (nil) when its context ends, having
			// closed its connection.
			func(ctx context.Context) { _ = s.listener.Run(ctx) },
			s.previews.Run,
			s.sweeper.run,
			s.runWebhooks,
			s.schedules.Run,
			func(ctx context.Context) { deployments.RunWorker(ctx, s.fires, s.log.With("component", "deployments")) },
		},
		s.hub.Close,
		func(ctx context.Context) { _ = s.relay.Run(ctx) })
	defer bg.join()
	return s.serve(ctx, bg.stopHubs)
}

// serve runs the HTTP and gRPC servers until ctx is cancelled or one of
// them fails; at shutdown it calls stopHubs (which ends open event
// streams) and drains both servers.
func (s *Server) serve(ctx context.Context, stopHubs func()) error {
	errc := make(chan error, 2)
	serving := make(chan struct{})
	go func() {
		err := s.http.Serve(s.httpLn)
		close(serving)
		errc <- fmt.Errorf("http server: %w", err)
	}()
	go func() { errc <- s.cp.serve() }()
	s.log.InfoContext(ctx, "api-server listening", "http", s.HTTPAddr(), "grpc", s.GRPCAddr())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.log.InfoContext(ctx, "shutting down", "timeout", s.cfg.ShutdownTimeout)
	stopHubs() // ends open event streams so the drain below can finish
	shutdownCtx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	cpDone := make(chan struct{})
	go func() { s.cp.stop(shutdownCtx); close(cpDone) }()
	defer func() { <-cpDone }()
	// Once Shutdown has closed the listener and the accept loop ended, no
	// connection becomes new: those without a request yet go at once
	// rather than holding the drain for five seconds.
	go func() {
		<-serving
		s.unused.closeAll()
	}()
	if err := s.http.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("drain http server: %w", err)
	}
	return nil
}

// background runs the server's background tasks, all started together in
// one errgroup: the hubs' tasks (stopped first, at the start of the
// shutdown, so event streams end and the drain can finish) and the outbox
// relay (stopped after the drain, so it still delivers what the last
// requests committed).
type background struct {
	g         errgroup.Group
	stopHubs  func()
	stopRelay context.CancelFunc
}

// startBackground starts hubs and relay, each until its context ends;
// stopping the hubs also calls closeHubs.
func startBackground(hubs []func(context.Context), closeHubs func(), relay func(context.Context)) *background {
	hubCtx, cancelHubs := context.WithCancel(context.Background())
	relayCtx, stopRelay := context.WithCancel(context.Background())
	b := &background{stopRelay: stopRelay, stopHubs: sync.OnceFunc(func() { cancelHubs(); closeHubs() })}
	for _, task := range hubs {
		b.g.Go(func() error { task(hubCtx); return nil })
	}
	b.g.Go(func() error { relay(relayCtx); return nil })
	return b
}

// join stops every task (the hubs' first) and waits until all returned.
func (b *background) join() {
	b.stopHubs()
	b.stopRelay()
	_ = b.g.Wait()
}
func (s *Server) close() {
	if s.httpLn != nil {
		_ = s.httpLn.Close()
	}
	s.cp.close()
	if s.temporal != nil {
		s.temporal.Close()
	}
	if s.pool != nil {
		s.pool.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.tracing.Shutdown(ctx); err != nil {
		s.log.Warn("tracing: spans not flushed at exit", "err", err)
	}
}

// withConsole serves the web console at /console beside the API (when
// MANGO_CONSOLE is on); the console calls the API's handler in process.
func withConsole(cfg *config.Config, api http.Handler, store *db.Store, log *slog.Logger) (http.Handler, error) {
	if !cfg.Console {
		return api, nil
	}
	c, err := console.New(console.Deps{API: api, Store: store, Secrets: cfg.Secrets, Logger: log.With("component", "console"),
		SignInTTL: cfg.ConsoleSignInTTL, MaxUploadBytes: cfg.FilesMaxBytes})
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle(console.Prefix, c)
	mux.Handle(console.Prefix+"/", c)
	mux.Handle("/", api)
	return mux, nil
}
