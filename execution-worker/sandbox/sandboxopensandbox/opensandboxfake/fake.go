// Package opensandboxfake is an offline OpenSandbox server for tests: an
// httptest server on 127.0.0.1 speaking the subset of the lifecycle and
// execd protocols the adapter uses, backed by a real local process sandbox
// (sandboxlocal) per remote sandbox. A sandbox's /mnt/session and
// /mnt/memory are the directories mnt/session and mnt/memory inside its
// local sandbox: the file routes map them,
// commands, their working directory and environment are rewritten (their
// output back), since the fake shares the host's file system. Uploads are
// streamed to disk and recorded ([Server.Upload]). It can inject faults:
// error statuses n times, a malformed command stream, expired or killed
// sandboxes.
package opensandboxfake

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/fakeapi"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxlocal"
)

// Token is the execd access token the fake hands out with endpoints.
const Token = "fake-execd-token"

// Server is the fake OpenSandbox server.
type Server struct {
	srv   *httptest.Server
	local *sandboxlocal.Provider

	// APIKey, when set, is required in OPEN-SANDBOX-API-KEY.
	APIKey string
	// ProvisionDelay is how long a new sandbox stays Pending.
	ProvisionDelay time.Duration
	// MaxPageSize caps the list page size (0: as asked), to exercise
	// the client's paging.
	MaxPageSize int

	rec fakeapi.Recorder

	mu        sync.Mutex
	seq       int
	boxes     map[string]*box
	malformed bool
	proxied   int
}

type box struct {
	id       string
	state    string
	reason   string
	metadata map[string]string
	created  time.Time
	readyAt  time.Time
	sb       sandbox.Sandbox
	// sidecar: the sandbox was created with a networkPolicy, so the
	// server started its egress sidecar (port 18080).
	sidecar  bool
	policies []Policy    // every policy enforced, oldest first
	commands []ExecEntry // every command run, with the policy then in force
}

// Policy is an egress policy as the sidecar's /policy endpoint takes it.
type Policy struct {
	DefaultAction string `json:"defaultAction,omitempty"`
	Egress        []Rule `json:"egress,omitempty"`
}

// Rule is one egress rule.
type Rule struct {
	Action string `json:"action"`
	Target string `json:"target"`
}

// Allowed returns the targets of the allow rules, in order.
func (p Policy) Allowed() []string {
	var out []string
	for _, r := range p.Egress {
		if r.Action == "allow" {
			out = append(out, r.Target)
		}
	}
	return out
}

// ExecEntry is a command the fake ran and the policy in force then (nil:
// the sandbox had no egress sidecar).
type ExecEntry struct {
	Command string
	Policy  *Policy
}

// New starts a fake server; it is closed when tb ends.
func New(tb testing.TB) *Server {
	tb.Helper()
	local, err := sandboxlocal.New(sandboxlocal.Config{Root: filepath.Join(tb.TempDir(), "boxes"), ExecTimeout: 10 * time.Minute, Installation: "opensandboxfake"})
	if err != nil {
		tb.Fatal(err)
	}
	s := &Server{local: local, boxes: map[string]*box{}, ProvisionDelay: 20 * time.Millisecond}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes", s.list)
	mux.HandleFunc("POST /v1/sandboxes", s.create)
	mux.HandleFunc("GET /v1/sandboxes/{id}", s.get)
	mux.HandleFunc("DELETE /v1/sandboxes/{id}", s.delete)
	mux.HandleFunc("POST /v1/sandboxes/{id}/resume", s.resume)
	mux.HandleFunc("GET /v1/sandboxes/{id}/endpoints/{port}", s.endpoint)
	mux.HandleFunc("POST /sandboxes/{id}/port/44772/command", s.command)
	mux.HandleFunc("GET /sandboxes/{id}/port/44772/files/download", s.download)
	mux.HandleFunc("POST /sandboxes/{id}/port/44772/files/upload", s.upload)
	mux.HandleFunc("DELETE /sandboxes/{id}/port/44772/files", s.removeFiles)
	mux.HandleFunc("GET /sandboxes/{id}/port/44772/files/info", s.filesInfo)
	mux.HandleFunc("GET /sandboxes/{id}/port/44772/files/search", s.searchFiles)
	mux.HandleFunc("DELETE /sandboxes/{id}/port/44772/directories", s.removeDirs)
	mux.HandleFunc("POST /sandboxes/{id}/port/18080/policy", s.policy)
	s.srv = httptest.NewServer(s.middleware(mux))
	tb.Cleanup(s.srv.Close)
	return s
}

// URL returns the server's base URL (the OPEN_SANDBOX_DOMAIN).
func (s *Server) URL() string { return s.srv.URL }

// Host returns host:port of the server.
func (s *Server) Host() string { return strings.TrimPrefix(s.srv.URL, "http://") }

// Fail answers the next n requests whose method is method ("" any) and
// whose path contains path with status (and Retry-After when set).
func (s *Server) Fail(method, path string, status, n int, retryAfter string) {
	s.rec.Inject(fakeapi.Fault{Method: method, Path: path, N: n, Status: status, RetryAfter: retryAfter})
}

// Requests counts the requests received whose method is method ("" any)
// and whose path contains path.
func (s *Server) Requests(method, path string) int { return s.rec.Count(method, path) }

// SetMalformedStream makes /command answer a malformed frame and then hang.
func (s *Server) SetMalformedStream(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.malformed = on
}

// Expire marks a sandbox Terminated by TTL expiry and removes its workspace.
func (s *Server) Expire(id string) {
	s.mu.Lock()
	b := s.boxes[id]
	if b != nil {
		b.state, b.reason = "Terminated", "ttl_expiry"
	}
	s.mu.Unlock()
	if b != nil && b.sb != nil {
		_ = b.sb.Destroy(context.Background())
	}
}

// Kill removes a sandbox as if killed out of band: it no longer exists.
func (s *Server) Kill(id string) {
	s.mu.Lock()
	b := s.boxes[id]
	delete(s.boxes, id)
	s.mu.Unlock()
	if b != nil && b.sb != nil {
		_ = b.sb.Destroy(context.Background())
	}
}

// SetMetadata changes a sandbox's metadata value (relabelling).
func (s *Server) SetMetadata(id, key, value string) {
	fakeapi.Locked(&s.mu, s.boxes, id, func(b *box) { b.metadata[key] = value })
}

// Pause marks a sandbox Paused (resume makes it Running again).
func (s *Server) Pause(id string) {
	fakeapi.Locked(&s.mu, s.boxes, id, func(b *box) { b.state = "Paused" })
}

// Policies returns every egress policy a sandbox enforced, oldest first:
// the one it was created with, then each one posted to its sidecar.
func (s *Server) Policies(id string) (policies []Policy) {
	fakeapi.Locked(&s.mu, s.boxes, id, func(b *box) { policies = slices.Clone(b.policies) })
	return policies
}

// IDs returns the ids of the sandboxes that exist, sorted.
func (s *Server) IDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.boxes))
}

// Commands returns the commands a sandbox ran, with the policy in force.
func (s *Server) Commands(id string) (commands []ExecEntry) {
	fakeapi.Locked(&s.mu, s.boxes, id, func(b *box) { commands = slices.Clone(b.commands) })
	return commands
}

// ProxiedEndpoints counts endpoint requests with use_server_proxy=true.
func (s *Server) ProxiedEndpoints() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proxied
}

// Count returns how many sandboxes (any state) carry metadata key=value.
func (s *Server) Count(key, value string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, b := range s.boxes {
		if b.metadata[key] == value {
			n++
		}
	}
	return n
}

func (s *Server) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hit := s.rec.Take(r); hit != nil {
			hit.Write(w, "", func(w http.ResponseWriter, status int, msg string) { writeError(w, status, "INJECTED", msg) })
			return
		}
		if strings.HasPrefix(r.URL.Path, "/v1/") && s.APIKey != "" && r.Header.Get("OPEN-SANDBOX-API-KEY") != s.APIKey {
			writeError(w, http.StatusUnauthorized, "UNAUTHORIZED", "bad api key")
			return
		}
		if strings.HasPrefix(r.URL.Path, "/sandboxes/") && strings.Contains(r.URL.Path, "/port/44772/") && r.Header.Get("X-EXECD-ACCESS-TOKEN") != Token {
			writeError(w, http.StatusUnauthorized, "UNAUTHORIZED", "bad execd token")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]string{"code": code, "message": msg})
}

var writeJSON = fakeapi.WriteJSON

// view renders a box (under s.mu), advancing Pending to Running.
func (s *Server) view(b *box) map[string]any {
	if b.state == "Pending" && !time.Now().Before(b.readyAt) {
		b.state = "Running"
	}
	return map[string]any{
		"id":         b.id,
		"status":     map[string]string{"state": b.state, "reason": b.reason},
		"metadata":   maps.Clone(b.metadata),
		"createdAt":  b.created.Format(time.RFC3339Nano),
		"entrypoint": []string{"tail", "-f", "/dev/null"},
	}
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	filter, err := url.ParseQuery(r.URL.Query().Get("metadata"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "INVALID_REQUEST", err.Error())
		return
	}
	s.mu.Lock()
	var items []map[string]any
	ids := slices.Sorted(maps.Keys(s.boxes))
	for _, id := range ids {
		if b := s.boxes[id]; fakeapi.Matches(b.metadata, filter) {
			items = append(items, s.view(b))
		}
	}
	maxSize := s.MaxPageSize
	s.mu.Unlock()
	page, size := fakeapi.QueryInt(r, "page", 1), fakeapi.QueryInt(r, "pageSize", 20)
	if maxSize > 0 {
		size = min(size, maxSize)
	}
	if page < 1 || size < 1 {
		writeError(w, http.StatusBadRequest, "INVALID_REQUEST", "page and pageSize must be positive")
		return
	}
	total := len(items)
	from, to := min((page-1)*size, total), min(page*size, total)
	writeJSON(w, http.StatusOK, map[string]any{
		"items": items[from:to],
		"pagination": map[string]any{"page": page, "pageSize": size, "totalItems": total,
			"totalPages": (total + size - 1) / size, "hasNextPage": to < total},
	})
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Image *struct {
			URI string `json:"uri"`
		} `json:"image"`
		Entrypoint     []string          `json:"entrypoint"`
		ResourceLimits map[string]string `json:"resourceLimits"`
		Env            map[string]string `json:"env"`
		Metadata       map[string]string `json:"metadata"`
		NetworkPolicy  json.RawMessage   `json:"networkPolicy"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "INVALID_REQUEST", err.Error())
		return
	}
	if req.Image == nil || req.Image.URI == "" || len(req.Entrypoint) == 0 || len(req.ResourceLimits) == 0 {
		writeError(w, http.StatusBadRequest, "INVALID_REQUEST", "image, entrypoint and resourceLimits are required")
		return
	}
	var pol *Policy
	if len(req.NetworkPolicy) > 0 && string(req.NetworkPolicy) != "null" {
		p, err := parsePolicy(req.NetworkPolicy)
		if err != nil {
			writeError(w, http.StatusBadRequest, "INVALID_REQUEST", "networkPolicy: "+err.Error())
			return
		}
		pol = &p
	}
	s.mu.Lock()
	s.seq++
	id := fmt.Sprintf("sbx-%06d", s.seq)
	s.mu.Unlock()
	sb, _, err := s.local.Create(r.Context(), id, sandbox.Spec{Env: req.Env})
	if err != nil {
		writeError(w, http.StatusInternalServerError, "RUNTIME_ERROR", err.Error())
		return
	}
	s.mu.Lock()
	now := time.Now().UTC()
	b := &box{id: id, state: "Pending", metadata: maps.Clone(req.Metadata), created: now, readyAt: now.Add(s.ProvisionDelay), sb: sb}
	if pol != nil {
		b.sidecar, b.policies = true, []Policy{*pol}
	}
	if b.metadata == nil {
		b.metadata = map[string]string{}
	}
	s.boxes[id] = b
	v := s.view(b)
	s.mu.Unlock()
	writeJSON(w, http.StatusAccepted, v)
}

func (s *Server) lookup(w http.ResponseWriter, r *http.Request) (*box, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.boxes[r.PathValue("id")]
	if b == nil {
		writeError(w, http.StatusNotFound, "SANDBOX_NOT_FOUND", "sandbox not found")
		return nil, false
	}
	return b, true
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	b, ok := s.lookup(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	v := s.view(b)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request) {
	b, ok := s.lookup(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	delete(s.boxes, b.id)
	s.mu.Unlock()
	if b.sb != nil {
		_ = b.sb.Destroy(r.Context())
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) resume(w http.ResponseWriter, r *http.Request) {
	b, ok := s.lookup(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.state != "Paused" {
		writeError(w, http.StatusConflict, "INVALID_STATE", "not paused")
		return
	}
	b.state = "Running"
	w.WriteHeader(http.StatusAccepted)
}

func (s *Server) endpoint(w http.ResponseWriter, r *http.Request) {
	b, ok := s.lookup(w, r)
	if !ok {
		return
	}
	port := r.PathValue("port")
	s.mu.Lock()
	if r.URL.Query().Get("use_server_proxy") == "true" {
		s.proxied++
	}
	state := s.view(b)["status"].(map[string]string)["state"]
	s.mu.Unlock()
	if state != "Running" {
		writeError(w, http.StatusConflict, "INVALID_STATE", "sandbox is "+state)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"endpoint": s.Host() + "/sandboxes/" + b.id + "/port/" + port,
		"headers":  map[string]string{"X-EXECD-ACCESS-TOKEN": Token},
	})
}

// running returns the local sandbox of a Running box, or answers 404.
func (s *Server) running(w http.ResponseWriter, r *http.Request) (sandbox.Sandbox, bool) {
	s.mu.Lock()
	b := s.boxes[r.PathValue("id")]
	ok := b != nil && s.view(b)["status"].(map[string]string)["state"] == "Running"
	s.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, "SANDBOX_NOT_FOUND", "sandbox not running")
		return nil, false
	}
	return b.sb, true
}

// logCommand records a command with the policy in force.
func (s *Server) logCommand(id, command string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.boxes[id]
	if b == nil {
		return
	}
	e := ExecEntry{Command: command}
	if n := len(b.policies); n > 0 {
		p := b.policies[n-1]
		e.Policy = &p
	}
	b.commands = append(b.commands, e)
}

func (s *Server) command(w http.ResponseWriter, r *http.Request) {
	sb, ok := s.running(w, r)
	if !ok {
		return
	}
	var req struct {
		Command string            `json:"command"`
		Cwd     string            `json:"cwd"`
		Timeout int64             `json:"timeout"`
		Envs    map[string]string `json:"envs"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Command == "" {
		writeError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "bad body")
		return
	}
	s.logCommand(r.PathValue("id"), req.Command)
	rc := http.NewResponseController(w)
	send := func(ev map[string]any) {
		ev["timestamp"] = time.Now().UnixMilli()
		b, _ := json.Marshal(ev)
		_, _ = w.Write(append(b, '\n', '\n'))
		_ = rc.Flush()
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	s.mu.Lock()
	malformed := s.malformed
	s.mu.Unlock()
	if malformed {
		_, _ = io.WriteString(w, "{\"type\":\"stdout\",\"text\":\n\n")
		_ = rc.Flush()
		<-r.Context().Done()
		return
	}
	send(map[string]any{"type": "init", "text": "cmd-" + strconv.FormatInt(time.Now().UnixNano(), 36)})
	// The sandbox's /mnt/session and /mnt/memory are directories inside
	// the local sandbox: commands see them there, and their output names
	// them /mnt/session and /mnt/memory.
	in, out := fakeapi.SessionRewrite(sb.Root())
	env := map[string]string{}
	for k, v := range req.Envs {
		env[k] = in.Replace(v)
	}
	env["MANGO_WORKSPACE"] = sb.Root()
	cmd := in.Replace(req.Command)
	if req.Cwd != "" {
		cmd = "cd -- " + sandbox.ShellQuote(in.Replace(req.Cwd)) + " || exit 1\n" + cmd
	}
	res, err := sb.Exec(r.Context(), sandbox.ExecRequest{Command: cmd, Env: env, Timeout: time.Duration(req.Timeout) * time.Millisecond})
	if err != nil {
		send(map[string]any{"type": "error", "error": map[string]any{"ename": "RuntimeError", "evalue": err.Error()}})
		return
	}
	res.Stdout, res.Stderr = []byte(out.Replace(string(res.Stdout))), []byte(out.Replace(string(res.Stderr)))
	if len(res.Stdout) > 0 {
		send(map[string]any{"type": "stdout", "text": string(res.Stdout)})
	}
	if len(res.Stderr) > 0 {
		send(map[string]any{"type": "stderr", "text": string(res.Stderr)})
	}
	if res.ExitCode != 0 {
		send(map[string]any{"type": "error", "error": map[string]any{"ename": "CommandExecError", "evalue": strconv.Itoa(res.ExitCode)}})
		return
	}
	send(map[string]any{"type": "execution_complete", "execution_time": res.Duration.Milliseconds()})
}

func (s *Server) download(w http.ResponseWriter, r *http.Request) {
	sb, ok := s.running(w, r)
	if !ok {
		return
	}
	p := r.URL.Query().Get("path")
	f, err := os.Open(fakeapi.HostPath(sb.Root(), p))
	if errors.Is(err, fs.ErrNotExist) {
		writeError(w, http.StatusNotFound, "FILE_NOT_FOUND", "file not found")
		return
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, "RUNTIME_ERROR", err.Error())
		return
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		writeError(w, http.StatusBadRequest, "INVALID_PATH", "not a regular file")
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, filepath.Base(p), fi.ModTime(), f)
}

func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	sb, ok := s.running(w, r)
	if !ok {
		return
	}
	_, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", err.Error())
		return
	}
	mr := multipart.NewReader(r.Body, params["boundary"])
	var meta struct {
		Path string `json:"path"`
		Mode int    `json:"mode"`
	}
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", err.Error())
			return
		}
		switch part.FormName() {
		case "metadata":
			if err := json.NewDecoder(part).Decode(&meta); err != nil || meta.Path == "" {
				writeError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "bad metadata")
				return
			}
		case "file":
			if meta.Path == "" {
				writeError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "file part before metadata")
				return
			}
			mode := fs.FileMode(0o644)
			if meta.Mode > 0 {
				if m, err := strconv.ParseUint(strconv.Itoa(meta.Mode), 8, 32); err == nil {
					mode = fs.FileMode(m)
				}
			}
			if err := s.store(sb, r.PathValue("id"), meta.Path, part, mode); err != nil {
				writeError(w, http.StatusInternalServerError, "RUNTIME_ERROR", err.Error())
				return
			}
			meta.Path = ""
		}
	}
	w.WriteHeader(http.StatusOK)
}

// Upload is what the fake received for one uploaded file.
type Upload = fakeapi.Upload

// Upload returns the last upload to path p (as the sandbox names it) of
// sandbox id.
func (s *Server) Upload(id, p string) (Upload, bool) {
	return s.rec.Upload(id + ":" + filepath.Clean(p))
}

// store streams content to the sandbox path p (parents created, the mode
// applied exactly) and records its size and digest.
func (s *Server) store(sb sandbox.Sandbox, id, p string, content io.Reader, mode fs.FileMode) error {
	h := fakeapi.HostPath(sb.Root(), p)
	if err := os.MkdirAll(filepath.Dir(h), 0o755); err != nil {
		return err
	}
	if err := s.rec.Store(id+":"+filepath.Clean(p), h, content, mode); err != nil {
		return err
	}
	return os.Chmod(h, mode)
}

// sandboxPath is fakeapi.HostPath reversed.
func sandboxPath(sb sandbox.Sandbox, h string) string {
	return fakeapi.SandboxPath(sb.Root(), h)
}

// fileInfo is execd's FileInfo of the sandbox path p.
func fileInfo(p string, fi fs.FileInfo) map[string]any {
	typ := "other"
	switch {
	case fi.Mode().IsRegular():
		typ = "file"
	case fi.IsDir():
		typ = "directory"
	case fi.Mode()&fs.ModeSymlink != 0:
		typ = "symlink"
	}
	mode, _ := strconv.Atoi(strconv.FormatUint(uint64(fi.Mode().Perm()), 8))
	return map[string]any{
		"path": p, "type": typ, "size": fi.Size(), "mode": mode, "owner": "root", "group": "root",
		"modified_at": fi.ModTime().UTC().Format(time.RFC3339Nano), "created_at": fi.ModTime().UTC().Format(time.RFC3339Nano),
	}
}

// filesInfo serves GET /files/info: a map of each path to its FileInfo
// (symbolic links not followed).
func (s *Server) filesInfo(w http.ResponseWriter, r *http.Request) {
	sb, ok := s.running(w, r)
	if !ok {
		return
	}
	out := map[string]any{}
	for _, p := range r.URL.Query()["path"] {
		fi, err := os.Lstat(fakeapi.HostPath(sb.Root(), p))
		if errors.Is(err, fs.ErrNotExist) {
			writeError(w, http.StatusNotFound, "FILE_NOT_FOUND", "file not found: "+p)
			return
		}
		if err != nil {
			writeError(w, http.StatusInternalServerError, "RUNTIME_ERROR", err.Error())
			return
		}
		out[p] = fileInfo(p, fi)
	}
	writeJSON(w, http.StatusOK, out)
}

// searchFiles serves GET /files/search: the entries under path (not
// directories, symbolic links not followed) whose name matches the glob
// pattern ("**", the default, matches all).
func (s *Server) searchFiles(w http.ResponseWriter, r *http.Request) {
	sb, ok := s.running(w, r)
	if !ok {
		return
	}
	root, pattern := r.URL.Query().Get("path"), cmp.Or(r.URL.Query().Get("pattern"), "**")
	if _, err := filepath.Match(pattern, ""); err != nil || root == "" {
		writeError(w, http.StatusBadRequest, "INVALID_PARAMETER", "bad path or pattern")
		return
	}
	h := fakeapi.HostPath(sb.Root(), root)
	if fi, err := os.Stat(h); err != nil || !fi.IsDir() {
		writeError(w, http.StatusNotFound, "FILE_NOT_FOUND", "directory not found")
		return
	}
	out := []map[string]any{}
	err := filepath.WalkDir(h, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if ok, _ := filepath.Match(pattern, d.Name()); pattern != "**" && !ok {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		out = append(out, fileInfo(sandboxPath(sb, p), fi))
		return nil
	})
	if err != nil {
		writeError(w, http.StatusInternalServerError, "RUNTIME_ERROR", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// removeDirs serves DELETE /directories: each path removed with
// everything under it; a missing path is no error.
func (s *Server) removeDirs(w http.ResponseWriter, r *http.Request) {
	sb, ok := s.running(w, r)
	if !ok {
		return
	}
	for _, p := range r.URL.Query()["path"] {
		if err := os.RemoveAll(fakeapi.HostPath(sb.Root(), p)); err != nil {
			writeError(w, http.StatusInternalServerError, "RUNTIME_ERROR", err.Error())
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) removeFiles(w http.ResponseWriter, r *http.Request) {
	sb, ok := s.running(w, r)
	if !ok {
		return
	}
	for _, p := range r.URL.Query()["path"] {
		if err := os.Remove(fakeapi.HostPath(sb.Root(), p)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			writeError(w, http.StatusInternalServerError, "RUNTIME_ERROR", err.Error())
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) policy(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.running(w, r); !ok {
		return
	}
	data, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "bad policy")
		return
	}
	pol, err := parsePolicy(data)
	if err != nil {
		writeError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", err.Error())
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.boxes[r.PathValue("id")]
	if b == nil || !b.sidecar {
		// Only a sandbox created with a networkPolicy has the sidecar.
		writeError(w, http.StatusNotFound, "SANDBOX::ENDPOINT_NOT_FOUND", "no egress sidecar on port 18080")
		return
	}
	b.policies = append(b.policies, pol)
	w.WriteHeader(http.StatusOK)
}

// parsePolicy checks a policy the way the sidecar does: known fields only,
// actions allow or deny, a target on every rule; an omitted default is deny.
func parsePolicy(data []byte) (Policy, error) {
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	var p Policy
	if err := dec.Decode(&p); err != nil {
		return p, fmt.Errorf("bad policy: %w", err)
	}
	p.DefaultAction = cmp.Or(p.DefaultAction, "deny")
	if p.DefaultAction != "allow" && p.DefaultAction != "deny" {
		return p, fmt.Errorf("bad policy: defaultAction %q", p.DefaultAction)
	}
	for i, r := range p.Egress {
		if (r.Action != "allow" && r.Action != "deny") || r.Target == "" {
			return p, fmt.Errorf("bad policy: egress[%d] = %+v", i, r)
		}
	}
	return p, nil
}
