package gittest_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/mangohq/mango/execution-worker/gitrepo/gittest"
)

func TestServerAdvertisesRefs(t *testing.T) {
	t.Parallel()
	s := gittest.Start(t)
	url := s.AddRepo(t, "owner/repo", map[string]string{"README.md": "hello\n"})
	main := s.Head(t, "owner/repo", gittest.DefaultBranch)
	if len(main) != 40 {
		t.Fatalf("Head(main) = %q, want a 40-character SHA", main)
	}
	feature := s.Commit(t, "owner/repo", "feature", map[string]string{"a/b.txt": "b\n"})
	if feature == main || s.Head(t, "owner/repo", "feature") != feature {
		t.Fatalf("Commit(feature) = %q, Head(feature) = %q, Head(main) = %q: want a new commit on feature", feature, s.Head(t, "owner/repo", "feature"), main)
	}

	body := get(t, url+"/info/refs?service=git-upload-pack", "", http.StatusOK)
	for _, want := range []string{main + " refs/heads/main", feature + " refs/heads/feature", "allow-reachable-sha1-in-want"} {
		if !strings.Contains(body, want) {
			t.Errorf("ref advertisement lacks %q:\n%s", want, body)
		}
	}
}

func TestCommitSHAsAreStable(t *testing.T) {
	t.Parallel()
	a, b := gittest.Start(t), gittest.Start(t)
	files := map[string]string{"x": "1", "dir/y": "2"}
	a.AddRepo(t, "r", files)
	b.AddRepo(t, "other", files)
	if ha, hb := a.Head(t, "r", "main"), b.Head(t, "other", "main"); ha != hb {
		t.Fatalf("same files gave commits %s and %s, want one SHA", ha, hb)
	}
}

func TestRequireToken(t *testing.T) {
	t.Parallel()
	s := gittest.Start(t)
	url := s.AddRepo(t, "private", map[string]string{"f": "x"}, gittest.RequireToken("s3cret"))
	refs := url + "/info/refs?service=git-upload-pack"

	resp := do(t, refs, "")
	if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic") {
		t.Errorf("without a token: status %d, WWW-Authenticate %q; want 401 and Basic", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	get(t, refs, "wrong", http.StatusUnauthorized)
	get(t, refs, "s3cret", http.StatusOK)
}

func TestRequireCredentials(t *testing.T) {
	t.Parallel()
	s := gittest.Start(t)
	url := s.AddRepo(t, "private", map[string]string{"f": "x"}, gittest.RequireCredentials("x-access-token", "s3cret"))
	refs := url + "/info/refs?service=git-upload-pack"
	get(t, refs, "s3cret", http.StatusOK) // do sends username x-access-token

	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, refs, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth("someone", "s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("right password, wrong username: status %d, want 401", resp.StatusCode)
	}
}

func TestUnknownRepoIsNotFound(t *testing.T) {
	t.Parallel()
	s := gittest.Start(t)
	get(t, s.RepoURL("missing")+"/info/refs?service=git-upload-pack", "", http.StatusNotFound)
}

func TestDenySHA1InWant(t *testing.T) {
	t.Parallel()
	s := gittest.Start(t)
	url := s.AddRepo(t, "old", map[string]string{"f": "x"}, gittest.DenySHA1InWant())
	body := get(t, url+"/info/refs?service=git-upload-pack", "", http.StatusOK)
	if strings.Contains(body, "sha1-in-want") {
		t.Errorf("ref advertisement offers fetching by SHA, want it denied:\n%s", body)
	}
}

func do(t *testing.T, url, token string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.SetBasicAuth("x-access-token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

func get(t *testing.T, url, token string, wantStatus int) string {
	t.Helper()
	resp := do(t, url, token)
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read body: %v", url, err)
	}
	if resp.StatusCode != wantStatus {
		t.Fatalf("GET %s (token %t): status %d, want %d: %s", url, token != "", resp.StatusCode, wantStatus, body)
	}
	return string(body)
}
