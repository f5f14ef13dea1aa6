package db_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/db/dbtest"
)

// newDream stores a pending dream and the session that runs it.
func newDream(t *testing.T, store *db.Store, id, sessionID string, now time.Time) {
	t.Helper()
	ctx := context.Background()
	sid, out := sessionID, "memstore_out"
	if err := store.DreamCreate(ctx, &db.Dream{ID: id, InputStoreID: "memstore_in", InputSessionIDs: []string{"sesn_in"},
		Model: json.RawMessage(`{"id":"fake","speed":"standard"}`), OutputBehavior: json.RawMessage(`{"type":"create_new"}`),
		OutputStoreID: &out, SessionID: &sid, CreatedAt: now}); err != nil {
		t.Fatalf("create dream %s: %v", id, err)
	}
	if _, _, err := store.SessionCreate(ctx, db.SessionCreateParams{ID: sessionID, AgentID: "agent_1", AgentVersion: 1,
		Agent: json.RawMessage(`{"name":"a"}`), Provider: "local", Metadata: map[string]string{}, Now: now, DreamID: &id}, nil); err != nil {
		t.Fatalf("create session %s: %v", sessionID, err)
	}
}

func dreamStatus(t *testing.T, store *db.Store, id string) *db.Dream {
	t.Helper()
	d, err := store.DreamGet(context.Background(), id)
	if err != nil {
		t.Fatalf("get dream %s: %v", id, err)
	}
	return d
}

func idle(t *testing.T, store *db.Store, id, reason string, at time.Time) {
	t.Helper()
	_, _, err := store.Append(context.Background(), id, &db.AppendRequest{Now: at,
		Decide: func(*db.Session) (*db.Change, error) {
			return &db.Change{To: db.StatusIdle, StopReason: json.RawMessage(`{"type":"` + reason + `"}`), EventID: "sevt_idle" + at.Format("150405.000000")}, nil
		}})
	if err != nil {
		t.Fatalf("idle %s: %v", id, err)
	}
}

// TestDreamFollowsSession: the session's status changes move its dream:
// running, then completed on end_turn, failed on another stop reason or
// termination; a canceled dream stays canceled.
func TestDreamFollowsSession(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	t0 := time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)
	newDream(t, store, "drm_ok", "sesn_drm_ok", t0)
	if d := dreamStatus(t, store, "drm_ok"); d.Status != db.DreamPending || d.SessionID == nil || *d.SessionID != "sesn_drm_ok" {
		t.Fatalf("new dream = %+v; want pending with its session", d)
	}
	setStatus(t, store, "sesn_drm_ok", db.StatusRunning, t0.Add(time.Second), nil)
	if d := dreamStatus(t, store, "drm_ok"); d.Status != db.DreamRunning {
		t.Fatalf("dream after its session runs = %s; want running", d.Status)
	}
	idle(t, store, "sesn_drm_ok", "end_turn", t0.Add(2*time.Second))
	if d := dreamStatus(t, store, "drm_ok"); d.Status != db.DreamCompleted || d.EndedAt == nil || d.Error != nil {
		t.Fatalf("dream after end_turn = %+v; want completed, ended, no error", d)
	}
	if _, err := store.DreamCancel(ctx, "drm_ok", t0.Add(3*time.Second)); !errors.Is(err, db.ErrDreamEnded) {
		t.Fatalf("cancel a completed dream: err = %v; want ErrDreamEnded", err)
	}

	t0 = t0.Add(time.Minute) // event ids are minted from the time
	newDream(t, store, "drm_budget", "sesn_drm_budget", t0)
	setStatus(t, store, "sesn_drm_budget", db.StatusRunning, t0.Add(time.Second), nil)
	idle(t, store, "sesn_drm_budget", "budget_reached", t0.Add(2*time.Second))
	if d := dreamStatus(t, store, "drm_budget"); d.Status != db.DreamFailed || !json.Valid(d.Error) || len(d.Error) == 0 {
		t.Fatalf("dream after budget_reached = %+v; want failed with an error", d)
	}

	t0 = t0.Add(time.Minute)
	newDream(t, store, "drm_term", "sesn_drm_term", t0)
	setStatus(t, store, "sesn_drm_term", db.StatusRunning, t0.Add(time.Second), nil)
	setStatus(t, store, "sesn_drm_term", db.StatusTerminated, t0.Add(2*time.Second), nil)
	if d := dreamStatus(t, store, "drm_term"); d.Status != db.DreamFailed {
		t.Fatalf("dream after its session terminated = %s; want failed", d.Status)
	}

	t0 = t0.Add(time.Minute)
	newDream(t, store, "drm_cancel", "sesn_drm_cancel", t0)
	setStatus(t, store, "sesn_drm_cancel", db.StatusRunning, t0.Add(time.Second), nil)
	if _, err := store.DreamArchive(ctx, "drm_cancel", t0); !errors.Is(err, db.ErrDreamEnded) {
		t.Fatalf("archive a running dream: err = %v; want ErrDreamEnded", err)
	}
	d, err := store.DreamCancel(ctx, "drm_cancel", t0.Add(2*time.Second))
	if err != nil || d.Status != db.DreamCanceled || d.EndedAt == nil {
		t.Fatalf("cancel = %+v, %v; want canceled", d, err)
	}
	idle(t, store, "sesn_drm_cancel", "end_turn", t0.Add(3*time.Second))
	if d := dreamStatus(t, store, "drm_cancel"); d.Status != db.DreamCanceled {
		t.Fatalf("canceled dream after its session idled = %s; want still canceled", d.Status)
	}
}

// TestDreamListArchive: archive hides a dream from the default list;
// include_archived and statuses filter.
func TestDreamListArchive(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	t0 := time.Date(2026, 4, 2, 0, 0, 0, 0, time.UTC)
	newDream(t, store, "drm_l1", "sesn_drm_l1", t0)
	newDream(t, store, "drm_l2", "sesn_drm_l2", t0.Add(time.Second))
	if _, err := store.DreamCancel(ctx, "drm_l1", t0); err != nil {
		t.Fatal(err)
	}
	a, err := store.DreamArchive(ctx, "drm_l1", t0.Add(time.Minute))
	if err != nil || a.ArchivedAt == nil {
		t.Fatalf("archive = %+v, %v; want archived", a, err)
	}
	again, err := store.DreamArchive(ctx, "drm_l1", t0.Add(2*time.Minute))
	if err != nil || !again.ArchivedAt.Equal(*a.ArchivedAt) {
		t.Fatalf("archive again = %+v, %v; want it unchanged", again, err)
	}
	ids := func(p db.DreamListParams) []string {
		p.Limit = 10
		p.CreatedGT = ptr(t0.Add(-time.Nanosecond))
		list, _, err := store.DreamList(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, d := range list {
			if d.ID == "drm_l1" || d.ID == "drm_l2" {
				out = append(out, d.ID)
			}
		}
		return out
	}
	if got := ids(db.DreamListParams{}); len(got) != 1 || got[0] != "drm_l2" {
		t.Errorf("default list = %v; want [drm_l2]", got)
	}
	if got := ids(db.DreamListParams{IncludeArchived: true}); len(got) != 2 || got[0] != "drm_l2" {
		t.Errorf("list with archived = %v; want [drm_l2 drm_l1] (newest first)", got)
	}
	if got := ids(db.DreamListParams{IncludeArchived: true, Statuses: []string{db.DreamCanceled}}); len(got) != 1 || got[0] != "drm_l1" {
		t.Errorf("list of canceled = %v; want [drm_l1]", got)
	}
	if _, err := store.DreamGet(ctx, "drm_none"); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("get unknown dream: err = %v; want ErrNotFound", err)
	}
}

func ptr[T any](v T) *T { return &v }
