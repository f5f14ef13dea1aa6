package app_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/mangohq/mango/api-server/internal/testserver"
	"github.com/mangohq/mango/internal/tlsconf"
	"github.com/mangohq/mango/internal/tlsconf/tlsconftest"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// TestControlPlaneServed checks that the api-server serves the ControlPlane
// on MANGO_GRPC_ADDR behind MANGO_WORKER_TOKEN.
func TestControlPlaneServed(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	conn, err := grpc.NewClient(srv.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	client := pb.NewControlPlaneClient(conn)
	req := &pb.RecordWorkerHeartbeatRequest{WorkerId: "w1", Provider: "local", TaskQueues: []string{"mango.local"}}

	_, err = client.RecordWorkerHeartbeat(context.Background(), req)
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("heartbeat without token: %v, want Unauthenticated", err)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+srv.WorkerToken)
	if _, err := client.RecordWorkerHeartbeat(ctx, req); err != nil {
		t.Errorf("heartbeat with token: %v", err)
	}
}

// TestControlPlaneTLS checks that with MANGO_GRPC_TLS_CERT_FILE and
// MANGO_GRPC_TLS_KEY_FILE the ControlPlane serves TLS only, and with
// MANGO_GRPC_TLS_CLIENT_CA_FILE also requires a client certificate of
// that CA.
func TestControlPlaneTLS(t *testing.T) {
	t.Parallel()
	pki := tlsconftest.New(t)
	serverTLS := []testserver.Option{
		testserver.WithEnv("MANGO_GRPC_TLS_CERT_FILE", pki.Server.CertFile),
		testserver.WithEnv("MANGO_GRPC_TLS_KEY_FILE", pki.Server.KeyFile),
	}
	tlsSrv := testserver.Start(t, serverTLS...)
	mtlsSrv := testserver.Start(t, append(serverTLS, testserver.WithEnv("MANGO_GRPC_TLS_CLIENT_CA_FILE", pki.CA.CertFile))...)
	rightCA := tlsconf.Client{CAFile: pki.CA.CertFile}
	withCert := tlsconf.Client{CAFile: pki.CA.CertFile, CertFile: pki.Client.CertFile, KeyFile: pki.Client.KeyFile}
	otherCert := tlsconf.Client{CAFile: pki.CA.CertFile, CertFile: pki.OtherClient.CertFile, KeyFile: pki.OtherClient.KeyFile}
	tests := []struct {
		name   string
		srv    *testserver.Server
		client *tlsconf.Client // nil: plaintext
		want   codes.Code
		// wantMsg are substrings the error must contain.
		wantMsg []string
	}{
		{name: "client trusting the CA", srv: tlsSrv, client: &rightCA, want: codes.OK},
		{name: "client trusting another CA", srv: tlsSrv, client: &tlsconf.Client{CAFile: pki.OtherCA.CertFile},
			want: codes.Unavailable, wantMsg: []string{"certificate", "authority"}},
		{name: "plaintext client", srv: tlsSrv, want: codes.Unavailable},
		{name: "mutual TLS with the client certificate", srv: mtlsSrv, client: &withCert, want: codes.OK},
		{name: "mutual TLS without a client certificate", srv: mtlsSrv, client: &rightCA, want: codes.Unavailable},
		{name: "mutual TLS with a client certificate of another CA", srv: mtlsSrv, client: &otherCert, want: codes.Unavailable},
		{name: "mutual TLS, plaintext client", srv: mtlsSrv, want: codes.Unavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			creds := insecure.NewCredentials()
			if tt.client != nil {
				conf, err := tt.client.Config()
				if err != nil {
					t.Fatal(err)
				}
				creds = credentials.NewTLS(conf)
			}
			conn, err := grpc.NewClient(tt.srv.GRPCAddr, grpc.WithTransportCredentials(creds))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = conn.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tt.srv.WorkerToken)
			_, err = pb.NewControlPlaneClient(conn).RecordWorkerHeartbeat(ctx,
				&pb.RecordWorkerHeartbeatRequest{WorkerId: "w1", Provider: "local", TaskQueues: []string{"mango.local"}})
			if got := status.Code(err); got != tt.want {
				t.Fatalf("heartbeat: %v (code %v), want code %v", err, got, tt.want)
			}
			for _, w := range tt.wantMsg {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("heartbeat error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// TestShutdownEndsPreviewStreams checks that a graceful stop ends the
// workers' long-lived preview streams (they reconnect elsewhere) instead
// of waiting for them until MANGO_SHUTDOWN_TIMEOUT, which would outlast a
// pod's termination grace period and end in SIGKILL.
func TestShutdownEndsPreviewStreams(t *testing.T) {
	t.Parallel()
	const timeout = 60 * time.Second
	srv := testserver.Start(t, testserver.WithEnv("MANGO_SHUTDOWN_TIMEOUT", timeout.String()))
	conn, err := grpc.NewClient(srv.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+srv.WorkerToken)
	stream, err := pb.NewControlPlaneClient(conn).StreamPreviews(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&pb.StreamPreviewsRequest{}); err != nil {
		t.Fatal(err)
	}
	// A heartbeat round trip proves the stream's RPC is being served.
	if _, err := pb.NewControlPlaneClient(conn).RecordWorkerHeartbeat(ctx, &pb.RecordWorkerHeartbeatRequest{
		WorkerId: "w1", Provider: "local", TaskQueues: []string{"mango.local"}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := srv.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if took := time.Since(start); took > timeout/4 {
		t.Errorf("shutdown with an open preview stream took %v, want far less than MANGO_SHUTDOWN_TIMEOUT=%v", took, timeout)
	}
	if _, err := stream.CloseAndRecv(); status.Code(err) != codes.Unavailable {
		t.Errorf("preview stream after shutdown: %v, want Unavailable (reconnect)", err)
	}
}

// TestShutdownEndsInterruptStreams: a graceful stop ends the workers'
// interrupt streams with UNAVAILABLE (they reconnect elsewhere) instead of
// holding the drain until MANGO_SHUTDOWN_TIMEOUT.
func TestShutdownEndsInterruptStreams(t *testing.T) {
	t.Parallel()
	const timeout = 60 * time.Second
	srv := testserver.Start(t, testserver.WithEnv("MANGO_SHUTDOWN_TIMEOUT", timeout.String()))
	conn, err := grpc.NewClient(srv.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+srv.WorkerToken)
	stream, err := pb.NewControlPlaneClient(conn).WatchInterrupts(ctx, &pb.WatchInterruptsRequest{WorkerId: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Header(); err != nil { // subscribed
		t.Fatalf("watch interrupts: %v", err)
	}
	start := time.Now()
	if err := srv.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if took := time.Since(start); took > timeout/4 {
		t.Errorf("shutdown with an open interrupt stream took %v, want far less than MANGO_SHUTDOWN_TIMEOUT=%v", took, timeout)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("interrupt stream after shutdown: %v, want Unavailable (reconnect)", err)
	}
}

// TestShutdownClosesUnusedConnections: a connection that has not sent a
// request (HTTP clients open such connections speculatively) does not
// hold a graceful stop: without the fix, http.Server.Shutdown waits five
// seconds for it, past this server's MANGO_SHUTDOWN_TIMEOUT of 3s.
func TestShutdownClosesUnusedConnections(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t, testserver.WithEnv("MANGO_SHUTDOWN_TIMEOUT", "3s"))
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.BaseURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	// A request on another connection proves the server took the idle one
	// in (accepted before it).
	resp, err := http.Get(srv.BaseURL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if err := srv.Stop(); err != nil {
		t.Fatalf("graceful stop with an unused connection open: %v", err)
	}
	// The unused connection was closed by the server.
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Fatal("the unused connection is still open after the stop")
	}
}
