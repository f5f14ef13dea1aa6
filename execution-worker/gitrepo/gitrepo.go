// Package gitrepo clones the git repositories a session mounts as
// github_repository resources, with the pure-Go go-git library (the worker
// image has no git binary).
//
// [Clone] produces a real repository: the .git directory is kept, so git log
// works wherever git exists, and the remote "origin" is the URL without any
// credential. Errors name the repository by that URL, never contain the
// token, and say what went wrong through sentinel errors ([ErrAuth],
// [ErrRepoNotFound], [ErrBranchNotFound], [ErrCommitNotFound], ...) that
// errors.Is matches.
package gitrepo

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
)

// Errors Clone returns, wrapped with the repository URL.
var (
	// ErrInvalidOptions reports Options Clone refuses before any network
	// access: a URL that is not http(s) or carries credentials, a branch and
	// a commit together, a commit that is not a full SHA.
	ErrInvalidOptions = errors.New("invalid repository options")
	// ErrAuth reports that the server asked for credentials (HTTP 401) or
	// refused the ones given (HTTP 403): the token is missing, wrong, or
	// lacks access. GitHub answers 404 instead for private repositories a
	// token cannot see; that is ErrRepoNotFound.
	ErrAuth = errors.New("authentication required or failed")
	// ErrRepoNotFound reports a repository the server does not have.
	ErrRepoNotFound = errors.New("repository not found")
	// ErrEmptyRepo reports a repository with no commits.
	ErrEmptyRepo = errors.New("repository is empty")
	// ErrBranchNotFound reports a branch the repository does not have.
	ErrBranchNotFound = errors.New("branch not found")
	// ErrCommitNotFound reports a commit that is not reachable from the
	// repository's branches and tags.
	ErrCommitNotFound = errors.New("commit not found")
	// ErrDirNotEmpty reports a target directory that already has entries.
	ErrDirNotEmpty = errors.New("target directory is not empty")
)

// TokenUsername is the HTTP basic auth username sent with Options.Token, the
// one GitHub expects with installation and personal access tokens.
const TokenUsername = "x-access-token"

// remoteName is the name of the remote Clone configures.
const remoteName = "origin"

// Options says what to clone. At most one of Branch and Commit is set; with
// neither, Clone checks out the remote's default branch.
type Options struct {
	// URL is the repository's https URL. http is accepted too, for tests and
	// for operators with in-cluster git servers; it sends the token in clear.
	// The URL must not contain credentials (user:password@).
	URL string
	// Branch, when set, is the branch to check out (a name such as "main",
	// not "refs/heads/main").
	Branch string
	// Commit, when set, is the full 40-character SHA of the commit to check
	// out, with a detached HEAD.
	Commit string
	// Token, when set, is sent as the HTTP basic auth password with the
	// username TokenUsername. It is not stored in the clone.
	Token string
}

// Result describes what Clone checked out.
type Result struct {
	// Commit is the SHA HEAD resolves to.
	Commit string
	// Branch is the branch HEAD is on, or "" for a detached HEAD (Commit
	// checkouts).
	Branch string
}

// Clone clones the repository opt describes into dir, which must be absent
// or an empty directory, and checks out a branch (shallow, depth 1), the
// default branch (shallow) or a commit (fetched by SHA with depth 1 when the
// server allows it, else with all branches and tags).
//
// Clone stops when ctx is done; the error then matches ctx.Err(). On any
// error Clone leaves dir as it found it: absent or empty.
func Clone(ctx context.Context, opt Options, dir string) (Result, error) {
	safe, err := checkOptions(opt)
	if err != nil {
		return Result{}, err
	}
	created, err := prepareDir(dir)
	if err != nil {
		return Result{}, fmt.Errorf("clone %s: %w", safe, err)
	}
	var auth transport.AuthMethod
	if opt.Token != "" {
		auth = &githttp.BasicAuth{Username: TokenUsername, Password: opt.Token}
	}
	c := cloner{url: safe, auth: auth, token: opt.Token}
	var res Result
	if opt.Commit != "" {
		res, err = c.cloneCommit(ctx, dir, plumbing.NewHash(strings.ToLower(opt.Commit)))
	} else {
		res, err = c.cloneBranch(ctx, dir, opt.Branch)
	}
	if err != nil {
		cleanDir(dir, created)
		return Result{}, c.wrap(ctx, err)
	}
	return res, nil
}

// RepoName returns the last path segment of a repository URL without a
// ".git" suffix ("https://github.com/o/r.git" -> "r"), the default mount
// directory name, or "" when the URL has no path.
func RepoName(rawURL string) string {
	p := rawURL
	if u, err := url.Parse(rawURL); err == nil && u.Scheme != "" {
		p = u.Path
	}
	p = strings.TrimRight(p, "/")
	p = strings.TrimSuffix(path.Base(p), ".git")
	if p == "." || p == "/" || p == ".." {
		return ""
	}
	return p
}

// checkOptions validates opt and returns the URL to clone, normalized.
func checkOptions(opt Options) (string, error) {
	u, err := url.Parse(opt.URL)
	if err != nil {
		return "", fmt.Errorf("%w: repository URL does not parse", ErrInvalidOptions)
	}
	if u.User != nil {
		// Never echo the URL: the userinfo is a credential.
		return "", fmt.Errorf("%w: repository URL must not contain credentials; pass a token instead", ErrInvalidOptions)
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return "", fmt.Errorf("%w: repository URL %q: scheme must be https or http", ErrInvalidOptions, opt.URL)
	}
	if u.Host == "" || u.Opaque != "" || RepoName(opt.URL) == "" {
		return "", fmt.Errorf("%w: repository URL %q: want https://host/path", ErrInvalidOptions, opt.URL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%w: repository URL %q: must not have a query or fragment", ErrInvalidOptions, opt.URL)
	}
	safe := u.String()
	if opt.Branch != "" && opt.Commit != "" {
		return "", fmt.Errorf("clone %s: %w: set a branch or a commit, not both", safe, ErrInvalidOptions)
	}
	if opt.Branch != "" && !validBranch(opt.Branch) {
		return "", fmt.Errorf("clone %s: %w: branch %q is not a valid branch name", safe, ErrInvalidOptions, opt.Branch)
	}
	if opt.Commit != "" && !plumbing.IsHash(opt.Commit) {
		return "", fmt.Errorf("clone %s: %w: commit %q is not a full 40-character SHA", safe, ErrInvalidOptions, opt.Commit)
	}
	return safe, nil
}

// validBranch rejects what git refuses in a branch name (git
// check-ref-format), and full ref names.
func validBranch(b string) bool {
	return !strings.HasPrefix(b, "refs/") && !strings.HasPrefix(b, "-") &&
		!strings.HasPrefix(b, "/") && !strings.HasSuffix(b, "/") &&
		!strings.HasSuffix(b, ".lock") && !strings.HasSuffix(b, ".") &&
		!strings.Contains(b, "..") && !strings.Contains(b, "//") && !strings.Contains(b, "@{") &&
		!strings.ContainsAny(b, " ~^:?*[\\\x00\x7f\t\n")
}

// prepareDir makes sure dir exists and is empty, and reports whether it
// created it.
func prepareDir(dir string) (created bool, err error) {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return false, fmt.Errorf("create target directory: %w", err)
		}
		return true, nil
	case err != nil:
		return false, fmt.Errorf("read target directory: %w", err)
	case len(entries) > 0:
		return false, ErrDirNotEmpty
	}
	return false, nil
}

// cleanDir undoes a failed clone: it removes dir if Clone created it, else
// what Clone put in it.
func cleanDir(dir string, created bool) {
	if created {
		_ = os.RemoveAll(dir)
		return
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		_ = os.RemoveAll(filepath.Join(dir, e.Name()))
	}
}

type cloner struct {
	url   string // without credentials
	auth  transport.AuthMethod
	token string // only to scrub it from error text
}

// cloneBranch clones branch, or the default branch when branch is "",
// shallow.
func (c cloner) cloneBranch(ctx context.Context, dir, branch string) (Result, error) {
	opts := &git.CloneOptions{
		URL:          c.url,
		Auth:         c.auth,
		RemoteName:   remoteName,
		SingleBranch: true,
		Depth:        1,
		Tags:         git.NoTags,
	}
	if branch != "" {
		opts.ReferenceName = plumbing.NewBranchReferenceName(branch)
	}
	repo, err := git.PlainCloneContext(ctx, dir, false, opts)
	if err != nil {
		if branch != "" && isRefNotFound(err) {
			return Result{}, fmt.Errorf("%w: %q", ErrBranchNotFound, branch)
		}
		return Result{}, err
	}
	head, err := repo.Head()
	if err != nil {
		return Result{}, fmt.Errorf("resolve HEAD: %w", err)
	}
	res := Result{Commit: head.Hash().String()}
	if head.Name().IsBranch() {
		res.Branch = head.Name().Short()
	}
	return res, nil
}

// cloneCommit fetches commit and checks it out with a detached HEAD. It asks
// for that one commit first (depth 1); servers that do not allow fetching by
// SHA, or that do not have it, get a full fetch of branches and tags.
func (c cloner) cloneCommit(ctx context.Context, dir string, commit plumbing.Hash) (Result, error) {
	repo, err := git.PlainInit(dir, false)
	if err != nil {
		return Result{}, fmt.Errorf("init repository: %w", err)
	}
	remote, err := repo.CreateRemote(&config.RemoteConfig{Name: remoteName, URLs: []string{c.url}})
	if err != nil {
		return Result{}, fmt.Errorf("add remote: %w", err)
	}
	const tmpRef = "refs/mango/checkout"
	err = remote.FetchContext(ctx, &git.FetchOptions{
		RemoteName: remoteName,
		RefSpecs:   []config.RefSpec{config.RefSpec(commit.String() + ":" + tmpRef)},
		Depth:      1,
		Auth:       c.auth,
		Tags:       git.NoTags,
	})
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		if ctx.Err() != nil || isFinal(err) {
			return Result{}, err
		}
		// Fetching by SHA is not allowed, or the server does not have the
		// commit: fetch everything and look for it.
		err = remote.FetchContext(ctx, &git.FetchOptions{
			RemoteName: remoteName,
			RefSpecs: []config.RefSpec{
				"+refs/heads/*:refs/remotes/" + remoteName + "/*",
				"+refs/tags/*:refs/tags/*",
			},
			Auth: c.auth,
			Tags: git.NoTags,
		})
		if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
			return Result{}, err
		}
	}
	_ = repo.Storer.RemoveReference(tmpRef)
	if _, err := repo.CommitObject(commit); err != nil {
		return Result{}, fmt.Errorf("%w: %s", ErrCommitNotFound, commit)
	}
	wt, err := repo.Worktree()
	if err != nil {
		return Result{}, fmt.Errorf("open worktree: %w", err)
	}
	if err := wt.Checkout(&git.CheckoutOptions{Hash: commit, Force: true}); err != nil {
		return Result{}, fmt.Errorf("check out %s: %w", commit, err)
	}
	return Result{Commit: commit.String()}, nil
}

// isFinal reports errors a second, full fetch would only repeat.
func isFinal(err error) bool {
	return errors.Is(err, transport.ErrAuthenticationRequired) ||
		errors.Is(err, transport.ErrAuthorizationFailed) ||
		errors.Is(err, transport.ErrRepositoryNotFound) ||
		errors.Is(err, transport.ErrEmptyRemoteRepository)
}

func isRefNotFound(err error) bool {
	return errors.Is(err, plumbing.ErrReferenceNotFound) ||
		errors.Is(err, git.NoMatchingRefSpecError{})
}

// wrap turns a go-git error into Clone's: the URL first, then the sentinel
// that says what went wrong, with the token scrubbed from the text.
func (c cloner) wrap(ctx context.Context, err error) error {
	var kind error
	switch {
	case ctx.Err() != nil:
		kind = ctx.Err()
	case errors.Is(err, transport.ErrAuthenticationRequired), errors.Is(err, transport.ErrAuthorizationFailed):
		kind = ErrAuth
	case errors.Is(err, transport.ErrRepositoryNotFound):
		kind = ErrRepoNotFound
	case errors.Is(err, transport.ErrEmptyRemoteRepository):
		kind = ErrEmptyRepo
	}
	if kind == nil || errors.Is(err, kind) {
		return &cloneError{msg: c.scrub(fmt.Sprintf("clone %s: %v", c.url, err)), err: err}
	}
	// The go-git text adds nothing to the sentinel's but the server's
	// response body; keep the cause for errors.Is/As only.
	msg := fmt.Sprintf("clone %s: %v", c.url, kind)
	switch {
	case errors.Is(err, transport.ErrAuthenticationRequired) && c.token == "":
		msg += ": the server requires a token"
	case errors.Is(err, transport.ErrAuthenticationRequired):
		msg += ": the server rejected the token"
	case errors.Is(err, transport.ErrAuthorizationFailed):
		msg += ": the token does not grant access"
	}
	return &cloneError{msg: msg, err: err, kind: kind}
}

func (c cloner) scrub(s string) string {
	if c.token == "" {
		return s
	}
	return strings.ReplaceAll(s, c.token, "[redacted]")
}

// cloneError carries a message built once, scrubbed of the token, and the
// errors it matches.
type cloneError struct {
	msg  string
	err  error // go-git's error, or one of ours
	kind error // the sentinel or context error, when not already in err
}

func (e *cloneError) Error() string { return e.msg }

func (e *cloneError) Unwrap() []error {
	if e.kind == nil {
		return []error{e.err}
	}
	return []error{e.kind, e.err}
}
