package sessionfiles_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/mangohq/mango/execution-worker/sandbox"
	"github.com/mangohq/mango/execution-worker/sandbox/sandboxlocal"
	"github.com/mangohq/mango/execution-worker/sessionfiles"
)

// counted is an acquisition and a materialization that count their calls;
// acquire waits for gate (when set) or its context, and returns err once
// gate let it through.
type counted struct {
	sb          sandbox.Sandbox
	gate        chan struct{}
	err         error
	acquires    atomic.Int32
	materials   atomic.Int32
	interrupted atomic.Int32
}

func newCounted(t *testing.T) *counted {
	t.Helper()
	p, err := sandboxlocal.New(sandboxlocal.Config{Root: t.TempDir(), Installation: "once-test"})
	if err != nil {
		t.Fatal(err)
	}
	sb, _, err := p.Create(t.Context(), "sesn_once", sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	return &counted{sb: sb}
}

func (c *counted) acquire(ctx context.Context) (sandbox.Sandbox, error) {
	c.acquires.Add(1)
	if c.gate != nil {
		select {
		case <-c.gate:
		case <-ctx.Done():
			c.interrupted.Add(1)
			return nil, ctx.Err()
		}
	}
	if c.err != nil {
		return nil, c.err
	}
	return c.sb, nil
}

func (c *counted) materialize(context.Context, sandbox.Sandbox) error {
	c.materials.Add(1)
	return nil
}

func TestOnceStartHandsItsSandboxToTheFirstAcquire(t *testing.T) {
	t.Parallel()
	c := newCounted(t)
	var o sessionfiles.Once
	stop := o.Start(t.Context(), c.acquire, c.materialize)
	defer stop()
	if o.Sandbox() != nil {
		t.Error("Sandbox() is set before any Acquire; a sandbox the turn never asked for must not be reported")
	}
	sb, err := o.Acquire(t.Context(), c.acquire, c.materialize)
	if err != nil || sb != c.sb {
		t.Fatalf("Acquire = %v, %v; want the started acquisition's sandbox", sb, err)
	}
	if _, err := o.Acquire(t.Context(), c.acquire, c.materialize); err != nil {
		t.Fatal(err)
	}
	if got := c.materials.Load(); got != 1 {
		t.Errorf("materialized %d times, want once", got)
	}
	if got := c.acquires.Load(); got != 2 {
		t.Errorf("acquire called %d times, want 2 (the started one, then the second Acquire's)", got)
	}
	if o.Sandbox() != c.sb {
		t.Error("Sandbox() does not report the sandbox handed out")
	}
}

// TestOnceStartErrorSurfacesOnce: the first Acquire gets the started
// acquisition's error, as if it had acquired itself; the next one tries
// again.
func TestOnceStartErrorSurfacesOnce(t *testing.T) {
	t.Parallel()
	c := newCounted(t)
	refused := errors.New("refused")
	c.err = refused
	var o sessionfiles.Once
	stop := o.Start(t.Context(), c.acquire, c.materialize)
	defer stop()
	if _, err := o.Acquire(t.Context(), c.acquire, c.materialize); !errors.Is(err, refused) {
		t.Fatalf("first Acquire = %v, want the started acquisition's error", err)
	}
	if got := c.acquires.Load(); got != 1 {
		t.Errorf("acquire called %d times by the first Acquire, want 1 (the started one, not repeated)", got)
	}
	c.err = nil
	if sb, err := o.Acquire(t.Context(), c.acquire, c.materialize); err != nil || sb != c.sb {
		t.Errorf("second Acquire = %v, %v; want a new try that succeeds", sb, err)
	}
}

// TestOnceStoppedAcquisitionIsNoOutcome: an acquisition stop cut short
// does not fail a later Acquire (a tool call outliving its turn's
// attempt): it acquires under its own context. Stop waits for the
// started acquisition to end.
func TestOnceStoppedAcquisitionIsNoOutcome(t *testing.T) {
	t.Parallel()
	c := newCounted(t)
	c.gate = make(chan struct{})
	var o sessionfiles.Once
	stop := o.Start(t.Context(), c.acquire, c.materialize)
	stop()
	if got := c.interrupted.Load(); got != 1 {
		t.Fatalf("stop returned and the started acquisition had not ended by its cancellation (%d)", got)
	}
	stop() // again: harmless
	close(c.gate)
	if sb, err := o.Acquire(t.Context(), c.acquire, c.materialize); err != nil || sb != c.sb {
		t.Errorf("Acquire after stop = %v, %v; want its own acquisition's sandbox", sb, err)
	}
}

// TestOnceAcquireWaitsOnlyAsLongAsItsContext: an Acquire waiting for the
// started acquisition gives up when its own context ends.
func TestOnceAcquireWaitsOnlyAsLongAsItsContext(t *testing.T) {
	t.Parallel()
	c := newCounted(t)
	c.gate = make(chan struct{})
	var o sessionfiles.Once
	stop := o.Start(t.Context(), c.acquire, c.materialize)
	defer stop()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := o.Acquire(ctx, c.acquire, c.materialize); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire with its context done = %v, want context.Canceled", err)
	}
	close(c.gate)
	if sb, err := o.Acquire(t.Context(), c.acquire, c.materialize); err != nil || sb != c.sb {
		t.Errorf("later Acquire = %v, %v; want the started acquisition's sandbox", sb, err)
	}
	if got := c.acquires.Load(); got != 1 {
		t.Errorf("acquire called %d times, want 1", got)
	}
}
