package app

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mangohq/mango/execution-worker/internal/config"
	"github.com/mangohq/mango/execution-worker/workflows/session"
)

// TestRunJoinsBackgroundTasks: at shutdown, run returns only once every
// background task returned, so none of them outlives the connections Run
// closes after it. Each task takes a while (a second of the bubble's fake
// clock) to return after its context ends.
func TestRunJoinsBackgroundTasks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const tasks = 5
		var started, finished atomic.Int32
		p := &process{cfg: &config.Config{ShutdownGrace: time.Second}, logger: slog.New(slog.DiscardHandler),
			turnActs: &session.TurnActivities{Calls: session.NewCalls()}}
		for range tasks {
			p.background = append(p.background, func(ctx context.Context) {
				started.Add(1)
				<-ctx.Done()
				time.Sleep(time.Second) // releasing what it holds
				finished.Add(1)
			})
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- p.run(ctx, nil) }()
		synctest.Wait()
		if n := started.Load(); n != tasks {
			t.Fatalf("%d background tasks running while serving, want all %d started together", n, tasks)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("run after the context's end = %v, want nil", err)
		}
		if n := finished.Load(); n != tasks {
			t.Fatalf("run returned with %d of %d background tasks finished, want every one joined", n, tasks)
		}
	})
}
