package sandboxdaytona_test

import (
	"testing"

	"github.com/mangohq/mango/execution-worker/sandbox/sandboxtest"
)

func TestPutFileStreams(t *testing.T) {
	f := newFake(t)
	sb, ref := create(t, newProvider(t, f), "stream")
	sandboxtest.CheckStreamingTransfer(t, sb, func(p string) (int64, string, bool) {
		u, ok := f.Upload(ref.ID, p)
		return u.Bytes, u.SHA256, ok
	})
}

func TestSessionPaths(t *testing.T) {
	f := newFake(t)
	sb, _ := create(t, newProvider(t, f), "paths")
	sandboxtest.CheckSessionPaths(t, sb)
}
