package transfer

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mangohq/mango/execution-worker/sandbox"
)

// ErrMalformedListing reports a listing [ParseStatList] cannot read.
var ErrMalformedListing = errors.New("malformed file listing")

// ParseStatList parses lines "size mtime ./name" (stat -c '%s %Y %n' run
// by find in dir) into FileInfos under dir, sorted by path. A line that
// does not start with two numbers continues the previous file's name (a
// name holding a newline); a first line that does not is an error matching
// [ErrMalformedListing].
func ParseStatList(dir, out string) ([]sandbox.FileInfo, error) {
	var files []sandbox.FileInfo
	for line := range strings.SplitSeq(strings.TrimSuffix(out, "\n"), "\n") {
		if line == "" && len(files) == 0 {
			continue
		}
		sizeStr, rest, ok1 := strings.Cut(line, " ")
		mtimeStr, name, ok2 := strings.Cut(rest, " ")
		size, err1 := strconv.ParseInt(sizeStr, 10, 64)
		mtime, err2 := strconv.ParseInt(mtimeStr, 10, 64)
		if !ok1 || !ok2 || err1 != nil || err2 != nil || !strings.HasPrefix(name, "./") {
			if len(files) == 0 {
				return nil, fmt.Errorf("%w: unexpected line %q", ErrMalformedListing, line)
			}
			files[len(files)-1].Path += "\n" + line
			continue
		}
		files = append(files, sandbox.FileInfo{
			Path:    path.Join(dir, strings.TrimPrefix(name, "./")),
			Size:    size,
			ModTime: time.Unix(mtime, 0),
		})
	}
	slices.SortFunc(files, func(a, b sandbox.FileInfo) int { return strings.Compare(a.Path, b.Path) })
	return files, nil
}
