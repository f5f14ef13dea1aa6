package fakeapi_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mangohq/mango/execution-worker/sandbox/internal/fakeapi"
)

func TestFaultsHitTheNextMatchingRequests(t *testing.T) {
	var rec fakeapi.Recorder
	rec.Inject(fakeapi.Fault{Method: http.MethodGet, Path: "/boxes/", N: 2, Status: 503, RetryAfter: "1"})
	get := httptest.NewRequest(http.MethodGet, "/v1/boxes/a", nil)
	del := httptest.NewRequest(http.MethodDelete, "/v1/boxes/a", nil)
	if f := rec.Take(del); f != nil {
		t.Errorf("DELETE hit the GET fault %+v", f)
	}
	for i := range 2 {
		if f := rec.Take(get); f == nil || f.Status != 503 {
			t.Fatalf("GET %d: fault %+v, want the 503", i, f)
		}
	}
	if f := rec.Take(get); f != nil {
		t.Errorf("third GET hit %+v; the fault was for two", f)
	}
	if got := rec.Count(http.MethodGet, "/boxes/"); got != 3 {
		t.Errorf("Count(GET) = %d, want 3", got)
	}
	if got := rec.Count("", "/v1/"); got != 4 {
		t.Errorf("Count(any) = %d, want 4", got)
	}

	w := httptest.NewRecorder()
	fault := fakeapi.Fault{Status: 429, RetryAfter: "2"}
	fault.Write(w, "{", func(w http.ResponseWriter, status int, msg string) {
		fakeapi.WriteJSON(w, status, map[string]string{"m": msg})
	})
	if w.Code != 429 || w.Header().Get("Retry-After") != "2" || !strings.Contains(w.Body.String(), "injected fault") {
		t.Errorf("error answer: %d %q %q", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
	w = httptest.NewRecorder()
	fault = fakeapi.Fault{Truncated: true}
	fault.Write(w, `{"a": "`, nil)
	if w.Code != 200 || w.Header().Get("Content-Length") != "4096" || w.Body.String() != `{"a": "` {
		t.Errorf("truncated answer: %d %q %q", w.Code, w.Header().Get("Content-Length"), w.Body)
	}
}

func TestStoreRecordsSizeAndDigest(t *testing.T) {
	var rec fakeapi.Recorder
	file := filepath.Join(t.TempDir(), "f")
	if err := rec.Store("box:/f", file, strings.NewReader("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	u, ok := rec.Upload("box:/f")
	// sha256("hello")
	if !ok || u.Bytes != 5 || u.SHA256 != "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824" {
		t.Errorf("Upload = %+v, %v", u, ok)
	}
	if b, _ := os.ReadFile(file); string(b) != "hello" {
		t.Errorf("file holds %q", b)
	}
	if _, ok := rec.Upload("box:/g"); ok {
		t.Error("Upload of a path never stored reported ok")
	}
}

func TestHostPath(t *testing.T) {
	for p, want := range map[string]string{
		"/mnt/session/outputs/a.txt": "/tmp/box/mnt/session/outputs/a.txt",
		"/mnt/session":               "/tmp/box/mnt/session",
		"/mnt/sessions/x":            "/mnt/sessions/x",
		"/tmp/box/work/../a":         "/tmp/box/a",
	} {
		if got := fakeapi.HostPath("/tmp/box", p); got != want {
			t.Errorf("HostPath(%q) = %q, want %q", p, got, want)
		}
	}
	if a, b := fakeapi.RandomHex(8), fakeapi.RandomHex(8); len(a) != 16 || a == b {
		t.Errorf("RandomHex(8) = %q then %q: want 16 hex digits, different each time", a, b)
	}
}

func TestQueryIntAndMatches(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/x?limit=7&bad=x", nil)
	for _, tc := range []struct {
		name string
		want int
	}{{"limit", 7}, {"bad", -1}, {"absent", 100}} {
		if got := fakeapi.QueryInt(r, tc.name, 100); got != tc.want {
			t.Errorf("QueryInt(%s) = %d, want %d", tc.name, got, tc.want)
		}
	}
	labels := map[string]string{"a": "1", "b": "2"}
	if !fakeapi.Matches(labels, url.Values{"a": {"1"}}) || !fakeapi.Matches(labels, nil) {
		t.Error("Matches = false for a subset of the labels, want true")
	}
	if fakeapi.Matches(labels, url.Values{"a": {"2"}}) || fakeapi.Matches(labels, url.Values{"c": {"3"}}) {
		t.Error("Matches = true for a different or a missing label, want false")
	}
}
