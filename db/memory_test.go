package db_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/db/dbtest"
)

var apiActor = db.Actor{Type: db.ActorAPI, ID: "key_test"}

// newMemoryStore creates a store and a session holding it as a
// memory_store resource ("sesrsc_m").
func newMemoryStore(t *testing.T, store *db.Store, storeID, sessionID string, t0 time.Time) {
	t.Helper()
	ctx := context.Background()
	if err := store.MemoryStoreCreate(ctx, &db.MemoryStore{ID: storeID, Name: "Notes", Description: "d", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	_, _, err := store.SessionCreate(ctx, db.SessionCreateParams{ID: sessionID, AgentID: "agent_1", AgentVersion: 1,
		Agent: json.RawMessage(`{"name":"a"}`), Provider: "local", Metadata: map[string]string{}, Now: t0,
		Resources: []db.ResourceCreate{{ID: "sesrsc_m", Type: db.ResourceMemoryStore, MountPath: "/mnt/memory/notes",
			MemoryStoreID: storeID, Access: db.AccessReadWrite, Instructions: "keep it short", StoreName: "Notes", StoreDescription: "d"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
}

// TestMemoryStoreLifecycle: create, patch metadata, list with archived
// filter and paging, archive makes memories read-only, delete.
func TestMemoryStoreLifecycle(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	for i, id := range []string{"memstore_a", "memstore_b", "memstore_c"} {
		st := &db.MemoryStore{ID: id, Name: id, Metadata: map[string]string{"k": "v", "drop": "x"}, CreatedAt: t0.Add(time.Duration(i) * time.Second)}
		if err := store.MemoryStoreCreate(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	name, v2 := "renamed", "v2"
	st, err := store.MemoryStoreUpdate(ctx, "memstore_a", db.MemoryStorePatch{Name: &name, Metadata: map[string]*string{"k": &v2, "drop": nil}}, t0.Add(time.Hour))
	if err != nil || st.Name != "renamed" || len(st.Metadata) != 1 || st.Metadata["k"] != "v2" || !st.UpdatedAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("update = %+v, %v; want renamed with metadata {k: v2}", st, err)
	}
	many := map[string]*string{}
	for i := range db.MaxMemoryStoreMetadata {
		many[fmt.Sprint("m", i)] = &v2
	}
	if _, err := store.MemoryStoreUpdate(ctx, "memstore_a", db.MemoryStorePatch{Metadata: many}, t0); !errors.Is(err, db.ErrMemoryStoreMetadata) {
		t.Fatalf("17 metadata pairs: err = %v; want ErrMemoryStoreMetadata", err)
	}
	if _, err := store.MemoryStoreArchive(ctx, "memstore_b", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	again, err := store.MemoryStoreArchive(ctx, "memstore_b", t0.Add(2*time.Hour))
	if err != nil || again.ArchivedAt == nil || !again.ArchivedAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("archiving twice = %+v, %v; want the first archived_at kept", again, err)
	}
	page, more, err := store.MemoryStoreList(ctx, db.MemoryStoreFilter{}, nil, 1)
	if err != nil || len(page) != 1 || page[0].ID != "memstore_c" || !more {
		t.Fatalf("list page 1 = %+v, %v, %v; want [memstore_c] and more", page, more, err)
	}
	page, more, err = store.MemoryStoreList(ctx, db.MemoryStoreFilter{}, &db.Cursor{CreatedAt: page[0].CreatedAt, ID: page[0].ID}, 5)
	if err != nil || len(page) != 1 || page[0].ID != "memstore_a" || more {
		t.Fatalf("list page 2 = %+v, %v, %v; want [memstore_a] (archived b excluded)", page, more, err)
	}
	page, _, _ = store.MemoryStoreList(ctx, db.MemoryStoreFilter{IncludeArchived: true}, nil, 5)
	if len(page) != 3 {
		t.Fatalf("list with archived = %d stores; want 3", len(page))
	}
	if _, err := store.MemoryCreate(ctx, "memstore_b", "/x.md", "x", apiActor, t0); !errors.Is(err, db.ErrMemoryStoreArchived) {
		t.Fatalf("write to an archived store: err = %v; want ErrMemoryStoreArchived", err)
	}
	if _, err := store.MemoryStoreUpdate(ctx, "memstore_b", db.MemoryStorePatch{Name: &name}, t0); !errors.Is(err, db.ErrMemoryStoreArchived) {
		t.Fatalf("update of an archived store: err = %v; want ErrMemoryStoreArchived", err)
	}
	if _, err := store.MemoryCreate(ctx, "memstore_a", "/x.md", "x", apiActor, t0); err != nil {
		t.Fatal(err)
	}
	if err := store.MemoryStoreDelete(ctx, "memstore_a"); err != nil {
		t.Fatal(err)
	}
	if _, err := store.MemoryStoreGet(ctx, "memstore_a"); !errors.Is(err, db.ErrNotFound) {
		t.Fatalf("get a deleted store: err = %v; want ErrNotFound", err)
	}
	if err := store.MemoryStoreDelete(ctx, "memstore_a"); !errors.Is(err, db.ErrNotFound) {
		t.Fatalf("delete twice: err = %v; want ErrNotFound", err)
	}
}

// TestMemoryLifecycle: create, rename and edit with a precondition,
// delete; the versions record each change, its actor, and survive the
// memory; redaction clears a version but keeps it.
func TestMemoryLifecycle(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	if err := store.MemoryStoreCreate(ctx, &db.MemoryStore{ID: "memstore_l", Name: "n", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	m, err := store.MemoryCreate(ctx, "memstore_l", "/notes.md", "one", apiActor, t0)
	if err != nil || !strings.HasPrefix(m.ID, "mem_") || m.SHA256 != db.ContentSHA256([]byte("one")) || m.SizeBytes != 3 {
		t.Fatalf("create = %+v, %v", m, err)
	}
	if _, err := store.MemoryCreate(ctx, "memstore_l", "/notes.md", "two", apiActor, t0); !errors.Is(err, db.ErrMemoryPathTaken) {
		t.Fatalf("a second memory at /notes.md: err = %v; want ErrMemoryPathTaken", err)
	}
	var clash *db.MemoryPathClashError
	if _, err := store.MemoryCreate(ctx, "memstore_l", "/notes.md/sub.md", "x", apiActor, t0); !errors.As(err, &clash) {
		t.Fatalf("a memory under the memory /notes.md: err = %v; want a MemoryPathClashError", err)
	}
	var pre *db.MemoryPreconditionError
	content := "two"
	_, err = store.MemoryUpdateApply(ctx, "memstore_l", m.ID, db.MemoryUpdate{Content: &content, IfSHA256: db.ContentSHA256([]byte("zzz"))}, apiActor, t0)
	if !errors.As(err, &pre) || pre.Actual != m.SHA256 {
		t.Fatalf("update with a stale precondition: err = %v; want a MemoryPreconditionError naming %s", err, m.SHA256)
	}
	newPath := "/docs/notes.md"
	m2, err := store.MemoryUpdateApply(ctx, "memstore_l", m.ID, db.MemoryUpdate{Path: &newPath, Content: &content, IfSHA256: m.SHA256}, apiActor, t0.Add(time.Second))
	if err != nil || m2.Path != newPath || m2.Content != "two" || m2.VersionID == m.VersionID || m2.ID != m.ID {
		t.Fatalf("update = %+v, %v; want the same memory at %s with a new version", m2, err, newPath)
	}
	m3, err := store.MemoryUpdateApply(ctx, "memstore_l", m.ID, db.MemoryUpdate{Content: &content}, apiActor, t0.Add(2*time.Second))
	if err != nil || m3.VersionID != m2.VersionID {
		t.Fatalf("an update that changes nothing = %+v, %v; want no new version", m3, err)
	}
	if err := store.MemoryDelete(ctx, "memstore_l", m.ID, db.ContentSHA256([]byte("one")), apiActor, t0); !errors.As(err, &pre) {
		t.Fatalf("delete with a stale expected sha: err = %v; want a MemoryPreconditionError", err)
	}
	if err := store.MemoryDelete(ctx, "memstore_l", m.ID, m2.SHA256, db.Actor{Type: db.ActorAPI, ID: "key_other"}, t0.Add(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := store.MemoryGet(ctx, "memstore_l", m.ID); !errors.Is(err, db.ErrNotFound) {
		t.Fatalf("get a deleted memory: err = %v; want ErrNotFound", err)
	}
	vs, _, err := store.MemoryVersionList(ctx, db.MemoryVersionFilter{StoreID: "memstore_l", MemoryID: m.ID}, nil, 10)
	if err != nil || len(vs) != 3 || vs[0].Operation != db.MemoryDeleted || vs[1].Operation != db.MemoryModified || vs[2].Operation != db.MemoryCreated {
		t.Fatalf("versions = %+v, %v; want deleted, modified, created", vs, err)
	}
	if vs[0].Content != nil || vs[0].SHA256 != nil || *vs[0].Path != newPath || vs[0].CreatedBy.ID != "key_other" {
		t.Fatalf("deleted version = %+v; want no content, the last path, by key_other", vs[0])
	}
	byKey, _, _ := store.MemoryVersionList(ctx, db.MemoryVersionFilter{StoreID: "memstore_l", Actor: apiActor}, nil, 10)
	created, _, _ := store.MemoryVersionList(ctx, db.MemoryVersionFilter{StoreID: "memstore_l", Operation: db.MemoryCreated}, nil, 10)
	if len(byKey) != 2 || len(created) != 1 {
		t.Fatalf("versions by key_test = %d, created = %d; want 2 and 1", len(byKey), len(created))
	}
	gte := t0.Add(time.Second)
	recent, _, _ := store.MemoryVersionList(ctx, db.MemoryVersionFilter{StoreID: "memstore_l", CreatedGTE: &gte}, nil, 10)
	if len(recent) != 2 {
		t.Fatalf("versions created at or after t0+1s = %d; want 2", len(recent))
	}
	red, err := store.MemoryVersionRedact(ctx, "memstore_l", vs[2].ID, db.Actor{Type: db.ActorAPI, ID: "key_redactor"}, t0.Add(time.Hour))
	if err != nil || red.Content != nil || red.Path != nil || red.SHA256 != nil || red.SizeBytes != nil || red.RedactedAt == nil ||
		red.RedactedBy == nil || red.RedactedBy.ID != "key_redactor" || red.CreatedBy.ID != "key_test" || red.Operation != db.MemoryCreated {
		t.Fatalf("redacted = %+v, %v; want content and path cleared, redacted by key_redactor, created_by kept", red, err)
	}
	if got, err := store.MemoryVersionGet(ctx, "memstore_l", vs[2].ID); err != nil || got.RedactedAt == nil {
		t.Fatalf("get a redacted version = %+v, %v; want the row, redacted", got, err)
	}
}

// TestMemoryRedactCurrent: the version holding a memory's content cannot
// be redacted.
func TestMemoryRedactCurrent(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	if err := store.MemoryStoreCreate(ctx, &db.MemoryStore{ID: "memstore_r", Name: "n", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	m, err := store.MemoryCreate(ctx, "memstore_r", "/a.md", "a", apiActor, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.MemoryVersionRedact(ctx, "memstore_r", m.VersionID, apiActor, t0); !errors.Is(err, db.ErrMemoryVersionCurrent) {
		t.Fatalf("redact the current version: err = %v; want ErrMemoryVersionCurrent", err)
	}
}

// TestMemoryList: prefixes match whole segments, depth rolls deeper
// memories into folder prefixes, and pages continue after a prefix.
func TestMemoryList(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	if err := store.MemoryStoreCreate(ctx, &db.MemoryStore{ID: "memstore_ls", Name: "n", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/a.md", "/notes/x.md", "/notes/deep/y.md", "/notes/deep/z.md", "/notes-archive/q.md", "/z.md"} {
		if _, err := store.MemoryCreate(ctx, "memstore_ls", p, p, apiActor, t0); err != nil {
			t.Fatal(err)
		}
	}
	show := func(items []db.MemoryListItem) string {
		var s []string
		for _, it := range items {
			if it.Memory != nil {
				s = append(s, it.Memory.Path)
			} else {
				s = append(s, "prefix:"+it.Prefix)
			}
		}
		return strings.Join(s, " ")
	}
	cases := []struct {
		p    db.MemoryListParams
		want string
		more bool
	}{
		{db.MemoryListParams{Limit: 10}, "/a.md /notes-archive/q.md /notes/deep/y.md /notes/deep/z.md /notes/x.md /z.md", false},
		{db.MemoryListParams{PathPrefix: "/notes/", Limit: 10}, "/notes/deep/y.md /notes/deep/z.md /notes/x.md", false},
		{db.MemoryListParams{Depth: 1, Limit: 10}, "/a.md prefix:/notes-archive/ prefix:/notes/ /z.md", false},
		{db.MemoryListParams{PathPrefix: "/notes/", Depth: 1, Limit: 10}, "prefix:/notes/deep/ /notes/x.md", false},
		{db.MemoryListParams{Depth: 1, Limit: 2}, "/a.md prefix:/notes-archive/", true},
		{db.MemoryListParams{Depth: 1, Limit: 2, After: "/notes-archive/", AfterPrefix: true}, "prefix:/notes/ /z.md", false},
		{db.MemoryListParams{Limit: 2, After: "/notes/deep/y.md"}, "/notes/deep/z.md /notes/x.md", true},
	}
	basic, _, _ := store.MemoryList(ctx, db.MemoryListParams{StoreID: "memstore_ls", Limit: 1})
	full, _, _ := store.MemoryList(ctx, db.MemoryListParams{StoreID: "memstore_ls", Limit: 1, WithContent: true})
	if len(basic) != 1 || basic[0].Memory.Content != "" || basic[0].Memory.SHA256 != db.ContentSHA256([]byte("/a.md")) || len(full) != 1 || full[0].Memory.Content != "/a.md" {
		t.Fatalf("list without content = %+v, with = %+v; want the hash always, the content only when asked", basic, full)
	}
	for _, c := range cases {
		c.p.StoreID = "memstore_ls"
		items, more, err := store.MemoryList(ctx, c.p)
		if err != nil || show(items) != c.want || more != c.more {
			t.Errorf("MemoryList(%+v) = %q, more %v, %v; want %q, more %v", c.p, show(items), more, err, c.want, c.more)
		}
	}
}

// TestMemorySync: the four outcomes, an idempotent retry, the conflict
// copy, and an API edit made between the read and the sync that survives.
func TestMemorySync(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	newMemoryStore(t, store, "memstore_s", "sesn_s", t0)
	res, err := store.ResourcesForWorker(ctx, "sesn_s")
	if err != nil || len(res) != 1 || res[0].MemoryStoreID != "memstore_s" || res[0].Access != db.AccessReadWrite ||
		res[0].Instructions != "keep it short" || res[0].StoreName != "Notes" {
		t.Fatalf("memory_store resource = %+v, %v", res, err)
	}
	keep, _ := store.MemoryCreate(ctx, "memstore_s", "/keep.md", "k1", apiActor, t0)
	edited, _ := store.MemoryCreate(ctx, "memstore_s", "/edited.md", "e1", apiActor, t0)
	gone, _ := store.MemoryCreate(ctx, "memstore_s", "/gone.md", "g1", apiActor, t0)
	files, err := store.MemoryReadForSession(ctx, "sesn_s", "sesrsc_m", "memstore_s")
	if err != nil || len(files) != 3 || files[0].Path != "edited.md" || string(files[0].Content) != "e1" {
		t.Fatalf("read = %+v, %v; want edited.md, gone.md, keep.md", files, err)
	}
	base, _ := store.MemoryBase(ctx, "sesn_s", "sesrsc_m")
	if len(base) != 3 || base["keep.md"] != keep.SHA256 {
		t.Fatalf("base = %v; want the three memories read", base)
	}
	// Between the read and the sync, the API edits edited.md and deletes gone.md.
	apiContent := "e-api"
	if _, err := store.MemoryUpdateApply(ctx, "memstore_s", edited.ID, db.MemoryUpdate{Content: &apiContent}, apiActor, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := store.MemoryDelete(ctx, "memstore_s", gone.ID, "", apiActor, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	changes := []db.MemoryChange{
		{Path: "keep.md", Content: []byte("k2"), BaseSHA256: keep.SHA256},               // applied (modified)
		{Path: "new/n.md", Content: []byte("n1")},                                       // applied (created)
		{Path: "edited.md", Content: []byte("e-agent"), BaseSHA256: edited.SHA256},      // conflict
		{Path: "gone.md", Content: []byte("g-agent"), BaseSHA256: gone.SHA256},          // conflict: the API deleted it
		{Path: "../escape.md", Content: []byte("x")},                                    // refused
		{Path: "bad.md", Content: []byte{0xff, 0xfe}},                                   // refused
		{Path: "keep2.md", Content: []byte("x"), SHA256: db.ContentSHA256([]byte("y"))}, // refused: wrong sha
	}
	want := []string{"applied", "applied", "conflict", "conflict", "refused", "refused", "refused"}
	now := t0.Add(time.Minute)
	got, err := store.MemorySyncApply(ctx, "sesn_s", "sesrsc_m", "memstore_s", false, changes, now)
	checkOutcomes(t, "first sync", got, err, want)
	if got[2].ConflictPath != "edited.conflict-sesn_s.md" || got[3].ConflictPath != "gone.conflict-sesn_s.md" {
		t.Fatalf("conflict paths = %q, %q; want edited.conflict-sesn_s.md, gone.conflict-sesn_s.md", got[2].ConflictPath, got[3].ConflictPath)
	}
	if m, _ := store.MemoryGet(ctx, "memstore_s", edited.ID); m.Content != "e-api" {
		t.Fatalf("edited.md = %q; the API's edit must survive", m.Content)
	}
	checkMemory(t, store, "memstore_s", "/edited.conflict-sesn_s.md", "e-agent")
	checkMemory(t, store, "memstore_s", "/keep.md", "k2")
	checkMemory(t, store, "memstore_s", "/new/n.md", "n1")
	vs, _, _ := store.MemoryVersionList(ctx, db.MemoryVersionFilter{StoreID: "memstore_s", Actor: db.Actor{Type: db.ActorSession, ID: "sesn_s"}}, nil, 20)
	if len(vs) != 4 { // keep modified, n created, two conflict copies created
		t.Fatalf("versions by the session = %d; want 4", len(vs))
	}
	// A retry of the same sync changes nothing more.
	got, err = store.MemorySyncApply(ctx, "sesn_s", "sesrsc_m", "memstore_s", false, changes, now.Add(time.Minute))
	checkOutcomes(t, "retried sync", got, err, []string{"unchanged", "unchanged", "conflict", "conflict", "refused", "refused", "refused"})
	vs2, _, _ := store.MemoryVersionList(ctx, db.MemoryVersionFilter{StoreID: "memstore_s", Actor: db.Actor{Type: db.ActorSession, ID: "sesn_s"}}, nil, 20)
	if len(vs2) != 4 {
		t.Fatalf("versions by the session after a retry = %d; want still 4", len(vs2))
	}
	if m, _ := store.MemoryGet(ctx, "memstore_s", edited.ID); m.Content != "e-api" {
		t.Fatalf("edited.md after a retry = %q; the API's edit must survive", m.Content)
	}
	base, _ = store.MemoryBase(ctx, "sesn_s", "sesrsc_m")
	if base["keep.md"] != db.ContentSHA256([]byte("k2")) || base["edited.md"] != db.ContentSHA256([]byte("e-agent")) {
		t.Fatalf("base = %v; want keep.md at k2 and edited.md at what the sandbox holds", base)
	}
	// A deletion the agent made of an unchanged memory applies; one of a
	// memory the API changed is dropped.
	got, err = store.MemorySyncApply(ctx, "sesn_s", "sesrsc_m", "memstore_s", false,
		[]db.MemoryChange{{Path: "keep.md", Deleted: true}, {Path: "edited.conflict-sesn_s.md", Deleted: true}}, now.Add(2*time.Minute))
	checkOutcomes(t, "deletions", got, err, []string{"applied", "conflict"})
	if _, err := store.MemoryGet(ctx, "memstore_s", keep.ID); !errors.Is(err, db.ErrNotFound) {
		t.Fatalf("keep.md after the agent deleted it: err = %v; want ErrNotFound", err)
	}
	checkMemory(t, store, "memstore_s", "/edited.conflict-sesn_s.md", "e-agent")
	// read_only and archived stores refuse.
	got, err = store.MemorySyncApply(ctx, "sesn_s", "sesrsc_m", "memstore_s", true, []db.MemoryChange{{Path: "ro.md", Content: []byte("x")}}, now)
	checkOutcomes(t, "read_only", got, err, []string{"refused"})
	if _, err := store.MemoryStoreArchive(ctx, "memstore_s", now); err != nil {
		t.Fatal(err)
	}
	got, err = store.MemorySyncApply(ctx, "sesn_s", "sesrsc_m", "memstore_s", false, []db.MemoryChange{{Path: "ar.md", Content: []byte("x")}}, now)
	checkOutcomes(t, "archived", got, err, []string{"refused"})
	if !strings.Contains(got[0].Reason, "archived") {
		t.Fatalf("archived refusal reason = %q; want it to say archived", got[0].Reason)
	}
}

func checkOutcomes(t *testing.T, what string, got []db.MemoryChangeResult, err error, want []string) {
	t.Helper()
	if err != nil || len(got) != len(want) {
		t.Fatalf("%s: results = %+v, %v; want %v", what, got, err, want)
	}
	for i := range want {
		if got[i].Outcome != want[i] {
			t.Errorf("%s: change %d (%s) = %s (%s); want %s", what, i, got[i].Path, got[i].Outcome, got[i].Reason, want[i])
		}
		if want[i] == "refused" && got[i].Reason == "" {
			t.Errorf("%s: change %d refused without a reason", what, i)
		}
	}
}

func checkMemory(t *testing.T, store *db.Store, storeID, path, content string) {
	t.Helper()
	items, _, err := store.MemoryList(context.Background(), db.MemoryListParams{StoreID: storeID, Limit: 100, WithContent: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		if it.Memory != nil && it.Memory.Path == path {
			if it.Memory.Content != content {
				t.Fatalf("%s = %q; want %q", path, it.Memory.Content, content)
			}
			return
		}
	}
	t.Fatalf("no memory at %s; want one holding %q", path, content)
}

// TestMemoryConcurrentWriters: concurrent syncs of two sessions and API
// edits of one store serialize on its lock: every write lands once.
func TestMemoryConcurrentWriters(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	newMemoryStore(t, store, "memstore_c", "sesn_c", t0)
	if _, err := store.MemoryReadForSession(ctx, "sesn_c", "sesrsc_m", "memstore_c"); err != nil {
		t.Fatal(err)
	}
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n {
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, err := store.MemoryCreate(ctx, "memstore_c", fmt.Sprintf("/api/%d.md", i), "a", apiActor, t0)
			errs <- err
		}()
		go func() {
			defer wg.Done()
			_, err := store.MemorySyncApply(ctx, "sesn_c", "sesrsc_m", "memstore_c", false,
				[]db.MemoryChange{{Path: fmt.Sprintf("agent/%d.md", i), Content: []byte("s")}}, t0)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	items, _, _ := store.MemoryList(ctx, db.MemoryListParams{StoreID: "memstore_c", Limit: 100})
	if len(items) != 2*n {
		t.Fatalf("memories after concurrent writes = %d; want %d", len(items), 2*n)
	}
	base, _ := store.MemoryBase(ctx, "sesn_c", "sesrsc_m")
	if len(base) != n {
		t.Fatalf("base after concurrent syncs = %d entries; want %d", len(base), n)
	}
}

// TestValidateMemoryPath covers the path rules.
func TestValidateMemoryPath(t *testing.T) {
	t.Parallel()
	ok := []string{"/a.md", "/projects/foo/notes.md", "/ünïcode.md"}
	bad := []string{"", "a.md", "/", "/a//b", "/a/./b", "/../a", "/a\tb", "/a\u200bb", "/a\u2028", "/e\u0301.md",
		"/" + strings.Repeat("a", 1024), "/" + strings.Repeat("a/", 20) + "b"}
	for _, p := range ok {
		if err := db.ValidateMemoryPath(p); err != nil {
			t.Errorf("ValidateMemoryPath(%q) = %v; want nil", p, err)
		}
	}
	for _, p := range bad {
		if err := db.ValidateMemoryPath(p); err == nil {
			t.Errorf("ValidateMemoryPath(%q) = nil; want an error", p)
		}
	}
}

// TestMemoryBaseGoesWithResource: deleting a memory_store resource drops
// its base, at once when never materialized, else once the worker
// reports it removed.
func TestMemoryBaseGoesWithResource(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	newMemoryStore(t, store, "memstore_b", "sesn_b", t0)
	if _, err := store.MemoryCreate(ctx, "memstore_b", "/a.md", "a", apiActor, t0); err != nil {
		t.Fatal(err)
	}
	read := func() {
		t.Helper()
		if _, err := store.MemoryReadForSession(ctx, "sesn_b", "sesrsc_m", "memstore_b"); err != nil {
			t.Fatal(err)
		}
		if base, _ := store.MemoryBase(ctx, "sesn_b", "sesrsc_m"); len(base) != 1 {
			t.Fatalf("base after a read = %v; want a.md", base)
		}
	}
	read()
	if err := store.ResourceMarkMaterialized(ctx, "sesn_b", "sesrsc_m", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := store.ResourceDelete(ctx, "sesn_b", "sesrsc_m", t0); err != nil {
		t.Fatal(err)
	}
	if base, _ := store.MemoryBase(ctx, "sesn_b", "sesrsc_m"); len(base) != 1 {
		t.Fatalf("base of a deleted resource still in the sandbox = %v; want it kept until the worker removes it", base)
	}
	if err := store.ResourceMarkMaterialized(ctx, "sesn_b", "sesrsc_m", 2); err != nil {
		t.Fatal(err)
	}
	if base, _ := store.MemoryBase(ctx, "sesn_b", "sesrsc_m"); len(base) != 0 {
		t.Fatalf("base after the worker removed the resource = %v; want none", base)
	}
	_, err := store.ResourceAdd(ctx, "sesn_b", db.ResourceCreate{ID: "sesrsc_m2", Type: db.ResourceMemoryStore, MountPath: "/mnt/memory/b",
		MemoryStoreID: "memstore_b", Access: db.AccessReadOnly}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.MemoryReadForSession(ctx, "sesn_b", "sesrsc_m2", "memstore_b"); err != nil {
		t.Fatal(err)
	}
	if _, err := store.ResourceDelete(ctx, "sesn_b", "sesrsc_m2", t0); err != nil {
		t.Fatal(err)
	}
	if base, _ := store.MemoryBase(ctx, "sesn_b", "sesrsc_m2"); len(base) != 0 {
		t.Fatalf("base after deleting an unmaterialized resource = %v; want none", base)
	}
	if acc, err := store.MemoryStoreAccess(ctx, "memstore_b", "sesn_b"); err != nil || acc != "" {
		t.Fatalf("access after both resources went = %q, %v; want none", acc, err)
	}
}
