// Package controlplane connects an execution worker to the api-server's
// ControlPlane gRPC service (proto/mango/controlplane/v1), adding the
// shared worker token to every call. Workers reach all persistent state
// through it; they never import the db module.
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// Client is a ControlPlane client stub over one connection.
type Client struct {
	pb.ControlPlaneClient
	conn *grpc.ClientConn
}

// Dial returns a client of the ControlPlane at addr (host:port) that sends
// "authorization: Bearer <token>" with every call. The connection is
// established lazily, on the first call.
func Dial(addr, token string, opts ...grpc.DialOption) (*Client, error) {
	if token == "" {
		return nil, errors.New("controlplane: worker token is empty (MANGO_WORKER_TOKEN)")
	}
	opts = append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(bearer(token)),
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
	return &Client{ControlPlaneClient: pb.NewControlPlaneClient(conn), conn: conn}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// bearer is per-call credentials carrying the worker token. It allows
// plaintext connections: the ControlPlane listens on a private network
// unless TLS is configured in front of it.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }
