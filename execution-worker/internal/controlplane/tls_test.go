package controlplane_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/mangohq/mango/execution-worker/internal/controlplane"
	"github.com/mangohq/mango/execution-worker/internal/cptest"
	"github.com/mangohq/mango/internal/tlsconf"
	"github.com/mangohq/mango/internal/tlsconf/tlsconftest"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

func clientTLS(t *testing.T, c *tlsconf.Client) *tls.Config {
	t.Helper()
	if c == nil {
		return nil
	}
	conf, err := c.Config()
	if err != nil {
		t.Fatalf("tlsconf.Client%+v.Config() = %v", *c, err)
	}
	return conf
}

func heartbeat(ctx context.Context, c *controlplane.Client) error {
	_, err := c.RecordWorkerHeartbeat(ctx, &pb.RecordWorkerHeartbeatRequest{WorkerId: "w-tls", Provider: "local", TaskQueues: []string{"mango.local"}})
	return err
}

// TestDialTLSToTheControlPlane runs the worker's client against a real
// api-server serving the ControlPlane over TLS (MANGO_GRPC_TLS_*), and
// over mutual TLS.
func TestDialTLSToTheControlPlane(t *testing.T) {
	t.Parallel()
	pki := tlsconftest.New(t)
	serverTLS := []string{"MANGO_GRPC_TLS_CERT_FILE=" + pki.Server.CertFile, "MANGO_GRPC_TLS_KEY_FILE=" + pki.Server.KeyFile}
	tlsSrv := cptest.Start(t, serverTLS...)
	mtlsSrv := cptest.Start(t, append(serverTLS, "MANGO_GRPC_TLS_CLIENT_CA_FILE="+pki.CA.CertFile)...)
	withCert := &tlsconf.Client{CAFile: pki.CA.CertFile, CertFile: pki.Client.CertFile, KeyFile: pki.Client.KeyFile}
	tests := []struct {
		name   string
		srv    *cptest.Server
		client *tlsconf.Client // nil: plaintext
		want   codes.Code
		// wantMsg are substrings the error must contain.
		wantMsg []string
	}{
		{name: "client trusting the CA", srv: tlsSrv, client: &tlsconf.Client{CAFile: pki.CA.CertFile}, want: codes.OK},
		{name: "server name override", srv: tlsSrv, client: &tlsconf.Client{CAFile: pki.CA.CertFile, ServerName: "localhost"}, want: codes.OK},
		{name: "client trusting another CA", srv: tlsSrv, client: &tlsconf.Client{CAFile: pki.OtherCA.CertFile},
			want: codes.Unavailable, wantMsg: []string{"certificate", "authority"}},
		{name: "server name the certificate does not cover", srv: tlsSrv, client: &tlsconf.Client{CAFile: pki.CA.CertFile, ServerName: "api.example.com"},
			want: codes.Unavailable, wantMsg: []string{"certificate"}},
		{name: "plaintext client", srv: tlsSrv, want: codes.Unavailable},
		{name: "mutual TLS with the client certificate", srv: mtlsSrv, client: withCert, want: codes.OK},
		{name: "mutual TLS without a client certificate", srv: mtlsSrv, client: &tlsconf.Client{CAFile: pki.CA.CertFile}, want: codes.Unavailable},
		{name: "mutual TLS with a client certificate of another CA", srv: mtlsSrv,
			client: &tlsconf.Client{CAFile: pki.CA.CertFile, CertFile: pki.OtherClient.CertFile, KeyFile: pki.OtherClient.KeyFile}, want: codes.Unavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := controlplane.DialTLS(tt.srv.GRPCAddr, tt.srv.WorkerToken, clientTLS(t, tt.client))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err = heartbeat(ctx, c)
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

// recorder is a TCP listener on 127.0.0.1 that keeps every byte its
// clients send. It greets each connection with an empty HTTP/2 SETTINGS
// frame, the server preface a plaintext gRPC client waits for before it
// sends a call's headers, and answers nothing else; to a TLS client the
// greeting is not a handshake, so the handshake fails.
type recorder struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	bytes []byte
}

func newRecorder(t *testing.T) *recorder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{ln: ln}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				r.record(conn)
			}()
		}
	}()
	t.Cleanup(r.stop)
	return r
}

// settingsFrame is an HTTP/2 SETTINGS frame with no settings: length 0,
// type 4, no flags, stream 0.
var settingsFrame = []byte{0, 0, 0, 4, 0, 0, 0, 0, 0}

func (r *recorder) record(conn net.Conn) {
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	_, _ = conn.Write(settingsFrame)
	buf := make([]byte, 4096)
	for {
		n, err := conn.Read(buf)
		r.mu.Lock()
		r.bytes = append(r.bytes, buf[:n]...)
		r.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// stop closes the listener and waits until every connection has ended
// (the client closed it), so that the bytes are complete.
func (r *recorder) stop() {
	_ = r.ln.Close()
	r.wg.Wait()
}

func (r *recorder) recorded() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.bytes)
}

// recordToken is the worker token of the recorder tests. HPACK sends a
// header value Huffman-coded when that is shorter; these characters have
// long Huffman codes, so "Bearer <token>" goes out literally and a
// plaintext client's bytes contain it as is.
const recordToken = "tok-~{<>}^|~{<>}^|~{<>}"

// recordCall makes one heartbeat through a client of the recorder with
// tlsConf (nil: plaintext), ending it once the token was seen or the
// client gave up, and returns every byte the recorder received.
func recordCall(t *testing.T, tlsConf *tls.Config) (recorded []byte, callErr error) {
	t.Helper()
	rec := newRecorder(t)
	c, err := controlplane.DialTLS(rec.ln.Addr().String(), recordToken, tlsConf)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- heartbeat(ctx, c) }()
	ticker := time.NewTicker(10 * time.Millisecond)
	defer ticker.Stop()
wait:
	for {
		select {
		case callErr = <-done:
			break wait
		case <-ticker.C:
			if bytes.Contains(rec.recorded(), []byte(recordToken)) {
				cancel()
				callErr = <-done
				break wait
			}
		}
	}
	_ = c.Close()
	rec.stop()
	return rec.recorded(), callErr
}

// TestTokenNeverCrossesPlaintextWithTLS checks that a client configured
// with TLS opens with a TLS ClientHello and never sends the token to a
// peer that is not a TLS server; and, so that the check can fail, that a
// plaintext client's bytes do carry the token.
func TestTokenNeverCrossesPlaintextWithTLS(t *testing.T) {
	t.Parallel()
	pki := tlsconftest.New(t)
	t.Run("TLS", func(t *testing.T) {
		t.Parallel()
		got, err := recordCall(t, clientTLS(t, &tlsconf.Client{CAFile: pki.CA.CertFile}))
		if status.Code(err) != codes.Unavailable {
			t.Errorf("call through a TLS client to a non-TLS peer = %v, want Unavailable", err)
		}
		// A TLS record of type handshake (0x16) whose message is a
		// ClientHello (type 1).
		if len(got) < 6 || got[0] != 0x16 || got[5] != 0x01 {
			t.Errorf("the TLS client's first bytes % x are not a TLS ClientHello", got[:min(len(got), 6)])
		}
		if bytes.Contains(got, []byte(recordToken)) {
			t.Errorf("the TLS client sent the worker token in plaintext: %q", got)
		}
	})
	t.Run("plaintext sanity check", func(t *testing.T) {
		t.Parallel()
		got, _ := recordCall(t, nil)
		if !bytes.Contains(got, []byte("Bearer "+recordToken)) {
			t.Errorf("a plaintext client's bytes do not contain the token, so the TLS check above proves nothing: %q", got)
		}
	})
}

// TestTLSTokenRequiresTransportSecurity checks that with TLS configured the
// token's credentials refuse a transport without security, even when a
// dial option replaces the TLS transport.
func TestTLSTokenRequiresTransportSecurity(t *testing.T) {
	t.Parallel()
	pki := tlsconftest.New(t)
	_, err := controlplane.DialTLS("127.0.0.1:1", "tok", clientTLS(t, &tlsconf.Client{CAFile: pki.CA.CertFile}),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err == nil || !strings.Contains(err.Error(), "transport") {
		t.Errorf("DialTLS with insecure transport credentials = %v, want gRPC to refuse the token without transport security", err)
	}
	if _, err := controlplane.Dial("127.0.0.1:1", "tok"); err != nil {
		t.Errorf("plaintext Dial = %v, want it allowed", err)
	}
}

func TestLoopback(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1:8081":         true,
		"127.1.2.3:8081":         true,
		"[::1]:8081":             true,
		"localhost:8081":         true,
		"LocalHost.:8081":        true,
		"api.localhost:8081":     true,
		"10.0.0.5:8081":          false,
		"[fd00::1]:8081":         false,
		"api-server:8081":        false,
		"api.mango.svc:8081":     false,
		"localhost.example:8081": false,
		"0.0.0.0:8081":           false,
	} {
		if got := controlplane.Loopback(addr); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
