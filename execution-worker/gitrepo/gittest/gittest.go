// Package gittest serves git repositories over smart HTTP on 127.0.0.1 for
// tests, so that code which clones repositories can be tested offline.
//
// A [Server] runs Debian's git http-backend behind net/http/cgi. Repositories
// are bare repositories in a temporary directory, created and filled with the
// git command line; commits use a fixed author, committer and date, so the
// same files always give the same commit SHA.
//
// The package depends only on the standard library and package testenv, so
// it can move to wherever tests of several modules can import it.
//
// Without git or git-http-backend the tests that call [Start] are skipped,
// unless MANGO_REQUIRE_SERVICES=1, where they fail.
package gittest

import (
	"bytes"
	"io"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/mangohq/mango/internal/testenv"
)

// DefaultBranch is the branch HEAD names in every repository [Server.AddRepo]
// creates.
const DefaultBranch = "main"

// Server is a git smart-HTTP server on 127.0.0.1. Its methods are safe for
// concurrent use.
type Server struct {
	// URL is the server's base URL, "http://127.0.0.1:<port>".
	URL string

	git     string // path of the git binary
	backend string // path of git-http-backend
	root    string // GIT_PROJECT_ROOT: holds <name>.git bare repositories
	work    string // scratch space for building commits
	stderr  io.Writer

	mu    sync.Mutex
	creds map[string]credential // repository name -> what it requires
}

// RepoOption configures a repository created by [Server.AddRepo].
type RepoOption func(*repoConfig)

type repoConfig struct {
	cred      credential
	noSHAWant bool
}

// credential is what a private repository requires: a password, and a
// username when user is not "".
type credential struct{ user, password string }

// RequireToken makes the repository private: a request without HTTP basic
// auth whose password is token gets 401 with "WWW-Authenticate: Basic". The
// username is not checked.
func RequireToken(token string) RepoOption {
	return func(c *repoConfig) { c.cred = credential{password: token} }
}

// RequireCredentials is [RequireToken] that checks the username too.
func RequireCredentials(username, password string) RepoOption {
	return func(c *repoConfig) { c.cred = credential{user: username, password: password} }
}

// DenySHA1InWant makes the server refuse to fetch a commit by its SHA
// (uploadpack.allowReachableSHA1InWant false), as old servers do. By default a
// repository allows it, as GitHub does.
func DenySHA1InWant() RepoOption {
	return func(c *repoConfig) { c.noSHAWant = true }
}

// Start starts a server that stops when the test ends. It skips the test
// when git or git-http-backend is missing, unless MANGO_REQUIRE_SERVICES=1.
func Start(t testing.TB) *Server {
	t.Helper()
	gitPath, backend := findGit(t)
	s := &Server{
		git:     gitPath,
		backend: backend,
		root:    t.TempDir(),
		work:    t.TempDir(),
		creds:   map[string]credential{},
	}
	s.stderr = logWriter{t}
	srv := httptest.NewServer(http.HandlerFunc(s.serveHTTP))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

func findGit(t testing.TB) (gitPath, backend string) {
	t.Helper()
	missing := func(format string, args ...any) {
		t.Helper()
		testenv.Unavailable(t, "gittest: "+format+"; install git to run this test", args...)
	}
	gitPath, err := exec.LookPath("git")
	if err != nil {
		missing("git not found on PATH: %v", err)
		return "", ""
	}
	out, err := exec.Command(gitPath, "--exec-path").Output()
	if err != nil {
		missing("git --exec-path: %v", err)
		return "", ""
	}
	backend = filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	if st, err := os.Stat(backend); err != nil || st.IsDir() {
		missing("git-http-backend not found at %s", backend)
		return "", ""
	}
	return gitPath, backend
}

// RepoURL returns the URL of the repository called name, whether or not it
// exists: "<URL>/<name>.git".
func (s *Server) RepoURL(name string) string {
	return s.URL + "/" + name + ".git"
}

// AddRepo creates a bare repository called name (it may contain slashes, as
// in "owner/repo") whose default branch [DefaultBranch] has one commit with
// files (path -> content, paths separated by "/"), and returns its URL. With
// no files the repository is empty.
func (s *Server) AddRepo(t testing.TB, name string, files map[string]string, opts ...RepoOption) (url string) {
	t.Helper()
	var cfg repoConfig
	for _, o := range opts {
		o(&cfg)
	}
	dir := s.repoDir(name)
	if _, err := os.Stat(dir); err == nil {
		t.Fatalf("gittest: repository %q already exists", name)
	}
	s.run(t, "", "init", "--quiet", "--bare", "--initial-branch="+DefaultBranch, dir)
	s.run(t, dir, "config", "http.receivepack", "false")
	allow := "true"
	if cfg.noSHAWant {
		allow = "false"
	}
	s.run(t, dir, "config", "uploadpack.allowReachableSHA1InWant", allow)
	if cfg.cred.password != "" {
		s.mu.Lock()
		s.creds[name] = cfg.cred
		s.mu.Unlock()
	}
	if len(files) > 0 {
		s.Commit(t, name, DefaultBranch, files)
	}
	return s.RepoURL(name)
}

// Commit adds a commit to branch of repository name and returns its SHA. The
// commit's tree is the branch's tree with files (path -> content) added or
// replaced. A branch that does not exist yet starts from [DefaultBranch]
// (or from nothing when the repository is empty).
func (s *Server) Commit(t testing.TB, name, branch string, files map[string]string) (sha string) {
	t.Helper()
	dir := s.repoDir(name)
	work, err := os.MkdirTemp(s.work, "commit-")
	if err != nil {
		t.Fatalf("gittest: %v", err)
	}
	defer func() { _ = os.RemoveAll(work) }()
	tree := filepath.Join(work, "tree")
	env := []string{
		"GIT_WORK_TREE=" + tree,
		"GIT_INDEX_FILE=" + filepath.Join(work, "index"),
	}

	parent := s.resolve(t, dir, "refs/heads/"+branch)
	if parent == "" {
		parent = s.resolve(t, dir, "refs/heads/"+DefaultBranch)
	}
	if parent != "" {
		s.runEnv(t, dir, env, "read-tree", parent)
	}
	paths := make([]string, 0, len(files))
	for p, content := range files {
		full := filepath.Join(tree, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatalf("gittest: %v", err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatalf("gittest: %v", err)
		}
		paths = append(paths, p)
	}
	sort.Strings(paths)
	if len(paths) > 0 {
		s.runEnv(t, dir, env, append([]string{"add", "--"}, paths...)...)
	}
	treeSHA := s.runEnv(t, dir, env, "write-tree")
	args := []string{"commit-tree", treeSHA, "-m", "commit on " + branch + ": " + strings.Join(paths, ", ")}
	if parent != "" {
		args = append(args, "-p", parent)
	}
	sha = s.runEnv(t, dir, env, args...)
	s.run(t, dir, "update-ref", "refs/heads/"+branch, sha)
	return sha
}

// Head returns the SHA branch of repository name points to, or "" when the
// branch does not exist.
func (s *Server) Head(t testing.TB, name, branch string) string {
	t.Helper()
	return s.resolve(t, s.repoDir(name), "refs/heads/"+branch)
}

func (s *Server) resolve(t testing.TB, dir, ref string) string {
	t.Helper()
	cmd := s.command(dir, nil, "rev-parse", "--verify", "--quiet", ref+"^{commit}")
	out, err := cmd.Output()
	if err != nil {
		return "" // --quiet: exit status 1 and no output when ref is absent
	}
	return strings.TrimSpace(string(out))
}

func (s *Server) repoDir(name string) string {
	return filepath.Join(s.root, filepath.FromSlash(name)+".git")
}

func (s *Server) run(t testing.TB, dir string, args ...string) string {
	t.Helper()
	return s.runEnv(t, dir, nil, args...)
}

func (s *Server) runEnv(t testing.TB, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := s.command(dir, env, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("gittest: git %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// command builds a git command isolated from the user's configuration, with
// a fixed identity and date so that commit SHAs are reproducible.
func (s *Server) command(gitDir string, env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(s.git, args...)
	cmd.Env = append(baseEnv(),
		"GIT_AUTHOR_NAME=Mango Test",
		"GIT_AUTHOR_EMAIL=test@mango.invalid",
		"GIT_AUTHOR_DATE=2026-01-01T00:00:00Z",
		"GIT_COMMITTER_NAME=Mango Test",
		"GIT_COMMITTER_EMAIL=test@mango.invalid",
		"GIT_COMMITTER_DATE=2026-01-01T00:00:00Z",
	)
	if gitDir != "" {
		cmd.Env = append(cmd.Env, "GIT_DIR="+gitDir)
	}
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// baseEnv is the environment every git process gets: PATH and nothing from
// the user's or the system's git configuration.
func baseEnv() []string {
	return []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.TempDir(),
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=" + os.DevNull,
		"LANG=C",
	}
}

// serveHTTP checks the token of a private repository, then hands the request
// to git http-backend.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	name, _, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), ".git/")
	if !ok {
		http.NotFound(w, r)
		return
	}
	s.mu.Lock()
	want, private := s.creds[name]
	s.mu.Unlock()
	if _, err := os.Stat(s.repoDir(name)); err != nil {
		http.NotFound(w, r) // what http-backend answers, without its log line
		return
	}
	if private {
		user, password, ok := r.BasicAuth()
		if !ok || password != want.password || want.user != "" && user != want.user {
			w.Header().Set("WWW-Authenticate", `Basic realm="gittest"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
	}
	h := &cgi.Handler{
		Path: s.backend,
		Dir:  s.root,
		Env: append(baseEnv(),
			"GIT_PROJECT_ROOT="+s.root,
			"GIT_HTTP_EXPORT_ALL=1",
		),
		Stderr: s.stderr,
	}
	h.ServeHTTP(w, r)
}

// logWriter sends git-http-backend's diagnostics to the test log.
type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Logf("git-http-backend: %s", bytes.TrimRight(p, "\n"))
	return len(p), nil
}
