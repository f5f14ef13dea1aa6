package tools

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// Limits of the read tool.
const (
	// MaxReadLines is the most lines read returns at once.
	MaxReadLines = 2000
	// MaxReadBytes bounds the text read returns at once.
	MaxReadBytes = 256 << 10
	// MaxLineBytes is the longest line read shows whole; longer lines are
	// cut and marked.
	MaxLineBytes = 4096
)

// readInput is the input of read.
type readInput struct {
	FilePath  *string `json:"file_path"`
	ViewRange []int   `json:"view_range"`
}

func (in *readInput) check() error {
	if err := checkPath(in.FilePath); err != nil {
		return err
	}
	if in.ViewRange == nil {
		return nil
	}
	if len(in.ViewRange) != 2 {
		return fmt.Errorf("view_range must be [start, end], got %d numbers", len(in.ViewRange))
	}
	start, end := in.ViewRange[0], in.ViewRange[1]
	if start < 1 {
		return fmt.Errorf("view_range start must be at least 1 (lines are numbered from 1), got %d", start)
	}
	if end != -1 && end < start {
		return fmt.Errorf("view_range end must be -1 (end of file) or at least start %d, got %d", start, end)
	}
	return nil
}

// checkPath checks a required file_path.
func checkPath(p *string) error {
	if p == nil {
		return missing("file_path")
	}
	if *p == "" {
		return errors.New("file_path must not be empty")
	}
	return nil
}

// read returns a text file with cat -n style line numbers.
func (t *call) read(in readInput) (Result, error) {
	p := *in.FilePath
	data, err := t.sb.ReadFile(t.ctx, p)
	if err != nil {
		return t.fileFailure(err, p)
	}
	if bytes.IndexByte(data, 0) >= 0 {
		return errorf("%s is a binary file (%d bytes) and cannot be shown as text; inspect it with bash (for example od -c)", p, len(data)), nil
	}
	lines := splitLines(text(data))
	if len(lines) == 0 {
		return Result{Content: fmt.Sprintf("(%s is empty)", p)}, nil
	}
	start, end := 1, len(lines)
	if in.ViewRange != nil {
		start = in.ViewRange[0]
		if start > len(lines) {
			return errorf("view_range starts at line %d but %s has %d lines", start, p, len(lines)), nil
		}
		if e := in.ViewRange[1]; e != -1 && e < end {
			end = e
		}
	}
	var b strings.Builder
	last, cut := start-1, false
	for n := start; n <= end; n++ {
		line := lines[n-1]
		if len(line) > MaxLineBytes {
			line = CutUTF8(line, MaxLineBytes) + " [line truncated]"
			cut = true
		}
		entry := fmt.Sprintf("%6d\t%s\n", n, line)
		if n-start >= MaxReadLines || (b.Len()+len(entry) > MaxReadBytes && n > start) {
			break
		}
		b.WriteString(entry)
		last = n
	}
	if last < end {
		fmt.Fprintf(&b, "[showing lines %d-%d of %d; use view_range to read further]\n", start, last, len(lines))
	}
	if cut {
		fmt.Fprintf(&b, "[lines longer than %d bytes were cut]\n", MaxLineBytes)
	}
	return Result{Content: b.String()}, nil
}

// splitLines splits s into lines without their newlines; a final newline
// does not start another line.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// writeInput is the input of write.
type writeInput struct {
	FilePath *string `json:"file_path"`
	Content  *string `json:"content"`
}

func (in *writeInput) check() error {
	if err := checkPath(in.FilePath); err != nil {
		return err
	}
	if in.Content == nil {
		return missing("content")
	}
	return nil
}

// write creates or replaces a file, creating its parent directories.
func (t *call) write(in writeInput) (Result, error) {
	p := *in.FilePath
	if r, refused := t.refuseReadOnly(p); refused {
		return r, nil
	}
	if err := t.sb.WriteFile(t.ctx, p, []byte(*in.Content), 0); err != nil {
		return t.fileFailure(err, p)
	}
	return Result{Content: fmt.Sprintf("Wrote %d bytes to %s", len(*in.Content), p)}, nil
}

// editInput is the input of edit.
type editInput struct {
	FilePath   *string `json:"file_path"`
	OldString  *string `json:"old_string"`
	NewString  *string `json:"new_string"`
	ReplaceAll bool    `json:"replace_all"`
}

func (in *editInput) check() error {
	if err := checkPath(in.FilePath); err != nil {
		return err
	}
	if in.OldString == nil {
		return missing("old_string")
	}
	if in.NewString == nil {
		return missing("new_string")
	}
	if *in.OldString == "" {
		return errors.New("old_string must not be empty (to create a file, use write)")
	}
	if *in.OldString == *in.NewString {
		return errors.New("old_string and new_string are identical; there is nothing to change")
	}
	return nil
}

// edit replaces old_string, which must be unique unless replace_all is set.
func (t *call) edit(in editInput) (Result, error) {
	p := *in.FilePath
	if r, refused := t.refuseReadOnly(p); refused {
		return r, nil
	}
	data, err := t.sb.ReadFile(t.ctx, p)
	if err != nil {
		return t.fileFailure(err, p)
	}
	if bytes.IndexByte(data, 0) >= 0 {
		return errorf("%s is a binary file; edit only changes text files", p), nil
	}
	content, old := string(data), *in.OldString
	n := strings.Count(content, old)
	switch {
	case n == 0:
		return errorf("old_string not found in %s; it must match the file exactly, including whitespace (read the file first)", p), nil
	case n > 1 && !in.ReplaceAll:
		return errorf("old_string occurs %d times in %s; include more surrounding text to make it unique, or set replace_all to replace every occurrence", n, p), nil
	}
	if in.ReplaceAll {
		content = strings.ReplaceAll(content, old, *in.NewString)
	} else {
		content = strings.Replace(content, old, *in.NewString, 1)
	}
	if err := t.sb.WriteFile(t.ctx, p, []byte(content), 0); err != nil {
		return t.fileFailure(err, p)
	}
	if n == 1 {
		return Result{Content: fmt.Sprintf("Replaced 1 occurrence in %s", p)}, nil
	}
	return Result{Content: fmt.Sprintf("Replaced %d occurrences in %s", n, p)}, nil
}
