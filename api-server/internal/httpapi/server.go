// Package httpapi serves Mango's public HTTP API: the Managed Agents
// resources (Agents, Environments, ...) in the wire format the official
// Anthropic SDKs speak, plus health, readiness and metrics endpoints.
package httpapi

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mangohq/mango/api-server/internal/auth"
	"github.com/mangohq/mango/api-server/internal/broadcast"
	"github.com/mangohq/mango/api-server/internal/credentials"
	"github.com/mangohq/mango/api-server/internal/envelope"
	"github.com/mangohq/mango/api-server/internal/eventhub"
	"github.com/mangohq/mango/api-server/internal/filestore"
	"github.com/mangohq/mango/api-server/internal/metrics"
	"github.com/mangohq/mango/api-server/internal/preview"
	"github.com/mangohq/mango/api-server/internal/usage"
	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/internal/buildinfo"
)

// Deps are the collaborators of the HTTP API.
type Deps struct {
	// Store is the PostgreSQL store.
	Store *db.Store
	// Keys verifies API keys.
	Keys *auth.Verifier
	// Ready reports whether the server can serve traffic (database and
	// Temporal reachable); nil means always ready.
	Ready func(ctx context.Context) error
	// Logger receives access and error logs.
	Logger *slog.Logger
	// Registry receives the HTTP metrics and is served on /metrics.
	Registry *prometheus.Registry
	// MaxBodyBytes caps request bodies.
	MaxBodyBytes int64
	// Now returns the current time; tests may pin it.
	Now func() time.Time
	// Wake, when set, is called after a commit that owes a session's
	// workflow a wake-up (an outbox row was written in that commit). It
	// delivers the signal directly; the outbox relay retries if it fails.
	Wake func(ctx context.Context, sessionID string)
	// Hub wakes SSE streams when events are committed (by any replica).
	Hub *eventhub.Hub
	// Previews delivers preview frames to streams that asked for them
	// with event_deltas[]; nil means streams receive no previews.
	Previews *preview.Hub
	// Providers are the sandbox providers sessions may use; the first is
	// the default (MANGO_SANDBOX).
	Providers []string
	// RequireLiveWorker refuses (503) sessions whose provider has no live
	// worker.
	RequireLiveWorker bool
	// Cleanup releases a deleted session's workflow and sandbox; nil skips.
	Cleanup SessionCleanup
	// HeartbeatInterval spaces `: ping` comments on idle streams (15s).
	HeartbeatInterval time.Duration
	// Prices is the model price table (MANGO_MODEL_PRICES); nil means the
	// defaults.
	Prices *usage.Table
	// Secrets seals the secrets clients send (repository tokens of
	// session resources, credential secrets); empty refuses them.
	Secrets *envelope.Keyring
	// Outbound calls credential endpoints (mcp_oauth_validate); nil is a
	// client refusing loopback, private and link-local addresses.
	Outbound *http.Client
	// AllowPrivate lets those calls reach loopback, link-local and
	// private addresses (MANGO_MCP_ALLOW_PRIVATE; package netguard).
	AllowPrivate bool
	// WebhookAllowPrivate accepts webhook endpoints on loopback,
	// link-local and private addresses, and plain http
	// (MANGO_WEBHOOK_ALLOW_PRIVATE).
	WebhookAllowPrivate bool
	// Files holds the bytes of Files.
	Files filestore.Blobs
	// FilesMaxBytes caps one file (MANGO_FILES_MAX_BYTES); it replaces
	// MaxBodyBytes for uploads.
	FilesMaxBytes int64
	// FilesDownloadUploads lets clients download their uploads
	// (MANGO_FILES_DOWNLOAD_UPLOADS).
	FilesDownloadUploads bool
	// SkillsMaxBytes caps the total size of one skill version's files
	// (MANGO_SKILLS_MAX_BYTES); 0 is DefaultSkillsMaxBytes.
	SkillsMaxBytes int64
	// SkillsMaxFiles caps the number of files of one skill version
	// (MANGO_SKILLS_MAX_FILES); 0 is DefaultSkillsMaxFiles.
	SkillsMaxFiles int
	// Work wakes long polls of an environment's work queue when an item
	// is announced on db.WorkChannel; nil makes a poll wait its whole
	// block_ms before looking again.
	Work *broadcast.Keyed
	// WorkLeaseTTL is the lease of an acknowledged work item and the TTL
	// of a heartbeat that asks for none (MANGO_WORK_LEASE_TTL).
	WorkLeaseTTL time.Duration
	// WorkMaxLeaseTTL caps the TTL a heartbeat may ask for
	// (MANGO_WORK_MAX_LEASE_TTL).
	WorkMaxLeaseTTL time.Duration
	// Schedules keeps deployments' Temporal Schedules in step; nil leaves
	// them to the background syncer and shows no upcoming runs.
	Schedules Schedules
}

// API is the HTTP API. Its Handler serves every route.
type API struct {
	deps Deps
	echo *echo.Echo

	eventsAppended prometheus.Counter
	// deploymentRuns counts deployment runs by trigger and result.
	deploymentRuns *prometheus.CounterVec
	// envKeys caches resolved environment keys for a few seconds: a
	// revoked key stops working within envKeyCacheTTL.
	envKeys *auth.Cache[*principal]
}

// envKeyCacheTTL is how long a resolved environment key is trusted
// without a database lookup.
const envKeyCacheTTL = 5 * time.Second

// withDefaults fills the unset dependencies that have a default.
func (deps *Deps) withDefaults() {
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	if deps.Registry == nil {
		deps.Registry = prometheus.NewRegistry()
	}
	if deps.HeartbeatInterval <= 0 {
		deps.HeartbeatInterval = 15 * time.Second
	}
	if deps.Prices == nil {
		deps.Prices = usage.DefaultTable()
	}
	if deps.WorkLeaseTTL <= 0 {
		deps.WorkLeaseTTL = 300 * time.Second
	}
	if deps.WorkMaxLeaseTTL <= 0 {
		deps.WorkMaxLeaseTTL = time.Hour
	}
	if deps.Outbound == nil {
		deps.Outbound = credentials.NewHTTPClient(deps.AllowPrivate)
	}
}

// New builds the HTTP API.
func New(deps Deps) *API {
	deps.withDefaults()
	appended, err := metrics.EventsAppended(deps.Registry, "http")
	if err != nil {
		panic(fmt.Sprintf("httpapi: register metrics: %v", err)) // only a programming error gets here
	}
	a := &API{deps: deps, echo: echo.New(), eventsAppended: appended, envKeys: auth.NewCache[*principal](envKeyCacheTTL),
		deploymentRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mango_deployment_runs_total",
			Help: "Deployment runs recorded by trigger (schedule, manual) and result (session, error).",
		}, []string{"trigger", "result"})}
	if err := deps.Registry.Register(a.deploymentRuns); err != nil {
		panic(fmt.Sprintf("httpapi: register metrics: %v", err)) // only a programming error gets here
	}
	for _, trigger := range []string{db.TriggerSchedule, db.TriggerManual} {
		for _, result := range []string{"session", "error"} {
			a.deploymentRuns.WithLabelValues(trigger, result) // series at 0 from the start, for dashboards
		}
	}
	if deps.Hub != nil {
		deps.Hub.SetLogger(deps.Logger)
	}
	if deps.Store != nil {
		if err := deps.Registry.Register(newProviderCollector(a)); err != nil {
			panic(fmt.Sprintf("httpapi: register metrics: %v", err)) // only a programming error gets here
		}
	}
	e := a.echo
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = a.handleError
	e.Use(requestID, newHTTPMetrics(deps.Registry).middleware, a.accessLog, a.recoverPanics, a.authenticate)

	e.GET("/healthz", healthz)
	e.GET("/readyz", a.readyz)
	e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(deps.Registry, promhttp.HandlerOpts{})))

	e.GET("/admin/providers", a.adminProviders)
	e.POST("/admin/environments/:id/keys", a.adminEnvironmentKeyCreate)
	e.GET("/admin/environments/:id/keys", a.adminEnvironmentKeyList)
	e.POST("/admin/environment-keys/:id/revoke", a.adminEnvironmentKeyRevoke)
	e.POST("/admin/environments/:id/healthcheck", a.adminWorkHealthcheck)
	e.GET("/admin/webhooks/:id/deliveries", a.adminWebhookDeliveries)

	a.routes(e.Group("/v1"))
	return a
}

// routes registers the public API under v1.
func (a *API) routes(v1 *echo.Group) {
	v1.POST("/agents", a.agentCreate)
	v1.GET("/agents", a.agentList)
	v1.GET("/agents/:id", a.agentGet)
	v1.POST("/agents/:id", a.agentUpdate)
	v1.POST("/agents/:id/archive", a.agentArchive)
	v1.GET("/agents/:id/versions", a.agentVersions)

	v1.POST("/environments", a.environmentCreate)
	v1.GET("/environments", a.environmentList)
	v1.GET("/environments/:id", a.environmentGet)
	v1.POST("/environments/:id", a.environmentUpdate)
	v1.POST("/environments/:id/archive", a.environmentArchive)
	v1.DELETE("/environments/:id", a.environmentDelete)
	v1.GET("/environments/:id/work/poll", a.workPoll)
	v1.GET("/environments/:id/work/stats", a.workStats)
	v1.GET("/environments/:id/work", a.workList)
	v1.GET("/environments/:id/work/:wid", a.workGet)
	v1.POST("/environments/:id/work/:wid", a.workUpdate)
	v1.POST("/environments/:id/work/:wid/ack", a.workAck)
	v1.POST("/environments/:id/work/:wid/heartbeat", a.workHeartbeat)
	v1.POST("/environments/:id/work/:wid/stop", a.workStop)

	v1.POST("/sessions", a.sessionCreate)
	v1.GET("/sessions", a.sessionList)
	v1.GET("/sessions/:id", a.sessionGet)
	v1.POST("/sessions/:id", a.sessionUpdate)
	v1.POST("/sessions/:id/archive", a.sessionArchive)
	v1.DELETE("/sessions/:id", a.sessionDelete)
	v1.POST("/sessions/:id/events", a.eventSend)
	v1.GET("/sessions/:id/events", a.eventList)
	v1.GET("/sessions/:id/events/stream", a.eventStream)
	v1.GET("/sessions/:id/threads", a.threadList)
	v1.GET("/sessions/:id/threads/:tid", a.threadGet)
	v1.POST("/sessions/:id/threads/:tid/archive", a.threadArchive)
	v1.GET("/sessions/:id/threads/:tid/events", a.threadEvents)
	v1.GET("/sessions/:id/threads/:tid/stream", a.threadStream)

	a.automationRoutes(v1)

	v1.POST("/files", a.fileUpload)
	v1.GET("/files", a.fileList)
	v1.GET("/files/:id", a.fileGet)
	v1.GET("/files/:id/content", a.fileContent)
	v1.DELETE("/files/:id", a.fileDelete)

	v1.POST("/skills", a.skillCreate)
	v1.GET("/skills", a.skillList)
	v1.GET("/skills/:id", a.skillGet)
	v1.DELETE("/skills/:id", a.skillDelete)
	v1.POST("/skills/:id/versions", a.skillVersionCreate)
	v1.GET("/skills/:id/versions", a.skillVersionList)
	v1.GET("/skills/:id/versions/:version", a.skillVersionGet)
	v1.DELETE("/skills/:id/versions/:version", a.skillVersionDelete)
	v1.GET("/skills/:id/versions/:version/content", a.skillVersionContent)

	v1.POST("/dreams", a.dreamCreate)
	v1.GET("/dreams", a.dreamList)
	v1.GET("/dreams/:id", a.dreamGet)
	v1.POST("/dreams/:id/cancel", a.dreamCancel)
	v1.POST("/dreams/:id/archive", a.dreamArchive)
	v1.POST("/memory_stores", a.memoryStoreCreate)
	v1.GET("/memory_stores", a.memoryStoreList)
	v1.GET("/memory_stores/:id", a.memoryStoreGet)
	v1.POST("/memory_stores/:id", a.memoryStoreUpdate)
	v1.DELETE("/memory_stores/:id", a.memoryStoreDelete)
	v1.POST("/memory_stores/:id/archive", a.memoryStoreArchive)
	v1.POST("/memory_stores/:id/memories", a.memoryCreate)
	v1.GET("/memory_stores/:id/memories", a.memoryList)
	v1.GET("/memory_stores/:id/memories/:memory", a.memoryGet)
	v1.POST("/memory_stores/:id/memories/:memory", a.memoryUpdate)
	v1.DELETE("/memory_stores/:id/memories/:memory", a.memoryDelete)
	v1.GET("/memory_stores/:id/memory_versions", a.memoryVersionList)
	v1.GET("/memory_stores/:id/memory_versions/:version", a.memoryVersionGet)
	v1.POST("/memory_stores/:id/memory_versions/:version/redact", a.memoryVersionRedact)
	v1.POST("/sessions/:id/resources", a.resourceAdd)
	v1.GET("/sessions/:id/resources", a.resourceList)
	v1.GET("/sessions/:id/resources/:rid", a.resourceGet)
	v1.POST("/sessions/:id/resources/:rid", a.resourceUpdate)
	v1.DELETE("/sessions/:id/resources/:rid", a.resourceDelete)

	v1.POST("/vaults", a.vaultCreate)
	v1.GET("/vaults", a.vaultList)
	v1.GET("/vaults/:id", a.vaultGet)
	v1.POST("/vaults/:id", a.vaultUpdate)
	v1.POST("/vaults/:id/archive", a.vaultArchive)
	v1.DELETE("/vaults/:id", a.vaultDelete)
	v1.POST("/vaults/:id/credentials", a.credentialCreate)
	v1.GET("/vaults/:id/credentials", a.credentialList)
	v1.GET("/vaults/:id/credentials/:cid", a.credentialGet)
	v1.POST("/vaults/:id/credentials/:cid", a.credentialUpdate)
	v1.POST("/vaults/:id/credentials/:cid/archive", a.credentialArchive)
	v1.POST("/vaults/:id/credentials/:cid/mcp_oauth_validate", a.credentialValidate)
	v1.DELETE("/vaults/:id/credentials/:cid", a.credentialDelete)
}

// automationRoutes are the routes of what runs without a client
// watching: webhook endpoints, deployments and their runs.
func (a *API) automationRoutes(v1 *echo.Group) {
	v1.POST("/organizations/webhooks", a.webhookCreate)
	v1.GET("/organizations/webhooks", a.webhookList)
	v1.GET("/organizations/webhooks/:id", a.webhookGet)
	v1.POST("/organizations/webhooks/:id", a.webhookUpdate)
	v1.DELETE("/organizations/webhooks/:id", a.webhookDelete)
	v1.POST("/organizations/webhooks/:id/regenerate_signing_secret", a.webhookRegenerateSecret)

	v1.POST("/deployments", a.deploymentCreate)
	v1.GET("/deployments", a.deploymentList)
	v1.GET("/deployments/:id", a.deploymentGet)
	v1.POST("/deployments/:id", a.deploymentUpdate)
	v1.POST("/deployments/:id/archive", a.deploymentArchive)
	v1.POST("/deployments/:id/pause", a.deploymentPause)
	v1.POST("/deployments/:id/unpause", a.deploymentUnpause)
	v1.POST("/deployments/:id/run", a.deploymentRun)
	v1.GET("/deployment_runs", a.deploymentRunList)
	v1.GET("/deployment_runs/:id", a.deploymentRunGet)
}

// Handler returns the http.Handler serving the API.
func (a *API) Handler() http.Handler { return a.echo }

// healthz answers liveness probes with the build that is running.
func healthz(c echo.Context) error {
	b := buildinfo.Get()
	return c.JSON(http.StatusOK, map[string]string{"status": "ok", "version": b.Version, "commit": b.Commit})
}

func (a *API) readyz(c echo.Context) error {
	if a.deps.Ready != nil {
		ctx, cancel := context.WithTimeout(c.Request().Context(), 3*time.Second)
		defer cancel()
		if err := a.deps.Ready(ctx); err != nil {
			return c.JSON(http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "reason": err.Error()})
		}
	}
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

// now returns the current time at the database's microsecond precision,
// so what a create returns equals what a later get reads.
func (a *API) now() time.Time {
	return a.deps.Now().UTC().Truncate(time.Microsecond)
}
