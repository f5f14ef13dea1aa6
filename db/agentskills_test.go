package db_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/db/dbtest"
)

// addSkill stores a skill with versions (ids given, oldest first).
func addSkill(t *testing.T, store *db.Store, id, name, source string, at time.Time, versions ...string) {
	t.Helper()
	ctx := context.Background()
	sk := &db.Skill{ID: id, Name: name, DisplayName: name, Source: source, CreatedAt: at}
	for i, vid := range versions {
		v := &db.SkillVersion{ID: vid, SkillID: id, Name: name, Description: "d", StorageKey: "k-" + vid, SizeBytes: 1,
			FileCount: 1, ContentSHA256: "sha-" + vid, CreatedAt: at.Add(time.Duration(i) * time.Second)}
		var err error
		if i == 0 {
			err = store.SkillCreate(ctx, sk, v)
		} else {
			err = store.SkillVersionCreate(ctx, v)
		}
		if err != nil {
			t.Fatalf("add skill %s version %s: %v", id, vid, err)
		}
	}
}

func wantInUse(t *testing.T, what string, err error, agents ...string) {
	t.Helper()
	var inUse *db.SkillInUseError
	if !errors.As(err, &inUse) || !errors.Is(err, db.ErrConflict) || !slices.Equal(inUse.Agents, agents) {
		t.Fatalf("%s: err = %v; want a SkillInUseError (a conflict) naming %v", what, err, agents)
	}
}

// TestSkillInUse: a skill (or version) that the current version of a
// non-archived agent names cannot be deleted; once the agent moves on or
// is archived, it can.
func TestSkillInUse(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	addSkill(t, store, "skill_a", "alpha", db.SkillCustom, t0, "skillver_a1", "skillver_a2")
	addSkill(t, store, "skill_b", "beta", db.SkillCustom, t0, "skillver_b1", "skillver_b2")
	spec := json.RawMessage(`{}`)
	refs := []db.SkillRef{{SkillID: "skill_a", VersionID: "skillver_a1"}, {SkillID: "skill_b", VersionID: "skillver_b2"}}
	if _, err := store.AgentCreate(ctx, "agent_1", spec, refs, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := store.AgentCreate(ctx, "agent_2", spec, refs[:1], t0); err != nil {
		t.Fatal(err)
	}
	_, err := store.SkillDelete(ctx, "skill_a")
	wantInUse(t, "deleting a skill two agents use", err, "agent_1", "agent_2")
	_, err = store.SkillVersionDelete(ctx, "skill_a", "skillver_a1", t0)
	wantInUse(t, "deleting a pinned version", err, "agent_1", "agent_2")
	if _, err := store.SkillVersionDelete(ctx, "skill_a", "skillver_a2", t0); err != nil {
		t.Fatalf("deleting a version no agent pins: %v", err)
	}

	// agent_1 moves to a version without skill_a; agent_2 is archived.
	if _, err := store.AgentUpdate(ctx, "agent_1", t0, func(*db.Agent) (json.RawMessage, []db.SkillRef, error) {
		return spec, refs[1:], nil
	}); err != nil {
		t.Fatal(err)
	}
	_, err = store.SkillDelete(ctx, "skill_a")
	wantInUse(t, "deleting a skill agent_2 still uses", err, "agent_2")
	if _, err := store.AgentArchive(ctx, "agent_2", t0); err != nil {
		t.Fatal(err)
	}
	if keys, err := store.SkillDelete(ctx, "skill_a"); err != nil || len(keys) != 1 {
		t.Fatalf("deleting a skill only old and archived versions name = %v, %v; want its one remaining key", keys, err)
	}
	_, err = store.SkillDelete(ctx, "skill_b")
	wantInUse(t, "skill_b of agent_1's current version", err, "agent_1")
}

// TestAgentSkillRefsMissing: an agent version naming a skill or version
// that is gone is refused, and nothing is written.
func TestAgentSkillRefsMissing(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	addSkill(t, store, "skill_a", "alpha", db.SkillCustom, t0, "skillver_a1")
	addSkill(t, store, "skill_b", "beta", db.SkillCustom, t0, "skillver_b1")
	for _, ref := range []db.SkillRef{{SkillID: "skill_gone", VersionID: "skillver_a1"}, {SkillID: "skill_a", VersionID: "skillver_gone"},
		{SkillID: "skill_a", VersionID: "skillver_b1"}} {
		_, err := store.AgentCreate(ctx, "agent_1", json.RawMessage(`{}`), []db.SkillRef{ref}, t0)
		if !errors.Is(err, db.ErrSkillRefMissing) || !strings.Contains(err.Error(), ref.SkillID) {
			t.Fatalf("agent naming %+v: err = %v; want ErrSkillRefMissing naming %s", ref, err, ref.SkillID)
		}
		if _, err := store.AgentGet(ctx, "agent_1"); !errors.Is(err, db.ErrNotFound) {
			t.Fatalf("a refused agent create left the agent: err = %v", err)
		}
	}
}

// TestSkillListSource: the source filter of the skill list.
func TestSkillListSource(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	addSkill(t, store, "skill_a", "alpha", db.SkillCustom, t0, "skillver_a1")
	addSkill(t, store, "pdf", "pdf", db.SkillAnthropic, t0.Add(time.Second), "skillver_p1")
	for source, want := range map[string]string{"": "pdf,skill_a", db.SkillCustom: "skill_a", db.SkillAnthropic: "pdf"} {
		got, _, err := store.SkillList(ctx, source, nil, 10)
		var gotIDs []string
		for _, s := range got {
			gotIDs = append(gotIDs, s.ID)
			if want := map[string]string{"pdf": db.SkillAnthropic, "skill_a": db.SkillCustom}[s.ID]; s.Source != want {
				t.Errorf("skill %s has source %q; want %q", s.ID, s.Source, want)
			}
		}
		if err != nil || strings.Join(gotIDs, ",") != want {
			t.Errorf("list source %q = %v, %v; want %s", source, gotIDs, err, want)
		}
	}
}

// TestSkillResources: a session's skill resources are written with it,
// hidden from the client calls and listed for workers with their skill's
// name and description.
func TestSkillResources(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	addSkill(t, store, "skill_a", "alpha", db.SkillCustom, t0, "skillver_a1", "skillver_a2")
	_, _, err := store.SessionCreate(ctx, db.SessionCreateParams{ID: "sesn_s", AgentID: "agent_1", AgentVersion: 1,
		Agent: json.RawMessage(`{"name":"a"}`), Provider: "local", Metadata: map[string]string{}, Now: t0,
		Resources: []db.ResourceCreate{{ID: "sesrsc_g", Type: db.ResourceRepository, MountPath: "/workspace/repo",
			URL: "https://example.com/o/repo.git"}},
		Skills: []db.SessionSkill{{ResourceID: "sesrsc_s", SkillID: "skill_a", VersionID: "skillver_a1", Name: "alpha"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	live, err := store.ResourceList(ctx, "sesn_s", nil, 10)
	if err != nil || len(live) != 1 || live[0].ID != "sesrsc_g" {
		t.Fatalf("client list = %+v, %v; want the repository alone", live, err)
	}
	bySession, err := store.ResourcesOfSessions(ctx, []string{"sesn_s"})
	if err != nil || len(bySession["sesn_s"]) != 1 {
		t.Fatalf("resources of sessions = %+v, %v; want the repository alone", bySession, err)
	}
	if _, err := store.ResourceGet(ctx, "sesn_s", "sesrsc_s"); !errors.Is(err, db.ErrNotFound) {
		t.Fatalf("client get of a skill resource: err = %v; want ErrNotFound", err)
	}
	if _, err := store.ResourceDelete(ctx, "sesn_s", "sesrsc_s", t0); !errors.Is(err, db.ErrNotFound) {
		t.Fatalf("client delete of a skill resource: err = %v; want ErrNotFound", err)
	}
	for range db.MaxResourcesPerSession - 1 {
		// The skill resource does not count toward the limit.
		if _, err := store.ResourceAdd(ctx, "sesn_s", db.ResourceCreate{ID: "sesrsc_" + t0.Format("150405.000000"),
			Type: db.ResourceRepository, MountPath: "/workspace/" + t0.Format("150405.000000"), URL: "https://example.com/r.git"}, t0); err != nil {
			t.Fatalf("add resource: %v", err)
		}
		t0 = t0.Add(time.Microsecond)
	}
	worker, err := store.ResourcesForWorker(ctx, "sesn_s")
	if err != nil || len(worker) != db.MaxResourcesPerSession+1 {
		t.Fatalf("worker list = %d resources, %v; want %d", len(worker), err, db.MaxResourcesPerSession+1)
	}
	sk := worker[len(worker)-1]
	if sk.ID != "sesrsc_s" || sk.Type != db.ResourceSkill || sk.MountPath != "/mnt/session/skills/alpha" || sk.SkillID != "skill_a" ||
		sk.SkillVersionID != "skillver_a1" || sk.SkillName != "alpha" || sk.SkillDescription != "d" {
		t.Fatalf("worker's skill resource = %+v; want skill_a/skillver_a1 named alpha at /mnt/session/skills/alpha", sk)
	}
	if r, err := store.SkillResource(ctx, "sesn_s", "sesrsc_s"); err != nil || r.SkillVersionID != "skillver_a1" {
		t.Fatalf("skill resource = %+v, %v", r, err)
	}
	if _, err := store.SkillResource(ctx, "sesn_s", "sesrsc_g"); !errors.Is(err, db.ErrNotFound) {
		t.Fatalf("a repository as a skill resource: err = %v; want ErrNotFound", err)
	}
	// The version deleted: the row stays, its description is gone.
	if _, err := store.SkillVersionDelete(ctx, "skill_a", "skillver_a1", t0); err != nil {
		t.Fatal(err)
	}
	worker, _ = store.ResourcesForWorker(ctx, "sesn_s")
	if sk := worker[len(worker)-1]; sk.SkillName != "alpha" || sk.SkillDescription != "" {
		t.Fatalf("skill resource of a deleted version = %+v; want name alpha (the skill's), no description", sk)
	}
}

// TestSkillCatalogApply: new skills and changed content get versions,
// unchanged content none, a skill gone from the catalog is deleted unless
// an agent uses it.
func TestSkillCatalogApply(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	ver := func(id, sha string) *db.SkillVersion {
		return &db.SkillVersion{ID: id, Name: "x", Description: "d", StorageKey: "k-" + id, SizeBytes: 1, FileCount: 1, ContentSHA256: sha, CreatedAt: t0}
	}
	cat := func(id string, v *db.SkillVersion) db.CatalogSkill {
		if v != nil {
			v.Name = id
		}
		return db.CatalogSkill{ID: id, Name: id, DisplayName: id, Version: v}
	}
	res, err := store.SkillCatalogApply(ctx, []db.CatalogSkill{cat("pdf", ver("skillver_p1", "s1")), cat("xlsx", ver("skillver_x1", "s1")),
		cat("docx", ver("skillver_d1", "s1"))}, t0)
	if err != nil || strings.Join(res.Added, ",") != "pdf,xlsx,docx" || len(res.Removed)+len(res.Kept)+len(res.UnusedKeys) != 0 {
		t.Fatalf("first import = %+v, %v; want three skills added", res, err)
	}
	state, err := store.SkillCatalog(ctx)
	if err != nil || len(state) != 3 || state["pdf"] != "s1" {
		t.Fatalf("catalog state = %v, %v", state, err)
	}
	if sk, err := store.SkillGet(ctx, "pdf"); err != nil || sk.Source != db.SkillAnthropic {
		t.Fatalf("imported skill = %+v, %v; want source anthropic", sk, err)
	}
	if _, err := store.AgentCreate(ctx, "agent_1", json.RawMessage(`{}`), []db.SkillRef{{SkillID: "docx", VersionID: "skillver_d1"}}, t0); err != nil {
		t.Fatal(err)
	}
	t1 := t0.Add(time.Second)
	v2 := ver("skillver_p2", "s2")
	v2.CreatedAt = t1
	res, err = store.SkillCatalogApply(ctx, []db.CatalogSkill{cat("pdf", v2), cat("xlsx", ver("skillver_x2", "s1"))}, t1)
	if err != nil || strings.Join(res.Added, ",") != "pdf" || strings.Join(res.Removed, ",") != "" ||
		len(res.Kept) != 1 || res.Kept[0].SkillID != "docx" || strings.Join(res.UnusedKeys, ",") != "k-skillver_x2" {
		t.Fatalf("second import = %+v, %v; want pdf's new version, xlsx unchanged (its new key unused), docx kept", res, err)
	}
	if sk, _ := store.SkillGet(ctx, "pdf"); sk.LatestVersionID != "skillver_p2" {
		t.Fatalf("pdf's latest = %s; want skillver_p2", sk.LatestVersionID)
	}
	if _, err := store.AgentArchive(ctx, "agent_1", t1); err != nil {
		t.Fatal(err)
	}
	res, err = store.SkillCatalogApply(ctx, []db.CatalogSkill{cat("pdf", nil)}, t1)
	slices.Sort(res.Removed)
	if err != nil || strings.Join(res.Removed, ",") != "docx,xlsx" || len(res.UnusedKeys) != 2 || len(res.Added) != 0 {
		t.Fatalf("third import = %+v, %v; want docx and xlsx removed with their keys", res, err)
	}
}

// TestSkillDeleteRacesAgentCreate: an agent naming a skill and the
// skill's deletion, run together, never both succeed: either the agent
// holds the skill (the delete answers in use) or the skill is gone (the
// agent is refused).
func TestSkillDeleteRacesAgentCreate(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	for i := range 20 {
		id, vid, agentID := fmt.Sprintf("skill_r%d", i), fmt.Sprintf("skillver_r%d", i), fmt.Sprintf("agent_r%d", i)
		addSkill(t, store, id, "race", db.SkillCustom, t0, vid)
		start := make(chan struct{})
		var agentErr, deleteErr error
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			_, agentErr = store.AgentCreate(ctx, agentID, json.RawMessage(`{}`), []db.SkillRef{{SkillID: id, VersionID: vid}}, t0)
		}()
		go func() {
			defer wg.Done()
			<-start
			_, deleteErr = store.SkillDelete(ctx, id)
		}()
		close(start)
		wg.Wait()
		var inUse *db.SkillInUseError
		switch {
		case agentErr == nil && errors.As(deleteErr, &inUse):
		case deleteErr == nil && errors.Is(agentErr, db.ErrSkillRefMissing):
		default:
			t.Fatalf("round %d: agent create: %v, skill delete: %v; want exactly one to succeed, the other refused", i, agentErr, deleteErr)
		}
	}
}
