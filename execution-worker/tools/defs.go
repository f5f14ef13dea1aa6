package tools

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/mangohq/mango/execution-worker/model"
)

// Server tool versions sent to the Messages API.
//
// web_search_20250305 is the generally available web search tool.
// web_fetch_20250910 is the web fetch tool; the Anthropic API still gates
// it behind the beta header "anthropic-beta: web-fetch-2025-09-10", which
// the model client must send when a web_fetch declaration is present.
const (
	WebSearchType = "web_search_20250305"
	WebFetchType  = "web_fetch_20250910"
	// WebFetchBeta is the anthropic-beta value web_fetch needs.
	WebFetchBeta = "web-fetch-2025-09-10"
)

// definition is the model-facing description of one local tool.
type definition struct {
	description string
	schema      string
}

var definitions = map[string]definition{
	Bash: {
		description: "Run a shell command in the session's sandbox, in a persistent shell (bash where the sandbox has it, else /bin/sh) that starts in the workspace root. " +
			"State carries over between calls: a cd and exported variables persist (and, where the sandbox keeps a long-lived shell process, so do other variables, functions and background jobs). " +
			"Commands read no input (stdin is /dev/null). Files you want to keep or publish go in the workspace or under /mnt/session/outputs; session inputs are under /mnt/session/uploads. " +
			"The sandbox may offer only a minimal POSIX userland (for example busybox), so prefer portable commands and flags. " +
			"The result is stdout, then stderr after a [stderr] line when both have output, then a note of a non-zero exit code, a timeout or truncated output; " +
			"each stream longer than about 30000 bytes is shortened in the middle. " +
			"A command that exits non-zero or times out is reported as an error; a timeout kills the command and its shell, and the next call gets a new shell in the same directory. " +
			"The default timeout is the sandbox's (typically 2 minutes); set timeout_ms for longer commands, up to 600000 (10 minutes). " +
			"Use read, write, edit, glob and grep rather than cat, sed or find where they fit.",
		schema: `{
  "type": "object",
  "properties": {
    "command": {"type": "string", "description": "The shell command to run. Required unless restart is true."},
    "restart": {"type": "boolean", "description": "Restart the shell first: the old shell and its background jobs are killed, and the command (if any) runs in a new shell in the workspace root."},
    "timeout_ms": {"type": "integer", "minimum": 1, "description": "Timeout in milliseconds (at most 600000). The command is killed when it expires."}
  },
  "additionalProperties": false
}`,
	},
	Read: {
		description: fmt.Sprintf("Read a text file in the workspace. file_path is relative to the workspace root or an absolute path inside it. "+
			"Returns the text with line numbers in the format of cat -n (the number right-aligned in six columns, a tab, the line); the numbers are not part of the file. "+
			"At most %d lines or %d KiB are returned at once and lines longer than %d bytes are cut; "+
			"use view_range [start, end] (1-based, inclusive; end -1 means the end of the file) to read a specific part or to continue. "+
			"Binary files are refused.", MaxReadLines, MaxReadBytes>>10, MaxLineBytes),
		schema: `{
  "type": "object",
  "properties": {
    "file_path": {"type": "string", "description": "Path of the file, relative to the workspace root or absolute inside it."},
    "view_range": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2, "description": "Optional [start, end] line range, 1-based and inclusive; end -1 reads to the end of the file."}
  },
  "required": ["file_path"],
  "additionalProperties": false
}`,
	},
	Write: {
		description: "Create a file in the workspace, or replace an existing file's entire content, creating missing parent directories. " +
			"file_path is relative to the workspace root or an absolute path inside it. " +
			"To change part of an existing file, use edit instead.",
		schema: `{
  "type": "object",
  "properties": {
    "file_path": {"type": "string", "description": "Path of the file, relative to the workspace root or absolute inside it."},
    "content": {"type": "string", "description": "The complete new content of the file."}
  },
  "required": ["file_path", "content"],
  "additionalProperties": false
}`,
	},
	Edit: {
		description: "Replace text in an existing file in the workspace. " +
			"old_string must match the file exactly, including whitespace and indentation, and must not include the line-number prefixes that read shows. " +
			"It must occur exactly once (include enough surrounding lines to make it unique) unless replace_all is true, which replaces every occurrence. " +
			"new_string must differ from old_string. Read the file before editing it; to create a file, use write.",
		schema: `{
  "type": "object",
  "properties": {
    "file_path": {"type": "string", "description": "Path of the file, relative to the workspace root or absolute inside it."},
    "old_string": {"type": "string", "description": "The exact text to replace."},
    "new_string": {"type": "string", "description": "The text to put in its place."},
    "replace_all": {"type": "boolean", "description": "Replace every occurrence of old_string instead of requiring exactly one (default false)."}
  },
  "required": ["file_path", "old_string", "new_string"],
  "additionalProperties": false
}`,
	},
	Glob: {
		description: fmt.Sprintf("Find files in the workspace by path pattern. "+
			"The pattern is matched against file paths relative to path (default: the workspace root): * and ? match within one path segment, [abc] matches one character of a set, and a ** segment matches any number of directories, including none "+
			"(for example **/*.go, src/**/test_*.py, *.md). Hidden files are matched like any other. "+
			"Returns regular files, relative to the workspace root, sorted by name, at most %d.", MaxGlobResults),
		schema: `{
  "type": "object",
  "properties": {
    "pattern": {"type": "string", "description": "Glob pattern, for example **/*.go."},
    "path": {"type": "string", "description": "Directory to search, relative to the workspace root or absolute inside it (default: the workspace root)."}
  },
  "required": ["pattern"],
  "additionalProperties": false
}`,
	},
	Grep: {
		description: fmt.Sprintf("Search file contents in the workspace with a POSIX extended regular expression (as grep -E: use ( | ) + ? { } unescaped; \\d and other Perl classes are not supported, use [0-9]). "+
			"Searches path recursively: a directory or a single file (default: the workspace root). "+
			"Returns matching lines as path:line_number:text, paths relative to the workspace root, at most %d lines. "+
			"To find files by name, use glob.", MaxGrepLines),
		schema: `{
  "type": "object",
  "properties": {
    "pattern": {"type": "string", "description": "Extended regular expression to search for."},
    "path": {"type": "string", "description": "File or directory to search, relative to the workspace root or absolute inside it (default: the workspace root)."}
  },
  "required": ["pattern"],
  "additionalProperties": false
}`,
	},
}

// Definitions returns the model-facing definitions of the local built-ins
// among names (bash, read, write, edit, glob, grep), in that order. Other
// names, the server tools included, are ignored; duplicates count once.
func Definitions(names []string) []model.ToolDef {
	var defs []model.ToolDef
	for _, n := range localNames {
		if !slices.Contains(names, n) {
			continue
		}
		d := definitions[n]
		defs = append(defs, model.ToolDef{Name: n, Description: d.description, InputSchema: json.RawMessage(d.schema)})
	}
	return defs
}

// ServerTools returns the server-tool declarations of web_fetch and
// web_search among names, in that order, for the Messages API to run:
//
//	{"type":"web_fetch_20250910","name":"web_fetch"}
//	{"type":"web_search_20250305","name":"web_search"}
//
// Other names are ignored. A request carrying web_fetch needs the
// [WebFetchBeta] header.
func ServerTools(names []string) []model.ToolDef {
	var defs []model.ToolDef
	for _, t := range []struct{ name, typ string }{{WebFetch, WebFetchType}, {WebSearch, WebSearchType}} {
		if !slices.Contains(names, t.name) {
			continue
		}
		raw := fmt.Appendf(nil, `{"type":%q,"name":%q}`, t.typ, t.name)
		defs = append(defs, model.ToolDef{Name: t.name, Type: t.typ, Raw: raw})
	}
	return defs
}
