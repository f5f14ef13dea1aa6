package sessionfiles

import (
	"context"
	"errors"
	"fmt"

	"github.com/mangohq/mango/execution-worker/gitrepo"
)

// GitClone clones with package gitrepo; failures the client can fix (no
// access, unknown repository, branch or commit) are marked ErrUnusable.
func GitClone(ctx context.Context, repo Repository, dir string) (string, error) {
	res, err := gitrepo.Clone(ctx, gitrepo.Options{URL: repo.URL, Branch: repo.Branch, Commit: repo.Commit, Token: repo.Token}, dir)
	if err != nil {
		for _, fixable := range []error{gitrepo.ErrAuth, gitrepo.ErrRepoNotFound, gitrepo.ErrEmptyRepo, gitrepo.ErrBranchNotFound,
			gitrepo.ErrCommitNotFound, gitrepo.ErrInvalidOptions} {
			if errors.Is(err, fixable) {
				return "", fmt.Errorf("%w: %w", ErrUnusable, err)
			}
		}
		return "", err
	}
	return res.Commit, nil
}
