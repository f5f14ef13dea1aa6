package wire

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/jackc/pgx/v5/pgxpool"
)

// attachMemoryStore writes a memory_store resource of a session directly
// (the resource API is tested with the resources).
func attachMemoryStore(t *testing.T, dbURL, sessionID, resourceID, storeID, access string) {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	_, err = pool.Exec(ctx, `INSERT INTO session_resources (id, session_id, type, mount_path, memory_store_id, access, instructions,
		store_name, store_description, created_at, updated_at) VALUES ($1, $2, 'memory_store', $3, $4, $5, '', 'n', '', $6, $6)`,
		resourceID, sessionID, "/mnt/memory/"+resourceID, storeID, access, time.Now())
	if err != nil {
		t.Fatalf("attach memory store %s to session %s: %v", storeID, sessionID, err)
	}
}

// TestSelfHostedMemoryAccess: a work item's secret uses the memories of
// the stores attached to its session (writes attributed to the session,
// none to a read_only store); not other stores, not the stores' own
// routes; an environment key may not use memories at all.
func TestSelfHostedMemoryAccess(t *testing.T) {
	t.Parallel()
	h := newSelfHosted(t)
	ctx := context.Background()
	newStore := func(name string) string {
		st, err := h.client.Beta.MemoryStores.New(ctx, anthropic.BetaMemoryStoreNewParams{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		return st.ID
	}
	rw, ro, other := newStore("rw"), newStore("ro"), newStore("other")
	sid := h.session(t, true)
	attachMemoryStore(t, h.srv.DatabaseURL, sid, "sesrsc_memrw000000000000000000", rw, "read_write")
	attachMemoryStore(t, h.srv.DatabaseURL, sid, "sesrsc_memro000000000000000000", ro, "read_only")
	envWorker := h.as(t, h.envKey)
	w, err := envWorker.Beta.Environments.Work.Poll(ctx, h.envID, anthropic.BetaEnvironmentWorkPollParams{})
	if err != nil || w == nil {
		t.Fatalf("poll = %v, %v", w, err)
	}
	worker := h.as(t, sessionsToken(t, w.Secret))
	mem := worker.Beta.MemoryStores.Memories
	m, err := mem.New(ctx, rw, anthropic.BetaMemoryStoreMemoryNewParams{Path: "/a.md", Content: anthropic.String("a")})
	if err != nil {
		t.Fatalf("the work item's secret creates a memory of its session's read_write store: %v", err)
	}
	if _, err := mem.List(ctx, rw, anthropic.BetaMemoryStoreMemoryListParams{}); err != nil {
		t.Fatalf("list with the work item's secret: %v", err)
	}
	vs, err := h.client.Beta.MemoryStores.MemoryVersions.List(ctx, rw, anthropic.BetaMemoryStoreMemoryVersionListParams{MemoryID: anthropic.String(m.ID)})
	if err != nil || len(vs.Data) != 1 || vs.Data[0].CreatedBy.Type != "session_actor" || vs.Data[0].CreatedBy.SessionID != sid {
		t.Fatalf("versions = %v, %v; want one by session_actor %s", vs, err, sid)
	}
	if _, err := mem.List(ctx, ro, anthropic.BetaMemoryStoreMemoryListParams{}); err != nil {
		t.Fatalf("list a read_only store with the work item's secret: %v", err)
	}
	_, err = mem.New(ctx, ro, anthropic.BetaMemoryStoreMemoryNewParams{Path: "/b.md", Content: anthropic.String("b")})
	wantAPIError(t, err, http.StatusForbidden)
	_, err = mem.List(ctx, other, anthropic.BetaMemoryStoreMemoryListParams{})
	wantAPIError(t, err, http.StatusForbidden)
	_, err = worker.Beta.MemoryStores.Get(ctx, rw, anthropic.BetaMemoryStoreGetParams{})
	wantAPIError(t, err, http.StatusForbidden)
	_, err = envWorker.Beta.MemoryStores.Memories.List(ctx, rw, anthropic.BetaMemoryStoreMemoryListParams{})
	wantAPIError(t, err, http.StatusForbidden)
}
