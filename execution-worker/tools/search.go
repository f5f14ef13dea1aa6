package tools

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/mangohq/mango/execution-worker/sandbox"
)

// Limits of glob and grep.
const (
	// MaxGlobResults is the most file names glob returns.
	MaxGlobResults = 1000
	// MaxGrepLines is the most matching lines grep returns.
	MaxGrepLines = 1000
	// MaxGrepBytes bounds the text grep returns.
	MaxGrepBytes = 128 << 10
	// maxGrepLineBytes is the longest matching line grep shows whole.
	maxGrepLineBytes = 2000
	// listingOutput is the output limit asked of the sandbox for find and
	// grep, whose output is cut in Go afterwards.
	listingOutput = 8 << 20
)

// globInput is the input of glob.
type globInput struct {
	Pattern *string `json:"pattern"`
	Path    *string `json:"path"`
}

func (in *globInput) check() error {
	if in.Pattern == nil {
		return missing("pattern")
	}
	if *in.Pattern == "" {
		return errors.New("pattern must not be empty")
	}
	if strings.ContainsRune(*in.Pattern, 0) || in.Path != nil && strings.ContainsRune(*in.Path, 0) {
		return errors.New("pattern and path must not contain NUL")
	}
	for seg := range strings.SplitSeq(*in.Pattern, "/") {
		if _, err := path.Match(seg, ""); err != nil {
			return fmt.Errorf("pattern: malformed segment %q", seg)
		}
	}
	return nil
}

// glob lists the regular files under the search directory with find and
// matches their paths against the pattern in Go.
func (t *call) glob(in globInput) (Result, error) {
	base := t.root
	explicit := in.Path != nil && *in.Path != ""
	if explicit {
		var ok bool
		if base, ok = t.searchPath(*in.Path); !ok {
			return t.escape(*in.Path), nil
		}
	}
	full := *in.Pattern
	if !path.IsAbs(full) {
		full = base + "/" + full
	}
	segs := strings.Split(strings.TrimPrefix(path.Clean(full), "/"), "/")
	// The literal leading segments name the directory to search; at least
	// one segment is left to match.
	n := 0
	for n < len(segs)-1 && !hasMeta(segs[n]) {
		n++
	}
	dir, pat := "/"+strings.Join(segs[:n], "/"), segs[n:]
	dir, ok := t.searchPath(dir)
	if !ok {
		return t.escape(*in.Pattern), nil
	}
	cmd := fmt.Sprintf("[ -d %[1]s ] || exit 3; exec find %[1]s -type f", quote(dir))
	res, err := t.sb.Exec(t.ctx, sandbox.ExecRequest{Command: cmd, MaxOutput: listingOutput})
	if err != nil {
		return t.execFailure(err)
	}
	switch {
	case res.TimedOut:
		return errorf("glob timed out; narrow the pattern or path"), nil
	case res.ExitCode == 3 && explicit && dir == base:
		return errorf("no such directory: %s", *in.Path), nil
	case res.ExitCode == 3:
		return Result{Content: "No files matched"}, nil
	case res.ExitCode != 0 && len(res.Stdout) == 0:
		return errorf("find failed (exit code %d): %s", res.ExitCode, t.relativize(text(res.Stderr))), nil
	}
	prefix := strings.TrimSuffix(dir, "/") + "/"
	var found []string
	for line := range strings.SplitSeq(text(res.Stdout), "\n") {
		rel, ok := strings.CutPrefix(line, prefix)
		if !ok || rel == "" {
			continue
		}
		if matchSegments(pat, strings.Split(rel, "/")) {
			found = append(found, t.relative(line))
		}
	}
	if len(found) == 0 {
		if res.Truncated {
			return Result{Content: "No files matched among the files listed before the listing was cut; narrow the path"}, nil
		}
		return Result{Content: "No files matched"}, nil
	}
	slices.Sort(found)
	var b strings.Builder
	for _, f := range found[:min(len(found), MaxGlobResults)] {
		b.WriteString(f)
		b.WriteByte('\n')
	}
	if len(found) > MaxGlobResults {
		fmt.Fprintf(&b, "[showing %d of %d files; narrow the pattern or path]\n", MaxGlobResults, len(found))
	}
	if res.Truncated {
		b.WriteString("[the file listing was cut at the sandbox's output limit; results may be incomplete]\n")
	}
	if res.ExitCode != 0 {
		b.WriteString("[some directories could not be read]\n")
	}
	return Result{Content: b.String()}, nil
}

// execPather is implemented by sandboxes whose commands see a path the
// agent names somewhere else (local: the session directories live inside
// the workspace).
type execPather interface {
	// ExecPath returns where commands find the absolute path p.
	ExecPath(p string) string
}

// searchPath returns the directory commands search for p: a path under
// the workspace as it is, and the session paths (/mnt/session/...,
// /mnt/memory/..., /workspace/...) where the sandbox's commands see them.
// ok is false for any other path.
func (t *call) searchPath(p string) (string, bool) {
	if abs, ok := inside(t.root, p); ok {
		return abs, true
	}
	abs := path.Clean(p)
	if !path.IsAbs(abs) || !sandbox.InSessionPaths(abs) {
		return "", false
	}
	if ep, ok := t.sb.(execPather); ok {
		return ep.ExecPath(abs), true
	}
	if rest, ok := strings.CutPrefix(abs, sandbox.WorkspaceDir); ok && t.root != sandbox.WorkspaceDir {
		// The workspace lies elsewhere; /workspace/X is its X.
		return path.Join(t.root, rest), true
	}
	return abs, true
}

// hasMeta reports whether a pattern segment has glob metacharacters.
func hasMeta(seg string) bool {
	return strings.ContainsAny(seg, `*?[\`)
}

// matchSegments reports whether the path segments name match the pattern
// segments pat, where a "**" segment matches any number (zero included) of
// segments and every other segment matches one name as path.Match does.
func matchSegments(pat, name []string) bool {
	// next[j] reports whether pat[i+1:] matches name[j:].
	next := make([]bool, len(name)+1)
	next[len(name)] = true
	for i := len(pat) - 1; i >= 0; i-- {
		cur := make([]bool, len(name)+1)
		for j := len(name); j >= 0; j-- {
			switch {
			case pat[i] == "**":
				cur[j] = next[j] || j < len(name) && cur[j+1]
			case j < len(name):
				ok, _ := path.Match(pat[i], name[j]) // validated by check
				cur[j] = ok && next[j+1]
			}
		}
		next = cur
	}
	return next[0]
}

// grepInput is the input of grep.
type grepInput struct {
	Pattern *string `json:"pattern"`
	Path    *string `json:"path"`
}

func (in *grepInput) check() error {
	if in.Pattern == nil {
		return missing("pattern")
	}
	if *in.Pattern == "" {
		return errors.New("pattern must not be empty")
	}
	if strings.ContainsRune(*in.Pattern, 0) || in.Path != nil && strings.ContainsRune(*in.Path, 0) {
		return errors.New("pattern and path must not contain NUL")
	}
	return nil
}

// grep searches file contents with grep -rnHE.
func (t *call) grep(in grepInput) (Result, error) {
	target := t.root
	if in.Path != nil && *in.Path != "" {
		var ok bool
		if target, ok = t.searchPath(*in.Path); !ok {
			return t.escape(*in.Path), nil
		}
	}
	cmd := fmt.Sprintf("exec grep -rnHE -e %s %s", quote(*in.Pattern), quote(target))
	res, err := t.sb.Exec(t.ctx, sandbox.ExecRequest{Command: cmd, MaxOutput: listingOutput})
	if err != nil {
		return t.execFailure(err)
	}
	stdout, stderr := text(res.Stdout), strings.TrimSpace(t.relativize(text(res.Stderr)))
	switch {
	case res.TimedOut:
		return errorf("grep timed out; narrow the pattern or path"), nil
	case res.ExitCode == 1 && stdout == "":
		return Result{Content: "No matches"}, nil
	case res.ExitCode != 0 && stdout == "":
		if stderr == "" {
			stderr = fmt.Sprintf("exit code %d", res.ExitCode)
		}
		return errorf("grep failed: %s", stderr), nil
	}
	var b strings.Builder
	lines := splitLines(stdout)
	shown := 0
	for _, line := range lines {
		line = t.relativize(line)
		if len(line) > maxGrepLineBytes {
			line = CutUTF8(line, maxGrepLineBytes) + " [line truncated]"
		}
		if shown == MaxGrepLines || b.Len()+len(line)+1 > MaxGrepBytes {
			break
		}
		b.WriteString(line)
		b.WriteByte('\n')
		shown++
	}
	if shown < len(lines) {
		fmt.Fprintf(&b, "[showing %d of %d matching lines; narrow the pattern or path]\n", shown, len(lines))
	}
	if res.Truncated {
		b.WriteString("[grep output was cut at the sandbox's output limit; there are more matches]\n")
	}
	if stderr != "" {
		// Unreadable files, or GNU grep's "binary file matches" notices.
		fmt.Fprintf(&b, "[messages from grep]\n%s\n", CutUTF8(stderr, maxGrepLineBytes))
	}
	return Result{Content: b.String()}, nil
}

// relativize rewrites paths under the workspace at the start of each line
// (grep and find output and errors) relative to the workspace root.
func (t *call) relativize(s string) string {
	prefix := t.root + "/"
	if t.root == "/" {
		return s
	}
	lines := strings.Split(s, "\n")
	for i, line := range lines {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			lines[i] = rest
			continue
		}
		// "grep: /workspace/x: ..." and "find: /workspace/x: ..."
		if tool, rest, ok := strings.Cut(line, ": "); ok && !strings.Contains(tool, " ") {
			if rel, ok := strings.CutPrefix(rest, prefix); ok {
				lines[i] = tool + ": " + rel
			}
		}
	}
	return strings.Join(lines, "\n")
}
