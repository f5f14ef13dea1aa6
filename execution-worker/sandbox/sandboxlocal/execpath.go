package sandboxlocal

import "path/filepath"

// ExecPath returns where commands find the absolute path p as the agent
// names it: the session paths (/workspace/..., /mnt/session/..., /mnt/memory/...) lie inside
// the workspace directory; any other path is returned as it is. The file
// tools use it to search those paths with find and grep.
func (s *localSandbox) ExecPath(p string) string {
	rel, err := s.rel(p)
	if err != nil {
		return p
	}
	return filepath.Join(s.dir, rel)
}
