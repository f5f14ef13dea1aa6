package poll_test

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mangohq/mango/internal/poll"
)

// fakeTB records a Fatalf and stops the goroutine that called it, as
// testing.T does.
type fakeTB struct {
	testing.TB
	mu     sync.Mutex
	failed string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.failed = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

// run calls fn with a fresh fakeTB on its own goroutine (Fatalf ends that
// goroutine) and returns the failure message, empty when fn passed.
func run(fn func(tb testing.TB)) string {
	f := &fakeTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed
}

// checksInASecond is how many times Until and Never call their condition
// in a window of one second: at 0, 10, 30, 70, 150, 250, ..., 950 and
// 1000ms (the pause doubles from FirstInterval to MaxInterval, the last
// one is cut to the deadline).
const checksInASecond = 14

func TestUntil(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		okAt      int // the call that first reports ok; 0 = never
		timeout   time.Duration
		wantCalls int
		wantFail  []string // substrings of the failure; nil = must pass
	}{
		{name: "ok at once", okAt: 1, timeout: time.Second, wantCalls: 1},
		{name: "ok after polls", okAt: 5, timeout: time.Second, wantCalls: 5},
		{name: "zero timeout still checks once", okAt: 1, timeout: 0, wantCalls: 1},
		{
			name: "timeout", okAt: 0, timeout: time.Second,
			wantCalls: checksInASecond,
			wantFail:  []string{"timed out after 1s", "waiting for the widget to be ready", "last seen: call " + fmt.Sprint(checksInASecond)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				calls := 0
				start := time.Now()
				msg := run(func(tb testing.TB) {
					poll.Until(tb, tt.timeout, "the widget to be ready", func() (bool, string) {
						calls++
						return calls == tt.okAt, fmt.Sprintf("call %d", calls)
					})
				})
				if calls != tt.wantCalls {
					t.Errorf("cond called %d times, want %d", calls, tt.wantCalls)
				}
				if tt.wantFail == nil {
					if msg != "" {
						t.Errorf("Until failed with %q, want it to pass", msg)
					}
					return
				}
				for _, want := range tt.wantFail {
					if !strings.Contains(msg, want) {
						t.Errorf("failure message %q does not contain %q", msg, want)
					}
				}
				if elapsed := time.Since(start); elapsed < tt.timeout {
					t.Errorf("Until gave up after %v, want at least the timeout %v", elapsed, tt.timeout)
				}
			})
		})
	}
}

func TestNever(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		happensAt  int // the call that first reports the event; 0 = never
		wantCalls  int
		wantFail   []string
		wantWindow bool // the whole window must have passed
	}{
		{name: "never happens", happensAt: 0, wantCalls: checksInASecond, wantWindow: true},
		{name: "happens at once", happensAt: 1, wantCalls: 1, wantFail: []string{"expected no second delivery within 1s", "it happened: call 1"}},
		{name: "happens later", happensAt: 7, wantCalls: 7, wantFail: []string{"it happened: call 7"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				calls := 0
				start := time.Now()
				msg := run(func(tb testing.TB) {
					poll.Never(tb, time.Second, "second delivery", func() (bool, string) {
						calls++
						return calls == tt.happensAt, fmt.Sprintf("call %d", calls)
					})
				})
				if calls != tt.wantCalls {
					t.Errorf("check called %d times, want %d", calls, tt.wantCalls)
				}
				if tt.wantFail == nil && msg != "" {
					t.Errorf("Never failed with %q, want it to pass", msg)
				}
				for _, want := range tt.wantFail {
					if !strings.Contains(msg, want) {
						t.Errorf("failure message %q does not contain %q", msg, want)
					}
				}
				if elapsed := time.Since(start); tt.wantWindow && elapsed < time.Second {
					t.Errorf("Never returned after %v, want the whole window of 1s", elapsed)
				}
			})
		})
	}
}
