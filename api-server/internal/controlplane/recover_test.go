package controlplane_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mangohq/mango/api-server/internal/controlplane"
	"github.com/mangohq/mango/api-server/internal/preview"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// lockedBuffer is a log destination the server's goroutines may share.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// records returns the JSON log records written so far.
func (b *lockedBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b.buf.Bytes()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r map[string]any
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}

// panickySink panics on a frame whose text is "boom".
type panickySink struct{}

func (panickySink) Publish(frames []preview.Frame) {
	for _, f := range frames {
		if f.Text == "boom" {
			panic("preview sink exploded")
		}
	}
}

func (panickySink) Sync(context.Context, []preview.Want, time.Duration) {}

func TestHandlerPanicAnswersInternal(t *testing.T) {
	t.Parallel()
	logs := &lockedBuffer{}
	reg := prometheus.NewRegistry()
	// A nil store makes every store-touching RPC dereference nil.
	client := serve(t, controlplane.Deps{Store: nil, Token: token, Registry: reg, Previews: panickySink{},
		Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	ctx := authed(context.Background())

	heartbeat := func() error {
		_, err := client.RecordWorkerHeartbeat(ctx, &pb.RecordWorkerHeartbeatRequest{WorkerId: "w1", Provider: "local"})
		return err
	}
	previews := func(text string) (*pb.StreamPreviewsResponse, error) {
		stream, err := client.StreamPreviews(ctx)
		if err != nil {
			t.Fatalf("open StreamPreviews: %v", err)
		}
		_ = stream.Send(&pb.StreamPreviewsRequest{Frames: []*pb.PreviewFrame{{SessionId: "sesn_x", EventId: "sevt_x", Text: text,
			Kind: pb.PreviewFrameKind_PREVIEW_FRAME_KIND_DELTA}}})
		return stream.CloseAndRecv()
	}

	// The same panicking method answers Internal every time, on the same
	// connection.
	for i := range 2 {
		err := heartbeat()
		wantCode(t, "RecordWorkerHeartbeat over a nil store", err, codes.Internal)
		if got, want := status.Convert(err).Message(), "RecordWorkerHeartbeat: internal error"; got != want {
			t.Errorf("call %d: message %q, want %q", i+1, got, want)
		}
	}
	_, err := previews("boom")
	wantCode(t, "StreamPreviews with a panicking sink", err, codes.Internal)
	if got, want := status.Convert(err).Message(), "StreamPreviews: internal error"; got != want {
		t.Errorf("stream message %q, want %q", got, want)
	}

	// The server still serves: a call that does not panic succeeds.
	resp, err := previews("fine")
	if err != nil {
		t.Fatalf("StreamPreviews after the panics: %v, want success", err)
	}
	if resp.GetFramesReceived() != 1 {
		t.Errorf("StreamPreviews received %d frames, want 1", resp.GetFramesReceived())
	}

	if got := metricValue(t, reg, "mango_controlplane_requests_total", map[string]string{"method": "RecordWorkerHeartbeat", "code": "Internal"}); got != 2 {
		t.Errorf("Internal heartbeat requests metric = %v, want 2", got)
	}
	if got := metricValue(t, reg, "mango_controlplane_requests_total", map[string]string{"method": "StreamPreviews", "code": "Internal"}); got != 1 {
		t.Errorf("Internal StreamPreviews requests metric = %v, want 1", got)
	}

	// Each panic is logged at Error with its value and the handler's stack.
	wantPanics := map[string]string{
		"RecordWorkerHeartbeat": "nil pointer dereference",
		"StreamPreviews":        "preview sink exploded",
	}
	seen := map[string]int{}
	for _, r := range logs.records(t) {
		if r["msg"] != "controlplane: handler panicked" {
			continue
		}
		method, _ := r["method"].(string)
		seen[method]++
		if r["level"] != "ERROR" {
			t.Errorf("%s panic logged at %v, want ERROR", method, r["level"])
		}
		if v, _ := r["panic"].(string); !strings.Contains(v, wantPanics[method]) {
			t.Errorf("%s panic value %q, want it to contain %q", method, v, wantPanics[method])
		}
		if stack, _ := r["stack"].(string); !strings.Contains(stack, "controlplane.(*Server)."+method) {
			t.Errorf("%s stack does not name the handler:\n%s", method, stack)
		}
	}
	if seen["RecordWorkerHeartbeat"] != 2 || seen["StreamPreviews"] != 1 {
		t.Errorf("panic log records by method = %v, want RecordWorkerHeartbeat:2 StreamPreviews:1", seen)
	}
}
