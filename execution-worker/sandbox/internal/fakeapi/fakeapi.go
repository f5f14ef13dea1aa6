// Package fakeapi holds what the in-process fakes of the remote sandbox
// services share: every request counted by method and path, faults
// injected into the next matching requests, the size and digest of every
// uploaded file, JSON answers and query parameters, and the local
// sandboxes (sandboxlocal) backing the fakes' sandboxes.
package fakeapi

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxlocal"
)

// Fault answers the next N requests whose method is Method (empty: any)
// and whose path contains Path.
type Fault struct {
	Method, Path string
	N            int
	// Status is the error answer's status; RetryAfter, when set, its
	// Retry-After header.
	Status     int
	RetryAfter string
	// Malformed answers 200 with a body that is not valid JSON; Truncated
	// answers 200 with a body cut short of its Content-Length (the
	// connection closes mid-body).
	Malformed, Truncated bool
}

// Write answers the fault: malformed is the start of the invalid JSON body
// a Malformed or Truncated fault sends, and writeErr renders the service's
// error body for the others.
func (f *Fault) Write(w http.ResponseWriter, malformed string, writeErr func(w http.ResponseWriter, status int, msg string)) {
	switch {
	case f.Malformed:
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, malformed)
	case f.Truncated:
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "4096")
		_, _ = io.WriteString(w, malformed)
	default:
		if f.RetryAfter != "" {
			w.Header().Set("Retry-After", f.RetryAfter)
		}
		writeErr(w, f.Status, "injected fault")
	}
}

// Upload is what a fake received for one uploaded file.
type Upload struct {
	// Bytes is the content's length; SHA256 its hex digest.
	Bytes  int64
	SHA256 string
}

// Recorder counts requests, injects faults and records uploads. The zero
// value is ready; it is safe for concurrent use.
type Recorder struct {
	mu      sync.Mutex
	counts  map[string]int // by "METHOD path"
	faults  []*Fault
	uploads map[string]Upload
}

// Inject makes f answer the next f.N matching requests. Faults are tried
// in the order they were injected.
func (r *Recorder) Inject(f Fault) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults = append(r.faults, &f)
}

// Take counts req and returns the fault it hits (one of its N used up),
// or nil.
func (r *Recorder) Take(req *http.Request) *Fault {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.counts == nil {
		r.counts = map[string]int{}
	}
	r.counts[req.Method+" "+req.URL.Path]++
	for _, f := range r.faults {
		if f.N > 0 && (f.Method == "" || f.Method == req.Method) && strings.Contains(req.URL.Path, f.Path) {
			f.N--
			return f
		}
	}
	return nil
}

// Count returns how many requests with method (empty: any) and a path
// containing contains were taken.
func (r *Recorder) Count(method, contains string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for k, c := range r.counts {
		m, p, _ := strings.Cut(k, " ")
		if (method == "" || m == method) && strings.Contains(p, contains) {
			n += c
		}
	}
	return n
}

// Store streams content to file (created with mode, or truncated) and
// records its size and digest under key.
func (r *Recorder) Store(key, file string, content io.Reader, mode fs.FileMode) error {
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	sum := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, sum), content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.uploads == nil {
		r.uploads = map[string]Upload{}
	}
	r.uploads[key] = Upload{Bytes: n, SHA256: hex.EncodeToString(sum.Sum(nil))}
	return nil
}

// Upload returns what was last stored under key.
func (r *Recorder) Upload(key string) (Upload, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	u, ok := r.uploads[key]
	return u, ok
}

// FilePart returns the part named "file" of a multipart request.
func FilePart(req *http.Request) (*multipart.Part, error) {
	mr, err := req.MultipartReader()
	if err != nil {
		return nil, err
	}
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return nil, errors.New("no file part")
		}
		if err != nil {
			return nil, err
		}
		if part.FormName() == "file" {
			return part, nil
		}
	}
}

// WriteJSON answers status with v as JSON.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// HostPath maps a path in a fake sandbox to the host: the session roots
// ([sandbox.SessionRoots]: /mnt/session, /mnt/memory) lie inside root, the
// local sandbox's directory; other paths are host paths already.
func HostPath(root, p string) string {
	p = path.Clean(p)
	if _, ok := sandbox.SessionRoot(p); ok {
		return root + p
	}
	return p
}

// SandboxPath is HostPath reversed: a host path inside one of the session
// roots under root names that session path; other paths are returned as
// they are.
func SandboxPath(root, h string) string {
	for _, dir := range sandbox.SessionRoots {
		if rest, ok := strings.CutPrefix(h, root+dir); ok && (rest == "" || rest[0] == '/') {
			return dir + rest
		}
	}
	return h
}

// RandomHex returns n random bytes, hex-encoded.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// QueryInt returns the integer query parameter name of r: def when it is
// absent, -1 when it is not an integer (the caller's range check refuses
// it).
func QueryInt(r *http.Request, name string, def int) int {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return -1
	}
	return n
}

// Matches reports whether labels hold every key of want, with its first
// value.
func Matches(labels map[string]string, want url.Values) bool {
	for k := range want {
		if labels[k] != want.Get(k) {
			return false
		}
	}
	return true
}

// NewLocal creates the local sandbox backing the fake sandbox id, in the
// directory id under dir.
func NewLocal(ctx context.Context, dir, id string) (sandbox.Sandbox, error) {
	p, err := sandboxlocal.New(sandboxlocal.Config{Root: filepath.Join(dir, id), MaxOutput: 64 << 20, Installation: "fakeapi"})
	if err != nil {
		return nil, err
	}
	sb, _, err := p.Create(ctx, id, sandbox.Spec{})
	return sb, err
}

// SessionRewrite returns the replacers of a fake that runs commands in the
// local sandbox whose directory is root, where each session root
// ([sandbox.SessionRoots]) is a directory inside root: in rewrites the
// session roots in what a command is given, out rewrites them back in what
// the command prints.
func SessionRewrite(root string) (in, out *strings.Replacer) {
	var ins, outs []string
	for _, dir := range sandbox.SessionRoots {
		ins = append(ins, dir, root+dir)
		outs = append(outs, root+dir, dir)
	}
	return strings.NewReplacer(ins...), strings.NewReplacer(outs...)
}

// Locked calls fn with m[key] under mu when m holds key: the fakes' hooks
// that inspect or change one sandbox.
func Locked[V any](mu *sync.Mutex, m map[string]*V, key string, fn func(*V)) {
	mu.Lock()
	defer mu.Unlock()
	if v := m[key]; v != nil {
		fn(v)
	}
}
