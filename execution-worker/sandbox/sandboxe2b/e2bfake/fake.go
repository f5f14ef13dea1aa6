// Package e2bfake is an offline fake of the E2B protocol (also spoken by
// Tencent CubeSandbox) for tests: one httptest server on 127.0.0.1 serving
// the control plane and, for requests whose Host is 49983-<id>.<domain>,
// envd. Each fake sandbox is backed by a real local process sandbox
// (sandboxlocal), so commands, process groups, kills and files are real.
// A sandbox's /mnt/session and /mnt/memory are the directories mnt/session
// and mnt/memory inside its local directory: the file routes map them, and process arguments, working
// directory and environment are rewritten (and their output back), as the
// fake shares the host's file system. Uploads are streamed to disk and
// recorded (size and SHA-256, see [Server.Upload]).
// Faults can be injected: error answers, malformed stream frames, killed or
// expired sandboxes.
package e2bfake

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/e2bproto"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/fakeapi"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/shellexec"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxlocal"
)

// Route names, for [Server.Fail] and [Server.Count].
const (
	RouteCreate    = "create"
	RouteList      = "list"
	RouteGet       = "get"
	RouteConnect   = "connect"
	RouteTimeout   = "timeout"
	RouteKill      = "kill"
	RouteProcess   = "process"
	RouteFilesGet  = "files.get"
	RouteFilesPost = "files.post"
)

// Options configure the fake.
type Options struct {
	// APIKey, when set, must be presented: as X-API-Key, or as a Bearer
	// token when Bearer is set.
	APIKey string
	Bearer bool
	// AccessTokens makes the fake issue envd access tokens (E2B) and
	// require them (X-Access-Token).
	AccessTokens bool
	// Domain is the sandbox domain returned by the control plane (default
	// "e2b.test").
	Domain string
	// OmitDomain leaves the domain out of answers (the client's configured
	// domain applies).
	OmitDomain bool
	// MaxPageSize caps the page size of GET /v2/sandboxes (0: the
	// client's limit), to exercise the client's paging with nextToken.
	MaxPageSize int
}

// Server is the fake service.
type Server struct {
	// URL is the control plane base URL; Addr its host:port, to which envd
	// requests are sent with the sandbox host in the Host header.
	URL, Addr string
	// Domain is the sandbox domain.
	Domain string

	opts  Options
	ts    *httptest.Server
	local *sandboxlocal.Provider

	mu        sync.Mutex
	sandboxes map[string]*fakeSandbox
	last      time.Time
	faults    map[string][]fault
	malformed int
	counts    map[string]int
	users     map[string]int // processes started, by envd user
	rec       fakeapi.Recorder
}

type fakeSandbox struct {
	id, template string
	token        string
	metadata     map[string]string
	startedAt    time.Time
	endAt        time.Time
	paused       bool
	sb           sandbox.Sandbox
	life         context.Context
	kill         context.CancelFunc
}

type fault struct {
	status     int
	retryAfter string
}

// New starts a fake and stops it when t ends.
func New(t testing.TB, opts Options) *Server {
	t.Helper()
	local, err := sandboxlocal.New(sandboxlocal.Config{Root: t.TempDir(), ExecTimeout: time.Hour, MaxOutput: 64 << 20, Installation: "e2bfake"})
	if err != nil {
		t.Fatalf("e2bfake: %v", err)
	}
	s := &Server{
		opts:      opts,
		local:     local,
		Domain:    cmp.Or(opts.Domain, "e2b.test"),
		sandboxes: map[string]*fakeSandbox{},
		faults:    map[string][]fault{},
		counts:    map[string]int{},
		users:     map[string]int{},
	}
	s.ts = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.ts.URL
	s.Addr = strings.TrimPrefix(s.ts.URL, "http://")
	t.Cleanup(func() {
		s.ts.CloseClientConnections()
		s.ts.Close()
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, sb := range s.sandboxes {
			sb.kill()
		}
	})
	return s
}

// Fail makes the next n requests of route answer status (with a
// Retry-After header when retryAfter is set).
func (s *Server) Fail(route string, status, n int, retryAfter string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.faults[route] = append(s.faults[route], fault{status, retryAfter})
	}
}

// MalformNextStreams makes the next n Process/Start answers send a
// malformed frame and then hang until the client goes away.
func (s *Server) MalformNextStreams(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.malformed += n
}

// Count returns how many requests route received.
func (s *Server) Count(route string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[route]
}

// ProcessesAs returns how many processes were started as user (envd's
// Basic authorization; the fake runs them all as the host user).
func (s *Server) ProcessesAs(user string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.users[user]
}

// Kill removes a sandbox behind the client's back (as an expired timeout
// without auto-pause does).
func (s *Server) Kill(id string) bool {
	s.mu.Lock()
	sb, ok := s.sandboxes[id]
	delete(s.sandboxes, id)
	s.mu.Unlock()
	if ok {
		sb.kill()
		_ = sb.sb.Destroy(context.Background())
	}
	return ok
}

// Pause pauses a sandbox (as auto-pause at its timeout does): envd is
// unreachable until a connect resumes it.
func (s *Server) Pause(id string) {
	fakeapi.Locked(&s.mu, s.sandboxes, id, func(sb *fakeSandbox) { sb.paused = true })
}

// SetMetadata changes a sandbox's metadata.
func (s *Server) SetMetadata(id, key, value string) {
	fakeapi.Locked(&s.mu, s.sandboxes, id, func(sb *fakeSandbox) { sb.metadata[key] = value })
}

// EndAt returns when a sandbox expires (zero if it does not exist).
func (s *Server) EndAt(id string) (end time.Time) {
	fakeapi.Locked(&s.mu, s.sandboxes, id, func(sb *fakeSandbox) { end = sb.endAt })
	return end
}

// IDs returns the ids of the existing sandboxes.
func (s *Server) IDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Keys(s.sandboxes))
}

var writeJSON = fakeapi.WriteJSON

func apiError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"code": status, "message": msg})
}

// begin counts the request and applies an injected fault.
func (s *Server) begin(w http.ResponseWriter, route string) bool {
	s.mu.Lock()
	s.counts[route]++
	var f *fault
	if q := s.faults[route]; len(q) > 0 {
		f = &q[0]
		s.faults[route] = q[1:]
	}
	s.mu.Unlock()
	if f == nil {
		return true
	}
	if f.retryAfter != "" {
		w.Header().Set("Retry-After", f.retryAfter)
	}
	apiError(w, f.status, "injected fault")
	return false
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	host := r.Host
	if h, _, ok := strings.Cut(host, ":"); ok && !strings.Contains(h, "]") {
		host = h
	}
	if id, ok := s.envdHost(host); ok {
		s.serveEnvd(w, r, id)
		return
	}
	s.serveAPI(w, r)
}

// envdHost parses 49983-<id>.<domain>.
func (s *Server) envdHost(host string) (string, bool) {
	first, rest, ok := strings.Cut(host, ".")
	if !ok || rest != s.Domain {
		return "", false
	}
	port, id, ok := strings.Cut(first, "-")
	if !ok || port != strconv.Itoa(e2bproto.EnvdPort) || id == "" {
		return "", false
	}
	return id, true
}

func (s *Server) authorized(r *http.Request) bool {
	if s.opts.APIKey == "" {
		return true
	}
	if s.opts.Bearer {
		return r.Header.Get("Authorization") == "Bearer "+s.opts.APIKey
	}
	return r.Header.Get("X-API-Key") == s.opts.APIKey
}

func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(r) {
		apiError(w, http.StatusUnauthorized, "invalid API key")
		return
	}
	p := r.URL.Path
	switch {
	case r.Method == http.MethodPost && p == "/sandboxes":
		if s.begin(w, RouteCreate) {
			s.create(w, r)
		}
	case r.Method == http.MethodGet && (p == "/sandboxes" || p == "/v2/sandboxes"):
		if s.begin(w, RouteList) {
			s.list(w, r)
		}
	case strings.HasPrefix(p, "/sandboxes/"):
		id, action, _ := strings.Cut(strings.TrimPrefix(p, "/sandboxes/"), "/")
		switch {
		case r.Method == http.MethodGet && action == "":
			if s.begin(w, RouteGet) {
				s.get(w, id)
			}
		case r.Method == http.MethodDelete && action == "":
			if s.begin(w, RouteKill) {
				if s.Kill(id) {
					w.WriteHeader(http.StatusNoContent)
				} else {
					apiError(w, http.StatusNotFound, "sandbox not found")
				}
			}
		case r.Method == http.MethodPost && (action == "connect" || action == "timeout"):
			route := RouteConnect
			if action == "timeout" {
				route = RouteTimeout
			}
			if s.begin(w, route) {
				s.extend(w, r, id, action == "connect")
			}
		default:
			apiError(w, http.StatusNotFound, "no such route")
		}
	default:
		apiError(w, http.StatusNotFound, "no such route")
	}
}

func (s *Server) info(sb *fakeSandbox, detail bool) map[string]any {
	m := map[string]any{
		"templateID":  sb.template,
		"sandboxID":   sb.id,
		"clientID":    "fake",
		"envdVersion": "0.2.0",
	}
	if sb.token != "" {
		m["envdAccessToken"] = sb.token
	}
	if !s.opts.OmitDomain {
		m["domain"] = s.Domain
	}
	if detail {
		state := "running"
		if sb.paused {
			state = "paused"
		}
		m["startedAt"] = sb.startedAt.Format(time.RFC3339Nano)
		m["endAt"] = sb.endAt.Format(time.RFC3339Nano)
		m["state"] = state
		m["metadata"] = sb.metadata
		m["cpuCount"], m["memoryMB"], m["diskSizeMB"] = 2, 512, 1024
	}
	return m
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var req struct {
		TemplateID string            `json:"templateID"`
		Timeout    *int              `json:"timeout"`
		Metadata   map[string]string `json:"metadata"`
		EnvVars    map[string]string `json:"envVars"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.TemplateID == "" {
		apiError(w, http.StatusBadRequest, "invalid request: templateID required")
		return
	}
	timeout := 15
	if req.Timeout != nil {
		timeout = *req.Timeout
	}
	id := fakeapi.RandomHex(10)
	local, _, err := s.local.Create(r.Context(), id, sandbox.Spec{Env: req.EnvVars})
	if err != nil {
		apiError(w, http.StatusInternalServerError, err.Error())
		return
	}
	life, kill := context.WithCancel(context.Background())
	sb := &fakeSandbox{id: id, template: req.TemplateID, metadata: map[string]string{}, sb: local, life: life, kill: kill}
	maps.Copy(sb.metadata, req.Metadata)
	if s.opts.AccessTokens {
		sb.token = fakeapi.RandomHex(10)
	}
	s.mu.Lock()
	now := time.Now()
	if !now.After(s.last) {
		now = s.last.Add(time.Microsecond)
	}
	s.last = now
	sb.startedAt, sb.endAt = now, now.Add(time.Duration(timeout)*time.Second)
	s.sandboxes[id] = sb
	body := s.info(sb, false)
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, body)
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	filter, err := url.ParseQuery(r.URL.Query().Get("metadata"))
	if err != nil {
		apiError(w, http.StatusBadRequest, "invalid metadata filter")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var matched []*fakeSandbox
	for _, sb := range s.sandboxes {
		if fakeapi.Matches(sb.metadata, filter) {
			matched = append(matched, sb)
		}
	}
	slices.SortFunc(matched, func(a, b *fakeSandbox) int { return strings.Compare(a.id, b.id) })
	if r.URL.Path == "/v2/sandboxes" {
		// Pages of at most limit sandboxes; X-Next-Token names the first
		// sandbox of the next page.
		limit := fakeapi.QueryInt(r, "limit", 100)
		if limit < 1 || limit > 100 {
			apiError(w, http.StatusBadRequest, "limit must be 1 to 100")
			return
		}
		if s.opts.MaxPageSize > 0 {
			limit = min(limit, s.opts.MaxPageSize)
		}
		if next := r.URL.Query().Get("nextToken"); next != "" {
			i := slices.IndexFunc(matched, func(sb *fakeSandbox) bool { return sb.id >= next })
			if i < 0 {
				i = len(matched)
			}
			matched = matched[i:]
		}
		if len(matched) > limit {
			w.Header().Set("X-Next-Token", matched[limit].id)
			matched = matched[:limit]
		}
	}
	out := []map[string]any{}
	for _, sb := range matched {
		out = append(out, s.info(sb, true))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) get(w http.ResponseWriter, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, ok := s.sandboxes[id]
	if !ok {
		apiError(w, http.StatusNotFound, "sandbox "+id+" not found")
		return
	}
	writeJSON(w, http.StatusOK, s.info(sb, true))
}

func (s *Server) extend(w http.ResponseWriter, r *http.Request, id string, connect bool) {
	var req struct {
		Timeout *int `json:"timeout"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Timeout == nil {
		apiError(w, http.StatusBadRequest, "timeout required")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, ok := s.sandboxes[id]
	if !ok {
		apiError(w, http.StatusNotFound, "sandbox "+id+" not found")
		return
	}
	end := time.Now().Add(time.Duration(*req.Timeout) * time.Second)
	if !connect || end.After(sb.endAt) {
		sb.endAt = end
	}
	if !connect {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	status := http.StatusOK
	if sb.paused {
		sb.paused, status = false, http.StatusCreated
	}
	writeJSON(w, status, s.info(sb, false))
}

// envd

func (s *Server) serveEnvd(w http.ResponseWriter, r *http.Request, id string) {
	route := ""
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/process.Process/Start":
		route = RouteProcess
	case r.Method == http.MethodGet && r.URL.Path == "/files":
		route = RouteFilesGet
	case r.Method == http.MethodPost && r.URL.Path == "/files":
		route = RouteFilesPost
	default:
		apiError(w, http.StatusNotFound, "no such envd route")
		return
	}
	if !s.begin(w, route) {
		return
	}
	s.mu.Lock()
	sb, ok := s.sandboxes[id]
	s.mu.Unlock()
	if !ok || sb.paused {
		// What the real proxy answers for a sandbox it cannot reach.
		writeJSON(w, http.StatusBadGateway, map[string]any{"sandboxId": id, "message": "The sandbox was not found", "code": 502})
		return
	}
	if sb.token != "" && r.Header.Get("X-Access-Token") != sb.token {
		apiError(w, http.StatusUnauthorized, "invalid access token")
		return
	}
	switch route {
	case RouteProcess:
		user := "user"
		if u, _, ok := r.BasicAuth(); ok {
			user = u
		}
		s.mu.Lock()
		s.users[user]++
		s.mu.Unlock()
		s.process(w, r, sb)
	case RouteFilesGet:
		s.readFile(w, r, sb)
	case RouteFilesPost:
		s.writeFile(w, r, sb)
	}
}

func (s *Server) process(w http.ResponseWriter, r *http.Request, sb *fakeSandbox) {
	if ct := r.Header.Get("Content-Type"); ct != "application/connect+json" {
		apiError(w, http.StatusUnsupportedMediaType, "want application/connect+json")
		return
	}
	flags, msg, err := e2bproto.ReadFrame(r.Body)
	if err != nil || flags != 0 {
		apiError(w, http.StatusBadRequest, fmt.Sprintf("invalid envelope: %v", err))
		return
	}
	var req e2bproto.StartRequest
	if err := json.Unmarshal(msg, &req); err != nil || req.Process.Cmd == "" {
		apiError(w, http.StatusBadRequest, "invalid StartRequest")
		return
	}
	w.Header().Set("Content-Type", "application/connect+json")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	s.mu.Lock()
	malformed := s.malformed > 0
	if malformed {
		s.malformed--
	}
	s.mu.Unlock()
	if malformed {
		_, _ = w.Write(e2bproto.EncodeFrame(0, []byte("{not json")))
		_ = rc.Flush()
		<-r.Context().Done()
		return
	}
	send := func(flags byte, v any) {
		b, _ := json.Marshal(v)
		_, _ = w.Write(e2bproto.EncodeFrame(flags, b))
	}
	send(0, map[string]any{"event": map[string]any{"start": map[string]any{"pid": 1}}})
	_ = rc.Flush()

	// The sandbox's /mnt/session and /mnt/memory are directories inside
	// the fake sandbox: the process sees them there, and its output names
	// them /mnt/session and /mnt/memory.
	in, out := fakeapi.SessionRewrite(sb.sb.Root())
	words := []string{shellexec.Quote(in.Replace(req.Process.Cmd))}
	for _, a := range req.Process.Args {
		words = append(words, shellexec.Quote(in.Replace(a)))
	}
	command := "exec " + strings.Join(words, " ")
	if req.Process.Cwd != "" {
		command = "cd " + shellexec.Quote(in.Replace(req.Process.Cwd)) + " && " + command
	}
	env := map[string]string{}
	for k, v := range req.Process.Envs {
		env[k] = in.Replace(v)
	}
	// Like envd, the process does not depend on the client's connection:
	// it runs until it exits or its sandbox is killed.
	res, err := sb.sb.Exec(sb.life, sandbox.ExecRequest{Command: command, Env: env})
	if err != nil {
		send(0x02, map[string]any{"error": map[string]any{"code": "unavailable", "message": err.Error()}})
		return
	}
	res.Stdout, res.Stderr = []byte(out.Replace(string(res.Stdout))), []byte(out.Replace(string(res.Stderr)))
	for _, chunk := range []struct {
		name string
		data []byte
	}{{"stdout", res.Stdout}, {"stderr", res.Stderr}} {
		for d := chunk.data; len(d) > 0; {
			n := min(len(d), 32<<10)
			send(0, map[string]any{"event": map[string]any{"data": map[string]any{chunk.name: d[:n]}}})
			d = d[n:]
		}
	}
	end := map[string]any{"exited": true, "status": fmt.Sprintf("exit status %d", res.ExitCode)}
	if res.ExitCode != 0 { // protojson omits zero values
		end["exitCode"] = res.ExitCode
	}
	send(0, map[string]any{"event": map[string]any{"end": end}})
	send(0x02, map[string]any{})
	_ = rc.Flush()
}

// Upload is what the fake received for one uploaded file.
type Upload = fakeapi.Upload

// Upload returns the last upload to path p of sandbox id.
func (s *Server) Upload(id, p string) (Upload, bool) { return s.rec.Upload(id + ":" + path.Clean(p)) }

// readFile serves GET /files: the file's content, streamed (with
// Content-Length and Range support, as envd's http.ServeContent).
func (s *Server) readFile(w http.ResponseWriter, r *http.Request, sb *fakeSandbox) {
	p := r.URL.Query().Get("path")
	h := fakeapi.HostPath(sb.sb.Root(), p)
	// A real envd can reach the whole sandbox; the fake keeps to the
	// sandbox's own directory.
	if !path.IsAbs(p) || !shellexec.Within(sb.sb.Root(), h) {
		apiError(w, http.StatusBadRequest, fmt.Sprintf("path '%s' is outside the fake sandbox", p))
		return
	}
	f, err := os.Open(h)
	if errors.Is(err, fs.ErrNotExist) {
		apiError(w, http.StatusNotFound, fmt.Sprintf("path '%s' does not exist", p))
		return
	}
	if err != nil {
		apiError(w, http.StatusBadRequest, err.Error())
		return
	}
	defer func() { _ = f.Close() }()
	st, err := f.Stat()
	if err != nil || st.IsDir() {
		apiError(w, http.StatusBadRequest, fmt.Sprintf("path '%s' is a directory", p))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, path.Base(p), st.ModTime(), f)
}

// writeFile serves POST /files: the multipart "file" part is streamed to
// path (parents created), or, without a multipart body, the raw body.
func (s *Server) writeFile(w http.ResponseWriter, r *http.Request, sb *fakeSandbox) {
	p := r.URL.Query().Get("path")
	h := fakeapi.HostPath(sb.sb.Root(), p)
	if !path.IsAbs(p) || !shellexec.Within(sb.sb.Root(), h) {
		apiError(w, http.StatusBadRequest, fmt.Sprintf("path '%s' is outside the fake sandbox", p))
		return
	}
	var content io.Reader = r.Body
	if strings.HasPrefix(r.Header.Get("Content-Type"), "multipart/form-data") {
		part, err := fakeapi.FilePart(r)
		if err != nil {
			apiError(w, http.StatusBadRequest, "multipart: "+err.Error())
			return
		}
		content = part
	}
	if err := os.MkdirAll(path.Dir(h), 0o755); err != nil {
		apiError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := s.rec.Store(sb.id+":"+path.Clean(p), h, content, 0o644); err != nil {
		apiError(w, http.StatusBadRequest, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, []map[string]string{{"path": p, "name": path.Base(p), "type": "file"}})
}
