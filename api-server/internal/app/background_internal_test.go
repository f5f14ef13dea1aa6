package app

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestBackgroundJoin: the background tasks start together; stopping the
// hubs (at the start of a shutdown) ends the hubs' tasks and closes the
// hubs but leaves the relay running; join stops the rest and returns only
// once every task returned, so none outlives the connections Serve closes
// after it. Each task takes a second of the bubble's clock to return.
func TestBackgroundJoin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var started, hubsDone, relayDone, closed atomic.Int32
		hub := func(ctx context.Context) {
			started.Add(1)
			<-ctx.Done()
			time.Sleep(time.Second)
			hubsDone.Add(1)
		}
		relay := func(ctx context.Context) {
			started.Add(1)
			<-ctx.Done()
			time.Sleep(time.Second)
			relayDone.Add(1)
		}
		b := startBackground([]func(context.Context){hub, hub, hub}, func() { closed.Add(1) }, relay)
		synctest.Wait()
		if n := started.Load(); n != 4 {
			t.Fatalf("%d background tasks running, want all 4 started together", n)
		}
		b.stopHubs()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if h, r, c := hubsDone.Load(), relayDone.Load(), closed.Load(); h != 3 || r != 0 || c != 1 {
			t.Fatalf("after stopping the hubs: %d hub tasks ended, relay ended %d, hubs closed %d times; want 3, 0, 1", h, r, c)
		}
		b.join()
		if r, c := relayDone.Load(), closed.Load(); r != 1 || c != 1 {
			t.Fatalf("join returned with the relay ended %d times and the hubs closed %d times, want 1 and 1", r, c)
		}
	})
}
