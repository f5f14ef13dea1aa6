package db

import (
	"context"
	"errors"
	"time"

	"github.com/mangohq/mango/db/internal/dbsqlc"
)

// Worker is an execution worker as last seen through its heartbeats.
type Worker struct {
	ID           string
	Provider     string
	TaskQueues   []string
	Capabilities []string
	Version      string
	FirstSeenAt  time.Time
	LastSeenAt   time.Time
}

func workerFromRow(r dbsqlc.Worker) *Worker {
	return &Worker{ID: r.WorkerID, Provider: r.Provider, TaskQueues: r.TaskQueues, Capabilities: r.Capabilities,
		Version: r.Version, FirstSeenAt: r.FirstSeenAt, LastSeenAt: r.LastSeenAt}
}

// WorkerHeartbeat records a worker's heartbeat at now: the first one sets
// FirstSeenAt, every one updates the description and LastSeenAt.
func (s *Store) WorkerHeartbeat(ctx context.Context, w *Worker, now time.Time) (*Worker, error) {
	queues, caps := w.TaskQueues, w.Capabilities
	if queues == nil {
		queues = []string{}
	}
	if caps == nil {
		caps = []string{}
	}
	row, err := s.q.WorkerUpsert(ctx, dbsqlc.WorkerUpsertParams{WorkerID: w.ID, Provider: w.Provider, TaskQueues: queues,
		Capabilities: caps, Version: w.Version, Now: now})
	if err != nil {
		return nil, mapErr("record worker heartbeat", err)
	}
	return workerFromRow(row), nil
}

// WorkerList returns every worker that ever sent a heartbeat, by provider
// and id.
func (s *Store) WorkerList(ctx context.Context) ([]Worker, error) {
	rows, err := s.q.WorkerList(ctx)
	if err != nil {
		return nil, mapErr("list workers", err)
	}
	out := make([]Worker, 0, len(rows))
	for _, r := range rows {
		out = append(out, *workerFromRow(r))
	}
	return out, nil
}

// WorkerQueueLastSeen returns the latest heartbeat of any worker that
// polls queue, and false when no worker ever reported it.
func (s *Store) WorkerQueueLastSeen(ctx context.Context, queue string) (time.Time, bool, error) {
	at, err := s.q.WorkerQueueLastSeen(ctx, queue)
	if err = mapErr("worker queue last seen", err); errors.Is(err, ErrNotFound) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, err
	}
	return at, true, nil
}

// WorkerGet returns a worker, or ErrNotFound.
func (s *Store) WorkerGet(ctx context.Context, id string) (*Worker, error) {
	row, err := s.q.WorkerGet(ctx, id)
	if err != nil {
		return nil, mapErr("get worker", err)
	}
	return workerFromRow(row), nil
}

// ProviderHasCapability reports whether a worker of provider that sent a
// heartbeat since `since` reports the capability.
func (s *Store) ProviderHasCapability(ctx context.Context, provider, capability string, since time.Time) (bool, error) {
	ok, err := s.q.ProviderHasCapability(ctx, dbsqlc.ProviderHasCapabilityParams{Provider: provider, Capability: capability, Since: since})
	if err != nil {
		return false, mapErr("look up provider capabilities", err)
	}
	return ok, nil
}
