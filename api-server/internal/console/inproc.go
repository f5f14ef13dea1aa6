package console

import (
	"io"
	"net/http"
	"sync"
)

// inProcess is an http.RoundTripper that serves each request with the
// public API's handler in this process: the console calls the API as any
// client does, through every middleware (authentication included), with
// no network hop. Responses stream: the body is readable as the handler
// writes and flushes it, so an event stream works as over a socket.
type inProcess struct{ api http.Handler }

// RoundTrip implements http.RoundTripper.
func (t inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	pr, pw := io.Pipe()
	w := &pipeWriter{header: http.Header{}, body: pw, ready: make(chan struct{})}
	r := req.Clone(req.Context())
	r.RequestURI = r.URL.RequestURI()
	r.RemoteAddr = "127.0.0.1:0" // the console, in this process
	if r.Body == nil {
		r.Body = http.NoBody
	}
	go func() {
		defer func() {
			w.WriteHeader(http.StatusOK) // a handler that wrote nothing answered 200
			_ = pw.Close()
		}()
		t.api.ServeHTTP(w, r)
	}()
	select {
	case <-w.ready:
	case <-req.Context().Done():
		_ = pr.CloseWithError(req.Context().Err())
		return nil, req.Context().Err()
	}
	return &http.Response{Status: http.StatusText(w.status), StatusCode: w.status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: w.sent, Body: pr, ContentLength: -1, Request: req}, nil
}

// pipeWriter is the handler's http.ResponseWriter: headers are handed to
// RoundTrip at the first write, the body goes through the pipe.
type pipeWriter struct {
	header http.Header
	sent   http.Header
	body   *io.PipeWriter
	status int
	once   sync.Once
	ready  chan struct{}
}

func (w *pipeWriter) Header() http.Header { return w.header }

func (w *pipeWriter) WriteHeader(status int) {
	w.once.Do(func() {
		w.status, w.sent = status, w.header.Clone()
		close(w.ready)
	})
}

func (w *pipeWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(p)
}

// Flush implements http.Flusher: the pipe has no buffer, so written bytes
// are already with the reader.
func (w *pipeWriter) Flush() { w.WriteHeader(http.StatusOK) }
