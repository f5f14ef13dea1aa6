package preview

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/mangohq/mango/execution-worker/internal/cptest"
	"github.com/mangohq/mango/internal/poll"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
	"github.com/mangohq/mango/proto/sessionwf"
)

// recorder is a ControlPlane that records the preview frames it receives.
type recorder struct {
	pb.UnimplementedControlPlaneServer
	frames chan *pb.PreviewFrame
}

func (r *recorder) StreamPreviews(st pb.ControlPlane_StreamPreviewsServer) error {
	for {
		msg, err := st.Recv()
		if err != nil {
			return err
		}
		for _, f := range msg.GetFrames() {
			r.frames <- f
		}
	}
}

func TestSinkNeverBlocksAndNamesEventsByKey(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{frames: make(chan *pb.PreviewFrame, 16)}
	srv := grpc.NewServer()
	pb.RegisterControlPlaneServer(srv, rec)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	s := NewStreamer(pb.NewControlPlaneClient(conn), nil)
	sink := s.Session("sesn_x")

	// Disconnected: frames are dropped at once.
	begin := time.Now()
	for range 10 * Queue {
		sink.Delta("t/1/message", "word ")
	}
	if d := time.Since(begin); d > time.Second || s.Dropped() != 10*Queue {
		t.Fatalf("disconnected: %d dropped in %v, want all %d at once", s.Dropped(), d, 10*Queue)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx)
	poll.Until(t, 5*time.Second, "the stream to connect", func() (bool, string) { return s.Connected(), "not connected" })
	sink.Start("t/1/message", "agent.message")
	sink.Delta("t/1/message", "hello ")
	sink.Start("t/1/message", "agent.message") // a second text block
	sink.Delta("t/1/message", "world")
	want := sessionwf.EventID("sesn_x", "t/1/message")
	wantFrames := []struct {
		kind  pb.PreviewFrameKind
		text  string
		index int32
	}{{pb.PreviewFrameKind_PREVIEW_FRAME_KIND_START, "", 0}, {pb.PreviewFrameKind_PREVIEW_FRAME_KIND_DELTA, "hello ", 0},
		{pb.PreviewFrameKind_PREVIEW_FRAME_KIND_DELTA, "world", 1}}
	for i, w := range wantFrames {
		select {
		case f := <-rec.frames:
			if f.GetEventId() != want || f.GetKind() != w.kind || f.GetText() != w.text || f.GetIndex() != w.index ||
				f.GetSessionId() != "sesn_x" || f.GetProducedAt() == nil {
				t.Fatalf("frame %d = %v, want %s %v %q index %d", i, f, want, w.kind, w.text, w.index)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("frame %d not received", i)
		}
	}
}

// TestStreamWaitsQuietlyForTheControlPlane: a worker that starts before
// its api-server (make dev, a rollout) retries the preview stream at INFO;
// the api-server answering, the stream connects.
func TestStreamWaitsQuietlyForTheControlPlane(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens yet: dials are refused
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	logs := &cptest.LockedBuffer{}
	s := NewStreamer(pb.NewControlPlaneClient(conn), slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx)
	poll.Until(t, 10*time.Second, "a logged retry", func() (bool, string) {
		out := logs.String()
		return strings.Contains(out, "preview stream to the ControlPlane lost"), "logs:\n" + out
	})
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	srv := grpc.NewServer()
	pb.RegisterControlPlaneServer(srv, &recorder{frames: make(chan *pb.PreviewFrame, 1)})
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	poll.Until(t, 10*time.Second, "the stream to connect after the server started", func() (bool, string) {
		return s.Connected(), "not connected"
	})
	if out := logs.String(); strings.Contains(out, "level=WARN") || !strings.Contains(out, "level=INFO") {
		t.Errorf("retries while the ControlPlane was not listening, want INFO only:\n%s", out)
	}
}
