// Package daytonafake is an offline stand-in for the Daytona control plane
// and toolbox, for tests. It serves the subset of the published wire
// protocol the sandboxdaytona adapter uses over HTTP on 127.0.0.1:
//
//	GET    /api/sandbox?labels=JSON&cursor=&limit=   list (labels filter)
//	POST   /api/sandbox                              create (names unique: 409)
//	GET    /api/sandbox/{idOrName}                   get
//	DELETE /api/sandbox/{idOrName}                   delete
//	POST   /api/sandbox/{idOrName}/start             start a stopped sandbox
//	GET    /toolbox/{id}/work-dir
//	POST   /toolbox/{id}/process/execute             synchronous, stdout+stderr combined
//	GET    /toolbox/{id}/files/download?path=        streamed
//	POST   /toolbox/{id}/files/upload?path=          multipart field "file", streamed
//	GET    /toolbox/{id}/files?path=                 one directory's entries
//	DELETE /toolbox/{id}/files?path=&recursive=
//	GET    /toolbox/{id}/files/info?path=
//	POST   /toolbox/{id}/files/permissions?path=&mode=
//
// Every remote sandbox is backed by a real local process sandbox
// (sandboxlocal), so commands really run, in their own process groups, and
// files really exist; a sandbox's /mnt/session and /mnt/memory are the
// directories mnt/session and mnt/memory inside it (file routes map them, commands and their working
// directory are rewritten and their output back). Uploads are recorded
// ([Server.Upload]). A new sandbox is "creating" until its first GET, and
// a started one is "starting" until the next GET, so clients must poll.
// Faults can be injected: error statuses (with Retry-After) for the next n
// matching requests, malformed bodies, expiry (the sandbox disappears) and
// stopping (as Daytona's auto-stop does).
package daytonafake

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/fakeapi"
)

// APIKey is the key the fake accepts.
const APIKey = "fake-daytona-key"

// Server is the fake service.
type Server struct {
	// MaxPageSize caps the page size of GET /sandbox (0: the client's
	// limit), to exercise the client's paging with cursors.
	MaxPageSize int

	srv *httptest.Server
	dir string

	rec fakeapi.Recorder

	mu        sync.Mutex
	sandboxes map[string]*box // by id
}

type box struct {
	ID, Name, State string
	Labels, Env     map[string]string
	CreatedAt       time.Time
	Body            map[string]any // the create request, for inspection
	local           sandbox.Sandbox
}

// New starts a fake whose sandboxes live under dir (for example t.TempDir()).
// Close stops it.
func New(dir string) *Server {
	s := &Server{dir: dir, sandboxes: map[string]*box{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// Close stops the server and removes the local sandboxes.
func (s *Server) Close() {
	s.srv.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.sandboxes {
		_ = b.local.Destroy(context.Background())
	}
}

// APIURL is the control plane base URL (DAYTONA_API_URL).
func (s *Server) APIURL() string { return s.srv.URL + "/api" }

// FailNext makes the next n requests whose method matches (empty: any) and
// whose path contains contains answer status, with a Retry-After header
// when retryAfter is set.
func (s *Server) FailNext(method, contains string, n, status int, retryAfter string) {
	s.rec.Inject(fakeapi.Fault{Method: method, Path: contains, N: n, Status: status, RetryAfter: retryAfter})
}

// MalformNext makes the next n matching requests answer 200 with a body
// that is not valid JSON.
func (s *Server) MalformNext(method, contains string, n int) {
	s.rec.Inject(fakeapi.Fault{Method: method, Path: contains, N: n, Malformed: true})
}

// Count returns how many requests with method (empty: any) and a path
// containing contains were received.
func (s *Server) Count(method, contains string) int { return s.rec.Count(method, contains) }

// Expire removes a sandbox as if it had been killed or had expired.
func (s *Server) Expire(id string) {
	s.mu.Lock()
	b := s.sandboxes[id]
	delete(s.sandboxes, id)
	s.mu.Unlock()
	if b != nil {
		_ = b.local.Destroy(context.Background())
	}
}

// Stop puts a sandbox in state "stopped", as Daytona's auto-stop does.
func (s *Server) Stop(id string) {
	fakeapi.Locked(&s.mu, s.sandboxes, id, func(b *box) { b.State = "stopped" })
}

// State returns the state of a sandbox ("" when missing).
func (s *Server) State(id string) (state string) {
	fakeapi.Locked(&s.mu, s.sandboxes, id, func(b *box) { state = b.State })
	return state
}

// SetLabel sets a label of a sandbox.
func (s *Server) SetLabel(id, k, v string) {
	fakeapi.Locked(&s.mu, s.sandboxes, id, func(b *box) { b.Labels[k] = v })
}

// CreateRequest returns the decoded create request of a sandbox.
func (s *Server) CreateRequest(id string) (body map[string]any) {
	fakeapi.Locked(&s.mu, s.sandboxes, id, func(b *box) { body = b.Body })
	return body
}

var writeJSON = fakeapi.WriteJSON

func writeErr(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"statusCode": status, "message": msg, "error": http.StatusText(status)})
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	hit := s.rec.Take(r)
	if r.Header.Get("Authorization") != "Bearer "+APIKey {
		writeErr(w, http.StatusUnauthorized, "invalid API key")
		return
	}
	if hit != nil {
		hit.Write(w, `{"exitCode": 0, "result": "\u00`, writeErr)
		return
	}
	switch {
	case strings.HasPrefix(r.URL.Path, "/api/sandbox"):
		s.controlPlane(w, r, strings.Trim(strings.TrimPrefix(r.URL.Path, "/api/sandbox"), "/"))
	case strings.HasPrefix(r.URL.Path, "/toolbox/"):
		id, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/toolbox/"), "/")
		s.toolbox(w, r, id, "/"+rest)
	default:
		writeErr(w, http.StatusNotFound, "no route")
	}
}

// dto renders a sandbox as Daytona's Sandbox DTO.
func (s *Server) dto(b *box) map[string]any {
	return map[string]any{
		"id": b.ID, "name": b.Name, "state": b.State, "labels": b.Labels, "env": b.Env,
		"organizationId": "org-fake", "user": "daytona", "target": "fake", "public": false,
		"networkBlockAll": false, "cpu": 1, "gpu": 0, "memory": 1, "disk": 3,
		"toolboxProxyUrl": s.srv.URL + "/toolbox",
		"createdAt":       b.CreatedAt.Format(time.RFC3339Nano),
	}
}

// lookup finds a sandbox by id or name; the caller holds mu.
func (s *Server) lookup(idOrName string) *box {
	if b := s.sandboxes[idOrName]; b != nil {
		return b
	}
	for _, b := range s.sandboxes {
		if b.Name == idOrName {
			return b
		}
	}
	return nil
}

func (s *Server) controlPlane(w http.ResponseWriter, r *http.Request, rest string) {
	switch {
	case rest == "" && r.Method == http.MethodGet:
		s.list(w, r)
	case rest == "" && r.Method == http.MethodPost:
		s.create(w, r)
	case rest != "" && !strings.Contains(rest, "/"):
		s.mu.Lock()
		b := s.lookup(rest)
		if b == nil {
			s.mu.Unlock()
			writeErr(w, http.StatusNotFound, "Sandbox with ID or name "+rest+" not found")
			return
		}
		switch r.Method {
		case http.MethodGet:
			out := s.dto(b)
			// Transitional states last until the next poll, and creating
			// until the backing sandbox exists (a concurrent create may
			// find the box by name while it is still being made).
			switch {
			case b.State == "starting", b.State == "creating" && b.local != nil:
				b.State = "started"
			}
			s.mu.Unlock()
			writeJSON(w, http.StatusOK, out)
		case http.MethodDelete:
			delete(s.sandboxes, b.ID)
			b.State = "destroying"
			out := s.dto(b)
			s.mu.Unlock()
			_ = b.local.Destroy(r.Context())
			writeJSON(w, http.StatusOK, out)
		default:
			s.mu.Unlock()
			writeErr(w, http.StatusMethodNotAllowed, "method not allowed")
		}
	case strings.HasSuffix(rest, "/start") && r.Method == http.MethodPost:
		s.mu.Lock()
		b := s.lookup(strings.TrimSuffix(rest, "/start"))
		if b == nil {
			s.mu.Unlock()
			writeErr(w, http.StatusNotFound, "sandbox not found")
			return
		}
		if b.State == "stopped" || b.State == "paused" || b.State == "archived" {
			b.State = "starting"
		}
		out := s.dto(b)
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, out)
	default:
		writeErr(w, http.StatusNotFound, "no route")
	}
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	var want map[string]string
	if v := r.URL.Query().Get("labels"); v != "" {
		if err := json.Unmarshal([]byte(v), &want); err != nil {
			writeErr(w, http.StatusBadRequest, "labels: "+err.Error())
			return
		}
	}
	limit := fakeapi.QueryInt(r, "limit", 100)
	if limit < 1 || limit > 200 {
		writeErr(w, http.StatusBadRequest, "limit")
		return
	}
	offset, _ := strconv.Atoi(r.URL.Query().Get("cursor"))
	s.mu.Lock()
	if s.MaxPageSize > 0 {
		limit = min(limit, s.MaxPageSize)
	}
	var match []*box
	for _, b := range s.sandboxes {
		ok := true
		for k, v := range want {
			if b.Labels[k] != v {
				ok = false
			}
		}
		if ok {
			match = append(match, b)
		}
	}
	sort.Slice(match, func(i, j int) bool { return match[i].ID < match[j].ID })
	items := []map[string]any{}
	for i := offset; i < len(match) && i < offset+limit; i++ {
		items = append(items, s.dto(match[i]))
	}
	s.mu.Unlock()
	var next any
	if offset+limit < len(match) {
		next = strconv.Itoa(offset + limit)
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items, "nextCursor": next})
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeErr(w, http.StatusBadRequest, "body: "+err.Error())
		return
	}
	var req struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
		Env    map[string]string `json:"env"`
	}
	raw, _ := json.Marshal(body)
	_ = json.Unmarshal(raw, &req)
	id := "fake-" + fakeapi.RandomHex(8)
	req.Name = cmp.Or(req.Name, id)
	if req.Labels == nil {
		req.Labels = map[string]string{}
	}
	if req.Env == nil {
		req.Env = map[string]string{}
	}
	s.mu.Lock()
	if s.lookup(req.Name) != nil {
		s.mu.Unlock()
		writeErr(w, http.StatusConflict, "Sandbox with name "+req.Name+" already exists")
		return
	}
	b := &box{ID: id, Name: req.Name, State: "creating", Labels: req.Labels, Env: req.Env, CreatedAt: time.Now().UTC(), Body: body}
	s.sandboxes[id] = b // reserve the name before the slow part
	s.mu.Unlock()

	local, err := fakeapi.NewLocal(r.Context(), s.dir, id)
	s.mu.Lock()
	if err != nil {
		delete(s.sandboxes, id)
		s.mu.Unlock()
		writeErr(w, http.StatusInternalServerError, err.Error())
		return
	}
	b.local = local
	out := s.dto(b)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) toolbox(w http.ResponseWriter, r *http.Request, id, op string) {
	s.mu.Lock()
	b := s.sandboxes[id]
	var local sandbox.Sandbox
	state := ""
	if b != nil {
		local, state = b.local, b.State
	}
	s.mu.Unlock()
	switch {
	case b == nil || local == nil:
		writeErr(w, http.StatusNotFound, "sandbox not found")
		return
	case state != "started":
		writeErr(w, http.StatusBadRequest, "sandbox is not running (state "+state+")")
		return
	}
	switch {
	case op == "/work-dir" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, map[string]string{"dir": local.Root()})
	case op == "/process/execute" && r.Method == http.MethodPost:
		s.execute(w, r, local)
	case op == "/files/download" && r.Method == http.MethodGet:
		s.download(w, r, local)
	case op == "/files/upload" && r.Method == http.MethodPost:
		s.upload(w, r, id, local)
	case op == "/files" && r.Method == http.MethodGet:
		listFiles(w, r, local)
	case op == "/files" && r.Method == http.MethodDelete:
		deleteFile(w, r, local)
	case op == "/files/info" && r.Method == http.MethodGet:
		fi, err := os.Lstat(fakeapi.HostPath(local.Root(), r.URL.Query().Get("path")))
		if err != nil {
			fileErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, fileInfo(fi))
	case op == "/files/permissions" && r.Method == http.MethodPost:
		setPermissions(w, r, local)
	default:
		writeErr(w, http.StatusNotFound, "no route")
	}
}

func (s *Server) execute(w http.ResponseWriter, r *http.Request, local sandbox.Sandbox) {
	var req struct {
		Command string `json:"command"`
		Cwd     string `json:"cwd"`
		Timeout int    `json:"timeout"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Command == "" {
		writeErr(w, http.StatusBadRequest, fmt.Sprintf("invalid request: %v", err))
		return
	}
	timeout := 10 * time.Second
	if req.Timeout > 0 {
		timeout = time.Duration(req.Timeout) * time.Second
	}
	// The sandbox's /mnt/session and /mnt/memory are directories inside
	// the local sandbox: the command sees them there, and its output names
	// them /mnt/session and /mnt/memory.
	in, out := fakeapi.SessionRewrite(local.Root())
	cmd := in.Replace(req.Command)
	if m := encodedScript.FindStringSubmatch(req.Command); m != nil {
		// A script sent base64-encoded (as the adapter does) is rewritten
		// inside its encoding.
		if script, err := base64.StdEncoding.DecodeString(m[1]); err == nil {
			cmd = strings.Replace(req.Command, m[1], base64.StdEncoding.EncodeToString([]byte(in.Replace(string(script)))), 1)
		}
	}
	if req.Cwd != "" {
		cmd = "cd '" + strings.ReplaceAll(in.Replace(req.Cwd), "'", `'\''`) + "' && " + cmd
	}
	// Like the daemon, the command runs to completion (or its own timeout)
	// even if the client goes away.
	res, err := local.Exec(context.Background(), sandbox.ExecRequest{Command: cmd, Timeout: timeout})
	if err != nil {
		writeErr(w, http.StatusInternalServerError, err.Error())
		return
	}
	res.Stdout, res.Stderr = []byte(out.Replace(string(res.Stdout))), []byte(out.Replace(string(res.Stderr)))
	writeJSON(w, http.StatusOK, map[string]any{"exitCode": res.ExitCode, "result": string(res.Stdout) + string(res.Stderr)})
}

// encodedScript matches a command piping a base64-encoded script into a
// shell.
var encodedScript = regexp.MustCompile(`^/bin/sh -c "echo ([A-Za-z0-9+/=]+) \| base64 -d \| /bin/sh"$`)

// fileErr answers a file system error as the toolbox does: 404 for a
// missing path, else 400.
func fileErr(w http.ResponseWriter, err error) {
	if errors.Is(err, fs.ErrNotExist) {
		writeErr(w, http.StatusNotFound, "file not found")
		return
	}
	writeErr(w, http.StatusBadRequest, err.Error())
}

// fileInfo is the toolbox's FileInfo of an Lstat result.
func fileInfo(fi fs.FileInfo) map[string]any {
	return map[string]any{
		"name": fi.Name(), "isDir": fi.IsDir(), "size": fi.Size(), "mode": fi.Mode().String(),
		"permissions": fmt.Sprintf("%04o", fi.Mode().Perm()), "owner": "daytona", "group": "daytona",
		"modTime": fi.ModTime().String(), "modifiedAt": fi.ModTime().UTC().Format(time.RFC3339Nano),
	}
}

// download serves GET /files/download, streamed with a Content-Length.
func (s *Server) download(w http.ResponseWriter, r *http.Request, local sandbox.Sandbox) {
	p := r.URL.Query().Get("path")
	f, err := os.Open(fakeapi.HostPath(local.Root(), p))
	if err != nil {
		fileErr(w, err)
		return
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil || fi.IsDir() {
		writeErr(w, http.StatusBadRequest, "not a file")
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, filepath.Base(p), fi.ModTime(), f)
}

// Upload is what the fake received for one uploaded file.
type Upload = fakeapi.Upload

// Upload returns the last upload to path p (as the sandbox names it) of
// sandbox id.
func (s *Server) Upload(id, p string) (Upload, bool) {
	return s.rec.Upload(id + ":" + filepath.Clean(p))
}

// upload serves POST /files/upload: the multipart "file" part streamed to
// path. Like a daemon without mkdir -p, the parent must exist.
func (s *Server) upload(w http.ResponseWriter, r *http.Request, id string, local sandbox.Sandbox) {
	p := r.URL.Query().Get("path")
	part, err := fakeapi.FilePart(r)
	if err != nil {
		writeErr(w, http.StatusBadRequest, "file: "+err.Error())
		return
	}
	if err := s.rec.Store(id+":"+filepath.Clean(p), fakeapi.HostPath(local.Root(), p), part, 0o644); err != nil {
		fileErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"message": "File uploaded successfully"})
}

// listFiles serves GET /files: the entries of one directory, Lstat'ed.
func listFiles(w http.ResponseWriter, r *http.Request, local sandbox.Sandbox) {
	p := cmp.Or(r.URL.Query().Get("path"), local.Root())
	entries, err := os.ReadDir(fakeapi.HostPath(local.Root(), p))
	if err != nil {
		fileErr(w, err)
		return
	}
	out := []map[string]any{}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			continue
		}
		out = append(out, fileInfo(fi))
	}
	writeJSON(w, http.StatusOK, out)
}

// deleteFile serves DELETE /files: a file or an empty directory, or with
// recursive=true a whole tree.
func deleteFile(w http.ResponseWriter, r *http.Request, local sandbox.Sandbox) {
	h := fakeapi.HostPath(local.Root(), r.URL.Query().Get("path"))
	if _, err := os.Lstat(h); err != nil {
		fileErr(w, err)
		return
	}
	var err error
	if r.URL.Query().Get("recursive") == "true" {
		err = os.RemoveAll(h)
	} else {
		err = os.Remove(h)
	}
	if err != nil {
		fileErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// setPermissions serves POST /files/permissions (mode only).
func setPermissions(w http.ResponseWriter, r *http.Request, local sandbox.Sandbox) {
	h := fakeapi.HostPath(local.Root(), r.URL.Query().Get("path"))
	if m := r.URL.Query().Get("mode"); m != "" {
		mode, err := strconv.ParseUint(m, 8, 32)
		if err != nil {
			writeErr(w, http.StatusBadRequest, "invalid mode")
			return
		}
		if err := os.Chmod(h, fs.FileMode(mode)); err != nil {
			fileErr(w, err)
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}
