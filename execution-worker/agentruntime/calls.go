package agentruntime

import (
	"context"
	"errors"
	"sync"

	"github.com/mangohq/mango/execution-worker/tools"
)

// Calls are the tool calls running in this process, by tool use event id.
//
// A turn's attempt can be given up by Temporal while it runs a tool: its
// heartbeat timed out while Temporal, or the way to it, was down, and the
// next attempt is scheduled, usually on this same worker (the locality
// queue leads it here). Cancelling the call with the abandoned attempt
// would leave the next attempt only a "started" mark, and it would have
// to report the call as ambiguous although nothing died. Instead the call
// outlives the attempt that started it: it runs to its end and journals
// its result, and the next attempt takes it over (or finds the result).
// An interrupt, a deletion or a worker shutting down still cancels it.
//
// The zero value is ready to use; a nil *Calls runs every call within its
// attempt, as if nothing ever took one over.
type Calls struct {
	// Abandoned reports whether ctx, done, belongs to an attempt that was
	// given up (the call goes on for the next attempt) rather than asked
	// to stop (the call is cancelled). nil: always asked to stop.
	Abandoned func(ctx context.Context) bool

	mu      sync.Mutex
	running map[string]*call
}

// call is one tool call run for an attempt, possibly taken over by
// later ones.
type call struct {
	cancel context.CancelCauseFunc
	done   chan struct{}
	result tools.Result // the journaled result, once done
	err    error
}

// run runs fn, the call journaled under id, and returns its result. fn
// runs under a context of its own that keeps ctx's values: it is
// cancelled only when the attempt waiting for it stops, not when it is
// abandoned.
func (cs *Calls) run(ctx context.Context, id string, fn func(context.Context) (tools.Result, error)) (tools.Result, error) {
	if cs == nil {
		return fn(ctx)
	}
	callCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	c := &call{cancel: cancel, done: make(chan struct{})}
	cs.mu.Lock()
	if cs.running == nil {
		cs.running = map[string]*call{}
	}
	cs.running[id] = c
	cs.mu.Unlock()
	go func() {
		defer close(c.done)
		defer cancel(nil)
		c.result, c.err = fn(callCtx)
		// Forgotten only once fn journaled the result: an attempt that
		// finds no running call finds the result instead.
		cs.mu.Lock()
		delete(cs.running, id)
		cs.mu.Unlock()
	}()
	return cs.wait(ctx, c)
}

// takeOver waits for the call journaled under id if this process runs it;
// running is false when it does not.
func (cs *Calls) takeOver(ctx context.Context, id string) (r tools.Result, running bool, err error) {
	if cs == nil {
		return r, false, nil
	}
	cs.mu.Lock()
	c := cs.running[id]
	cs.mu.Unlock()
	if c == nil {
		return r, false, nil
	}
	r, err = cs.wait(ctx, c)
	return r, true, err
}

// wait returns c's result, or ctx's cause when ctx ends first: the call
// goes on if the attempt was abandoned, and is cancelled (and its result
// returned) otherwise.
func (cs *Calls) wait(ctx context.Context, c *call) (tools.Result, error) {
	select {
	case <-c.done:
		return c.result, c.err
	case <-ctx.Done():
	}
	if cs.Abandoned != nil && cs.Abandoned(ctx) {
		return tools.Result{}, context.Cause(ctx)
	}
	c.cancel(context.Cause(ctx))
	<-c.done
	return c.result, c.err
}

// Stop cancels the calls still running, those abandoned attempts left
// behind included, and waits for them to end or for ctx. A worker stops
// them once its Temporal workers stopped: no attempt of it remains to
// take one over.
func (cs *Calls) Stop(ctx context.Context) {
	if cs == nil {
		return
	}
	cs.mu.Lock()
	running := make([]*call, 0, len(cs.running))
	for _, c := range cs.running {
		running = append(running, c)
	}
	cs.mu.Unlock()
	for _, c := range running {
		c.cancel(errWorkerStopped)
	}
	for _, c := range running {
		select {
		case <-c.done:
		case <-ctx.Done():
			return
		}
	}
}

var errWorkerStopped = errors.New("the worker stopped")
