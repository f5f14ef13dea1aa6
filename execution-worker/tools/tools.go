// Package tools implements the built-in toolset agent_toolset_20260401: the
// model-facing definitions of its tools and the execution of the six that
// run in the session's sandbox (bash, read, write, edit, glob, grep).
// web_fetch and web_search are server tools: [ServerTools] declares them to
// the Messages API, which runs them itself; they are never executed here.
//
// Every local tool goes through the [sandbox.Sandbox] interface only, so it
// behaves the same in every provider. The sandbox is assumed to offer
// /bin/sh, find and grep with POSIX flags (busybox is enough): bash runs the
// command as given, glob runs find and matches names in Go, grep runs
// grep -rnHE. Nothing else of the userland is relied on.
//
// [Execute] turns everything that is the model's to fix (invalid input, a
// missing file, a path outside the workspace, a failing command) into a
// [Result] with IsError set, which goes back to the model as a tool_result.
// It returns an error only for what ends the turn rather than the tool:
// cancellation of ctx, and a sandbox that was destroyed
// ([sandbox.ErrDestroyed]) or has disappeared ([sandbox.ErrNotFound]).
package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"path"
	"reflect"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/mangohq/mango/execution-worker/sandbox"
)

// ToolsetType is the type of the built-in toolset in an agent's tools.
const ToolsetType = "agent_toolset_20260401"

// Names of the built-in tools.
const (
	Bash      = "bash"
	Read      = "read"
	Write     = "write"
	Edit      = "edit"
	Glob      = "glob"
	Grep      = "grep"
	WebFetch  = "web_fetch"
	WebSearch = "web_search"
)

// localNames are the built-ins executed in the sandbox, in the order their
// definitions are sent.
var localNames = []string{Bash, Read, Write, Edit, Glob, Grep}

// LocalNames returns the built-ins [Execute] runs in the sandbox, in the
// order their definitions are sent.
func LocalNames() []string { return slices.Clone(localNames) }

// Local reports whether name is a built-in that [Execute] runs in the
// sandbox (bash, read, write, edit, glob, grep).
func Local(name string) bool {
	switch name {
	case Bash, Read, Write, Edit, Glob, Grep:
		return true
	}
	return false
}

// Result is the outcome of one tool call, sent back to the model as the
// content of a tool_result block.
type Result struct {
	// Content is the text shown to the model.
	Content string
	// IsError marks a failed call (the tool_result's is_error).
	IsError bool
	// Blocks, when set, is the content as a JSON array of content blocks
	// (a client's custom tool result with images); the model gets it
	// instead of Content, which then holds the text blocks joined.
	Blocks json.RawMessage `json:",omitempty"`
}

// errorf returns an IsError result.
func errorf(format string, args ...any) Result {
	return Result{Content: fmt.Sprintf(format, args...), IsError: true}
}

// Execute runs the built-in tool name with the model's input in sb.
//
// The input is decoded strictly: unknown fields, wrong types and missing
// required fields give an IsError result naming the field. Execute never
// panics (a bug in a tool is logged and reported as an IsError result). The
// error is non-nil only when the turn cannot go on: ctx was cancelled (the
// error wraps ctx.Err()), sb is nil, or the sandbox is destroyed or gone
// (the error wraps [sandbox.ErrDestroyed] or [sandbox.ErrNotFound]).
func Execute(ctx context.Context, sb sandbox.Sandbox, name string, input json.RawMessage) (res Result, err error) {
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("tool %s: %w", name, err)
	}
	if sb == nil {
		return Result{}, fmt.Errorf("tool %s: no sandbox", name)
	}
	defer func() {
		if r := recover(); r != nil {
			slog.ErrorContext(ctx, "built-in tool panicked", "tool", name, "panic", r, "stack", string(debug.Stack()))
			res, err = errorf("internal error while running %s", name), nil
		}
	}()
	t := &call{ctx: ctx, sb: sb, name: name, root: cleanRoot(sb.Root()), readOnly: readOnlyRoots(ctx)}
	switch name {
	case Bash:
		var in bashInput
		if r, ok := t.decode(input, &in); !ok {
			return r, nil
		}
		res, err = t.bash(in)
	case Read:
		var in readInput
		if r, ok := t.decode(input, &in); !ok {
			return r, nil
		}
		res, err = t.read(in)
	case Write:
		var in writeInput
		if r, ok := t.decode(input, &in); !ok {
			return r, nil
		}
		res, err = t.write(in)
	case Edit:
		var in editInput
		if r, ok := t.decode(input, &in); !ok {
			return r, nil
		}
		res, err = t.edit(in)
	case Glob:
		var in globInput
		if r, ok := t.decode(input, &in); !ok {
			return r, nil
		}
		res, err = t.glob(in)
	case Grep:
		var in grepInput
		if r, ok := t.decode(input, &in); !ok {
			return r, nil
		}
		res, err = t.grep(in)
	case WebFetch, WebSearch:
		return errorf("%s is a server tool run by the Messages API, not in the sandbox", name), nil
	default:
		return errorf("unknown tool %q", name), nil
	}
	if err != nil {
		return Result{}, fmt.Errorf("tool %s: %w", name, err)
	}
	return res, nil
}

// call is one tool call in progress.
type call struct {
	ctx  context.Context
	sb   sandbox.Sandbox
	name string
	root string // sb.Root(), cleaned
	// readOnly are the directories write and edit refuse (WithReadOnlyRoots).
	readOnly []string
}

// readOnlyKey is the context key of WithReadOnlyRoots.
type readOnlyKey struct{}

// WithReadOnlyRoots returns a context under which [Execute]'s write and
// edit refuse any path in one of roots (absolute, as the agent sees them:
// the mounts of the session's read_only memory stores). The check is
// lexical, as for the workspace: bash can still change those files, and
// the worker's memory sync refuses what it changed.
func WithReadOnlyRoots(ctx context.Context, roots []string) context.Context {
	if len(roots) == 0 {
		return ctx
	}
	clean := make([]string, 0, len(roots))
	for _, r := range roots {
		clean = append(clean, path.Clean(r))
	}
	return context.WithValue(ctx, readOnlyKey{}, clean)
}

func readOnlyRoots(ctx context.Context) []string {
	roots, _ := ctx.Value(readOnlyKey{}).([]string)
	return roots
}

// refuseReadOnly returns the result refusing to change p, and true, when
// p (relative to the root, or absolute) lies in a read-only root.
func (t *call) refuseReadOnly(p string) (Result, bool) {
	abs := path.Clean(p)
	if !path.IsAbs(p) {
		abs = path.Join(t.root, p)
	}
	for _, r := range t.readOnly {
		if abs == r || strings.HasPrefix(abs, r+"/") || r == "/" {
			return errorf("%s is in %s, a memory store attached read_only to this session: %s cannot change it", p, r, t.name), true
		}
	}
	return Result{}, false
}

// checker is implemented by inputs with required fields or constraints
// beyond their JSON types.
type checker interface {
	check() error
}

// decode decodes input strictly into v and checks it. On failure it returns
// the IsError result to give the model and false.
func (t *call) decode(input json.RawMessage, v checker) (Result, bool) {
	if len(bytes.TrimSpace(input)) == 0 {
		input = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(input))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, terr := dec.Token(); !errors.Is(terr, io.EOF) {
			err = errors.New("unexpected data after the input object")
		}
	}
	if err == nil {
		err = v.check()
	}
	if err != nil {
		return errorf("invalid input for %s: %s", t.name, describeDecodeError(err)), false
	}
	return Result{}, true
}

// describeDecodeError rewrites encoding/json errors for the model.
func describeDecodeError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field == "" {
			return fmt.Sprintf("input must be a JSON object, got %s", te.Value)
		}
		return fmt.Sprintf("field %s must be %s, got %s", te.Field, jsonKind(te.Type), te.Value)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return "malformed JSON: " + strings.TrimPrefix(se.Error(), "json: ")
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return "malformed JSON: unexpected end of input"
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

// jsonKind names the JSON type a Go type decodes from.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "a different type"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return t.String()
}

// missing is the error of an absent required field.
func missing(field string) error {
	return fmt.Errorf("missing required field %s", field)
}

// turnEnding returns the error to end the turn with when err (from the
// sandbox) means the turn cannot go on, else nil.
func (t *call) turnEnding(err error) error {
	if cerr := t.ctx.Err(); cerr != nil {
		return cerr
	}
	if errors.Is(err, sandbox.ErrDestroyed) || errors.Is(err, sandbox.ErrNotFound) {
		return err
	}
	return nil
}

// fileFailure maps an error of ReadFile or WriteFile on p to the result
// for the model, or to the error that ends the turn.
func (t *call) fileFailure(err error, p string) (Result, error) {
	if fatal := t.turnEnding(err); fatal != nil {
		return Result{}, fatal
	}
	switch {
	case errors.Is(err, sandbox.ErrPathEscape):
		return t.escape(p), nil
	case errors.Is(err, fs.ErrNotExist):
		return errorf("file not found: %s", p), nil
	}
	return errorf("%s", t.hideRoot(err.Error())), nil
}

// hideRoot shortens workspace paths in an error message to paths relative
// to the workspace root, as the model names them.
func (t *call) hideRoot(msg string) string {
	if t.root == "/" {
		return msg
	}
	return strings.ReplaceAll(msg, t.root+"/", "")
}

// execFailure maps an error of Exec (not a failing command, which is a
// result) to the result for the model, or to the error that ends the turn.
func (t *call) execFailure(err error) (Result, error) {
	if fatal := t.turnEnding(err); fatal != nil {
		return Result{}, fatal
	}
	return errorf("could not run the command in the sandbox: %s", t.hideRoot(err.Error())), nil
}

// escape is the result for a path outside the workspace.
func (t *call) escape(p string) Result {
	return errorf("path escapes the workspace: %s (paths must stay under %s)", p, t.root)
}

// cleanRoot returns the cleaned workspace root, as seen by commands.
func cleanRoot(root string) string {
	if root == "" {
		return "/"
	}
	return path.Clean(root)
}

// inside maps p (relative to root, or absolute) to a clean absolute path
// and reports whether it lies in root. The check is lexical: the shell
// tools are no boundary anyway (bash can reach whatever the sandbox can),
// it only keeps glob and grep consistent with read and write.
func inside(root, p string) (string, bool) {
	abs := p
	if !path.IsAbs(p) {
		abs = path.Join(root, p)
	}
	abs = path.Clean(abs)
	return abs, abs == root || root == "/" || strings.HasPrefix(abs, root+"/")
}

// relative returns abs relative to root, "." for root itself.
func (t *call) relative(abs string) string {
	if abs == t.root {
		return "."
	}
	prefix := t.root + "/"
	if t.root == "/" {
		prefix = "/"
	}
	if rel, ok := strings.CutPrefix(abs, prefix); ok {
		return rel
	}
	return abs
}

// quote quotes s for /bin/sh as one word.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// text returns b as text for the model: valid UTF-8, with NUL bytes (which
// event storage such as PostgreSQL jsonb cannot hold) replaced like invalid
// sequences by U+FFFD.
func text(b []byte) string {
	return strings.ReplaceAll(strings.ToValidUTF8(string(b), "\uFFFD"), "\x00", "\uFFFD")
}

// CutUTF8 returns the longest prefix of s of at most n bytes that does not
// end inside a UTF-8 sequence.
func CutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

// tailUTF8 returns the longest suffix of s of at most n bytes that does not
// start inside a UTF-8 sequence.
func tailUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := len(s) - n
	for i < len(s) && s[i]&0xC0 == 0x80 {
		i++
	}
	return s[i:]
}
