package tlsconf

import (
	"testing"

	"github.com/mangohq/mango/internal/tlsconf/tlsconftest"
)

func TestKeyPairCachedUntilFilesChange(t *testing.T) {
	t.Parallel()
	pki := tlsconftest.New(t)
	kp, err := newKeyPair(pki.Server.CertFile, pki.Server.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	first, err := kp.get()
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := kp.get(); again != first {
		t.Error("get() read the unchanged files again, want the cached pair")
	}
	rotated := pki.CA.Reissue(t, pki.Server)
	next, err := kp.get()
	if err != nil {
		t.Fatal(err)
	}
	if next == first || next.Leaf.SerialNumber.Cmp(rotated.Serial) != 0 {
		t.Errorf("after rotation get() = serial %v, want the new %v", next.Leaf.SerialNumber, rotated.Serial)
	}
}
