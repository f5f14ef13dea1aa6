package gitrepo_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mangohq/mango/execution-worker/gitrepo"
	"github.com/mangohq/mango/execution-worker/gitrepo/gittest"
)

// fixture is a server with a public repository "acme/widget" (main and a
// branch "feature") and a private one "acme/secret" that wants the token as
// GitHub does: password token, username x-access-token.
type fixture struct {
	srv                                 *gittest.Server
	public, private                     string // URLs
	first, second, third, feature, priv string // commit SHAs
}

const token = "ghs_S3cretTokenValue0123456789"

func newFixture(t *testing.T) fixture {
	t.Helper()
	s := gittest.Start(t)
	f := fixture{srv: s}
	f.public = s.AddRepo(t, "acme/widget", map[string]string{"README.md": "v1\n", "src/main.go": "package main\n"})
	f.first = s.Head(t, "acme/widget", "main")
	f.second = s.Commit(t, "acme/widget", "main", map[string]string{"README.md": "v2\n"})
	f.feature = s.Commit(t, "acme/widget", "feature", map[string]string{"FEATURE": "yes\n"})
	f.third = s.Commit(t, "acme/widget", "main", map[string]string{"README.md": "v3\n"})
	f.private = s.AddRepo(t, "acme/secret", map[string]string{"secret.txt": "hidden\n"}, gittest.RequireCredentials("x-access-token", token))
	f.priv = s.Head(t, "acme/secret", "main")
	return f
}

func TestClone(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tests := []struct {
		name       string
		opt        gitrepo.Options
		want       gitrepo.Result
		files      map[string]string // must exist with this content
		absent     []string          // must not exist
		wantCommit int               // commits git log shows (shallow: 1)
	}{{
		name:       "default branch",
		opt:        gitrepo.Options{URL: f.public},
		want:       gitrepo.Result{Commit: f.third, Branch: "main"},
		files:      map[string]string{"README.md": "v3\n", "src/main.go": "package main\n"},
		absent:     []string{"FEATURE"},
		wantCommit: 1,
	}, {
		name:       "branch",
		opt:        gitrepo.Options{URL: f.public, Branch: "feature"},
		want:       gitrepo.Result{Commit: f.feature, Branch: "feature"},
		files:      map[string]string{"README.md": "v2\n", "FEATURE": "yes\n"},
		wantCommit: 1,
	}, {
		name:       "commit",
		opt:        gitrepo.Options{URL: f.public, Commit: f.second},
		want:       gitrepo.Result{Commit: f.second},
		files:      map[string]string{"README.md": "v2\n", "src/main.go": "package main\n"},
		absent:     []string{"FEATURE"},
		wantCommit: 1, // fetched by SHA, depth 1
	}, {
		name:       "root commit",
		opt:        gitrepo.Options{URL: f.public, Commit: f.first},
		want:       gitrepo.Result{Commit: f.first},
		files:      map[string]string{"README.md": "v1\n", "src/main.go": "package main\n"},
		wantCommit: 1,
	}, {
		name:       "commit on another branch",
		opt:        gitrepo.Options{URL: f.public, Commit: f.feature},
		want:       gitrepo.Result{Commit: f.feature},
		files:      map[string]string{"README.md": "v2\n", "FEATURE": "yes\n"},
		wantCommit: 1,
	}, {
		name:       "commit in upper case",
		opt:        gitrepo.Options{URL: f.public, Commit: strings.ToUpper(f.first)},
		want:       gitrepo.Result{Commit: f.first},
		files:      map[string]string{"README.md": "v1\n"},
		wantCommit: 1,
	}, {
		name:       "private repository with the token",
		opt:        gitrepo.Options{URL: f.private, Token: token},
		want:       gitrepo.Result{Commit: f.priv, Branch: "main"},
		files:      map[string]string{"secret.txt": "hidden\n"},
		wantCommit: 1,
	}, {
		name:       "private repository at a commit",
		opt:        gitrepo.Options{URL: f.private, Token: token, Commit: f.priv},
		want:       gitrepo.Result{Commit: f.priv},
		files:      map[string]string{"secret.txt": "hidden\n"},
		wantCommit: 1,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "widget")
			got, err := gitrepo.Clone(t.Context(), tt.opt, dir)
			if err != nil {
				t.Fatalf("Clone: %v", err)
			}
			if got != tt.want {
				t.Errorf("Clone = %+v, want %+v", got, tt.want)
			}
			checkFiles(t, dir, tt.files, tt.absent)
			checkRepo(t, dir, tt.want, tt.opt.URL, tt.wantCommit)
		})
	}
}

// TestCloneCommitWithoutSHA1InWant checks the fallback for servers that do
// not let a client fetch a commit by SHA: the commit still comes, with its
// history.
func TestCloneCommitWithoutSHA1InWant(t *testing.T) {
	t.Parallel()
	s := gittest.Start(t)
	url := s.AddRepo(t, "old", map[string]string{"f": "1"}, gittest.DenySHA1InWant())
	first := s.Head(t, "old", "main")
	second := s.Commit(t, "old", "main", map[string]string{"f": "2"})
	s.Commit(t, "old", "main", map[string]string{"f": "3"})

	dir := t.TempDir()
	got, err := gitrepo.Clone(t.Context(), gitrepo.Options{URL: url, Commit: second}, dir)
	if err != nil {
		t.Fatalf("Clone: %v", err)
	}
	want := gitrepo.Result{Commit: second}
	if got != want {
		t.Errorf("Clone = %+v, want %+v", got, want)
	}
	checkFiles(t, dir, map[string]string{"f": "2"}, nil)
	checkRepo(t, dir, want, url, 2)
	if out := git(t, dir, "rev-list", "--max-parents=0", "HEAD"); out != first {
		t.Errorf("root commit = %q, want %q", out, first)
	}
}

func TestCloneErrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	missingSHA := strings.Repeat("ab", 20)
	tests := []struct {
		name string
		opt  gitrepo.Options
		want error
	}{
		{"private without a token", gitrepo.Options{URL: f.private}, gitrepo.ErrAuth},
		{"private with a wrong token", gitrepo.Options{URL: f.private, Token: "wrong-" + token}, gitrepo.ErrAuth},
		{"private commit with a wrong token", gitrepo.Options{URL: f.private, Token: "wrong-" + token, Commit: f.priv}, gitrepo.ErrAuth},
		{"unknown repository", gitrepo.Options{URL: f.srv.RepoURL("acme/nothing")}, gitrepo.ErrRepoNotFound},
		{"unknown repository at a commit", gitrepo.Options{URL: f.srv.RepoURL("acme/nothing"), Commit: f.first}, gitrepo.ErrRepoNotFound},
		{"unknown branch", gitrepo.Options{URL: f.public, Branch: "nope"}, gitrepo.ErrBranchNotFound},
		{"unknown commit", gitrepo.Options{URL: f.public, Commit: missingSHA}, gitrepo.ErrCommitNotFound},
		{"empty repository", gitrepo.Options{URL: f.srv.AddRepo(t, "acme/empty", nil)}, gitrepo.ErrEmptyRepo},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "repo")
			_, err := gitrepo.Clone(t.Context(), tt.opt, dir)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Clone error = %v, want one matching %q", err, tt.want)
			}
			msg := err.Error()
			t.Logf("error: %s", msg)
			if !strings.HasPrefix(msg, "clone "+tt.opt.URL+": ") {
				t.Errorf("error %q does not start with %q", msg, "clone "+tt.opt.URL+": ")
			}
			if strings.Contains(msg, token) {
				t.Errorf("error %q contains the token", msg)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("after a failed clone, stat %s: %v; want the directory removed", dir, err)
			}
		})
	}
}

func TestCloneInvalidOptions(t *testing.T) {
	t.Parallel()
	const secret = "p4ssw0rd"
	tests := []struct {
		name string
		opt  gitrepo.Options
	}{
		{"ssh scp form", gitrepo.Options{URL: "git@github.com:acme/widget.git"}},
		{"ssh scheme", gitrepo.Options{URL: "ssh://git@github.com/acme/widget.git"}},
		{"file scheme", gitrepo.Options{URL: "file:///etc"}},
		{"no host", gitrepo.Options{URL: "https:///acme/widget"}},
		{"no path", gitrepo.Options{URL: "https://github.com"}},
		{"credentials in the URL", gitrepo.Options{URL: "https://user:" + secret + "@github.com/acme/widget"}},
		{"query", gitrepo.Options{URL: "https://github.com/acme/widget?x=1"}},
		{"branch and commit", gitrepo.Options{URL: "https://github.com/acme/widget", Branch: "main", Commit: strings.Repeat("a", 40)}},
		{"short commit", gitrepo.Options{URL: "https://github.com/acme/widget", Commit: "abc1234"}},
		{"full ref as branch", gitrepo.Options{URL: "https://github.com/acme/widget", Branch: "refs/heads/main"}},
		{"branch with ..", gitrepo.Options{URL: "https://github.com/acme/widget", Branch: "a..b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "repo")
			_, err := gitrepo.Clone(t.Context(), tt.opt, dir)
			if !errors.Is(err, gitrepo.ErrInvalidOptions) {
				t.Fatalf("Clone error = %v, want one matching %q", err, gitrepo.ErrInvalidOptions)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error %q contains the URL's password", err)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("stat %s: %v; want no directory for invalid options", dir, err)
			}
		})
	}
}

func TestCloneIntoNonEmptyDir(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	dir := t.TempDir()
	keep := filepath.Join(dir, "keep")
	if err := os.WriteFile(keep, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := gitrepo.Clone(t.Context(), gitrepo.Options{URL: f.public}, dir)
	if !errors.Is(err, gitrepo.ErrDirNotEmpty) {
		t.Fatalf("Clone error = %v, want one matching %q", err, gitrepo.ErrDirNotEmpty)
	}
	checkFiles(t, dir, map[string]string{"keep": "mine"}, []string{".git"})
}

func TestCloneFailureEmptiesExistingDir(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	dir := t.TempDir()
	_, err := gitrepo.Clone(t.Context(), gitrepo.Options{URL: f.public, Commit: strings.Repeat("cd", 20)}, dir)
	if !errors.Is(err, gitrepo.ErrCommitNotFound) {
		t.Fatalf("Clone error = %v, want one matching %q", err, gitrepo.ErrCommitNotFound)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 0 {
		t.Errorf("after a failed clone, %s has %d entries (%v), want it kept and empty", dir, len(entries), err)
	}
}

func TestCloneCancelled(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	dir := filepath.Join(t.TempDir(), "repo")
	for _, opt := range []gitrepo.Options{{URL: f.public}, {URL: f.public, Commit: f.first}} {
		_, err := gitrepo.Clone(ctx, opt, dir)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Clone(%+v) with a cancelled context: error = %v, want one matching context.Canceled", opt, err)
		}
	}
}

// TestCloneCancelledWhileWaiting cancels a clone while the server holds the
// request: Clone must return instead of waiting for the server.
func TestCloneCancelledWhileWaiting(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := gitrepo.Clone(ctx, gitrepo.Options{URL: srv.URL + "/slow.git"}, filepath.Join(t.TempDir(), "repo"))
		done <- err
	}()
	<-entered
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Clone error = %v, want one matching context.Canceled", err)
	}
}

func TestRepoName(t *testing.T) {
	t.Parallel()
	tests := []struct{ url, want string }{
		{"https://github.com/acme/widget", "widget"},
		{"https://github.com/acme/widget.git", "widget"},
		{"https://github.com/acme/widget/", "widget"},
		{"https://github.com/acme/widget.git/", "widget"},
		{"http://127.0.0.1:8080/a/b/c.git", "c"},
		{"https://github.com/acme/my.repo", "my.repo"},
		{"https://github.com", ""},
		{"https://github.com/", ""},
		{"", ""},
	}
	for _, tt := range tests {
		if got := gitrepo.RepoName(tt.url); got != tt.want {
			t.Errorf("RepoName(%q) = %q, want %q", tt.url, got, tt.want)
		}
	}
}

func checkFiles(t *testing.T, dir string, files map[string]string, absent []string) {
	t.Helper()
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
		if err != nil {
			t.Errorf("read %s: %v", name, err)
			continue
		}
		if string(got) != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	for _, name := range absent {
		if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("stat %s: %v, want it absent", name, err)
		}
	}
}

// checkRepo checks with the git CLI that dir is a usable repository: HEAD as
// want says, a clean worktree, the history, and the remote without token.
func checkRepo(t *testing.T, dir string, want gitrepo.Result, url string, commits int) {
	t.Helper()
	if got := git(t, dir, "rev-parse", "HEAD"); got != want.Commit {
		t.Errorf("git rev-parse HEAD = %q, want %q", got, want.Commit)
	}
	branch := git(t, dir, "branch", "--show-current")
	if branch != want.Branch {
		t.Errorf("git branch --show-current = %q, want %q", branch, want.Branch)
	}
	if st := git(t, dir, "status", "--porcelain"); st != "" {
		t.Errorf("git status --porcelain = %q, want a clean worktree", st)
	}
	if n := len(strings.Split(git(t, dir, "log", "--format=%H"), "\n")); n != commits {
		t.Errorf("git log shows %d commits, want %d", n, commits)
	}
	if got := git(t, dir, "remote", "get-url", "origin"); got != url {
		t.Errorf("remote origin = %q, want %q", got, url)
	}
	cfg, err := os.ReadFile(filepath.Join(dir, ".git", "config"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(cfg), token) {
		t.Errorf(".git/config contains the token:\n%s", cfg)
	}
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}
