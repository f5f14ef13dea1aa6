// Package k8sfake is an offline stand-in for a Kubernetes cluster running
// the SIG Agent Sandbox controller, its sandbox router and the reference
// runtime in each sandbox pod, for tests. It serves two HTTP servers on
// 127.0.0.1:
//
// The API server speaks the Kubernetes REST protocol (JSON, Status objects
// for errors) for the resources the sandboxk8s adapter uses:
//
//	/apis/agents.x-k8s.io/v1beta1/namespaces/{ns}/sandboxes[/{name}]
//	/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/{ns}/sandboxclaims[/{name}]
//
// with create (409 AlreadyExists), get, list (labelSelector with =, ==, !=,
// existence and !existence; limit and continue), and delete (background
// cascade from a claim to its Sandbox, the resource lingering with a
// deletionTimestamp for a moment). A stand-in controller sets the Ready
// condition, status.podIPs and the pod-name annotation after a short delay;
// a claim is bound to a cold-started Sandbox of the same name.
//
// The router checks X-Sandbox-ID, X-Sandbox-Namespace and X-Sandbox-Port
// as sandbox-router does (400 {"detail"} for bad headers, 502 when no
// ready sandbox listens there) and serves the reference runtime's API
// (examples/python-runtime-sandbox): POST /execute (the command is
// shlex-split and run without a shell; output must decode as UTF-8; the
// runtime's own timeout), POST /upload (multipart "file", file name
// relative to the root, parents not created; streamed to disk and recorded,
// see [Server.Upload]), GET /download/{path} (the path percent-decoded a
// second time, as the runtime does; streamed with a Content-Length) and
// GET /.
//
// Every sandbox is backed by a real local process sandbox (sandboxlocal),
// so commands really run, in their own process groups, and files really
// exist. A pod's /mnt/session and /mnt/memory are the directories
// mnt/session and mnt/memory inside it: commands (inside a base64-encoded
// "sh -c" script too) are rewritten to see them there, and their output back. Faults can be injected: error statuses for the next n matching
// requests of either server, malformed or truncated bodies, a vanished
// (killed) or finished resource, a relabelled one.
package k8sfake

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/internal/fakeapi"
)

// Token is the bearer token the API server accepts.
const Token = "fake-k8s-token"

// RuntimePort is the port the runtime listens on in every pod.
const RuntimePort = 8888

// Resource names (plurals) the API server serves.
const (
	Sandboxes     = "sandboxes"
	SandboxClaims = "sandboxclaims"
)

var groups = map[string]struct{ group, kind string }{
	Sandboxes:     {"agents.x-k8s.io", "Sandbox"},
	SandboxClaims: {"extensions.agents.x-k8s.io", "SandboxClaim"},
}

// Server is the fake cluster.
type Server struct {
	api, router *httptest.Server
	dir         string

	mu          sync.Mutex
	objs        map[string]*resource // by plural/namespace/name
	rv          int
	readyDelay  time.Duration
	deleteDelay time.Duration
	execTimeout time.Duration
	pools       []string
	headers     http.Header
	closed      bool
	rec         fakeapi.Recorder // uploads by sandbox name and path
}

// resource is one stored object.
type resource struct {
	plural string
	obj    map[string]any
	local  sandbox.Sandbox   // a ready Sandbox's pod
	env    map[string]string // its container environment
}

// New starts a fake whose sandboxes live under dir (for example
// t.TempDir()). Close stops it.
func New(dir string) *Server {
	s := &Server{
		dir: dir, objs: map[string]*resource{},
		readyDelay: 30 * time.Millisecond, deleteDelay: 20 * time.Millisecond, execTimeout: 300 * time.Second,
	}
	s.api = httptest.NewServer(http.HandlerFunc(s.serveAPI))
	s.router = httptest.NewServer(http.HandlerFunc(s.serveRouter))
	return s
}

// Close stops the servers and removes the local sandboxes.
func (s *Server) Close() {
	s.api.Close()
	s.router.Close()
	s.mu.Lock()
	s.closed = true
	var locals []sandbox.Sandbox
	for _, r := range s.objs {
		if r.local != nil {
			locals = append(locals, r.local)
		}
	}
	s.mu.Unlock()
	for _, l := range locals {
		_ = l.Destroy(context.Background())
	}
}

// RouterURL is the sandbox router's base URL.
func (s *Server) RouterURL() string { return s.router.URL }

// RESTConfig is a client configuration for the API server.
func (s *Server) RESTConfig() *rest.Config {
	return &rest.Config{Host: s.api.URL, BearerToken: Token}
}

// SetExecTimeout sets the runtime's own command timeout (its
// SANDBOX_EXEC_TIMEOUT_SECONDS; default 300s).
func (s *Server) SetExecTimeout(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.execTimeout = d
}

// SetWarmPools limits the warm pools claims may name (default: any). A
// claim naming another stays not ready with reason WarmPoolNotFound.
func (s *Server) SetWarmPools(names ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pools = names
}

// FailNext makes the next n requests (to either server) whose method
// matches (empty: any) and whose path contains contains answer status,
// with a Retry-After header when retryAfter is set.
func (s *Server) FailNext(method, contains string, n, status int, retryAfter string) {
	s.rec.Inject(fakeapi.Fault{Method: method, Path: contains, N: n, Status: status, RetryAfter: retryAfter})
}

// MalformNext makes the next n matching requests answer 200 with a body
// that is not valid JSON.
func (s *Server) MalformNext(method, contains string, n int) {
	s.rec.Inject(fakeapi.Fault{Method: method, Path: contains, N: n, Malformed: true})
}

// TruncateNext makes the next n matching requests answer 200 with a body
// cut short of its Content-Length (the connection closes mid-body).
func (s *Server) TruncateNext(method, contains string, n int) {
	s.rec.Inject(fakeapi.Fault{Method: method, Path: contains, N: n, Truncated: true})
}

// Count returns how many requests with method (empty: any) and a path
// containing contains either server received.
func (s *Server) Count(method, contains string) int { return s.rec.Count(method, contains) }

// RouterHeaders returns the headers of the last request the router routed.
func (s *Server) RouterHeaders() http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.headers.Clone()
}

func key(plural, ns, name string) string { return plural + "/" + ns + "/" + name }

// Vanish removes a resource at once, as if it had been killed or had
// expired and been garbage-collected, with what it owns.
func (s *Server) Vanish(plural, namespace, name string) {
	s.mu.Lock()
	locals := s.removeLocked(key(plural, namespace, name))
	s.mu.Unlock()
	destroy(locals)
}

// Finish marks a Sandbox finished (Finished=True with reason), as the
// controller does when its pod ends or its shutdown time passes.
func (s *Server) Finish(namespace, name, reason string) {
	fakeapi.Locked(&s.mu, s.objs, key(Sandboxes, namespace, name), func(r *resource) {
		status(r.obj)["conditions"] = []any{
			cond("Ready", "False", "SandboxExpired", "sandbox expired"),
			cond("Finished", "True", reason, "sandbox finished"),
		}
		s.bumpLocked(r)
	})
}

// SetLabel sets a label of a resource.
func (s *Server) SetLabel(plural, namespace, name, k, v string) {
	fakeapi.Locked(&s.mu, s.objs, key(plural, namespace, name), func(r *resource) {
		md := r.obj["metadata"].(map[string]any)
		labels, _ := md["labels"].(map[string]any)
		if labels == nil {
			labels = map[string]any{}
			md["labels"] = labels
		}
		labels[k] = v
		s.bumpLocked(r)
	})
}

// Object returns a copy of a stored object (nil when missing).
func (s *Server) Object(plural, namespace, name string) (obj map[string]any) {
	fakeapi.Locked(&s.mu, s.objs, key(plural, namespace, name), func(r *resource) { obj = clone(r.obj) })
	return obj
}

// Names returns the names of the stored resources of plural in namespace,
// sorted.
func (s *Server) Names(plural, namespace string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for _, r := range s.objs {
		md := r.obj["metadata"].(map[string]any)
		if r.plural == plural && md["namespace"] == namespace {
			names = append(names, md["name"].(string))
		}
	}
	sort.Strings(names)
	return names
}

func clone(m map[string]any) map[string]any {
	b, _ := json.Marshal(m)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return out
}

func destroy(locals []sandbox.Sandbox) {
	for _, l := range locals {
		_ = l.Destroy(context.Background())
	}
}

var writeJSON = fakeapi.WriteJSON

// malformed starts the body of an injected malformed or truncated answer.
const malformed = `{"kind": "Sandbox", "stdout": "\u00`

// ----- Kubernetes API -----

// reasons maps a status code to its metav1.StatusReason.
var reasons = map[int]string{
	400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed",
	409: "AlreadyExists", 410: "Expired", 422: "Invalid", 429: "TooManyRequests",
	500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout",
}

// writeStatus answers a metav1.Status, as the API server does for errors.
func writeStatus(w http.ResponseWriter, code int, msg string, details map[string]any) {
	st := map[string]any{
		"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{},
		"status": "Failure", "message": msg, "reason": reasons[code], "code": code,
	}
	if details != nil {
		st["details"] = details
	}
	writeJSON(w, code, st)
}

func apiFault(w http.ResponseWriter, status int, msg string) { writeStatus(w, status, msg, nil) }

func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	f := s.rec.Take(r)
	if r.Header.Get("Authorization") != "Bearer "+Token {
		writeStatus(w, http.StatusUnauthorized, "Unauthorized", nil)
		return
	}
	if f != nil {
		f.Write(w, malformed, apiFault)
		return
	}
	// /apis/{group}/v1beta1/namespaces/{ns}/{plural}[/{name}]
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if len(parts) < 6 || len(parts) > 7 || parts[0] != "apis" || parts[2] != "v1beta1" || parts[3] != "namespaces" {
		writeStatus(w, http.StatusNotFound, "the server could not find the requested resource", nil)
		return
	}
	plural, ns := parts[5], parts[4]
	g, ok := groups[plural]
	if !ok || g.group != parts[1] {
		writeStatus(w, http.StatusNotFound, "the server could not find the requested resource", nil)
		return
	}
	switch {
	case len(parts) == 6 && r.Method == http.MethodGet:
		s.list(w, r, plural, ns)
	case len(parts) == 6 && r.Method == http.MethodPost:
		s.create(w, r, plural, ns)
	case len(parts) == 7 && r.Method == http.MethodGet:
		s.mu.Lock()
		res := s.objs[key(plural, ns, parts[6])]
		var out map[string]any
		if res != nil {
			out = clone(res.obj)
		}
		s.mu.Unlock()
		if out == nil {
			notFound(w, plural, parts[6])
			return
		}
		writeJSON(w, http.StatusOK, out)
	case len(parts) == 7 && r.Method == http.MethodDelete:
		s.delete(w, plural, ns, parts[6])
	default:
		writeStatus(w, http.StatusMethodNotAllowed, "the server does not allow this method on the requested resource", nil)
	}
}

func notFound(w http.ResponseWriter, plural, name string) {
	g := groups[plural]
	writeStatus(w, http.StatusNotFound, fmt.Sprintf("%s.%s %q not found", plural, g.group, name),
		map[string]any{"name": name, "group": g.group, "kind": plural})
}

func labelsOf(obj map[string]any) map[string]any {
	md, _ := obj["metadata"].(map[string]any)
	l, _ := md["labels"].(map[string]any)
	return l
}

// matches evaluates an equality-based label selector.
func matches(selector string, labels map[string]any) (bool, error) {
	for req := range strings.SplitSeq(selector, ",") {
		req = strings.TrimSpace(req)
		switch {
		case req == "":
		case strings.Contains(req, "!="):
			k, v, _ := strings.Cut(req, "!=")
			if labels[strings.TrimSpace(k)] == strings.TrimSpace(v) {
				return false, nil
			}
		case strings.Contains(req, "="):
			k, v, _ := strings.Cut(req, "=")
			v = strings.TrimPrefix(v, "=")
			if labels[strings.TrimSpace(k)] != strings.TrimSpace(v) {
				return false, nil
			}
		case strings.HasPrefix(req, "!"):
			if _, ok := labels[strings.TrimPrefix(req, "!")]; ok {
				return false, nil
			}
		case strings.ContainsAny(req, " ()"):
			return false, fmt.Errorf("unsupported selector %q", req)
		default:
			if _, ok := labels[req]; !ok {
				return false, nil
			}
		}
	}
	return true, nil
}

func (s *Server) list(w http.ResponseWriter, r *http.Request, plural, ns string) {
	q := r.URL.Query()
	limit := fakeapi.QueryInt(r, "limit", 0)
	if limit < 0 {
		writeStatus(w, http.StatusBadRequest, "invalid limit", nil)
		return
	}
	start := ""
	if v := q.Get("continue"); v != "" {
		b, err := base64.RawURLEncoding.DecodeString(v)
		if err != nil {
			writeStatus(w, http.StatusBadRequest, "continue key is not valid: "+err.Error(), nil)
			return
		}
		start = string(b)
	}
	s.mu.Lock()
	var match []map[string]any
	for _, res := range s.objs {
		md := res.obj["metadata"].(map[string]any)
		if res.plural != plural || md["namespace"] != ns || md["name"].(string) <= start {
			continue
		}
		ok, err := matches(q.Get("labelSelector"), labelsOf(res.obj))
		if err != nil {
			s.mu.Unlock()
			writeStatus(w, http.StatusBadRequest, err.Error(), nil)
			return
		}
		if ok {
			match = append(match, clone(res.obj))
		}
	}
	rv := strconv.Itoa(s.rv)
	s.mu.Unlock()
	sort.Slice(match, func(i, j int) bool {
		return match[i]["metadata"].(map[string]any)["name"].(string) < match[j]["metadata"].(map[string]any)["name"].(string)
	})
	meta := map[string]any{"resourceVersion": rv}
	if limit > 0 && len(match) > limit {
		meta["remainingItemCount"] = len(match) - limit
		match = match[:limit]
		last := match[limit-1]["metadata"].(map[string]any)["name"].(string)
		meta["continue"] = base64.RawURLEncoding.EncodeToString([]byte(last))
	}
	items := make([]any, len(match))
	for i, m := range match {
		items[i] = m
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"apiVersion": groups[plural].group + "/v1beta1", "kind": groups[plural].kind + "List",
		"metadata": meta, "items": items,
	})
}

func (s *Server) create(w http.ResponseWriter, r *http.Request, plural, ns string) {
	var obj map[string]any
	if err := json.NewDecoder(r.Body).Decode(&obj); err != nil {
		writeStatus(w, http.StatusBadRequest, "the object provided is unrecognized: "+err.Error(), nil)
		return
	}
	g := groups[plural]
	md, _ := obj["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	switch {
	case obj["apiVersion"] != g.group+"/v1beta1" || obj["kind"] != g.kind:
		writeStatus(w, http.StatusBadRequest, fmt.Sprintf("the API version in the data (%v) does not match the expected API version (%s/v1beta1)", obj["apiVersion"], g.group), nil)
		return
	case name == "":
		writeStatus(w, http.StatusUnprocessableEntity, "metadata.name: Required value: name or generateName is required", nil)
		return
	case md["namespace"] != nil && md["namespace"] != ns:
		writeStatus(w, http.StatusBadRequest, "the namespace of the provided object does not match the namespace sent on the request", nil)
		return
	}
	md["namespace"] = ns
	md["uid"] = fakeapi.RandomHex(16)
	md["creationTimestamp"] = time.Now().UTC().Format(time.RFC3339)
	md["generation"] = 1
	s.mu.Lock()
	k := key(plural, ns, name)
	if s.objs[k] != nil {
		s.mu.Unlock()
		writeStatus(w, http.StatusConflict, fmt.Sprintf("%s.%s %q already exists", plural, g.group, name),
			map[string]any{"name": name, "group": g.group, "kind": plural})
		return
	}
	res := &resource{plural: plural, obj: obj}
	status(obj)["conditions"] = []any{cond("Ready", "False", "DependenciesNotReady", "waiting for the pod")}
	s.objs[k] = res
	s.bumpLocked(res)
	out := clone(obj)
	delay := s.readyDelay
	s.mu.Unlock()
	time.AfterFunc(delay, func() { s.reconcile(k) })
	writeJSON(w, http.StatusCreated, out)
}

func status(obj map[string]any) map[string]any {
	st, _ := obj["status"].(map[string]any)
	if st == nil {
		st = map[string]any{}
		obj["status"] = st
	}
	return st
}

func cond(typ, st, reason, msg string) map[string]any {
	return map[string]any{
		"type": typ, "status": st, "reason": reason, "message": msg,
		"lastTransitionTime": time.Now().UTC().Format(time.RFC3339), "observedGeneration": 1,
	}
}

// bumpLocked gives r a new resourceVersion; the caller holds mu.
func (s *Server) bumpLocked(r *resource) {
	s.rv++
	r.obj["metadata"].(map[string]any)["resourceVersion"] = strconv.Itoa(s.rv)
}

// reconcile is the controller: a Sandbox gets its pod (a local sandbox)
// and becomes ready; a claim is bound to a cold-started Sandbox.
func (s *Server) reconcile(k string) {
	s.mu.Lock()
	res := s.objs[k]
	if res == nil || s.closed {
		s.mu.Unlock()
		return
	}
	md := res.obj["metadata"].(map[string]any)
	ns, name := md["namespace"].(string), md["name"].(string)
	if res.plural == SandboxClaims {
		s.bindClaimLocked(res, ns, name)
		s.mu.Unlock()
		return
	}
	env := containerEnv(res.obj)
	s.mu.Unlock()

	local, err := fakeapi.NewLocal(context.Background(), s.dir, ns+"-"+name)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.objs[k] != res || s.closed || err != nil {
		if local != nil {
			go destroy([]sandbox.Sandbox{local})
		}
		return
	}
	res.local, res.env = local, env
	md["annotations"] = map[string]any{"agents.x-k8s.io/pod-name": name}
	st := status(res.obj)
	st["conditions"] = []any{cond("Ready", "True", "DependenciesReady", "Pod is Ready; Service Exists")}
	st["podIPs"] = []any{"10.244.0." + strconv.Itoa(1+s.rv%250)}
	st["service"] = name
	st["serviceFQDN"] = name + "." + ns + ".svc.cluster.local"
	s.bumpLocked(res)
}

// bindClaimLocked cold-starts the claim's Sandbox; the caller holds mu.
func (s *Server) bindClaimLocked(claim *resource, ns, name string) {
	spec, _ := claim.obj["spec"].(map[string]any)
	ref, _ := spec["warmPoolRef"].(map[string]any)
	pool, _ := ref["name"].(string)
	if len(s.pools) > 0 && !slices.Contains(s.pools, pool) {
		status(claim.obj)["conditions"] = []any{cond("Ready", "False", "WarmPoolNotFound", fmt.Sprintf("SandboxWarmPool %q not found", pool))}
		s.bumpLocked(claim)
		return
	}
	md := claim.obj["metadata"].(map[string]any)
	env, _ := spec["env"].([]any)
	container := map[string]any{"name": "runtime", "image": "template-image"}
	if len(env) > 0 {
		container["env"] = env
	}
	sbKey := key(Sandboxes, ns, name)
	sb := &resource{plural: Sandboxes, obj: map[string]any{
		"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
		"metadata": map[string]any{
			"name": name, "namespace": ns, "uid": fakeapi.RandomHex(16),
			"creationTimestamp": time.Now().UTC().Format(time.RFC3339),
			"labels": map[string]any{
				"agents.x-k8s.io/claim-uid": md["uid"], "agents.x-k8s.io/launch-type": "cold",
			},
			"ownerReferences": []any{map[string]any{
				"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim",
				"name": name, "uid": md["uid"], "controller": true,
			}},
		},
		"spec":   map[string]any{"podTemplate": map[string]any{"spec": map[string]any{"containers": []any{container}}}},
		"status": map[string]any{"conditions": []any{cond("Ready", "False", "DependenciesNotReady", "waiting for the pod")}},
	}}
	s.objs[sbKey] = sb
	s.bumpLocked(sb)
	go func() {
		s.reconcile(sbKey)
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.objs[key(SandboxClaims, ns, name)] != claim || s.objs[sbKey] != sb || sb.local == nil {
			return
		}
		st := status(claim.obj)
		st["conditions"] = []any{cond("Ready", "True", "SandboxReady", "Sandbox is ready")}
		st["sandbox"] = map[string]any{"name": name, "podIPs": status(sb.obj)["podIPs"]}
		s.bumpLocked(claim)
	}()
}

// containerEnv is the first container's environment.
func containerEnv(obj map[string]any) map[string]string {
	spec, _ := obj["spec"].(map[string]any)
	pt, _ := spec["podTemplate"].(map[string]any)
	ps, _ := pt["spec"].(map[string]any)
	cs, _ := ps["containers"].([]any)
	env := map[string]string{}
	if len(cs) == 0 {
		return env
	}
	c, _ := cs[0].(map[string]any)
	list, _ := c["env"].([]any)
	for _, e := range list {
		m, _ := e.(map[string]any)
		n, _ := m["name"].(string)
		v, _ := m["value"].(string)
		if n != "" {
			env[n] = v
		}
	}
	return env
}

// delete marks the resource deleted and removes it (and what it owns)
// after the delete delay.
func (s *Server) delete(w http.ResponseWriter, plural, ns, name string) {
	k := key(plural, ns, name)
	s.mu.Lock()
	res := s.objs[k]
	if res == nil {
		s.mu.Unlock()
		notFound(w, plural, name)
		return
	}
	md := res.obj["metadata"].(map[string]any)
	if md["deletionTimestamp"] == nil {
		md["deletionTimestamp"] = time.Now().UTC().Format(time.RFC3339)
		s.bumpLocked(res)
		delay := s.deleteDelay
		time.AfterFunc(delay, func() {
			s.mu.Lock()
			var locals []sandbox.Sandbox
			if s.objs[k] == res {
				locals = s.removeLocked(k)
			}
			s.mu.Unlock()
			destroy(locals)
		})
	}
	out := clone(res.obj)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

// removeLocked removes a resource and, for a claim, its Sandbox, returning
// the local sandboxes to destroy; the caller holds mu.
func (s *Server) removeLocked(k string) []sandbox.Sandbox {
	res := s.objs[k]
	if res == nil {
		return nil
	}
	delete(s.objs, k)
	var locals []sandbox.Sandbox
	if res.local != nil {
		locals = append(locals, res.local)
	}
	if res.plural == SandboxClaims {
		md := res.obj["metadata"].(map[string]any)
		locals = append(locals, s.removeLocked(key(Sandboxes, md["namespace"].(string), md["name"].(string)))...)
	}
	return locals
}

// ----- sandbox router and runtime -----

func routerError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"detail": msg})
}

func dnsLabel(s string) bool { return len(validation.IsDNS1123Label(s)) == 0 }

func (s *Server) serveRouter(w http.ResponseWriter, r *http.Request) {
	f := s.rec.Take(r)
	if r.URL.Path == "/healthz" {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		return
	}
	if f != nil {
		f.Write(w, malformed, routerError)
		return
	}
	id := r.Header.Get("X-Sandbox-ID")
	ns := r.Header.Get("X-Sandbox-Namespace")
	if ns == "" {
		ns = "default"
	}
	port := RuntimePort
	if v := r.Header.Get("X-Sandbox-Port"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 65535 {
			routerError(w, http.StatusBadRequest, "Invalid port format.")
			return
		}
		port = n
	}
	switch {
	case id == "":
		routerError(w, http.StatusBadRequest, "X-Sandbox-ID header is required.")
		return
	case !dnsLabel(id):
		routerError(w, http.StatusBadRequest, "Invalid sandbox ID format.")
		return
	case !dnsLabel(ns):
		routerError(w, http.StatusBadRequest, "Invalid namespace format.")
		return
	}
	s.mu.Lock()
	s.headers = r.Header.Clone()
	res := s.objs[key(Sandboxes, ns, id)]
	var local sandbox.Sandbox
	var env map[string]string
	if res != nil {
		local, env = res.local, res.env
	}
	execTimeout := s.execTimeout
	s.mu.Unlock()
	if local == nil || port != RuntimePort {
		routerError(w, http.StatusBadGateway, "Could not connect to the backend sandbox: "+id)
		return
	}
	rt := runtime{local: local, env: env, timeout: execTimeout, store: func(full string, content io.Reader) error {
		return s.rec.Store(ns+"/"+id+":"+full, full, content, 0o644)
	}}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/":
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "message": "Sandbox Runtime is active."})
	case r.Method == http.MethodPost && r.URL.Path == "/execute":
		rt.execute(w, r)
	case r.Method == http.MethodPost && r.URL.Path == "/upload":
		rt.upload(w, r)
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/download/"):
		rt.download(w, strings.TrimPrefix(r.URL.Path, "/download/"))
	default:
		writeJSON(w, http.StatusNotFound, map[string]string{"detail": "Not Found"})
	}
}

// runtime is the reference runtime (examples/python-runtime-sandbox) of
// one pod.
type runtime struct {
	local   sandbox.Sandbox
	env     map[string]string
	timeout time.Duration
	// store writes an upload to a path and records it.
	store func(full string, content io.Reader) error
}

func failed(w http.ResponseWriter, msg string) {
	writeJSON(w, http.StatusOK, map[string]any{"stdout": "", "stderr": "Failed to execute command: " + msg, "exit_code": 1})
}

// execute runs the shlex-split command without a shell, in the root, to
// its end or the runtime's timeout, even if the client goes away.
func (rt runtime) execute(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Command *string `json:"command"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Command == nil {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"detail": []any{map[string]any{"type": "missing", "loc": []string{"body", "command"}, "msg": "Field required"}}})
		return
	}
	args, err := shlexSplit(*req.Command)
	if err != nil {
		failed(w, err.Error())
		return
	}
	if len(args) == 0 {
		failed(w, "list index out of range")
		return
	}
	// The pod's /mnt/session and /mnt/memory are directories inside the
	// local sandbox: the command sees them there (inside a base64-encoded
	// "sh -c" script too), and its output names them /mnt/session and
	// /mnt/memory.
	in, out := fakeapi.SessionRewrite(rt.local.Root())
	quoted := make([]string, len(args))
	for i, a := range args {
		if m := encodedScript.FindStringSubmatch(a); m != nil {
			if script, err := base64.StdEncoding.DecodeString(m[1]); err == nil {
				a = strings.Replace(a, m[1], base64.StdEncoding.EncodeToString([]byte(in.Replace(string(script)))), 1)
			}
		}
		quoted[i] = "'" + strings.ReplaceAll(in.Replace(a), "'", `'\''`) + "'"
	}
	res, err := rt.local.Exec(context.Background(), sandbox.ExecRequest{
		Command: "exec " + strings.Join(quoted, " "), Env: rt.env, Timeout: rt.timeout,
	})
	if err == nil {
		res.Stdout, res.Stderr = []byte(out.Replace(string(res.Stdout))), []byte(out.Replace(string(res.Stderr)))
	}
	switch {
	case err != nil:
		failed(w, err.Error())
	case res.TimedOut:
		failed(w, fmt.Sprintf("Command '%v' timed out after %v seconds", args, rt.timeout.Seconds()))
	case !utf8.Valid(res.Stdout) || !utf8.Valid(res.Stderr):
		failed(w, "'utf-8' codec can't decode the output: invalid start byte")
	default:
		writeJSON(w, http.StatusOK, map[string]any{"stdout": text(res.Stdout), "stderr": text(res.Stderr), "exit_code": res.ExitCode})
	}
}

// text applies Python's universal newlines.
func text(b []byte) string {
	return strings.ReplaceAll(strings.ReplaceAll(string(b), "\r\n", "\n"), "\r", "\n")
}

// safePath is the runtime's get_safe_path: the real path of p under the
// root, or false when it leaves the root.
func (rt runtime) safePath(p string) (string, bool) {
	base := realpath(rt.local.Root())
	full := realpath(filepath.Join(base, strings.TrimLeft(p, "/")))
	return full, full == base || strings.HasPrefix(full, base+"/")
}

// realpath resolves links in the existing prefix of p, like Python's
// os.path.realpath (non-strict).
func realpath(p string) string {
	p = filepath.Clean(p)
	rest := ""
	for {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return filepath.Join(p, rest)
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = parent
	}
}

func (rt runtime) upload(w http.ResponseWriter, r *http.Request) {
	mr, err := r.MultipartReader()
	if err != nil {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"detail": "file: Field required"})
		return
	}
	for {
		part, err := mr.NextPart()
		if err != nil {
			writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"detail": "file: Field required"})
			return
		}
		if part.FormName() != "file" {
			continue
		}
		// The file name as sent, directories included (Go's
		// Part.FileName would keep only the base name).
		_, params, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
		name := params["filename"]
		full, ok := rt.safePath(name)
		if !ok {
			writeJSON(w, http.StatusForbidden, map[string]string{"message": "Access denied"})
			return
		}
		if err := rt.store(full, part); err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"message": "File upload failed: " + err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"message": fmt.Sprintf("File '%s' uploaded successfully.", name)})
		return
	}
}

func (rt runtime) download(w http.ResponseWriter, p string) {
	full, ok := rt.safePath(pyUnquote(p))
	if !ok {
		writeJSON(w, http.StatusForbidden, map[string]string{"message": "Access denied"})
		return
	}
	f, err := os.Open(full)
	if err != nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"message": "File not found"})
		return
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		writeJSON(w, http.StatusNotFound, map[string]string{"message": "File not found"})
		return
	}
	// Like Starlette's FileResponse: streamed, with a Content-Length.
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(fi.Size(), 10))
	_, _ = io.Copy(w, f)
}

// Upload returns the last upload to the absolute path p (in the pod's
// view: its root is the local sandbox's directory) of the Sandbox
// namespace/name.
func (s *Server) Upload(namespace, name, p string) (Upload, bool) {
	return s.rec.Upload(namespace + "/" + name + ":" + filepath.Clean(p))
}

// encodedScript matches an "sh -c" script that pipes a base64-encoded
// script into a shell.
var encodedScript = regexp.MustCompile(`^echo ([A-Za-z0-9+/=]+) \| base64 -d \| /bin/sh$`)

// Upload is what the fake received for one uploaded file.
type Upload = fakeapi.Upload

// pyUnquote is Python's urllib.parse.unquote: valid %XX escapes are
// decoded, anything else is kept.
func pyUnquote(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// errNoClosing and errNoEscaped are shlex's errors.
var (
	errNoClosing = errors.New("no closing quotation")
	errNoEscaped = errors.New("no escaped character")
)

// shlexSplit is Python's shlex.split(s) (POSIX mode): whitespace
// separates words; single quotes keep everything; in double quotes a
// backslash escapes only '"' and '\'; outside quotes it escapes any
// character.
func shlexSplit(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case ' ', '\t', '\n', '\r':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case '\\':
			if i+1 >= len(s) {
				return nil, errNoEscaped
			}
			i++
			cur.WriteByte(s[i])
			inWord = true
		case '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, errNoClosing
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && (s[i+1] == '"' || s[i+1] == '\\') {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, errNoClosing
			}
			inWord = true
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}
