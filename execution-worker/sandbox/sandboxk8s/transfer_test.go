package sandboxk8s_test

import (
	"testing"

	"github.com/mangohq/mango/execution-worker/sandbox/sandboxtest"
)

func TestPutFileStreams(t *testing.T) {
	f := newFake(t)
	sb, ref := create(t, newProvider(t, f, nil), "stream")
	sandboxtest.CheckStreamingTransfer(t, sb, func(p string) (int64, string, bool) {
		u, ok := f.Upload(ns, name(ref), p)
		return u.Bytes, u.SHA256, ok
	})
}

func TestSessionPaths(t *testing.T) {
	f := newFake(t)
	sb, _ := create(t, newProvider(t, f, nil), "paths")
	sandboxtest.CheckSessionPaths(t, sb)
}
