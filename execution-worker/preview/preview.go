// Package preview sends the previews of events being produced (event_start
// and event_delta frames of agent.message, event_start of agent.thinking)
// from the worker to the api-server over the ControlPlane's StreamPreviews.
//
// A [Streamer] owns the worker's one long-lived client stream and
// reconnects with backoff; a [Sink] per turn implements
// [agentruntime.Previewer] and names every frame by the id the committed
// event will carry ([sessionwf.EventID] of the session and the event's
// key). Previews are best effort: a Sink never blocks. Frames go through a
// bounded queue and are dropped when it is full or the stream is down, so a
// slow or unreachable api-server cannot slow a turn.
package preview

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/mangohq/mango/execution-worker/agentruntime"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
	"github.com/mangohq/mango/proto/sessionwf"
)

// Queue bounds the frames waiting to be sent; more are dropped.
const Queue = 1024

// maxBatch bounds the frames sent in one message.
const maxBatch = 256

// Streamer owns the worker's preview stream. Create it with NewStreamer and
// run Run for the worker's lifetime.
type Streamer struct {
	client pb.ControlPlaneClient
	log    *slog.Logger
	now    func() time.Time

	frames    chan *pb.PreviewFrame
	connected atomic.Bool

	sent    atomic.Int64
	dropped atomic.Int64
}

// NewStreamer returns a Streamer sending through client.
func NewStreamer(client pb.ControlPlaneClient, log *slog.Logger) *Streamer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Streamer{client: client, log: log, now: time.Now, frames: make(chan *pb.PreviewFrame, Queue)}
}

// Sent and Dropped count the frames sent and dropped so far.
func (s *Streamer) Sent() int64 { return s.sent.Load() }

// Dropped counts the frames dropped so far (queue full or stream down).
func (s *Streamer) Dropped() int64 { return s.dropped.Load() }

// Connected reports whether the stream is open.
func (s *Streamer) Connected() bool { return s.connected.Load() }

// enqueue hands f to the sending goroutine without blocking and reports
// whether it was queued.
func (s *Streamer) enqueue(f *pb.PreviewFrame) bool {
	if !s.connected.Load() {
		s.dropped.Add(1)
		return false
	}
	select {
	case s.frames <- f:
		return true
	default:
		s.dropped.Add(1)
		return false
	}
}

// Run keeps the stream open until ctx ends, reconnecting with capped
// exponential backoff, and sends the queued frames in batches.
func (s *Streamer) Run(ctx context.Context) {
	b := &backoff.ExponentialBackOff{InitialInterval: 100 * time.Millisecond, Multiplier: 2, MaxInterval: 5 * time.Second}
	_, _ = backoff.Retry(ctx, func() (struct{}, error) {
		start := time.Now()
		err := s.stream(ctx)
		s.connected.Store(false)
		if time.Since(start) > 10*time.Second {
			b.Reset() // it worked for a while
		}
		if err == nil {
			err = errStreamEnded
		}
		return struct{}{}, err
	}, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(0), backoff.WithNotify(func(err error, wait time.Duration) {
		level := slog.LevelWarn
		if status.Code(err) == codes.Unavailable {
			level = slog.LevelInfo // an api-server starting, restarting or draining
		}
		s.log.Log(ctx, level, "preview stream to the ControlPlane lost; previews are dropped until it reconnects",
			"err", err, "backoff", wait, "dropped_total", s.dropped.Load())
	}))
}

// errStreamEnded stands for a stream that ended without an error: it is
// opened again all the same.
var errStreamEnded = errors.New("preview stream ended")

// stream opens one stream and sends until it breaks or ctx ends.
func (s *Streamer) stream(ctx context.Context) error {
	streamCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := s.client.StreamPreviews(streamCtx)
	if err != nil {
		return err
	}
	// Frames queued while disconnected are stale: drop them.
	for drained := false; !drained; {
		select {
		case <-s.frames:
			s.dropped.Add(1)
		default:
			drained = true
		}
	}
	// The server answers only when the stream ends: a receive that returns
	// tells us the stream broke even while nothing is being sent.
	broken := make(chan error, 1)
	go func() {
		var resp pb.StreamPreviewsResponse
		err := st.RecvMsg(&resp)
		if err == nil {
			err = errors.New("stream closed by the server")
		}
		broken <- err
	}()
	s.connected.Store(true)
	batch := make([]*pb.PreviewFrame, 0, maxBatch)
	for {
		batch = batch[:0]
		select {
		case <-ctx.Done():
			s.connected.Store(false)
			_ = st.CloseSend()
			return ctx.Err()
		case err := <-broken:
			return err
		case f := <-s.frames:
			batch = append(batch, f)
		}
	more:
		for len(batch) < maxBatch {
			select {
			case f := <-s.frames:
				batch = append(batch, f)
			default:
				break more
			}
		}
		if err := st.Send(&pb.StreamPreviewsRequest{Frames: batch}); err != nil {
			s.dropped.Add(int64(len(batch)))
			if errors.Is(err, io.EOF) {
				// The real cause is the stream's status.
				select {
				case err = <-broken:
				case <-time.After(time.Second):
				}
			}
			return err
		}
		s.sent.Add(int64(len(batch)))
	}
}

// Session returns the previewer of one turn of a session.
func (s *Streamer) Session(sessionID string) *Sink {
	return &Sink{streamer: s, sessionID: sessionID, blocks: map[string]int32{}, frames: map[string]uint32{}}
}

// Sink previews the events of one turn. Keys are the commit keys the
// agent runtime uses for the events ("<trigger>/<n>/message", ...).
type Sink struct {
	streamer  *Streamer
	sessionID string

	mu     sync.Mutex
	blocks map[string]int32  // event key → index of its current content block
	frames map[string]uint32 // event key → frames queued of it
}

var _ agentruntime.Previewer = (*Sink)(nil)

// Start announces an event. Several text blocks of one message share the
// message's event: the first sends event_start, later ones move the
// content index on.
func (k *Sink) Start(key, eventType string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	idx, seen := k.blocks[key]
	if seen {
		k.blocks[key] = idx + 1
		return
	}
	k.blocks[key] = 0
	k.frames[key] = 0
	k.send(key, &pb.PreviewFrame{SessionId: k.sessionID, EventId: sessionwf.EventID(k.sessionID, key),
		Kind: pb.PreviewFrameKind_PREVIEW_FRAME_KIND_START, EventType: eventType, ProducedAt: timestamppb.New(k.streamer.now())})
}

// Delta sends a text fragment of the event under key.
func (k *Sink) Delta(key, text string) {
	if text == "" {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.send(key, &pb.PreviewFrame{SessionId: k.sessionID, EventId: sessionwf.EventID(k.sessionID, key),
		Kind: pb.PreviewFrameKind_PREVIEW_FRAME_KIND_DELTA, EventType: eventTypeOf(key), Text: text, Index: k.blocks[key],
		ProducedAt: timestamppb.New(k.streamer.now())})
}

// send queues f, a frame of the event under key, and counts it; k.mu is
// held, so the frames of one event are queued in order.
func (k *Sink) send(key string, f *pb.PreviewFrame) {
	if k.streamer.enqueue(f) {
		k.frames[key]++
	}
}

// Frames is the number of frames of the event under key queued so far: its
// commit tells the api-server how many to expect before it.
func (k *Sink) Frames(key string) uint32 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.frames[key]
}

// eventTypeOf names the previewed event type of a key: deltas are sent for
// messages only (thinking previews are start-only).
func eventTypeOf(key string) string {
	if strings.Contains(key, "/thinking/") {
		return "agent.thinking"
	}
	return "agent.message"
}
