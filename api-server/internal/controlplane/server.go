// Package controlplane serves the internal gRPC ControlPlane API
// (proto/mango/controlplane/v1) that execution workers call: it loads what
// a run needs and commits complete events, transcript entries, tool journal
// entries, sandbox bindings and worker heartbeats to PostgreSQL through
// [db.Store]. Every call must carry the shared worker token.
package controlplane

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpccreds "google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/mangohq/mango/api-server/internal/broadcast"
	"github.com/mangohq/mango/api-server/internal/credentials"
	"github.com/mangohq/mango/api-server/internal/envelope"
	"github.com/mangohq/mango/api-server/internal/filestore"
	"github.com/mangohq/mango/api-server/internal/preview"
	"github.com/mangohq/mango/api-server/internal/usage"
	"github.com/mangohq/mango/db"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// MaxMessageBytes bounds one request message (transcript entries and tool
// results can be large).
const MaxMessageBytes = 32 << 20

// Deps are the service's dependencies.
type Deps struct {
	// Store is the api-server's database access.
	Store *db.Store
	// ServerOptions are added to the gRPC server's (tracing's stats
	// handler).
	ServerOptions []grpc.ServerOption
	// Token is the shared worker token (MANGO_WORKER_TOKEN). When empty,
	// every call is refused.
	Token string
	// Logger receives internal error causes.
	Logger *slog.Logger
	// Registry receives the service's metrics; nil means none.
	Registry prometheus.Registerer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Previews receives the preview frames workers stream; nil drops them.
	Previews PreviewSink
	// Interrupts hands WatchInterrupts the committed interrupts; nil
	// refuses WatchInterrupts with UNAVAILABLE (workers rely on Temporal's
	// cancellation alone).
	Interrupts InterruptSource
	// TLS, when not nil, makes NewGRPCServer serve over TLS with this
	// configuration (tlsconf.Server.Config); nil serves plaintext.
	TLS *tls.Config
	// Drain, when closed, ends the long-lived preview streams (workers
	// reconnect to another replica), so a graceful stop waits only for
	// unary calls; nil never drains.
	Drain <-chan struct{}
	// Prices is the model price table (MANGO_MODEL_PRICES); nil means the
	// defaults.
	Prices *usage.Table
	// Secrets opens sealed repository tokens for workers; nil holds no key.
	Secrets *envelope.Keyring
	// Files holds the bytes of Files; nil refuses the Files service's
	// calls.
	Files filestore.Blobs
	// FilesMaxBytes caps one published output (MANGO_FILES_MAX_BYTES).
	FilesMaxBytes int64
	// Wake, when set, signals a session's workflow at once after a call
	// wrote it a wake-up (outbox.Relay.Wake; the relay's poll delivers
	// what it misses): a session thread's, started or messaged by its
	// coordinator, and a session its thread's turn end owes one.
	Wake func(ctx context.Context, sessionID string)
	// EventWaits wakes AwaitToolResult when a session's events change
	// (fed by db.NotifyChannel); nil makes it look again every second.
	EventWaits *broadcast.Keyed
	// AllowPrivate lets credential refreshes reach token endpoints on
	// loopback, link-local and private addresses (MANGO_MCP_ALLOW_PRIVATE).
	AllowPrivate bool
}

// PreviewSink receives preview frames (implemented by *preview.Hub). Publish
// must not block.
type PreviewSink interface {
	Publish(frames []preview.Frame)
	// Sync waits, at most maxWait, until the wanted frames of previewed
	// events were received and reached the other replicas.
	Sync(ctx context.Context, wants []preview.Want, maxWait time.Duration)
}

// previewSyncWait bounds how long a commit waits for its event's preview
// frames: they normally arrive within a millisecond or two, but a worker's
// frames travel on another call than its commit.
const previewSyncWait = 200 * time.Millisecond

// Server implements pb.ControlPlaneServer over a [db.Store].
type Server struct {
	pb.UnimplementedControlPlaneServer

	store      *db.Store
	log        *slog.Logger
	now        func() time.Time
	metrics    *metrics
	previews   PreviewSink
	interrupts InterruptSource
	drain      <-chan struct{}
	prices     *usage.Table
	secrets    *envelope.Keyring
	files      filestore.Blobs
	eventWaits *broadcast.Keyed
	wake       func(ctx context.Context, sessionID string)
}

// wakeNow signals session sid's workflow at once when Deps.Wake is set.
func (s *Server) wakeNow(ctx context.Context, sid string) {
	if s.wake != nil {
		s.wake(context.WithoutCancel(ctx), sid)
	}
}

// New returns the ControlPlane service.
func New(d Deps) (*Server, error) {
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	m, err := newMetrics(d.Registry)
	if err != nil {
		return nil, err
	}
	if d.Prices == nil {
		d.Prices = usage.DefaultTable()
	}
	return &Server{store: d.Store, log: d.Logger, now: d.Now, metrics: m, previews: d.Previews, interrupts: d.Interrupts, drain: d.Drain, prices: d.Prices,
		secrets: d.Secrets, files: d.Files, eventWaits: d.EventWaits, wake: d.Wake}, nil
}

// NewGRPCServer returns a gRPC server with the ControlPlane service
// registered behind the worker-token check and request metrics, over TLS
// when d.TLS is set. A panic in
// a handler answers Internal (counted as such in the metrics) and is logged
// with its stack; the server keeps serving.
func NewGRPCServer(d Deps) (*grpc.Server, error) {
	svc, err := New(d)
	if err != nil {
		return nil, err
	}
	auth := newTokenAuth(d.Token, svc.log)
	rec := recoverer{log: svc.log}
	opts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(svc.metrics.unary, rec.unary, auth.unary),
		grpc.ChainStreamInterceptor(svc.metrics.stream, rec.stream, auth.stream),
		grpc.MaxRecvMsgSize(MaxMessageBytes),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}
	if d.TLS != nil {
		opts = append(opts, grpc.Creds(grpccreds.NewTLS(d.TLS)))
	}
	g := grpc.NewServer(append(opts, d.ServerOptions...)...)
	pb.RegisterControlPlaneServer(g, svc)
	pb.RegisterContextSnapshotsServer(g, &snapshotServer{s: svc})
	pb.RegisterFilesServer(g, newFileServer(svc, d.Files, d.FilesMaxBytes))
	pb.RegisterSessionResourcesServer(g, &resourceServer{s: svc})
	pb.RegisterSessionMemoryServer(g, &memoryServer{s: svc})
	pb.RegisterSessionThreadsServer(g, &threadServer{s: svc})
	pb.RegisterCredentialsServer(g, &credentialServer{s: svc, creds: &credentials.Service{Store: d.Store, Secrets: d.Secrets,
		HTTP: credentials.NewHTTPClient(d.AllowPrivate), Now: svc.now}})
	return g, nil
}

// fail turns a store error into the status a worker sees: sentinel errors
// become their codes with a public message, anything else is logged and
// answered with a generic internal error.
func (s *Server) fail(ctx context.Context, op string, err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, op+": canceled")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, op+": deadline exceeded")
	case db.Unavailable(err):
		// PostgreSQL is restarting or unreachable: workers retry.
		s.log.WarnContext(ctx, "controlplane: database unavailable", "op", op, "err", err)
		return status.Error(codes.Unavailable, op+": database unavailable, retry")
	case errors.Is(err, db.ErrDeleting):
		return status.Error(codes.FailedPrecondition, op+": session is being deleted")
	case errors.Is(err, db.ErrInvalidTransition):
		return status.Error(codes.FailedPrecondition, op+": the session's status does not allow this change")
	case errors.Is(err, db.ErrNotFound):
		return status.Error(codes.NotFound, op+": session not found")
	case errors.Is(err, db.ErrConflict):
		return status.Error(codes.Aborted, op+": concurrent update, retry")
	}
	s.log.ErrorContext(ctx, "controlplane: internal error", "op", op, "err", err)
	return status.Error(codes.Internal, op+": internal error")
}

func invalid(field, msg string) error {
	return status.Error(codes.InvalidArgument, field+": "+msg)
}

func requireSession(id string) error { return requireFields("session_id", id) }

// requireFields refuses the first empty value of the name, value pairs.
func requireFields(fields ...string) error {
	for i := 0; i+1 < len(fields); i += 2 {
		if fields[i+1] == "" {
			return invalid(fields[i], "required")
		}
	}
	return nil
}

// jsonObject validates a JSON object body; empty means {}.
func jsonObject(field, body string) (json.RawMessage, error) {
	if body == "" {
		return json.RawMessage(`{}`), nil
	}
	b := []byte(body)
	if !json.Valid(b) {
		return nil, invalid(field, "not valid JSON")
	}
	if trimmed := bytes.TrimLeft(b, " \t\r\n"); trimmed[0] == '{' {
		return b, nil
	}
	return nil, invalid(field, "must be a JSON object")
}

// jsonValue validates a required JSON value.
func jsonValue(field, body string) (json.RawMessage, error) {
	if body == "" {
		return nil, invalid(field, "required")
	}
	if !json.Valid([]byte(body)) {
		return nil, invalid(field, "not valid JSON")
	}
	return json.RawMessage(body), nil
}

var _ pb.ControlPlaneServer = (*Server)(nil)
