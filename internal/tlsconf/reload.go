package tlsconf

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"
)

// keyPair is a certificate and key read from two files, read again when
// either file's modification time or size changes and cached otherwise.
type keyPair struct {
	certFile, keyFile string

	mu    sync.Mutex
	cert  *tls.Certificate
	stamp [2]fileStamp // of certFile and keyFile when cert was read
}

// fileStamp is what tells a changed file from an unchanged one.
type fileStamp struct {
	mod  time.Time
	size int64
}

// newKeyPair reads the pair once, so that a broken pair fails at startup
// rather than at the first handshake.
func newKeyPair(certFile, keyFile string) (*keyPair, error) {
	kp := &keyPair{certFile: certFile, keyFile: keyFile}
	if _, err := kp.get(); err != nil {
		return nil, err
	}
	return kp, nil
}

// get returns the current pair. When a file changed but the pair does not
// load (a rotation half written), it returns the last good pair and tries
// again next time.
func (kp *keyPair) get() (*tls.Certificate, error) {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	certStamp, certErr := stampOf(kp.certFile)
	keyStamp, keyErr := stampOf(kp.keyFile)
	if kp.cert != nil && certErr == nil && keyErr == nil && kp.stamp == [2]fileStamp{certStamp, keyStamp} {
		return kp.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(kp.certFile, kp.keyFile)
	if err != nil {
		if kp.cert != nil {
			return kp.cert, nil
		}
		return nil, fmt.Errorf("load key pair %s, %s: %w", kp.certFile, kp.keyFile, err)
	}
	kp.cert = &cert
	kp.stamp = [2]fileStamp{certStamp, keyStamp}
	return kp.cert, nil
}

func stampOf(path string) (fileStamp, error) {
	fi, err := os.Stat(path) // follows symlinks: a Secret volume swaps its ..data link
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{mod: fi.ModTime(), size: fi.Size()}, nil
}
