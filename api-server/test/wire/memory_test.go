package wire

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/mangohq/mango/api-server/internal/testserver"
)

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// TestMemoryStores drives the Memory Stores API through the SDK: store
// lifecycle, memories, versions (with their actor), the content_sha256
// precondition, list filters, redaction, an archived store's read-only
// memories, and bad inputs.
func TestMemoryStores(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	client := newClient(t, srv)
	ctx := context.Background()
	ms := client.Beta.MemoryStores

	st, err := ms.New(ctx, anthropic.BetaMemoryStoreNewParams{Name: "Project notes", Description: anthropic.String("what we learned"),
		Metadata: map[string]string{"team": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(st.ID, "memstore_") || st.Name != "Project notes" || st.Metadata["team"] != "a" || st.JSON.ArchivedAt.Raw() != "null" {
		t.Fatalf("created store = %s; want memstore_ id, name, metadata, archived_at null", st.RawJSON())
	}
	up, err := ms.Update(ctx, st.ID, anthropic.BetaMemoryStoreUpdateParams{Name: anthropic.String("Notes"),
		Metadata: map[string]string{"owner": "b"}})
	if err != nil || up.Name != "Notes" || up.Metadata["team"] != "a" || up.Metadata["owner"] != "b" || up.Description != "what we learned" {
		t.Fatalf("updated store = %v, %v; want the name changed, metadata merged, description kept", up, err)
	}
	// The SDK sends agent-memory-2026-07-22; managed-agents-2026-04-01 is
	// accepted as well.
	got, err := ms.Get(ctx, st.ID, anthropic.BetaMemoryStoreGetParams{}, option.WithHeader("anthropic-beta", "managed-agents-2026-04-01"))
	if err != nil || got.Name != "Notes" {
		t.Fatalf("get store = %v, %v", got, err)
	}
	page, err := ms.List(ctx, anthropic.BetaMemoryStoreListParams{})
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != st.ID {
		t.Fatalf("list stores = %v, %v; want the one store", page, err)
	}

	testMemories(t, client, st.ID)

	arch, err := ms.Archive(ctx, st.ID, anthropic.BetaMemoryStoreArchiveParams{})
	if err != nil || arch.ArchivedAt.IsZero() {
		t.Fatalf("archive = %v, %v; want archived_at set", arch, err)
	}
	_, err = ms.Memories.New(ctx, st.ID, anthropic.BetaMemoryStoreMemoryNewParams{Path: "/late.md", Content: anthropic.String("x")})
	wantAPIError(t, err, http.StatusConflict)
	_, err = ms.Update(ctx, st.ID, anthropic.BetaMemoryStoreUpdateParams{Name: anthropic.String("again")})
	wantAPIError(t, err, http.StatusConflict)
	list, err := ms.Memories.List(ctx, st.ID, anthropic.BetaMemoryStoreMemoryListParams{})
	if err != nil || len(list.Data) == 0 {
		t.Fatalf("memories of an archived store = %v, %v; want them readable", list, err)
	}
	page, _ = ms.List(ctx, anthropic.BetaMemoryStoreListParams{})
	all, _ := ms.List(ctx, anthropic.BetaMemoryStoreListParams{IncludeArchived: anthropic.Bool(true)})
	if len(page.Data) != 0 || len(all.Data) != 1 {
		t.Fatalf("list = %d stores, with archived = %d; want 0 and 1", len(page.Data), len(all.Data))
	}
	del, err := ms.Delete(ctx, st.ID, anthropic.BetaMemoryStoreDeleteParams{})
	if err != nil || del.ID != st.ID || del.Type != "memory_store_deleted" {
		t.Fatalf("delete store = %v, %v", del, err)
	}
	_, err = ms.Get(ctx, st.ID, anthropic.BetaMemoryStoreGetParams{})
	wantAPIError(t, err, http.StatusNotFound)
}

// testMemories covers memories and versions of a live store.
func testMemories(t *testing.T, client anthropic.Client, storeID string) {
	t.Helper()
	ctx := context.Background()
	mem := client.Beta.MemoryStores.Memories
	m, err := mem.New(ctx, storeID, anthropic.BetaMemoryStoreMemoryNewParams{Path: "/notes.md", Content: anthropic.String("v1")})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(m.ID, "mem_") || m.ContentSha256 != sha("v1") || m.ContentSizeBytes != 2 || m.JSON.Content.Raw() != "null" {
		t.Fatalf("created memory = %s; want mem_ id, sha and size, content null (basic view)", m.RawJSON())
	}
	full, err := mem.Get(ctx, m.ID, anthropic.BetaMemoryStoreMemoryGetParams{MemoryStoreID: storeID})
	if err != nil || full.Content != "v1" || full.MemoryVersionID != m.MemoryVersionID {
		t.Fatalf("get memory = %v, %v; want content v1 (full view by default)", full, err)
	}
	_, err = mem.New(ctx, storeID, anthropic.BetaMemoryStoreMemoryNewParams{Path: "/notes.md", Content: anthropic.String("dup")})
	wantAPIError(t, err, http.StatusConflict)
	// A stale precondition is a 409 and changes nothing.
	_, err = mem.Update(ctx, m.ID, anthropic.BetaMemoryStoreMemoryUpdateParams{MemoryStoreID: storeID, Content: anthropic.String("lost"),
		Precondition: anthropic.BetaManagedAgentsPreconditionParam{ContentSha256: anthropic.String(sha("other"))}})
	if e := apiErrorWithStatus(t, err, http.StatusConflict); !strings.Contains(e.RawJSON(), sha("v1")) {
		t.Errorf("precondition error = %s; want it to name the current content_sha256", e.RawJSON())
	}
	m2, err := mem.Update(ctx, m.ID, anthropic.BetaMemoryStoreMemoryUpdateParams{MemoryStoreID: storeID, Content: anthropic.String("v2"),
		Path: anthropic.String("/docs/notes.md"), View: anthropic.BetaManagedAgentsMemoryViewFull,
		Precondition: anthropic.BetaManagedAgentsPreconditionParam{ContentSha256: anthropic.String(sha("v1"))}})
	if err != nil || m2.Content != "v2" || m2.Path != "/docs/notes.md" || m2.ID != m.ID || m2.MemoryVersionID == m.MemoryVersionID {
		t.Fatalf("update = %v, %v; want the same memory renamed with v2 and a new version", m2, err)
	}
	other, err := mem.New(ctx, storeID, anthropic.BetaMemoryStoreMemoryNewParams{Path: "/docs/deep/x.md", Content: anthropic.String("x")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mem.New(ctx, storeID, anthropic.BetaMemoryStoreMemoryNewParams{Path: "/top.md", Content: anthropic.String("")}); err != nil {
		t.Fatal(err)
	}
	testMemoryList(t, client, storeID)
	_, err = mem.Delete(ctx, other.ID, anthropic.BetaMemoryStoreMemoryDeleteParams{MemoryStoreID: storeID, ExpectedContentSha256: anthropic.String(sha("nope"))})
	wantAPIError(t, err, http.StatusConflict)
	d, err := mem.Delete(ctx, other.ID, anthropic.BetaMemoryStoreMemoryDeleteParams{MemoryStoreID: storeID, ExpectedContentSha256: anthropic.String(sha("x"))})
	if err != nil || d.ID != other.ID {
		t.Fatalf("delete memory = %v, %v", d, err)
	}
	_, err = mem.Get(ctx, other.ID, anthropic.BetaMemoryStoreMemoryGetParams{MemoryStoreID: storeID})
	wantAPIError(t, err, http.StatusNotFound)
	testMemoryVersions(t, client, storeID, m.ID, other.ID)
	testMemoryBadInputs(t, client, storeID, m.ID)
}

func testMemoryList(t *testing.T, client anthropic.Client, storeID string) {
	t.Helper()
	ctx := context.Background()
	mem := client.Beta.MemoryStores.Memories
	show := func(p anthropic.BetaMemoryStoreMemoryListParams) (string, string) {
		page, err := mem.List(ctx, storeID, p)
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, it := range page.Data {
			switch v := it.AsAny().(type) {
			case anthropic.BetaManagedAgentsMemory:
				s = append(s, v.Path)
			case anthropic.BetaManagedAgentsMemoryPrefix:
				s = append(s, "prefix:"+v.Path)
			}
		}
		return strings.Join(s, " "), page.NextPage
	}
	if got, _ := show(anthropic.BetaMemoryStoreMemoryListParams{}); got != "/docs/deep/x.md /docs/notes.md /top.md" {
		t.Errorf("list = %q; want every memory in path order", got)
	}
	if got, _ := show(anthropic.BetaMemoryStoreMemoryListParams{Depth: anthropic.Int(1)}); got != "prefix:/docs/ /top.md" {
		t.Errorf("list depth 1 = %q; want prefix:/docs/ /top.md", got)
	}
	if got, _ := show(anthropic.BetaMemoryStoreMemoryListParams{PathPrefix: anthropic.String("/docs/"), Depth: anthropic.Int(1)}); got != "prefix:/docs/deep/ /docs/notes.md" {
		t.Errorf("list /docs/ depth 1 = %q; want prefix:/docs/deep/ /docs/notes.md", got)
	}
	first, next := show(anthropic.BetaMemoryStoreMemoryListParams{Depth: anthropic.Int(1), Limit: anthropic.Int(1)})
	second, last := show(anthropic.BetaMemoryStoreMemoryListParams{Depth: anthropic.Int(1), Limit: anthropic.Int(1), Page: anthropic.String(next)})
	if first != "prefix:/docs/" || next == "" || second != "/top.md" || last != "" {
		t.Errorf("pages of 1 = %q (next %q), %q (next %q); want prefix:/docs/ then /top.md", first, next, second, last)
	}
	page, err := mem.List(ctx, storeID, anthropic.BetaMemoryStoreMemoryListParams{View: anthropic.BetaManagedAgentsMemoryViewFull, PathPrefix: anthropic.String("/docs/deep/")})
	if err != nil || len(page.Data) != 1 || page.Data[0].Content != "x" {
		t.Fatalf("full list = %v, %v; want content", page, err)
	}
}

func testMemoryVersions(t *testing.T, client anthropic.Client, storeID, memID, deletedID string) {
	t.Helper()
	ctx := context.Background()
	mv := client.Beta.MemoryStores.MemoryVersions
	page, err := mv.List(ctx, storeID, anthropic.BetaMemoryStoreMemoryVersionListParams{MemoryID: anthropic.String(memID)})
	if err != nil || len(page.Data) != 2 {
		t.Fatalf("versions of %s = %v, %v; want modified and created", memID, page, err)
	}
	modified, created := page.Data[0], page.Data[1]
	if modified.Operation != "modified" || created.Operation != "created" || created.Path != "/notes.md" || modified.Path != "/docs/notes.md" {
		t.Fatalf("versions = %s / %s; want modified at /docs/notes.md, created at /notes.md", modified.RawJSON(), created.RawJSON())
	}
	actor := created.CreatedBy.AsAPIActor()
	if created.CreatedBy.Type != "api_actor" || !strings.HasPrefix(actor.APIKeyID, "key_") || created.JSON.Content.Raw() != "null" {
		t.Fatalf("created version = %s; want created_by an api_actor with the key id, content null (basic)", created.RawJSON())
	}
	gone, _ := mv.List(ctx, storeID, anthropic.BetaMemoryStoreMemoryVersionListParams{MemoryID: anthropic.String(deletedID)})
	if len(gone.Data) != 2 || gone.Data[0].Operation != "deleted" || gone.Data[0].JSON.ContentSha256.Raw() != "null" {
		t.Fatalf("versions of the deleted memory = %v; want deleted (no sha) then created", gone.Data)
	}
	byKey, _ := mv.List(ctx, storeID, anthropic.BetaMemoryStoreMemoryVersionListParams{APIKeyID: anthropic.String(actor.APIKeyID)})
	bySession, _ := mv.List(ctx, storeID, anthropic.BetaMemoryStoreMemoryVersionListParams{SessionID: anthropic.String("sesn_none")})
	deleted, _ := mv.List(ctx, storeID, anthropic.BetaMemoryStoreMemoryVersionListParams{Operation: anthropic.BetaManagedAgentsMemoryVersionOperationDeleted})
	if len(byKey.Data) != 5 || len(bySession.Data) != 0 || len(deleted.Data) != 1 {
		t.Fatalf("versions by key = %d, by session = %d, deleted = %d; want 5, 0, 1", len(byKey.Data), len(bySession.Data), len(deleted.Data))
	}
	v, err := mv.Get(ctx, created.ID, anthropic.BetaMemoryStoreMemoryVersionGetParams{MemoryStoreID: storeID})
	if err != nil || v.Content != "v1" {
		t.Fatalf("get version = %v, %v; want content v1 (full by default)", v, err)
	}
	_, err = mv.Redact(ctx, modified.ID, anthropic.BetaMemoryStoreMemoryVersionRedactParams{MemoryStoreID: storeID})
	wantAPIError(t, err, http.StatusConflict) // it holds the memory's current content
	red, err := mv.Redact(ctx, created.ID, anthropic.BetaMemoryStoreMemoryVersionRedactParams{MemoryStoreID: storeID})
	if err != nil || red.RedactedAt.IsZero() || red.RedactedBy.Type != "api_actor" || red.JSON.Content.Raw() != "null" ||
		red.JSON.Path.Raw() != "null" || red.JSON.ContentSha256.Raw() != "null" || red.CreatedBy.Type != "api_actor" {
		t.Fatalf("redacted = %v, %v; want content, path and sha null, redacted_at/by set, created_by kept", red, err)
	}
	again, err := mv.Get(ctx, created.ID, anthropic.BetaMemoryStoreMemoryVersionGetParams{MemoryStoreID: storeID})
	if err != nil || again.RedactedAt.IsZero() || again.Operation != "created" {
		t.Fatalf("get a redacted version = %v, %v; want the row kept, redacted", again, err)
	}
}

func testMemoryBadInputs(t *testing.T, client anthropic.Client, storeID, memID string) {
	t.Helper()
	ctx := context.Background()
	mem := client.Beta.MemoryStores.Memories
	for _, p := range []string{"notes.md", "/a//b.md", "/../x.md", "/a\tb"} {
		_, err := mem.New(ctx, storeID, anthropic.BetaMemoryStoreMemoryNewParams{Path: p, Content: anthropic.String("x")})
		wantAPIError(t, err, http.StatusBadRequest)
	}
	_, err := mem.New(ctx, storeID, anthropic.BetaMemoryStoreMemoryNewParams{Path: "/big.md", Content: anthropic.String(strings.Repeat("a", 102401))})
	if e := apiErrorWithStatus(t, err, http.StatusBadRequest); !strings.Contains(e.RawJSON(), "102400") {
		t.Errorf("content over 100 kB: %s; want the limit named", e.RawJSON())
	}
	if _, err := mem.New(ctx, storeID, anthropic.BetaMemoryStoreMemoryNewParams{Path: "/max.md", Content: anthropic.String(strings.Repeat("a", 102400))}); err != nil {
		t.Errorf("content of exactly 100 kB: %v; want it accepted", err)
	}
	_, err = mem.New(ctx, storeID, anthropic.BetaMemoryStoreMemoryNewParams{Path: "/nocontent.md"})
	wantAPIError(t, err, http.StatusBadRequest)
	_, err = mem.List(ctx, storeID, anthropic.BetaMemoryStoreMemoryListParams{PathPrefix: anthropic.String("/docs")})
	wantAPIError(t, err, http.StatusBadRequest)
	_, err = mem.List(ctx, storeID, anthropic.BetaMemoryStoreMemoryListParams{}, option.WithQuery("view", "everything"))
	wantAPIError(t, err, http.StatusBadRequest)
	_, err = mem.Delete(ctx, memID, anthropic.BetaMemoryStoreMemoryDeleteParams{MemoryStoreID: storeID, ExpectedContentSha256: anthropic.String("ABC")})
	wantAPIError(t, err, http.StatusBadRequest)
	_, err = client.Beta.MemoryStores.New(ctx, anthropic.BetaMemoryStoreNewParams{Name: ""})
	wantAPIError(t, err, http.StatusBadRequest)
	_, err = mem.Get(ctx, "mem_000000000000000000000000", anthropic.BetaMemoryStoreMemoryGetParams{MemoryStoreID: storeID})
	wantAPIError(t, err, http.StatusNotFound)
	_, err = mem.Get(ctx, memID, anthropic.BetaMemoryStoreMemoryGetParams{MemoryStoreID: "memstore_000000000000000000000000"})
	wantAPIError(t, err, http.StatusNotFound)
}
