package interrupts

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/mangohq/mango/internal/poll"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// TestRegistryRule checks which registered turn a pushed interrupt stops:
// one committed after the turn loaded its run, or pending behind its
// trigger; never a stale one an earlier turn consumed, nor another
// session's.
func TestRegistryRule(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		in   Interrupt
		want bool
	}{
		{"committed after the run was loaded", Interrupt{SessionID: "s1", EventID: "sevt_new", Seq: 11}, true},
		{"pending behind the turn's trigger", Interrupt{SessionID: "s1", EventID: "sevt_pending", Seq: 9}, true},
		{"stale: consumed before the turn started", Interrupt{SessionID: "s1", EventID: "sevt_old", Seq: 4}, false},
		{"at last_seq but not pending", Interrupt{SessionID: "s1", EventID: "sevt_last", Seq: 10}, false},
		{"another session", Interrupt{SessionID: "s2", EventID: "sevt_other", Seq: 99}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := NewRegistry()
			ctx, turn := r.Start(context.Background(), "s1", 10, []string{"sevt_msg", "sevt_pending"})
			defer turn.Done()
			if got := r.Deliver(c.in); got != c.want {
				t.Fatalf("Deliver(%+v) = %v, want %v", c.in, got, c.want)
			}
			by, ok := turn.Interrupted()
			id := by.EventID
			if c.want {
				if ctx.Err() == nil || !errors.Is(context.Cause(ctx), ErrInterrupted) || !ok || by != c.in {
					t.Fatalf("turn after a meant interrupt: err %v, cause %v, interrupted (%q, %v); want cancelled by ErrInterrupted naming %s",
						ctx.Err(), context.Cause(ctx), id, ok, c.in.EventID)
				}
				if r.Applied() != 1 {
					t.Errorf("Applied = %d, want 1", r.Applied())
				}
				return
			}
			if ctx.Err() != nil || ok {
				t.Fatalf("turn after a stale or foreign interrupt: err %v, interrupted (%q, %v); want still running", ctx.Err(), id, ok)
			}
		})
	}
}

// TestRegistryRecent checks that an interrupt pushed before the turn
// registered (between its GetRun and Start) stops it at Start, that a
// recent stale one does not, and that Done unregisters.
func TestRegistryRecent(t *testing.T) {
	t.Parallel()
	r := NewRegistry()
	if r.Deliver(Interrupt{SessionID: "s1", EventID: "sevt_early", Seq: 21}) {
		t.Fatal("Deliver with no turn registered reported a cancelled turn")
	}
	// A turn that loaded its run at 20 starts after the push of seq 21.
	ctx, turn := r.Start(context.Background(), "s1", 20, []string{"sevt_msg"})
	if !errors.Is(context.Cause(ctx), ErrInterrupted) {
		t.Fatalf("turn registered after its interrupt arrived: cause %v, want ErrInterrupted", context.Cause(ctx))
	}
	turn.Done()
	// The next turn loaded its run after that interrupt was consumed.
	ctx, turn = r.Start(context.Background(), "s1", 25, []string{"sevt_msg2"})
	if ctx.Err() != nil {
		t.Fatalf("the next turn was cancelled by the remembered, consumed interrupt: %v", context.Cause(ctx))
	}
	turn.Done()
	if r.Deliver(Interrupt{SessionID: "s1", EventID: "sevt_late", Seq: 30}) {
		t.Fatal("Deliver after Done cancelled an unregistered turn")
	}
	if !errors.Is(context.Cause(ctx), context.Canceled) || errors.Is(context.Cause(ctx), ErrInterrupted) {
		t.Fatalf("a turn's context after Done: cause %v, want context.Canceled", context.Cause(ctx))
	}
	// The ring stays bounded.
	for i := range 3 * Recent {
		r.Deliver(Interrupt{SessionID: "s9", EventID: "sevt_x", Seq: int64(i)})
	}
	if n := len(r.recent); n != Recent {
		t.Fatalf("remembered %d interrupts, want at most %d", n, Recent)
	}
	var nilReg *Registry
	ctx, turn = nilReg.Start(context.Background(), "s1", 0, nil)
	turn.Done()
	if _, ok := turn.Interrupted(); ok || ctx.Err() != nil {
		t.Fatal("a nil registry's turn was interrupted")
	}
}

// fakeCP serves WatchInterrupts: the first stream is refused with
// UNAVAILABLE, later ones send what the test queues.
type fakeCP struct {
	pb.UnimplementedControlPlaneServer
	streams atomic.Int32
	send    chan *pb.WatchInterruptsResponse
}

func (f *fakeCP) WatchInterrupts(req *pb.WatchInterruptsRequest, st pb.ControlPlane_WatchInterruptsServer) error {
	if req.GetWorkerId() != "w-1" {
		return status.Errorf(codes.InvalidArgument, "worker_id %q, want w-1", req.GetWorkerId())
	}
	if f.streams.Add(1) == 1 {
		return status.Error(codes.Unavailable, "draining")
	}
	if err := st.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	for {
		select {
		case <-st.Context().Done():
			return nil
		case m := <-f.send:
			if err := st.Send(m); err != nil {
				return err
			}
		}
	}
}

// TestWatcherReconnectsAndDelivers: a refused stream is retried after the
// backoff; once connected, a pushed interrupt cancels the registered turn
// it is meant for.
func TestWatcherReconnectsAndDelivers(t *testing.T) {
	t.Parallel()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	cp := &fakeCP{send: make(chan *pb.WatchInterruptsResponse, 1)}
	pb.RegisterControlPlaneServer(srv, cp)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	reg := NewRegistry()
	w := NewWatcher(pb.NewControlPlaneClient(conn), "w-1", reg, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	poll.Until(t, 10*time.Second, "the watcher to connect", func() (bool, string) {
		return w.Connected(), fmt.Sprintf("%d streams opened", cp.streams.Load())
	})
	if n := cp.streams.Load(); n != 2 {
		t.Fatalf("streams opened = %d, want 2 (one refused, one retried)", n)
	}
	turnCtx, turn := reg.Start(context.Background(), "sesn_1", 5, nil)
	defer turn.Done()
	cp.send <- &pb.WatchInterruptsResponse{SessionId: "sesn_1", EventId: "sevt_i", Seq: 6, OutboxId: 77}
	select {
	case <-turnCtx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the pushed interrupt did not cancel the turn within 10s")
	}
	if by, ok := turn.Interrupted(); !ok || by.EventID != "sevt_i" || by.OutboxID != 77 || w.Received() != 1 || w.Applied() != 1 {
		t.Fatalf("after the push: interrupted (%+v, %v), received %d, applied %d; want sevt_i (outbox 77), 1, 1", by, ok, w.Received(), w.Applied())
	}
	cancel()
	<-done
	if w.Connected() {
		t.Fatal("watcher still reports connected after Run returned")
	}
}
