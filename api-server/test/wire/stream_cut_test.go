package wire

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/mangohq/mango/api-server/internal/testserver"
	"github.com/mangohq/mango/internal/poll"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// TestSlowStreamIsCutAndResumes: a client that stops reading its stream
// while the session commits far more than MANGO_STREAM_MAX_LAG events is
// cut, with the closing comment after the events it was sent, while
// another stream of the session receives everything; reconnecting with
// Last-Event-ID delivers exactly the rest.
func TestSlowStreamIsCutAndResumes(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t, testserver.WithEnv("MANGO_STREAM_MAX_LAG", "16"))
	client := newClient(t, srv)
	id := newSession(t, srv)

	// The slow client: a small receive buffer, and it stops reading after
	// the stream's first line.
	dialer := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return cmpErr(err, serr)
	}}
	conn, err := dialer.Dial("tcp", strings.TrimPrefix(srv.BaseURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	req, _ := http.NewRequest(http.MethodGet, srv.BaseURL+"/v1/sessions/"+id+"/events/stream", nil)
	req.Header.Set("x-api-key", srv.APIKey)
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 4096), req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("slow stream: %v, %v", resp, err)
	}
	body := bufio.NewReaderSize(resp.Body, 4096)
	if line, err := body.ReadString('\n'); err != nil || !strings.HasPrefix(line, ": connected") {
		t.Fatalf("slow stream's first line %q (%v), want the connected comment", line, err)
	}

	// A stream keeping up.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fast := watchIDs(ctx, client, id, "")

	// The session commits 200 events of 32 KB: far more than the sockets
	// of the slow client hold. The stream keeping up paces the commits:
	// event i is committed once it received event i-8, so it stays within
	// the lag bound however loaded the machine (its reader may be starved
	// of CPU for a while), while the slow client falls behind all the same.
	const n, pace = 200, 8
	var fastGot []string
	appendLarge(t, srv, id, n, 32<<10, func(i int) {
		if k := i - pace - len(fastGot); k > 0 {
			fastGot = append(fastGot, collectIDs(t, fast, k, 60*time.Second)...)
		}
	})
	want := listIDs(t, client, id)
	if len(want) < n {
		t.Fatalf("the session lists %d events, want at least %d", len(want), n)
	}
	if got := append(fastGot, collectIDs(t, fast, len(want)-len(fastGot), 60*time.Second)...); !slices.Equal(got, want) {
		t.Fatalf("the stream keeping up got %d events, want the session's %d", len(got), len(want))
	}
	waitMetric(t, srv, `mango_stream_cut_total{reason="slow"} 1`, 30*time.Second)

	// The slow client reads on: the events it was sent, the closing
	// comment, the end.
	rest, err := io.ReadAll(body)
	if err != nil {
		t.Fatalf("reading the cut stream: %v", err)
	}
	var got []string
	for _, line := range strings.Split(string(rest), "\n") {
		if v, ok := strings.CutPrefix(line, "id: "); ok {
			got = append(got, v)
		}
	}
	if !strings.HasSuffix(string(rest), "\n\n") || !strings.Contains(string(rest[max(0, len(rest)-200):]), ": stream cut:") {
		t.Fatalf("the cut stream ends with %q, want the closing comment", rest[max(0, len(rest)-200):])
	}
	if len(got) >= len(want) || !slices.Equal(got, want[:len(got)]) {
		t.Fatalf("the cut stream delivered %d events, want a strict prefix of the session's %d", len(got), len(want))
	}

	// Resuming with Last-Event-ID delivers exactly the rest.
	last := ""
	if len(got) > 0 {
		last = got[len(got)-1]
	}
	resumed := watchIDs(ctx, client, id, last)
	if more := collectIDs(t, resumed, len(want)-len(got), 60*time.Second); !slices.Equal(append(got, more...), want) {
		t.Fatalf("cut at %d + resumed %d events, want the session's %d in order", len(got), len(more), len(want))
	}
}

func cmpErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// appendLarge commits n agent.message events of about size bytes each
// through the ControlPlane, as a worker would, calling before(i) before
// event i.
func appendLarge(t *testing.T, srv *testserver.Server, sessionID string, n, size int, before func(i int)) {
	t.Helper()
	conn, ctx := workerConn(t, srv)
	cp := pb.NewControlPlaneClient(conn)
	text := strings.Repeat("x", size)
	for i := range n {
		before(i)
		if _, err := cp.AppendEvents(ctx, &pb.AppendEventsRequest{SessionId: sessionID, Events: []*pb.NewEvent{{
			Key: fmt.Sprintf("large/%d/message", i), Type: "agent.message",
			Body: `{"content":[{"type":"text","text":"` + text + `"}]}`}}}); err != nil {
			t.Fatalf("append event %d: %v", i, err)
		}
	}
}

// watchIDs streams a session's event ids from after lastEventID (empty:
// from now on).
func watchIDs(ctx context.Context, client anthropic.Client, sessionID, lastEventID string) <-chan string {
	var opts []option.RequestOption
	if lastEventID != "" {
		opts = append(opts, option.WithHeader("Last-Event-ID", lastEventID))
	}
	stream := client.Beta.Sessions.Events.StreamEvents(ctx, sessionID, anthropic.BetaSessionEventStreamParams{}, opts...)
	out := make(chan string, 1024)
	go func() {
		defer close(out)
		defer func() { _ = stream.Close() }()
		for stream.Next() {
			out <- stream.Current().ID
		}
	}()
	return out
}

func collectIDs(t *testing.T, ids <-chan string, n int, timeout time.Duration) []string {
	t.Helper()
	var got []string
	deadline := time.After(timeout)
	for len(got) < n {
		select {
		case id, ok := <-ids:
			if !ok {
				t.Fatalf("stream ended after %d of %d events", len(got), n)
			}
			got = append(got, id)
		case <-deadline:
			t.Fatalf("%d of %d events within %v", len(got), n, timeout)
		}
	}
	return got
}

// listIDs lists a session's event ids, oldest first.
func listIDs(t *testing.T, client anthropic.Client, sessionID string) []string {
	t.Helper()
	var out []string
	iter := client.Beta.Sessions.Events.ListAutoPaging(context.Background(), sessionID, anthropic.BetaSessionEventListParams{Limit: anthropic.Int(100)})
	for iter.Next() {
		out = append(out, iter.Current().ID)
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("list events of %s: %v", sessionID, err)
	}
	return out
}

// waitMetric waits until the server's /metrics has line.
func waitMetric(t *testing.T, srv *testserver.Server, line string, timeout time.Duration) {
	t.Helper()
	poll.Until(t, timeout, fmt.Sprintf("%q on /metrics", line), func() (bool, string) {
		resp, err := http.Get(srv.BaseURL + "/metrics")
		if err != nil {
			return false, err.Error()
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		return strings.Contains(string(b), "\n"+line+"\n"), "not there yet"
	})
}

// TestStreamsEndWhenClientsLeave: streams whose clients close their
// connections are unregistered at once, without waiting for a write to
// fail (pings are 15 s apart here); an idle stream sends `: ping`
// comments at MANGO_STREAM_PING_INTERVAL.
func TestStreamsEndWhenClientsLeave(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	id := newSession(t, srv)
	const n = 20
	conns := make([]net.Conn, n)
	for i := range conns {
		conn, _ := openSSE(t, srv, id)
		defer func() { _ = conn.Close() }()
		conns[i] = conn
	}
	waitMetric(t, srv, fmt.Sprintf("mango_stream_subscribers %d", n), 10*time.Second)
	for _, c := range conns {
		_ = c.Close()
	}
	waitMetric(t, srv, "mango_stream_subscribers 0", 5*time.Second)
	waitMetric(t, srv, "mango_stream_feeds 0", 5*time.Second)

	pinging := testserver.Start(t, testserver.WithEnv("MANGO_STREAM_PING_INTERVAL", "1s"))
	conn, body := openSSE(t, pinging, newSession(t, pinging))
	defer func() { _ = conn.Close() }()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for line := ""; !strings.HasPrefix(line, ": ping"); {
		var err error
		if line, err = body.ReadString('\n'); err != nil {
			t.Fatalf("idle stream: %v before a ping", err)
		}
	}
}

// openSSE opens a session's stream on a raw connection and returns it
// with the response body.
func openSSE(t *testing.T, srv *testserver.Server, sessionID string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.BaseURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, srv.BaseURL+"/v1/sessions/"+sessionID+"/events/stream", nil)
	req.Header.Set("x-api-key", srv.APIKey)
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("stream of %s: %v, %v", sessionID, resp, err)
	}
	return conn, bufio.NewReader(resp.Body)
}

// TestStreamToHTTP10Client: an HTTP/1.0 client, which cannot read chunked
// responses, gets its stream through the HTTP server (not hijacked),
// delimited by the connection's end.
func TestStreamToHTTP10Client(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	id := newSession(t, srv)
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.BaseURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(conn, "GET /v1/sessions/%s/events/stream HTTP/1.0\r\nHost: mango\r\nx-api-key: %s\r\n\r\n", id, srv.APIKey); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, &http.Request{Method: http.MethodGet})
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTP/1.0 stream: %v, %v", resp, err)
	}
	if len(resp.TransferEncoding) != 0 {
		t.Fatalf("HTTP/1.0 response with Transfer-Encoding %v, want none", resp.TransferEncoding)
	}
	if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || !strings.HasPrefix(line, ": connected") {
		t.Fatalf("first line %q (%v), want the connected comment", line, err)
	}
}
