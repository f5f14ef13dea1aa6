package db

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mangohq/mango/db/internal/dbsqlc"
)

// SandboxBinding is a session's sandbox ownership record: a provisioning
// intent while ExternalID is empty, a binding once it is set.
type SandboxBinding struct {
	SessionID  string
	Provider   string
	ExternalID string
	SpecHash   string
	TaskQueue  string
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// Intent reports whether b is a provisioning intent rather than a binding.
func (b *SandboxBinding) Intent() bool { return b.ExternalID == "" }

func bindingFromRow(r dbsqlc.SandboxBinding) *SandboxBinding {
	b := &SandboxBinding{SessionID: r.SessionID, Provider: r.Provider, SpecHash: r.SpecHash, TaskQueue: r.TaskQueue,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
	if r.ExternalID != nil {
		b.ExternalID = *r.ExternalID
	}
	return b
}

// SandboxIntentPut records a provisioning intent for a session before its
// sandbox is created. An existing intent is replaced; an existing binding
// is returned unchanged. The session row is share-locked so that a
// concurrent deletion either sees the intent or fences it out:
// ErrDeleting when the session is being deleted, ErrNotFound when it does
// not exist.
func (s *Store) SandboxIntentPut(ctx context.Context, b *SandboxBinding, now time.Time) (*SandboxBinding, error) {
	var out *SandboxBinding
	err := s.inTx(ctx, "put provisioning intent", func(q *dbsqlc.Queries) error {
		sess, err := q.SessionLockShare(ctx, b.SessionID)
		if err != nil {
			return err
		}
		if sess.DeletingAt != nil {
			return fmt.Errorf("session %s: %w", b.SessionID, ErrDeleting)
		}
		rows, err := q.SandboxIntentUpsert(ctx, dbsqlc.SandboxIntentUpsertParams{SessionID: b.SessionID, Provider: b.Provider,
			SpecHash: b.SpecHash, TaskQueue: b.TaskQueue, Now: now})
		if err != nil {
			return err
		}
		if len(rows) == 1 {
			out = bindingFromRow(rows[0])
			return nil
		}
		// A binding exists: the upsert's WHERE left it alone.
		row, err := q.SandboxBindingGet(ctx, b.SessionID)
		if err != nil {
			return err
		}
		out = bindingFromRow(row)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// SandboxBindingPut atomically replaces a session's provisioning intent (if
// any) with a binding. Putting the binding already stored updates its spec
// hash and task queue; ErrConflict when a different external id is bound.
// It does not require the session row: a binding must be recordable while
// the session is being deleted, so that teardown finds the resource.
func (s *Store) SandboxBindingPut(ctx context.Context, b *SandboxBinding, now time.Time) (*SandboxBinding, error) {
	if b.ExternalID == "" {
		return nil, errors.New("put sandbox binding: external id is empty")
	}
	ext := b.ExternalID
	rows, err := s.q.SandboxBindingUpsert(ctx, dbsqlc.SandboxBindingUpsertParams{SessionID: b.SessionID, Provider: b.Provider,
		ExternalID: &ext, SpecHash: b.SpecHash, TaskQueue: b.TaskQueue, Now: now})
	if err != nil {
		return nil, mapErr("put sandbox binding", err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("put sandbox binding of session %s: %w: a different sandbox is bound", b.SessionID, ErrConflict)
	}
	return bindingFromRow(rows[0]), nil
}

// SandboxBindingGet returns a session's binding or intent, or ErrNotFound.
func (s *Store) SandboxBindingGet(ctx context.Context, sessionID string) (*SandboxBinding, error) {
	row, err := s.q.SandboxBindingGet(ctx, sessionID)
	if err != nil {
		return nil, mapErr("get sandbox binding", err)
	}
	return bindingFromRow(row), nil
}

// SandboxBindingDelete removes a session's binding or intent and reports
// whether one existed.
func (s *Store) SandboxBindingDelete(ctx context.Context, sessionID string) (bool, error) {
	n, err := s.q.SandboxBindingDelete(ctx, sessionID)
	if err != nil {
		return false, mapErr("delete sandbox binding", err)
	}
	return n > 0, nil
}

// SandboxBindingListParams filter and page the sandbox records.
type SandboxBindingListParams struct {
	// Provider keeps only that provider's records when not empty.
	Provider string
	// OnlyIntents keeps only provisioning intents.
	OnlyIntents bool
	// AfterSessionID starts after this session id.
	AfterSessionID string
	// Limit is the page size.
	Limit int
}

// SandboxBindingList returns sandbox records ordered by session id.
func (s *Store) SandboxBindingList(ctx context.Context, p SandboxBindingListParams) ([]SandboxBinding, error) {
	rows, err := s.q.SandboxBindingList(ctx, dbsqlc.SandboxBindingListParams{Provider: p.Provider, OnlyIntents: p.OnlyIntents,
		AfterSessionID: p.AfterSessionID, RowLimit: int32(p.Limit)})
	if err != nil {
		return nil, mapErr("list sandbox bindings", err)
	}
	out := make([]SandboxBinding, 0, len(rows))
	for _, r := range rows {
		out = append(out, *bindingFromRow(r))
	}
	return out, nil
}
