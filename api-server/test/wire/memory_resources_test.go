package wire

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/mangohq/mango/api-server/internal/testserver"
)

// newMemoryStore creates a memory store through the SDK.
func newMemoryStore(t *testing.T, client anthropic.Client, name, description string) string {
	t.Helper()
	p := anthropic.BetaMemoryStoreNewParams{Name: name}
	if description != "" {
		p.Description = anthropic.String(description)
	}
	st, err := client.Beta.MemoryStores.New(context.Background(), p)
	if err != nil {
		t.Fatalf("create memory store %q: %v", name, err)
	}
	return st.ID
}

func memoryResourceParam(storeID, access, instructions string) anthropic.BetaSessionNewParamsResourceUnion {
	p := &anthropic.BetaManagedAgentsMemoryStoreResourceParam{MemoryStoreID: storeID,
		Access: anthropic.BetaManagedAgentsMemoryStoreResourceParamAccess(access)}
	if instructions != "" {
		p.Instructions = anthropic.String(instructions)
	}
	return anthropic.BetaSessionNewParamsResourceUnion{OfMemoryStore: p}
}

// wantMemoryResource checks a memory_store resource as the SDK reads it.
func wantMemoryResource(t *testing.T, what string, r anthropic.BetaManagedAgentsMemoryStoreResource, storeID, access, name, description, instructions, mount string) {
	t.Helper()
	if string(r.Type) != "memory_store" || r.MemoryStoreID != storeID || string(r.Access) != access || r.Name != name ||
		r.Description != description || r.Instructions != instructions || r.MountPath != mount {
		t.Errorf("%s = %s; want store %s, %s, name %q, description %q, instructions %q, mount_path %q",
			what, r.RawJSON(), storeID, access, name, description, instructions, mount)
	}
}

// addMemoryResource adds a memory_store resource with a raw request (the
// SDK's Add takes file resources only) and returns the status and body.
func addMemoryResource(t *testing.T, srv *testserver.Server, sessionID, body string) rawResponse {
	t.Helper()
	return do(t, srv, http.MethodPost, "/v1/sessions/"+sessionID+"/resources", "application/json", []byte(body), nil)
}

// TestMemoryStoreResources attaches memory stores to a session (create
// and add) and reads them back through the SDK's types: access and
// instructions as given (read_write by default), the store's name and
// description snapshotted, the mount path derived from the name and
// deduplicated within the session; delete frees the path.
func TestMemoryStoreResources(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	client := newClient(t, srv)
	ctx := context.Background()
	prefs := newMemoryStore(t, client, "User Preferences", "What the user likes.")
	same := newMemoryStore(t, client, "user preferences!", "")
	sess, err := newSessionWith(t, client, []anthropic.BetaSessionNewParamsResourceUnion{
		memoryResourceParam(prefs, "read_only", "Read this first."),
		memoryResourceParam(same, "", ""),
	})
	if err != nil {
		t.Fatalf("create session with memory stores: %v", err)
	}
	if len(sess.Resources) != 2 {
		t.Fatalf("session resources = %d, want 2", len(sess.Resources))
	}
	wantMemoryResource(t, "first store", sess.Resources[0].AsMemoryStore(), prefs, "read_only", "User Preferences", "What the user likes.",
		"Read this first.", "/mnt/memory/user-preferences")
	wantMemoryResource(t, "second store", sess.Resources[1].AsMemoryStore(), same, "read_write", "user preferences!", "", "",
		"/mnt/memory/user-preferences-2")
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(sess.Resources[1].RawJSON()), &raw); err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if strings.Join(keys, ",") != "access,created_at,description,id,instructions,memory_store_id,mount_path,name,type,updated_at" ||
		string(raw["instructions"]) != "null" || string(raw["description"]) != `""` {
		t.Errorf("memory_store resource = %s; want exactly the SDK's members (instructions null, description \"\") with id and timestamps",
			sess.Resources[1].RawJSON())
	}

	// The store's name changes later: the attachment keeps its snapshot.
	if _, err := client.Beta.MemoryStores.Update(ctx, prefs, anthropic.BetaMemoryStoreUpdateParams{Name: anthropic.String("Renamed")}); err != nil {
		t.Fatal(err)
	}
	r := addMemoryResource(t, srv, sess.ID, `{"type":"memory_store","memory_store_id":"`+prefs+`"}`)
	var added anthropic.BetaManagedAgentsMemoryStoreResource
	if r.status != http.StatusOK || json.Unmarshal(r.body, &added) != nil {
		t.Fatalf("add a memory store: %d %s", r.status, r.body)
	}
	wantMemoryResource(t, "added store", added, prefs, "read_write", "Renamed", "What the user likes.", "", "/mnt/memory/renamed")
	r = addMemoryResource(t, srv, sess.ID, `{"type":"memory_store","memory_store_id":"`+same+`","access":"read_only"}`)
	if r.status != http.StatusOK || json.Unmarshal(r.body, &added) != nil {
		t.Fatalf("add a memory store again: %d %s", r.status, r.body)
	}
	wantMemoryResource(t, "store added again", added, same, "read_only", "user preferences!", "", "", "/mnt/memory/user-preferences-3")
	var addedID struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(r.body, &addedID)

	got, err := client.Beta.Sessions.Resources.Get(ctx, sess.Resources[0].ID, anthropic.BetaSessionResourceGetParams{SessionID: sess.ID})
	if err != nil {
		t.Fatal(err)
	}
	wantMemoryResource(t, "get", got.AsMemoryStore(), prefs, "read_only", "User Preferences", "What the user likes.",
		"Read this first.", "/mnt/memory/user-preferences")
	mounts := func() []string {
		var out []string
		for it := range client.Beta.Sessions.Resources.ListAutoPaging(ctx, sess.ID, anthropic.BetaSessionResourceListParams{}).All() {
			out = append(out, it.AsMemoryStore().MountPath)
		}
		return out
	}
	if got := strings.Join(mounts(), " "); got != "/mnt/memory/user-preferences /mnt/memory/user-preferences-2 /mnt/memory/renamed /mnt/memory/user-preferences-3" {
		t.Errorf("listed mount paths = %s", got)
	}
	if _, err := client.Beta.Sessions.Resources.Delete(ctx, sess.Resources[1].ID, anthropic.BetaSessionResourceDeleteParams{SessionID: sess.ID}); err != nil {
		t.Fatalf("delete a memory_store resource: %v", err)
	}
	r = addMemoryResource(t, srv, sess.ID, `{"type":"memory_store","memory_store_id":"`+same+`","instructions":"Append only."}`)
	if r.status != http.StatusOK || json.Unmarshal(r.body, &added) != nil {
		t.Fatalf("add after delete: %d %s", r.status, r.body)
	}
	wantMemoryResource(t, "store added after a delete", added, same, "read_write", "user preferences!", "", "Append only.",
		"/mnt/memory/user-preferences-2")
	s, err := client.Beta.Sessions.Get(ctx, sess.ID, anthropic.BetaSessionGetParams{})
	if err != nil || len(s.Resources) != 4 {
		t.Fatalf("session = %v, %v; want 4 resources", s, err)
	}
	wantMemoryResource(t, "session get", s.Resources[2].AsMemoryStore(), same, "read_only", "user preferences!", "", "",
		"/mnt/memory/user-preferences-3")
	if s.Resources[2].ID != addedID.ID {
		t.Errorf("session get: resource 2 is %s, want %s", s.Resources[2].ID, addedID.ID)
	}
}

// TestMemoryStoreResourceRefusals: a memory_store resource names an
// existing store that is not archived, an access of read_write or
// read_only, instructions of at most 4096 characters and nothing else;
// each refusal is a 400 naming the member.
func TestMemoryStoreResourceRefusals(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	client := newClient(t, srv)
	ctx := context.Background()
	store := newMemoryStore(t, client, "Notes", "")
	archived := newMemoryStore(t, client, "Old", "")
	if _, err := client.Beta.MemoryStores.Archive(ctx, archived, anthropic.BetaMemoryStoreArchiveParams{}); err != nil {
		t.Fatal(err)
	}
	sess, err := newSessionWith(t, client, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ what, body, want string }{
		{"an archived store", `{"type":"memory_store","memory_store_id":"` + archived + `"}`, "memory_store_id: memory store"},
		{"an unknown store", `{"type":"memory_store","memory_store_id":"memstore_000000000000000000000000"}`, "memory_store_id: memory store"},
		{"a bad store id", `{"type":"memory_store","memory_store_id":"file_x"}`, "memory_store_id:"},
		{"no store id", `{"type":"memory_store"}`, "memory_store_id: is required"},
		{"a bad access", `{"type":"memory_store","memory_store_id":"` + store + `","access":"write"}`, "access: must be read_write or read_only"},
		{"long instructions", `{"type":"memory_store","memory_store_id":"` + store + `","instructions":"` + strings.Repeat("é", 4097) + `"}`,
			"instructions: must be at most 4096 characters"},
		{"a mount path", `{"type":"memory_store","memory_store_id":"` + store + `","mount_path":"/mnt/memory/x"}`, "mount_path is derived"},
	} {
		r := addMemoryResource(t, srv, sess.ID, c.body)
		if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), c.want) {
			t.Errorf("add %s: %d %s; want 400 mentioning %q", c.what, r.status, r.body, c.want)
		}
	}
	r := addMemoryResource(t, srv, sess.ID, `{"type":"memory_store","memory_store_id":"`+store+`","instructions":"`+strings.Repeat("é", 4096)+`"}`)
	if r.status != http.StatusOK {
		t.Errorf("add with 4096 characters of instructions: %d %s, want 200", r.status, r.body)
	}
	_, err = newSessionWith(t, client, []anthropic.BetaSessionNewParamsResourceUnion{memoryResourceParam(store, "", ""),
		memoryResourceParam(archived, "", "")})
	if e := apiErrorWithStatus(t, err, http.StatusBadRequest); !strings.Contains(e.Error(), "resources[1].memory_store_id") {
		t.Errorf("session with an archived store: %v; want the error to name resources[1].memory_store_id", e)
	}
}

// TestMemoryStoreResourceSelfHosted: in a self-hosted session a
// memory_store resource has mount_path null (the SDK's worker places the
// store under its working directory), wherever it is rendered; stores that
// worker could not place (two of one name, a name that is no folder name)
// are refused.
func TestMemoryStoreResourceSelfHosted(t *testing.T) {
	t.Parallel()
	h := newSelfHosted(t)
	ctx := context.Background()
	store := newMemoryStore(t, h.client, "Team Notes", "Shared.")
	s, err := h.client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(h.agent)}, EnvironmentID: h.envID,
		Resources: []anthropic.BetaSessionNewParamsResourceUnion{memoryResourceParam(store, "", "")}})
	if err != nil {
		t.Fatalf("create self-hosted session with a memory store: %v", err)
	}
	wantNullMount := wantNullMountOf(t)
	wantNullMount("session create", s.Resources[0].RawJSON())
	got, err := h.client.Beta.Sessions.Resources.Get(ctx, s.Resources[0].ID, anthropic.BetaSessionResourceGetParams{SessionID: s.ID})
	if err != nil {
		t.Fatal(err)
	}
	wantNullMount("resource get", got.RawJSON())
	other := newMemoryStore(t, h.client, "Team Notes", "Another store of the same name.")
	slashed := newMemoryStore(t, h.client, "a/b", "")
	for what, body := range map[string]string{
		"the same store again":            `{"type":"memory_store","memory_store_id":"` + store + `"}`,
		"a store of the same name":        `{"type":"memory_store","memory_store_id":"` + other + `"}`,
		"a store whose name is no folder": `{"type":"memory_store","memory_store_id":"` + slashed + `"}`,
	} {
		if r := addMemoryResource(t, h.srv, s.ID, body); r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "memory_store_id") {
			t.Errorf("add %s to a self-hosted session: %d %s; want 400 naming memory_store_id (the SDK's worker places stores at memory/<name>)",
				what, r.status, r.body)
		}
	}
	_, err = h.client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(h.agent)}, EnvironmentID: h.envID,
		Resources: []anthropic.BetaSessionNewParamsResourceUnion{memoryResourceParam(store, "", ""), memoryResourceParam(other, "", "")}})
	if e := apiErrorWithStatus(t, err, http.StatusBadRequest); !strings.Contains(e.Error(), "resources[1].memory_store_id") {
		t.Errorf("self-hosted session with two stores of one name: %v; want 400 naming resources[1].memory_store_id", e)
	}
	renamed := newMemoryStore(t, h.client, "Personal", "")
	r := addMemoryResource(t, h.srv, s.ID, `{"type":"memory_store","memory_store_id":"`+renamed+`","access":"read_only"}`)
	if r.status != http.StatusOK {
		t.Fatalf("add: %d %s", r.status, r.body)
	}
	wantNullMount("resource add", string(r.body))
	page, err := h.client.Beta.Sessions.Resources.List(ctx, s.ID, anthropic.BetaSessionResourceListParams{})
	if err != nil || len(page.Data) != 2 {
		t.Fatalf("list = %v, %v", page, err)
	}
	for _, it := range page.Data {
		wantNullMount("resource list", it.RawJSON())
	}
	sess, err := h.client.Beta.Sessions.Get(ctx, s.ID, anthropic.BetaSessionGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	wantNullMount("session get", sess.Resources[1].RawJSON())
}

// wantNullMountOf returns a check that a memory_store resource's raw JSON
// has mount_path null and a name.
func wantNullMountOf(t *testing.T) func(what, raw string) {
	return func(what, raw string) {
		t.Helper()
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(raw), &m); err != nil || string(m["mount_path"]) != "null" || len(m["name"]) < 3 {
			t.Errorf("%s = %s; want mount_path null and the store's name", what, raw)
		}
	}
}
