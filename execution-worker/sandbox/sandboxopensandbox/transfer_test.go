package sandboxopensandbox_test

import (
	"testing"

	"github.com/mangohq/mango/execution-worker/sandbox/sandboxopensandbox/opensandboxfake"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxtest"
)

func TestPutFileStreams(t *testing.T) {
	fake := opensandboxfake.New(t)
	sb, ref := create(t, newProvider(t, fake), "stream")
	sandboxtest.CheckStreamingTransfer(t, sb, func(p string) (int64, string, bool) {
		u, ok := fake.Upload(ref.ID, p)
		return u.Bytes, u.SHA256, ok
	})
}

func TestSessionPaths(t *testing.T) {
	fake := opensandboxfake.New(t)
	sb, _ := create(t, newProvider(t, fake), "paths")
	sandboxtest.CheckSessionPaths(t, sb)
}
