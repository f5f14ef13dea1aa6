package db_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/db/dbtest"
)

// selfHostedEnv creates an environment of config type typ ("self_hosted"
// or "cloud").
func selfHostedEnv(t *testing.T, store *db.Store, id, typ string) {
	t.Helper()
	now := time.Now().UTC()
	env := &db.Environment{ID: id, Name: id, Config: json.RawMessage(`{"type":"` + typ + `"}`), Scope: "organization",
		CreatedAt: now, UpdatedAt: now}
	if _, err := store.EnvironmentCreate(context.Background(), env); err != nil {
		t.Fatalf("create environment %s: %v", id, err)
	}
}

// envSession creates a session of the environment.
func envSession(t *testing.T, store *db.Store, id, envID string, selfHosted bool) {
	t.Helper()
	if _, _, err := store.SessionCreate(context.Background(), db.SessionCreateParams{ID: id, AgentID: "agent_1", AgentVersion: 1,
		Agent: json.RawMessage(`{"name":"a"}`), EnvironmentID: &envID, Provider: "local", Now: time.Now().UTC(), SelfHosted: selfHosted}, nil); err != nil {
		t.Fatalf("create session %s: %v", id, err)
	}
}

func hash(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

func TestEnvironmentKeys(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	selfHostedEnv(t, store, "env_k", "self_hosted")
	now := time.Now().UTC().Truncate(time.Microsecond)
	if _, err := store.EnvironmentKeyCreate(ctx, "envkey_x", "env_missing", "x", hash("x"), nil, now); !errors.Is(err, db.ErrNotFound) {
		t.Fatalf("create a key of a missing environment = %v; want ErrNotFound", err)
	}
	k, err := store.EnvironmentKeyCreate(ctx, "envkey_a", "env_k", "a", hash("a"), nil, now)
	if err != nil || k.ID != "envkey_a" || k.EnvironmentID != "env_k" || k.Name != "a" || !k.CreatedAt.Equal(now) || k.LastUsedAt != nil {
		t.Fatalf("create key = %+v, %v", k, err)
	}
	if _, err := store.EnvironmentKeyCreate(ctx, "envkey_dup", "env_k", "dup", hash("a"), nil, now); !errors.Is(err, db.ErrConflict) {
		t.Fatalf("create a key with a taken hash = %v; want ErrConflict", err)
	}
	expires := now.Add(time.Hour)
	if _, err := store.EnvironmentKeyCreate(ctx, "envkey_b", "env_k", "b", hash("b"), &expires, now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	keys, err := store.EnvironmentKeyList(ctx, "env_k")
	if err != nil || len(keys) != 2 || keys[0].ID != "envkey_b" || keys[1].ID != "envkey_a" || keys[0].ExpiresAt == nil || !keys[0].ExpiresAt.Equal(expires) {
		t.Fatalf("list keys = %+v, %v; want envkey_b (expiring) then envkey_a", keys, err)
	}

	// A use is recorded, at most once a minute.
	for _, c := range []struct {
		at       time.Time
		wantUsed time.Time
	}{{now, now}, {now.Add(30 * time.Second), now}, {now.Add(61 * time.Second), now.Add(61 * time.Second)}} {
		got, err := store.EnvironmentKeyByHash(ctx, hash("a"), c.at)
		if err != nil || got.ID != "envkey_a" || got.LastUsedAt == nil || !got.LastUsedAt.Equal(c.wantUsed) {
			t.Fatalf("key by hash at %v = %+v, %v; want envkey_a last used at %v", c.at, got, err, c.wantUsed)
		}
		if keys, _ := store.EnvironmentKeyList(ctx, "env_k"); keys[1].LastUsedAt == nil || !keys[1].LastUsedAt.Equal(c.wantUsed) {
			t.Fatalf("stored last use after a use at %v = %v; want %v", c.at, keys[1].LastUsedAt, c.wantUsed)
		}
	}

	if _, err := store.EnvironmentKeyByHash(ctx, hash("b"), now.Add(30*time.Minute)); err != nil {
		t.Errorf("an unexpired key = %v; want found", err)
	}
	if _, err := store.EnvironmentKeyByHash(ctx, hash("b"), expires); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("an expired key = %v; want ErrNotFound", err)
	}
	if _, err := store.EnvironmentKeyByHash(ctx, hash("nope"), now); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("an unknown key = %v; want ErrNotFound", err)
	}

	revoked, err := store.EnvironmentKeyRevoke(ctx, "envkey_a", now.Add(time.Minute))
	if err != nil || revoked.RevokedAt == nil || !revoked.RevokedAt.Equal(now.Add(time.Minute)) {
		t.Fatalf("revoke = %+v, %v", revoked, err)
	}
	if again, err := store.EnvironmentKeyRevoke(ctx, "envkey_a", now.Add(time.Hour)); err != nil || !again.RevokedAt.Equal(*revoked.RevokedAt) {
		t.Errorf("revoke again = %+v, %v; want the first revocation time kept", again, err)
	}
	if _, err := store.EnvironmentKeyByHash(ctx, hash("a"), now.Add(2*time.Minute)); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("a revoked key = %v; want ErrNotFound", err)
	}
	if _, err := store.EnvironmentKeyRevoke(ctx, "envkey_missing", now); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("revoke a missing key = %v; want ErrNotFound", err)
	}
	if err := store.EnvironmentDelete(ctx, "env_k"); err != nil {
		t.Fatal(err)
	}
	if keys, err := store.EnvironmentKeyList(ctx, "env_k"); err != nil || len(keys) != 0 {
		t.Errorf("keys of a deleted environment = %+v, %v; want none", keys, err)
	}
}

// pollOne polls env and fails the test unless it hands out want.
func pollOne(t *testing.T, store *db.Store, env, secret, want string, now time.Time) *db.WorkItem {
	t.Helper()
	w, err := store.WorkPoll(context.Background(), env, "worker-1", 5*time.Second, hash(secret), now)
	if err != nil || w == nil || w.ID != want {
		t.Fatalf("poll %s = %+v, %v; want %s", env, w, err, want)
	}
	return w
}

func TestWorkLifecycle(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	selfHostedEnv(t, store, "env_w", "self_hosted")
	selfHostedEnv(t, store, "env_other", "self_hosted")
	now := time.Now().UTC()
	if _, err := store.WorkEnqueueHealthcheck(ctx, "work_x", "env_missing", now); !errors.Is(err, db.ErrNotFound) {
		t.Fatalf("enqueue in a missing environment = %v; want ErrNotFound", err)
	}
	w, err := store.WorkEnqueueHealthcheck(ctx, "work_1", "env_w", now)
	if err != nil || w.State != db.WorkQueued || w.Type != db.WorkTypeHealthcheck || w.SessionID != "" || w.LastHeartbeat() != "" {
		t.Fatalf("enqueue = %+v, %v", w, err)
	}
	if _, err := store.WorkHeartbeat(ctx, "env_w", "work_1", db.NoHeartbeat, time.Minute, now); !errors.Is(err, db.ErrLeaseMismatch) {
		t.Fatalf("heartbeat of a queued item = %v; want ErrLeaseMismatch", err)
	}
	pollOne(t, store, "env_w", "s1", "work_1", now)
	if got, err := store.WorkBySecretHash(ctx, hash("s1")); err != nil || got.ID != "work_1" {
		t.Fatalf("work by its secret = %+v, %v", got, err)
	}
	if _, err := store.WorkAck(ctx, "env_other", "work_1", time.Minute, now); !errors.Is(err, db.ErrNotFound) {
		t.Fatalf("ack through another environment = %v; want ErrNotFound", err)
	}
	w, err = store.WorkAck(ctx, "env_w", "work_1", 5*time.Minute, now)
	if err != nil || w.State != db.WorkStarting || w.AcknowledgedAt == nil || w.TTLSeconds != 300 || w.LeaseExpiresAt == nil ||
		!w.LeaseExpiresAt.Equal(w.AcknowledgedAt.Add(5*time.Minute)) {
		t.Fatalf("ack = %+v, %v; want starting with a 300s lease", w, err)
	}
	if _, err := store.WorkAck(ctx, "env_w", "work_1", time.Minute, now); !errors.Is(err, db.ErrConflict) {
		t.Fatalf("ack twice = %v; want ErrConflict", err)
	}

	// The first heartbeat expects none and makes the item active; each
	// later one must name the last exactly.
	hb, err := store.WorkHeartbeat(ctx, "env_w", "work_1", db.NoHeartbeat, 30*time.Second, now.Add(time.Second))
	if err != nil || !hb.LeaseExtended || hb.State != db.WorkActive || hb.TTLSeconds != 30 || hb.LastHeartbeat == "" {
		t.Fatalf("first heartbeat = %+v, %v; want active, extended, 30s", hb, err)
	}
	if got, _ := store.WorkGet(ctx, "env_w", "work_1"); got.LastHeartbeat() != hb.LastHeartbeat || got.StartedAt == nil {
		t.Fatalf("stored last heartbeat %q, started %v; want %q as the heartbeat answered", got.LastHeartbeat(), got.StartedAt, hb.LastHeartbeat)
	}
	for _, stale := range []string{db.NoHeartbeat, "", now.UTC().Format(time.RFC3339Nano)} {
		_, err := store.WorkHeartbeat(ctx, "env_w", "work_1", stale, time.Minute, now.Add(2*time.Second))
		var mismatch *db.LeaseMismatchError
		if !errors.As(err, &mismatch) || mismatch.Current != (db.HeartbeatResult{LastHeartbeat: hb.LastHeartbeat, State: db.WorkActive, TTLSeconds: 30}) {
			t.Fatalf("heartbeat expecting %q = %v; want a LeaseMismatchError with the current lease", stale, err)
		}
	}
	hb2, err := store.WorkHeartbeat(ctx, "env_w", "work_1", hb.LastHeartbeat, time.Minute, now.Add(3*time.Second))
	if err != nil || !hb2.LeaseExtended || hb2.LastHeartbeat == hb.LastHeartbeat || hb2.TTLSeconds != 60 {
		t.Fatalf("second heartbeat = %+v, %v", hb2, err)
	}

	// A graceful stop leaves the lease to its worker: heartbeats are
	// answered, not extended, whatever they expect; a forced stop ends it.
	if w, err = store.WorkStop(ctx, "env_w", "work_1", false, now.Add(4*time.Second)); err != nil || w.State != db.WorkStopping || w.StopRequestedAt == nil {
		t.Fatalf("stop = %+v, %v; want stopping", w, err)
	}
	for _, exp := range []string{hb2.LastHeartbeat, "anything"} {
		got, err := store.WorkHeartbeat(ctx, "env_w", "work_1", exp, time.Minute, now.Add(5*time.Second))
		if err != nil || got.LeaseExtended || got.State != db.WorkStopping || got.LastHeartbeat != hb2.LastHeartbeat {
			t.Fatalf("heartbeat of a stopping item = %+v, %v; want not extended, stopping", got, err)
		}
	}
	if w, err = store.WorkStop(ctx, "env_w", "work_1", true, now.Add(6*time.Second)); err != nil || w.State != db.WorkStopped || w.StoppedAt == nil {
		t.Fatalf("force stop = %+v, %v; want stopped", w, err)
	}
	if _, err := store.WorkStop(ctx, "env_w", "work_1", true, now.Add(7*time.Second)); !errors.Is(err, db.ErrConflict) {
		t.Fatalf("stop a stopped item = %v; want ErrConflict", err)
	}
	if _, err := store.WorkBySecretHash(ctx, hash("s1")); !errors.Is(err, db.ErrNotFound) {
		t.Fatalf("work by the secret of a stopped item = %v; want ErrNotFound", err)
	}
	if _, err := store.WorkGet(ctx, "env_w", "work_missing"); !errors.Is(err, db.ErrNotFound) {
		t.Fatalf("get a missing item = %v; want ErrNotFound", err)
	}
}

// TestWorkStop: what a stop does from each state.
func TestWorkStop(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	selfHostedEnv(t, store, "env_s", "self_hosted")
	now := time.Now().UTC()
	// reach brings a new item to state.
	reach := func(id, state string) {
		t.Helper()
		if _, err := store.WorkEnqueueHealthcheck(ctx, id, "env_s", now); err != nil {
			t.Fatal(err)
		}
		steps := map[string][]func() error{
			db.WorkStarting: {func() error { _, err := store.WorkAck(ctx, "env_s", id, time.Hour, now); return err }},
		}
		steps[db.WorkActive] = append(steps[db.WorkStarting], func() error {
			_, err := store.WorkHeartbeat(ctx, "env_s", id, db.NoHeartbeat, time.Hour, now)
			return err
		})
		steps[db.WorkStopping] = append(steps[db.WorkActive], func() error { _, err := store.WorkStop(ctx, "env_s", id, false, now); return err })
		steps[db.WorkStopped] = []func() error{func() error { _, err := store.WorkStop(ctx, "env_s", id, true, now); return err }}
		for _, step := range steps[state] {
			if err := step(); err != nil {
				t.Fatalf("bring %s to %s: %v", id, state, err)
			}
		}
	}
	for i, c := range []struct {
		from  string
		force bool
		want  string // "" : ErrConflict
	}{
		{db.WorkQueued, false, db.WorkStopped},
		{db.WorkQueued, true, db.WorkStopped},
		{db.WorkStarting, false, db.WorkStopping},
		{db.WorkStarting, true, db.WorkStopped},
		{db.WorkActive, false, db.WorkStopping},
		{db.WorkActive, true, db.WorkStopped},
		{db.WorkStopping, false, db.WorkStopping},
		{db.WorkStopping, true, db.WorkStopped},
		{db.WorkStopped, false, ""},
		{db.WorkStopped, true, ""},
	} {
		id := fmt.Sprintf("work_%d", i)
		reach(id, c.from)
		w, err := store.WorkStop(ctx, "env_s", id, c.force, now.Add(time.Second))
		if c.want == "" {
			if !errors.Is(err, db.ErrConflict) {
				t.Errorf("stop(force=%v) from %s = %+v, %v; want ErrConflict", c.force, c.from, w, err)
			}
			continue
		}
		if err != nil || w.State != c.want || w.StopRequestedAt == nil || (w.StoppedAt != nil) != (c.want == db.WorkStopped) {
			t.Errorf("stop(force=%v) from %s = %+v, %v; want %s", c.force, c.from, w, err, c.want)
		}
	}
}

func TestWorkLeaseExpiry(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	selfHostedEnv(t, store, "env_e", "self_hosted")
	now := time.Now().UTC()
	for _, id := range []string{"work_a", "work_b"} {
		if _, err := store.WorkEnqueueHealthcheck(ctx, id, "env_e", now); err != nil {
			t.Fatal(err)
		}
	}
	pollOne(t, store, "env_e", "a1", "work_a", now)
	pollOne(t, store, "env_e", "b1", "work_b", now)
	if _, err := store.WorkAck(ctx, "env_e", "work_a", 10*time.Second, now); err != nil {
		t.Fatal(err)
	}
	if _, err := store.WorkAck(ctx, "env_e", "work_b", 10*time.Second, now); err != nil {
		t.Fatal(err)
	}
	if _, err := store.WorkHeartbeat(ctx, "env_e", "work_a", db.NoHeartbeat, 10*time.Second, now); err != nil {
		t.Fatal(err)
	}
	if _, err := store.WorkStop(ctx, "env_e", "work_b", false, now); err != nil {
		t.Fatal(err)
	}
	// Before the leases end, nothing changes.
	if w, err := store.WorkPoll(ctx, "env_e", "", 5*time.Second, hash("x"), now.Add(9*time.Second)); err != nil || w != nil {
		t.Fatalf("poll before the leases end = %+v, %v; want nothing", w, err)
	}
	// Once they ended, the next read of the queue requeues the active
	// item (heartbeat and secret cleared) and stops the stopping one.
	later := now.Add(11 * time.Second)
	if _, err := store.WorkHeartbeat(ctx, "env_e", "work_a", db.NoHeartbeat, time.Minute, later); !errors.Is(err, db.ErrLeaseMismatch) {
		t.Fatalf("heartbeat after the lease ended = %v; want ErrLeaseMismatch (requeued)", err)
	}
	a, _ := store.WorkGet(ctx, "env_e", "work_a")
	b, _ := store.WorkGet(ctx, "env_e", "work_b")
	if a.State != db.WorkQueued || a.LastHeartbeatAt != nil || a.LeaseExpiresAt != nil || b.State != db.WorkStopped || b.StoppedAt == nil {
		t.Fatalf("after the leases ended: a = %+v, b = %+v; want a queued without heartbeat, b stopped", a, b)
	}
	if _, err := store.WorkBySecretHash(ctx, hash("a1")); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("the secret of a requeued item = %v; want ErrNotFound", err)
	}
	pollOne(t, store, "env_e", "a2", "work_a", later)
	if w, err := store.WorkAck(ctx, "env_e", "work_a", time.Minute, later); err != nil || w.State != db.WorkStarting {
		t.Errorf("ack a requeued item = %+v, %v; want starting", w, err)
	}
}

func TestWorkPollReclaimAndStats(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	selfHostedEnv(t, store, "env_r", "self_hosted")
	now := time.Now().UTC().Truncate(time.Microsecond)
	if w, err := store.WorkPoll(ctx, "env_r", "worker-1", 5*time.Second, hash("x"), now); err != nil || w != nil {
		t.Fatalf("poll an empty queue = %+v, %v; want nil, nil", w, err)
	}
	for i, id := range []string{"work_old", "work_new"} {
		if _, err := store.WorkEnqueueHealthcheck(ctx, id, "env_r", now.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	stats := func(at time.Time) db.WorkStats {
		t.Helper()
		s, err := store.WorkStats(ctx, "env_r", 5*time.Second, 30*time.Second, at)
		if err != nil {
			t.Fatal(err)
		}
		return *s
	}
	if s := stats(now); s.Depth != 2 || s.Pending != 0 || s.WorkersPolling != 1 || s.OldestQueuedAt == nil || !s.OldestQueuedAt.Equal(now) {
		t.Fatalf("stats = %+v; want depth 2, one worker, oldest at %v", s, now)
	}
	pollOne(t, store, "env_r", "s1", "work_old", now.Add(2*time.Second))
	pollOne(t, store, "env_r", "s2", "work_new", now.Add(3*time.Second))
	if w, err := store.WorkPoll(ctx, "env_r", "worker-2", 5*time.Second, hash("s3"), now.Add(4*time.Second)); err != nil || w != nil {
		t.Fatalf("poll within the reclaim window = %+v, %v; want nothing", w, err)
	}
	if s := stats(now.Add(4 * time.Second)); s.Depth != 0 || s.Pending != 2 || s.WorkersPolling != 2 || !s.OldestQueuedAt.Equal(now) {
		t.Fatalf("stats = %+v; want 2 pending, two workers", s)
	}
	// Past the window the oldest item is handed out again, with a new
	// secret that replaces the first.
	pollOne(t, store, "env_r", "s4", "work_old", now.Add(7*time.Second))
	if _, err := store.WorkBySecretHash(ctx, hash("s1")); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("a replaced secret = %v; want ErrNotFound", err)
	}
	if w, err := store.WorkBySecretHash(ctx, hash("s4")); err != nil || w.ID != "work_old" {
		t.Errorf("the new secret = %+v, %v; want work_old", w, err)
	}
	if s := stats(now.Add(time.Minute)); s.Depth != 2 || s.Pending != 0 || s.WorkersPolling != 0 {
		t.Fatalf("stats a minute later = %+v; want depth 2, no worker polling", s)
	}
	if _, err := store.WorkAck(ctx, "env_r", "work_old", time.Minute, now.Add(7*time.Second)); err != nil {
		t.Fatal(err)
	}
	if s := stats(now.Add(7 * time.Second)); s.Depth != 0 || s.Pending != 1 || !s.OldestQueuedAt.Equal(now.Add(time.Second)) {
		t.Fatalf("stats after an ack = %+v; want work_new pending, the oldest", s)
	}
	if s := stats(now.Add(9 * time.Second)); s.Depth != 1 || s.Pending != 0 {
		t.Fatalf("stats after work_new's window = %+v; want depth 1", s)
	}
}

// TestWorkPollConcurrent: polls racing for a queue never hand out one
// item twice, and hand out every item.
func TestWorkPollConcurrent(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	selfHostedEnv(t, store, "env_c", "self_hosted")
	now := time.Now().UTC()
	const items, pollers = 20, 8
	for i := range items {
		if _, err := store.WorkEnqueueHealthcheck(ctx, fmt.Sprintf("work_%02d", i), "env_c", now); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	errs := make(chan error, pollers)
	for p := range pollers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				w, err := store.WorkPoll(ctx, "env_c", fmt.Sprintf("worker-%d", p), time.Hour, hash(fmt.Sprintf("%d/%d", p, n)), now)
				if err != nil {
					errs <- err
					return
				}
				if w == nil {
					return
				}
				mu.Lock()
				got[w.ID]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent poll: %v", err)
	}
	if len(got) != items {
		t.Fatalf("%d items handed out; want %d", len(got), items)
	}
	for id, n := range got {
		if n != 1 {
			t.Errorf("%s handed out %d times; want once", id, n)
		}
	}
}

func TestWorkListAndMetadata(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	selfHostedEnv(t, store, "env_l", "self_hosted")
	now := time.Now().UTC()
	for i := range 3 {
		if _, err := store.WorkEnqueueHealthcheck(ctx, fmt.Sprintf("work_%d", i), "env_l", now.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	page, more, err := store.WorkList(ctx, "env_l", 2, nil)
	if err != nil || !more || len(page) != 2 || page[0].ID != "work_2" || page[1].ID != "work_1" {
		t.Fatalf("first page = %+v, %v, %v; want work_2, work_1 and more", page, more, err)
	}
	page, more, err = store.WorkList(ctx, "env_l", 2, &db.Cursor{CreatedAt: page[1].CreatedAt, ID: page[1].ID})
	if err != nil || more || len(page) != 1 || page[0].ID != "work_0" {
		t.Fatalf("second page = %+v, %v, %v; want work_0 alone", page, more, err)
	}
	v1, v2 := "1", "2"
	w, err := store.WorkUpdateMetadata(ctx, "env_l", "work_0", map[string]*string{"a": &v1, "b": &v2})
	if err != nil || len(w.Metadata) != 2 || w.Metadata["a"] != "1" {
		t.Fatalf("set metadata = %+v, %v", w, err)
	}
	w, err = store.WorkUpdateMetadata(ctx, "env_l", "work_0", map[string]*string{"a": nil, "b": &v1})
	if err != nil || len(w.Metadata) != 1 || w.Metadata["b"] != "1" {
		t.Fatalf("patch metadata = %+v, %v; want only b=1", w, err)
	}
	if got, _ := store.WorkGet(ctx, "env_l", "work_0"); len(got.Metadata) != 1 || got.Metadata["b"] != "1" {
		t.Fatalf("stored metadata = %v", got.Metadata)
	}
	if _, err := store.WorkUpdateMetadata(ctx, "env_other", "work_0", nil); !errors.Is(err, db.ErrNotFound) {
		t.Fatalf("update through another environment = %v; want ErrNotFound", err)
	}
}

// listenWork listens on WorkChannel and returns a function waiting for
// the next notification's payload.
func listenWork(t *testing.T, store *db.Store) func() (string, error) {
	t.Helper()
	ctx := context.Background()
	c, err := store.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Release)
	if _, err := c.Exec(ctx, "LISTEN "+db.WorkChannel); err != nil {
		t.Fatal(err)
	}
	return func() (string, error) {
		ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		n, err := c.Conn().WaitForNotification(ctx)
		if err != nil {
			return "", err
		}
		return n.Payload, nil
	}
}

func userMessage(id string) db.NewEvent {
	return db.NewEvent{ID: id, Type: "user.message", Body: json.RawMessage(`{"content":[]}`)}
}

func TestAppendEnsureWork(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	selfHostedEnv(t, store, "env_sh", "self_hosted")
	selfHostedEnv(t, store, "env_cloud", "cloud")
	envSession(t, store, "sesn_sh", "env_sh", true)
	envSession(t, store, "sesn_cloud", "env_cloud", false)
	next := listenWork(t, store)
	now := time.Now().UTC()
	if sess, _ := store.SessionGet(ctx, "sesn_sh"); !sess.SelfHosted {
		t.Fatal("a self-hosted session reads back not self-hosted")
	}

	admit := func(session, work, event string) {
		t.Helper()
		if _, _, err := store.Append(ctx, session, &db.AppendRequest{Events: []db.NewEvent{userMessage(event)}, EnsureWork: work, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	admit("sesn_sh", "work_1", "sevt_1")
	if p, err := next(); err != nil || p != "env_sh" {
		t.Fatalf("notification = %q, %v; want env_sh", p, err)
	}
	admit("sesn_sh", "work_2", "sevt_2") // a live item exists: none added, nothing announced
	if p, err := next(); err == nil {
		t.Fatalf("notification %q for an item not inserted", p)
	}
	items, _, err := store.WorkList(ctx, "env_sh", 10, nil)
	if err != nil || len(items) != 1 || items[0].ID != "work_1" || items[0].SessionID != "sesn_sh" || items[0].Type != db.WorkTypeSession || items[0].State != db.WorkQueued {
		t.Fatalf("items = %+v, %v; want work_1 alone, queued, for sesn_sh", items, err)
	}
	admit("sesn_cloud", "work_3", "sevt_3") // not self-hosted: ignored
	if items, _, _ := store.WorkList(ctx, "env_cloud", 10, nil); len(items) != 0 {
		t.Fatalf("items of a cloud environment = %+v; want none", items)
	}
	// Once the item stopped, the next admission queues a new one.
	if _, err := store.WorkStop(ctx, "env_sh", "work_1", true, now); err != nil {
		t.Fatal(err)
	}
	admit("sesn_sh", "work_4", "sevt_4")
	if items, _, _ := store.WorkList(ctx, "env_sh", 10, nil); len(items) != 2 || items[0].ID != "work_4" || items[0].State != db.WorkQueued {
		t.Fatalf("items = %+v; want work_4 queued beside the stopped work_1", items)
	}

	// A session created with initial events gets its item at once.
	env := "env_sh"
	if _, _, err := store.SessionCreate(ctx, db.SessionCreateParams{ID: "sesn_init", AgentID: "agent_1", AgentVersion: 1,
		Agent: json.RawMessage(`{}`), EnvironmentID: &env, Provider: "local", Now: now, SelfHosted: true},
		&db.AppendRequest{Events: []db.NewEvent{userMessage("sevt_i")}, EnsureWork: "work_init", Now: now}); err != nil {
		t.Fatal(err)
	}
	if w, err := store.WorkGet(ctx, "env_sh", "work_init"); err != nil || w.SessionID != "sesn_init" {
		t.Fatalf("item of a session created with initial events = %+v, %v", w, err)
	}

	// A session's deletion stops its item.
	if _, _, err := store.SessionFence(ctx, "sesn_init", now); err != nil {
		t.Fatal(err)
	}
	if w, err := store.WorkGet(ctx, "env_sh", "work_init"); err != nil || w.State != db.WorkStopped || w.StoppedAt == nil {
		t.Fatalf("item of a session being deleted = %+v, %v; want stopped", w, err)
	}
}

// toolUse appends an agent.tool_use event.
func toolUse(t *testing.T, store *db.Store, session, id string) {
	t.Helper()
	if _, _, err := store.Append(context.Background(), session, &db.AppendRequest{Now: time.Now().UTC(),
		Events: []db.NewEvent{{ID: id, Type: "agent.tool_use", Body: json.RawMessage(`{"name":"bash","input":{}}`)}}}); err != nil {
		t.Fatal(err)
	}
}

func toolResult(id, typ, use string) db.NewEvent {
	return db.NewEvent{ID: id, Type: typ, Body: json.RawMessage(`{"tool_use_id":"` + use + `","content":[],"is_error":false}`)}
}

func TestAppendToolResults(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	selfHostedEnv(t, store, "env_t", "self_hosted")
	envSession(t, store, "sesn_t", "env_t", true)
	envSession(t, store, "sesn_u", "env_t", true)
	toolUse(t, store, "sesn_t", "sevt_use1")
	toolUse(t, store, "sesn_t", "sevt_use2")
	toolUse(t, store, "sesn_u", "sevt_useu")
	if ans, use, err := store.ToolUseAnswer(ctx, "sesn_t", "sevt_use1"); err != nil || ans != nil || use == nil || use.ID != "sevt_use1" {
		t.Fatalf("answer of an open tool use = %+v, %+v, %v; want the use and no answer", ans, use, err)
	}
	answer := func(id, typ string, uses ...string) error {
		_, _, err := store.Append(ctx, "sesn_t", &db.AppendRequest{Events: []db.NewEvent{toolResult(id, typ, uses[0])}, ToolResults: uses, Now: time.Now().UTC()})
		return err
	}
	if err := answer("sevt_r1", "user.tool_result", "sevt_use1"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		uses     []string
		answered bool
		id       string
	}{
		{"already answered", []string{"sevt_use1"}, true, "sevt_use1"},
		{"unknown", []string{"sevt_nope"}, false, "sevt_nope"},
		{"another session's", []string{"sevt_useu"}, false, "sevt_useu"},
		{"not a tool use", []string{"sevt_r1"}, false, "sevt_r1"},
		{"twice in one request", []string{"sevt_use2", "sevt_use2"}, true, "sevt_use2"},
	} {
		err := answer("sevt_bad", "user.tool_result", c.uses...)
		var tue *db.ToolUseError
		if !errors.As(err, &tue) || tue.ID != c.id || tue.Answered != c.answered {
			t.Errorf("%s: append = %v; want ToolUseError{%s, answered %v}", c.name, err, c.id, c.answered)
		}
		want := db.ErrNotFound
		if c.answered {
			want = db.ErrConflict
		}
		if !errors.Is(err, want) {
			t.Errorf("%s: append = %v; want it %v", c.name, err, want)
		}
	}
	if ans, _, err := store.ToolUseAnswer(ctx, "sesn_t", "sevt_use2"); err != nil || ans != nil {
		t.Fatalf("answer of sevt_use2 after refused appends = %+v, %v; want none", ans, err)
	}
	// The server's own answer (a timeout) counts as one too.
	if err := answer("sevt_r2", "agent.tool_result", "sevt_use2"); err != nil {
		t.Fatal(err)
	}
	var tue *db.ToolUseError
	if err := answer("sevt_r3", "user.tool_result", "sevt_use2"); !errors.As(err, &tue) || !tue.Answered {
		t.Fatalf("a user answer after the server's = %v; want answered", err)
	}
	for use, want := range map[string]string{"sevt_use1": "sevt_r1", "sevt_use2": "sevt_r2"} {
		if ans, u, err := store.ToolUseAnswer(ctx, "sesn_t", use); err != nil || ans == nil || ans.ID != want || u.ID != use {
			t.Errorf("answer of %s = %+v, %+v, %v; want %s", use, ans, u, err, want)
		}
	}
	for _, id := range []string{"sevt_nope", "sevt_r1", "sevt_useu"} {
		if _, _, err := store.ToolUseAnswer(ctx, "sesn_t", id); !errors.Is(err, db.ErrNotFound) {
			t.Errorf("answer of %s = %v; want ErrNotFound", id, err)
		}
	}
}
