// Package controlplane connects an execution worker to the api-server's
// ControlPlane gRPC service (proto/mango/controlplane/v1), adding the
// shared worker token to every call, over TLS when configured. Workers
// reach all persistent state through it; they never import the db module.
package controlplane

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// Client is a ControlPlane client stub over one connection.
type Client struct {
	pb.ControlPlaneClient
	// ContextSnapshots is served on the same connection.
	pb.ContextSnapshotsClient
	// SessionResources is served on the same connection.
	pb.SessionResourcesClient
	// FilesClient reaches the Files service on the same connection (read
	// it through [Files], which resumes broken streams).
	FilesClient pb.FilesClient
	// CredentialsClient reaches the Credentials service on the same
	// connection (use it through [MCPCredentials]).
	CredentialsClient pb.CredentialsClient
	// SessionMemoryClient reaches the SessionMemory service on the same
	// connection.
	SessionMemoryClient pb.SessionMemoryClient
	// SessionThreadsClient reaches the SessionThreads service on the
	// same connection.
	SessionThreadsClient pb.SessionThreadsClient
	conn                 *grpc.ClientConn
}

// MaxResponseBytes bounds one response message: GetRun carries the whole
// provider transcript, which outgrows gRPC's 4 MiB default in a long
// session (the model only ever sees its compacted projection).
const MaxResponseBytes = 256 << 20

// Dial returns a client of the ControlPlane at addr (host:port) that sends
// "authorization: Bearer <token>" with every call, over plaintext. The
// connection is established lazily, on the first call.
func Dial(addr, token string, opts ...grpc.DialOption) (*Client, error) {
	return DialTLS(addr, token, nil, opts...)
}

// DialTLS is Dial over TLS configured by tlsConf (tlsconf.Client.Config),
// or plaintext when tlsConf is nil. With TLS, the token's credentials
// require transport security, so gRPC refuses to send it over any
// connection that is not encrypted, even if opts replace the transport
// credentials.
func DialTLS(addr, token string, tlsConf *tls.Config, opts ...grpc.DialOption) (*Client, error) {
	if token == "" {
		return nil, errors.New("controlplane: worker token is empty (MANGO_WORKER_TOKEN)")
	}
	transport := insecure.NewCredentials()
	if tlsConf != nil {
		transport = credentials.NewTLS(tlsConf)
	}
	opts = append([]grpc.DialOption{
		grpc.WithTransportCredentials(transport),
		grpc.WithPerRPCCredentials(bearer{token: token, requireTLS: tlsConf != nil}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxResponseBytes)),
		// Reconnect within a second of the api-server coming back: gRPC's
		// default backoff grows to two minutes, so a restart of a few
		// seconds left turns waiting half a minute for the next attempt.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
	}, opts...)
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("controlplane: dial %s: %w", addr, err)
	}
	return &Client{ControlPlaneClient: pb.NewControlPlaneClient(conn), ContextSnapshotsClient: pb.NewContextSnapshotsClient(conn),
		SessionResourcesClient: pb.NewSessionResourcesClient(conn), FilesClient: pb.NewFilesClient(conn),
		CredentialsClient: pb.NewCredentialsClient(conn), SessionMemoryClient: pb.NewSessionMemoryClient(conn),
		SessionThreadsClient: pb.NewSessionThreadsClient(conn), conn: conn}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Loopback reports whether addr (host:port) names this machine: localhost
// or a loopback IP address. A plaintext connection to any other address
// sends the worker token across a network.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// bearer is per-call credentials carrying the worker token. Without TLS
// it allows plaintext connections (the ControlPlane may listen on a
// private network); with TLS it requires transport security, which gRPC
// enforces before sending it.
type bearer struct {
	token      string
	requireTLS bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

func (b bearer) RequireTransportSecurity() bool { return b.requireTLS }

var _ credentials.PerRPCCredentials = bearer{}
