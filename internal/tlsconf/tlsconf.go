// Package tlsconf builds the *tls.Config of Mango's TLS connections from
// PEM files: the api-server's ControlPlane listener, the workers' client of
// it, and both services' Temporal clients. It lives in the shared internal
// module, beside the services, and uses the standard library only.
//
// Certificates and their keys are read again when their files change
// (modification time or size), at the next handshake that needs them, so a
// secret rotated in place (cert-manager renewing a mounted Kubernetes
// Secret) takes effect without a restart. While a changed pair cannot be
// loaded (half written, key and certificate not matching yet), the last
// good pair keeps being used. CA bundles are read once, when the
// configuration is built.
//
// The Check functions validate files at startup so that each service's
// configuration loader can name the variable at fault.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
)

// MinVersion is the oldest TLS version accepted on either side.
const MinVersion = tls.VersionTLS12

// Client is the TLS configuration of a client connection. The zero value
// is TLS verified against the system roots, presenting no certificate.
type Client struct {
	// CAFile is a PEM bundle of the CAs that verify the server; empty
	// means the system roots.
	CAFile string
	// CertFile and KeyFile hold the PEM certificate (chain) and private key
	// presented when the server asks for one (mutual TLS); both or neither.
	CertFile string
	KeyFile  string
	// ServerName overrides the name verified in the server's certificate;
	// empty means the host dialed.
	ServerName string
}

// Config returns the client *tls.Config. It reads the CA bundle now and the
// key pair now and whenever its files change.
func (c *Client) Config() (*tls.Config, error) {
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, errors.New("tlsconf: a client certificate needs both a certificate and a key file")
	}
	conf := &tls.Config{MinVersion: MinVersion, ServerName: c.ServerName}
	if c.CAFile != "" {
		pool, err := loadPool(c.CAFile)
		if err != nil {
			return nil, err
		}
		conf.RootCAs = pool
	}
	if c.CertFile != "" {
		kp, err := newKeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, err
		}
		conf.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return kp.get() }
	}
	return conf, nil
}

// MutualTLS reports whether the client presents a certificate.
func (c *Client) MutualTLS() bool { return c != nil && c.CertFile != "" }

// LogValue implements slog.LogValuer: whether TLS is on and the file paths,
// never their contents. A nil *Client logs as TLS off.
func (c *Client) LogValue() slog.Value {
	if c == nil {
		return slog.GroupValue(slog.Bool("enabled", false))
	}
	ca := c.CAFile
	if ca == "" {
		ca = "system roots"
	}
	return slog.GroupValue(
		slog.Bool("enabled", true),
		slog.String("ca_file", ca),
		slog.Bool("mtls", c.MutualTLS()),
		slog.String("cert_file", c.CertFile),
		slog.String("key_file", c.KeyFile),
		slog.String("server_name", c.ServerName),
	)
}

// Server is the TLS configuration of a listener.
type Server struct {
	// CertFile and KeyFile hold the server's PEM certificate (chain) and
	// private key; both are required.
	CertFile string
	KeyFile  string
	// ClientCAFile, when set, is a PEM bundle of the CAs that sign client
	// certificates: every client must present one (mutual TLS).
	ClientCAFile string
}

// Config returns the server *tls.Config. It reads the client CA bundle now
// and the key pair now and whenever its files change.
func (s *Server) Config() (*tls.Config, error) {
	if s.CertFile == "" || s.KeyFile == "" {
		return nil, errors.New("tlsconf: a server needs both a certificate and a key file")
	}
	kp, err := newKeyPair(s.CertFile, s.KeyFile)
	if err != nil {
		return nil, err
	}
	conf := &tls.Config{
		MinVersion:     MinVersion,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return kp.get() },
	}
	if s.ClientCAFile != "" {
		pool, err := loadPool(s.ClientCAFile)
		if err != nil {
			return nil, err
		}
		conf.ClientCAs = pool
		conf.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return conf, nil
}

// MutualTLS reports whether the server requires client certificates.
func (s *Server) MutualTLS() bool { return s != nil && s.ClientCAFile != "" }

// LogValue implements slog.LogValuer: whether TLS is on and the file paths,
// never their contents. A nil *Server logs as TLS off.
func (s *Server) LogValue() slog.Value {
	if s == nil {
		return slog.GroupValue(slog.Bool("enabled", false))
	}
	return slog.GroupValue(
		slog.Bool("enabled", true),
		slog.String("cert_file", s.CertFile),
		slog.String("key_file", s.KeyFile),
		slog.Bool("mtls", s.MutualTLS()),
		slog.String("client_ca_file", s.ClientCAFile),
	)
}

// CheckCAFile reports whether path is a readable PEM file holding at least
// one certificate, every one of which parses.
func CheckCAFile(path string) error {
	_, err := loadPool(path)
	return err
}

// CheckKeyPair validates a certificate file and its key file, returning one
// error per file at fault (nil when it is fine): certErr when certFile is
// unreadable or holds no parsable PEM certificate, keyErr when keyFile is
// unreadable, holds no parsable PEM private key, or holds a key that does
// not match the certificate. Messages name the files, never their contents.
func CheckKeyPair(certFile, keyFile string) (certErr, keyErr error) {
	certPEM, certErr := readCertificates(certFile)
	keyPEM, keyErr := readKey(keyFile)
	if certErr == nil && keyErr == nil {
		if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
			keyErr = fmt.Errorf("the private key in %s does not match the certificate in %s", keyFile, certFile)
		}
	}
	return certErr, keyErr
}

// loadPool reads a PEM CA bundle.
func loadPool(path string) (*x509.CertPool, error) {
	data, err := readCertificates(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(data)
	return pool, nil
}

// readCertificates reads a PEM file and checks that it holds at least one
// certificate and that every certificate in it parses.
func readCertificates(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read certificates: %w", err)
	}
	n := 0
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		n++
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return nil, fmt.Errorf("certificate %d in %s: %w", n, path, err)
		}
	}
	if n == 0 {
		return nil, fmt.Errorf("no PEM certificate in %s", path)
	}
	return data, nil
}

// readKey reads a PEM file and checks that it holds a private key that
// parses.
func readKey(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read private key: %w", err)
	}
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, fmt.Errorf("no PEM private key in %s", path)
		}
		if block.Type != "PRIVATE KEY" && !strings.HasSuffix(block.Type, " PRIVATE KEY") {
			continue
		}
		if !parsesAsKey(block.Bytes) {
			return nil, fmt.Errorf("the private key in %s does not parse (want PKCS #8, PKCS #1 or SEC 1)", path)
		}
		return data, nil
	}
}

// parsesAsKey reports whether der is a private key in one of the forms
// crypto/tls accepts.
func parsesAsKey(der []byte) bool {
	if _, err := x509.ParsePKCS8PrivateKey(der); err == nil {
		return true
	}
	if _, err := x509.ParsePKCS1PrivateKey(der); err == nil {
		return true
	}
	_, err := x509.ParseECPrivateKey(der)
	return err == nil
}

var (
	_ slog.LogValuer = (*Client)(nil)
	_ slog.LogValuer = (*Server)(nil)
)
