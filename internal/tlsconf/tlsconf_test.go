package tlsconf_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mangohq/mango/internal/tlsconf"
	"github.com/mangohq/mango/internal/tlsconf/tlsconftest"
)

// result is what each side of one handshake saw.
type result struct {
	clientErr, serverErr error
	// serverSerial is the serial of the certificate the server presented,
	// clientSerial that of the client's (nil when none).
	serverSerial, clientSerial *big.Int
}

// handshake connects a client with clientConf to a 127.0.0.1 server with
// serverConf; the server writes one byte once its handshake succeeded and
// the client reads it, so that with TLS 1.3 a client certificate the server
// refuses also fails the client.
func handshake(t *testing.T, serverConf, clientConf *tls.Config) result {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type side struct {
		err    error
		serial *big.Int
	}
	serverDone := make(chan side, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			serverDone <- side{err: err}
			return
		}
		defer func() { _ = conn.Close() }()
		tc := tls.Server(conn, serverConf)
		if err := tc.HandshakeContext(ctx); err != nil {
			serverDone <- side{err: err}
			return
		}
		var s side
		if peers := tc.ConnectionState().PeerCertificates; len(peers) > 0 {
			s.serial = peers[0].SerialNumber
		}
		_, s.err = tc.Write([]byte{1})
		serverDone <- s
	}()
	var r result
	d := &tls.Dialer{Config: clientConf}
	conn, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err == nil {
		tc := conn.(*tls.Conn)
		r.serverSerial = tc.ConnectionState().PeerCertificates[0].SerialNumber
		_, err = io.ReadFull(tc, make([]byte, 1))
		_ = conn.Close()
	}
	r.clientErr = err
	s := <-serverDone
	r.serverErr, r.clientSerial = s.err, s.serial
	return r
}

func serverConfig(t *testing.T, s tlsconf.Server) *tls.Config {
	t.Helper()
	conf, err := s.Config()
	if err != nil {
		t.Fatalf("Server%+v.Config() = %v", s, err)
	}
	return conf
}

func clientConfig(t *testing.T, c tlsconf.Client) *tls.Config {
	t.Helper()
	conf, err := c.Config()
	if err != nil {
		t.Fatalf("Client%+v.Config() = %v", c, err)
	}
	return conf
}

func TestHandshakes(t *testing.T) {
	t.Parallel()
	pki := tlsconftest.New(t)
	plain := tlsconf.Server{CertFile: pki.Server.CertFile, KeyFile: pki.Server.KeyFile}
	mutual := plain
	mutual.ClientCAFile = pki.CA.CertFile
	var unknownAuthority x509.UnknownAuthorityError
	var hostname x509.HostnameError
	tests := []struct {
		name   string
		server tlsconf.Server
		client tlsconf.Client
		// ok means both sides succeed; otherwise wantClient/wantServer
		// check the errors.
		ok         bool
		wantClient func(error) bool
		wantServer string
	}{
		{name: "client verifies the server against the CA", server: plain,
			client: tlsconf.Client{CAFile: pki.CA.CertFile}, ok: true},
		{name: "server name override", server: plain,
			client: tlsconf.Client{CAFile: pki.CA.CertFile, ServerName: "localhost"}, ok: true},
		{name: "wrong CA is refused", server: plain,
			client:     tlsconf.Client{CAFile: pki.OtherCA.CertFile},
			wantClient: func(err error) bool { return errors.As(err, &unknownAuthority) }},
		{name: "no CA file means the system roots, not no verification", server: plain,
			client:     tlsconf.Client{},
			wantClient: func(err error) bool { return err != nil && strings.Contains(err.Error(), "certificate") }},
		{name: "a server name the certificate does not cover is refused", server: plain,
			client:     tlsconf.Client{CAFile: pki.CA.CertFile, ServerName: "api.example.com"},
			wantClient: func(err error) bool { return errors.As(err, &hostname) }},
		{name: "mutual TLS with the client certificate", server: mutual,
			client: tlsconf.Client{CAFile: pki.CA.CertFile, CertFile: pki.Client.CertFile, KeyFile: pki.Client.KeyFile}, ok: true},
		{name: "mutual TLS refuses a client without a certificate", server: mutual,
			client:     tlsconf.Client{CAFile: pki.CA.CertFile},
			wantClient: func(err error) bool { return err != nil }, wantServer: "certificate"},
		{name: "mutual TLS refuses a client certificate of another CA", server: mutual,
			client:     tlsconf.Client{CAFile: pki.CA.CertFile, CertFile: pki.OtherClient.CertFile, KeyFile: pki.OtherClient.KeyFile},
			wantClient: func(err error) bool { return err != nil }, wantServer: "unknown authority"},
		{name: "a client certificate is not asked for without a client CA", server: plain,
			client: tlsconf.Client{CAFile: pki.CA.CertFile, CertFile: pki.OtherClient.CertFile, KeyFile: pki.OtherClient.KeyFile}, ok: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := handshake(t, serverConfig(t, tt.server), clientConfig(t, tt.client))
			if tt.ok {
				if r.clientErr != nil || r.serverErr != nil {
					t.Fatalf("handshake: client error %v, server error %v; want both to succeed", r.clientErr, r.serverErr)
				}
				if r.serverSerial.Cmp(pki.Server.Serial) != 0 {
					t.Errorf("server presented serial %v, want %v", r.serverSerial, pki.Server.Serial)
				}
				if tt.server.ClientCAFile != "" && (r.clientSerial == nil || r.clientSerial.Cmp(pki.Client.Serial) != 0) {
					t.Errorf("client presented serial %v, want %v", r.clientSerial, pki.Client.Serial)
				}
				return
			}
			if !tt.wantClient(r.clientErr) {
				t.Errorf("client error = %v, not the expected one", r.clientErr)
			}
			if tt.wantServer != "" && (r.serverErr == nil || !strings.Contains(r.serverErr.Error(), tt.wantServer)) {
				t.Errorf("server error = %v, want one mentioning %q", r.serverErr, tt.wantServer)
			}
		})
	}
}

func TestMinVersion(t *testing.T) {
	t.Parallel()
	pki := tlsconftest.New(t)
	server := serverConfig(t, tlsconf.Server{CertFile: pki.Server.CertFile, KeyFile: pki.Server.KeyFile})
	client := clientConfig(t, tlsconf.Client{CAFile: pki.CA.CertFile})
	if server.MinVersion != tls.VersionTLS12 || client.MinVersion != tls.VersionTLS12 {
		t.Errorf("MinVersion server %x client %x, want %x", server.MinVersion, client.MinVersion, tls.VersionTLS12)
	}
	client.MinVersion, client.MaxVersion = tls.VersionTLS11, tls.VersionTLS11
	if r := handshake(t, server, client); r.serverErr == nil {
		t.Error("a TLS 1.1 client was accepted, want it refused")
	}
}

func TestServerReloadsRotatedCertificate(t *testing.T) {
	t.Parallel()
	pki := tlsconftest.New(t)
	server := serverConfig(t, tlsconf.Server{CertFile: pki.Server.CertFile, KeyFile: pki.Server.KeyFile})
	client := clientConfig(t, tlsconf.Client{CAFile: pki.CA.CertFile})
	first := handshake(t, server, client)
	if first.clientErr != nil || first.serverSerial.Cmp(pki.Server.Serial) != 0 {
		t.Fatalf("first handshake: err %v, serial %v; want serial %v", first.clientErr, first.serverSerial, pki.Server.Serial)
	}
	rotated := pki.CA.Reissue(t, pki.Server)
	next := handshake(t, server, client)
	if next.clientErr != nil {
		t.Fatalf("handshake after rotation: %v", next.clientErr)
	}
	if next.serverSerial.Cmp(rotated.Serial) != 0 {
		t.Errorf("after rotation the server presented serial %v, want the new %v (old %v)", next.serverSerial, rotated.Serial, pki.Server.Serial)
	}
}

func TestClientReloadsRotatedCertificate(t *testing.T) {
	t.Parallel()
	pki := tlsconftest.New(t)
	server := serverConfig(t, tlsconf.Server{CertFile: pki.Server.CertFile, KeyFile: pki.Server.KeyFile, ClientCAFile: pki.CA.CertFile})
	client := clientConfig(t, tlsconf.Client{CAFile: pki.CA.CertFile, CertFile: pki.Client.CertFile, KeyFile: pki.Client.KeyFile})
	if r := handshake(t, server, client); r.serverErr != nil || r.clientSerial.Cmp(pki.Client.Serial) != 0 {
		t.Fatalf("first handshake: err %v, client serial %v; want %v", r.serverErr, r.clientSerial, pki.Client.Serial)
	}
	rotated := pki.CA.Reissue(t, pki.Client)
	r := handshake(t, server, client)
	if r.serverErr != nil {
		t.Fatalf("handshake after rotation: %v", r.serverErr)
	}
	if r.clientSerial.Cmp(rotated.Serial) != 0 {
		t.Errorf("after rotation the client presented serial %v, want the new %v (old %v)", r.clientSerial, rotated.Serial, pki.Client.Serial)
	}
}

func TestHalfWrittenRotationKeepsTheLastGoodPair(t *testing.T) {
	t.Parallel()
	pki := tlsconftest.New(t)
	server := serverConfig(t, tlsconf.Server{CertFile: pki.Server.CertFile, KeyFile: pki.Server.KeyFile})
	client := clientConfig(t, tlsconf.Client{CAFile: pki.CA.CertFile})
	// A new key without its certificate yet: the pair does not match.
	other := pki.CA.Server(t, "next")
	key, err := os.ReadFile(other.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pki.Server.KeyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(pki.Server.KeyFile, later, later); err != nil {
		t.Fatal(err)
	}
	if r := handshake(t, server, client); r.clientErr != nil || r.serverSerial.Cmp(pki.Server.Serial) != 0 {
		t.Errorf("half-rotated handshake: err %v, serial %v; want the old pair (serial %v)", r.clientErr, r.serverSerial, pki.Server.Serial)
	}
	// The certificate arrives: the next handshake uses the new pair.
	cert, err := os.ReadFile(other.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pki.Server.CertFile, cert, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(pki.Server.CertFile, later, later); err != nil {
		t.Fatal(err)
	}
	if r := handshake(t, server, client); r.clientErr != nil || r.serverSerial.Cmp(other.Serial) != 0 {
		t.Errorf("completed rotation: err %v, serial %v; want the new pair (serial %v)", r.clientErr, r.serverSerial, other.Serial)
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	pki := tlsconftest.New(t)
	missing := filepath.Join(t.TempDir(), "missing.pem")
	tests := []struct {
		name string
		conf func() (*tls.Config, error)
	}{
		{"client CA missing", (&tlsconf.Client{CAFile: missing}).Config},
		{"client CA without a certificate", (&tlsconf.Client{CAFile: pki.Client.KeyFile}).Config},
		{"client certificate without key", (&tlsconf.Client{CertFile: pki.Client.CertFile}).Config},
		{"client key mismatch", (&tlsconf.Client{CertFile: pki.Client.CertFile, KeyFile: pki.Server.KeyFile}).Config},
		{"server without key", (&tlsconf.Server{CertFile: pki.Server.CertFile}).Config},
		{"server certificate missing", (&tlsconf.Server{CertFile: missing, KeyFile: pki.Server.KeyFile}).Config},
		{"server client CA missing", (&tlsconf.Server{CertFile: pki.Server.CertFile, KeyFile: pki.Server.KeyFile, ClientCAFile: missing}).Config},
	}
	for _, tt := range tests {
		if _, err := tt.conf(); err == nil {
			t.Errorf("%s: Config() succeeded, want an error", tt.name)
		}
	}
}

func TestCheckKeyPair(t *testing.T) {
	t.Parallel()
	pki := tlsconftest.New(t)
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.pem")
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name              string
		cert, key         string
		wantCert, wantKey string // "" means no error
	}{
		{"matching pair", pki.Server.CertFile, pki.Server.KeyFile, "", ""},
		{"missing certificate", missing, pki.Server.KeyFile, "no such file", ""},
		{"key given as the certificate", pki.Server.KeyFile, pki.Server.KeyFile, "no PEM certificate in " + pki.Server.KeyFile, ""},
		{"certificate given as the key", pki.Server.CertFile, pki.Server.CertFile, "", "no PEM private key in " + pki.Server.CertFile},
		{"key of another certificate", pki.Server.CertFile, pki.Client.KeyFile, "", "does not match the certificate in " + pki.Server.CertFile},
		{"key that does not parse", pki.Server.CertFile, garbage, "", "does not parse"},
		{"both wrong", missing, missing, "no such file", "no such file"},
	}
	for _, tt := range tests {
		certErr, keyErr := tlsconf.CheckKeyPair(tt.cert, tt.key)
		check := func(which string, err error, want string) {
			switch {
			case want == "" && err != nil:
				t.Errorf("%s: %s error = %v, want none", tt.name, which, err)
			case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
				t.Errorf("%s: %s error = %v, want one containing %q", tt.name, which, err, want)
			}
		}
		check("certificate", certErr, tt.wantCert)
		check("key", keyErr, tt.wantKey)
	}
}

func TestCheckCAFile(t *testing.T) {
	t.Parallel()
	pki := tlsconftest.New(t)
	dir := t.TempDir()
	corrupt := filepath.Join(dir, "corrupt.pem")
	if err := os.WriteFile(corrupt, []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, want string
	}{
		{"CA", pki.CA.CertFile, ""},
		{"a leaf certificate is a bundle too", pki.Server.CertFile, ""},
		{"missing", filepath.Join(dir, "nope.pem"), "no such file"},
		{"no certificate", pki.Client.KeyFile, "no PEM certificate"},
		{"certificate that does not parse", corrupt, "certificate 1 in " + corrupt},
	}
	for _, tt := range tests {
		err := tlsconf.CheckCAFile(tt.path)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: CheckCAFile = %v, want nil", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: CheckCAFile = %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
}

func TestLogValue(t *testing.T) {
	t.Parallel()
	var buf strings.Builder
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	log.Info("tls", "off", (*tlsconf.Client)(nil), "server_off", (*tlsconf.Server)(nil),
		"client", &tlsconf.Client{CertFile: "/c.crt", KeyFile: "/c.key", ServerName: "api"},
		"server", &tlsconf.Server{CertFile: "/s.crt", KeyFile: "/s.key", ClientCAFile: "/ca.crt"})
	out := buf.String()
	for _, want := range []string{
		`"off":{"enabled":false}`, `"server_off":{"enabled":false}`,
		`"client":{"enabled":true,"ca_file":"system roots","mtls":true,"cert_file":"/c.crt","key_file":"/c.key","server_name":"api"}`,
		`"server":{"enabled":true,"cert_file":"/s.crt","key_file":"/s.key","mtls":true,"client_ca_file":"/ca.crt"}`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log output %s does not contain %s", out, want)
		}
	}
}
