package pprofserve_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/mangohq/mango/internal/pprofserve"
)

// TestStart: the index and a heap profile answer on the bound address,
// and the server stops with its context.
func TestStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	addr, err := pprofserve.Start(ctx, "127.0.0.1:0", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + addr.String()
	for path, want := range map[string]string{"/debug/pprof/": "goroutine", "/debug/pprof/heap?debug=1": "heap profile"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), want) {
			t.Errorf("GET %s = %d, %.80q; want 200 with %q", path, resp.StatusCode, b, want)
		}
	}
	cancel()
	// Stopped: new connections are refused (Close is synchronous with the
	// listener, AfterFunc runs it promptly; poll briefly for the goroutine).
	for i := 0; ; i++ {
		_, err := http.Get(base + "/debug/pprof/")
		if err != nil {
			break
		}
		if i > 1000 {
			t.Fatal("still serving after the context ended")
		}
	}
	if _, err := pprofserve.Start(context.Background(), "127.0.0.1:bad", slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "MANGO_PPROF_ADDR") {
		t.Errorf("bad address: err = %v; want one naming MANGO_PPROF_ADDR", err)
	}
}
