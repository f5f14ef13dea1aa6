// Package tlsconftest generates throwaway certificates for tests of TLS
// connections: CAs, server certificates for 127.0.0.1 and localhost, and
// client certificates, written as PEM files under the test's temporary
// directory. Keys are ECDSA P-256 and certificates are valid for a day.
package tlsconftest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// PKI is a CA with a server and a client certificate, and an unrelated CA
// with a client certificate of its own.
type PKI struct {
	// CA signs Server and Client.
	CA *CA
	// OtherCA is unrelated to CA: nothing it signs verifies against CA,
	// and CA's certificates do not verify against it.
	OtherCA *CA
	// Server is a server certificate for 127.0.0.1, ::1 and localhost,
	// signed by CA.
	Server Pair
	// Client is a client certificate signed by CA.
	Client Pair
	// OtherClient is a client certificate signed by OtherCA.
	OtherClient Pair
}

// New generates a PKI.
func New(t testing.TB) *PKI {
	t.Helper()
	ca, other := NewCA(t, "mango test CA"), NewCA(t, "unrelated test CA")
	return &PKI{CA: ca, OtherCA: other, Server: ca.Server(t, "server"), Client: ca.Client(t, "client"),
		OtherClient: other.Client(t, "other-client")}
}

// CheckClientConfig checks that conf, a client's TLS configuration, trusts
// p.CA and only it, verifies the name serverName and presents p.Client.
// It fails the test otherwise.
func (p *PKI) CheckClientConfig(t testing.TB, conf *tls.Config, serverName string) {
	t.Helper()
	if conf == nil {
		t.Fatal("no TLS config, want one")
	}
	if conf.ServerName != serverName {
		t.Errorf("ServerName = %q, want %q", conf.ServerName, serverName)
	}
	if conf.MinVersion < tls.VersionTLS12 {
		t.Errorf("MinVersion = %x, want at least TLS 1.2", conf.MinVersion)
	}
	if conf.InsecureSkipVerify {
		t.Error("InsecureSkipVerify is set, want the server verified")
	}
	opts := x509.VerifyOptions{Roots: conf.RootCAs, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}
	if _, err := leaf(t, p.Server).Verify(opts); err != nil {
		t.Errorf("a certificate of the CA does not verify against RootCAs: %v", err)
	}
	if _, err := leaf(t, p.OtherClient).Verify(opts); err == nil {
		t.Error("a certificate of another CA verifies against RootCAs, want only the configured CA trusted")
	}
	if conf.GetClientCertificate == nil {
		t.Fatal("GetClientCertificate is nil, want the client certificate")
	}
	cert, err := conf.GetClientCertificate(&tls.CertificateRequestInfo{})
	if err != nil {
		t.Fatalf("GetClientCertificate: %v", err)
	}
	if cert.Leaf == nil || cert.Leaf.SerialNumber.Cmp(p.Client.Serial) != 0 {
		t.Errorf("client certificate %v, want serial %v", cert.Leaf, p.Client.Serial)
	}
}

func leaf(t testing.TB, p Pair) *x509.Certificate {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(p.CertFile, p.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	return cert.Leaf
}

// CA is a certificate authority whose certificate is in CertFile.
type CA struct {
	// CertFile is the CA certificate as PEM (a CA bundle of one).
	CertFile string

	name string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	dir  string
}

// Pair is a certificate and its key, as PEM files.
type Pair struct {
	// CertFile holds the certificate.
	CertFile string
	// KeyFile holds the private key (PKCS #8).
	KeyFile string
	// Serial is the certificate's serial number.
	Serial *big.Int

	usage x509.ExtKeyUsage
}

// NewCA generates a self-signed CA named name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          newSerial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("create CA certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ca := &CA{CertFile: filepath.Join(dir, "ca.crt"), name: name, cert: cert, key: key, dir: dir}
	writePEM(t, ca.CertFile, "CERTIFICATE", der)
	return ca
}

// Server issues a server certificate for 127.0.0.1, ::1 and localhost,
// written to <name>.crt and <name>.key.
func (ca *CA) Server(t testing.TB, name string) Pair {
	t.Helper()
	p := Pair{CertFile: filepath.Join(ca.dir, name+".crt"), KeyFile: filepath.Join(ca.dir, name+".key"), usage: x509.ExtKeyUsageServerAuth}
	return ca.issue(t, p)
}

// Client issues a client certificate (common name name), written to
// <name>.crt and <name>.key.
func (ca *CA) Client(t testing.TB, name string) Pair {
	t.Helper()
	p := Pair{CertFile: filepath.Join(ca.dir, name+".crt"), KeyFile: filepath.Join(ca.dir, name+".key"), usage: x509.ExtKeyUsageClientAuth}
	return ca.issue(t, p)
}

// Reissue replaces p's files with a new certificate of the same kind and a
// new key, the way cert-manager renews a mounted Secret: each file is
// written aside and renamed over the old one. The new files' modification
// time is a second past the old ones', so that even a file system with
// coarse timestamps shows the change.
func (ca *CA) Reissue(t testing.TB, p Pair) Pair {
	t.Helper()
	fi, err := os.Stat(p.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	next := ca.issue(t, p)
	later := fi.ModTime().Add(time.Second)
	for _, f := range []string{next.CertFile, next.KeyFile} {
		if err := os.Chtimes(f, later, later); err != nil {
			t.Fatal(err)
		}
	}
	return next
}

// issue writes a new certificate and key to p's files.
func (ca *CA) issue(t testing.TB, p Pair) Pair {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: newSerial(t),
		Subject:      pkix.Name{CommonName: filepath.Base(p.CertFile)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{p.usage},
	}
	if p.usage == x509.ExtKeyUsageServerAuth {
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("issue %s from %s: %v", p.CertFile, ca.name, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, p.CertFile, "CERTIFICATE", der)
	writePEM(t, p.KeyFile, "PRIVATE KEY", keyDER)
	p.Serial = tmpl.SerialNumber
	return p
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func newSerial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// writePEM writes one PEM block to path through a temporary file renamed
// over it, so a reader never sees half a file.
func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
