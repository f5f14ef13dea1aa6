package db_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/db/dbtest"
)

// TestSkillLifecycle: a skill holds its versions, the newest is its
// latest, "latest" resolves to it; its only version cannot be deleted;
// deleting the skill deletes its versions and returns their keys.
func TestSkillLifecycle(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	sk := &db.Skill{ID: "skill_a", Name: "csv-tools", DisplayName: "CSV", CreatedAt: t0}
	v1 := &db.SkillVersion{ID: "skillver_1", Name: "csv-tools", Description: "d1", StorageKey: "files/k1", SizeBytes: 10, FileCount: 1, CreatedAt: t0}
	if err := store.SkillCreate(ctx, sk, v1); err != nil {
		t.Fatal(err)
	}
	got, err := store.SkillGet(ctx, "skill_a")
	if err != nil || got.LatestVersionID != "skillver_1" || got.Name != "csv-tools" || !got.UpdatedAt.Equal(t0) {
		t.Fatalf("get skill = %+v, %v; want latest skillver_1", got, err)
	}
	if _, err := store.SkillVersionDelete(ctx, "skill_a", "skillver_1", t0); !errors.Is(err, db.ErrLastSkillVersion) {
		t.Fatalf("deleting the only version: err = %v; want ErrLastSkillVersion", err)
	}
	t1 := t0.Add(time.Second)
	v2 := &db.SkillVersion{ID: "skillver_2", SkillID: "skill_a", Name: "csv-tools", Description: "d2", StorageKey: "files/k2", SizeBytes: 20, FileCount: 2, CreatedAt: t1}
	if err := store.SkillVersionCreate(ctx, v2); err != nil {
		t.Fatal(err)
	}
	if got, _ := store.SkillGet(ctx, "skill_a"); got.LatestVersionID != "skillver_2" || !got.UpdatedAt.Equal(t1) {
		t.Fatalf("after a second version, skill = %+v; want latest skillver_2 updated at %v", got, t1)
	}
	if v, err := store.SkillVersionGet(ctx, "skill_a", "latest"); err != nil || v.ID != "skillver_2" || v.FileCount != 2 {
		t.Fatalf("latest = %+v, %v; want skillver_2", v, err)
	}
	if _, err := store.SkillVersionGet(ctx, "skill_other", "skillver_2"); !errors.Is(err, db.ErrNotFound) {
		t.Fatalf("a version under another skill: err = %v; want ErrNotFound", err)
	}
	page, more, err := store.SkillVersionList(ctx, "skill_a", nil, 1)
	if err != nil || len(page) != 1 || page[0].ID != "skillver_2" || !more {
		t.Fatalf("versions page 1 = %+v, %v, %v; want [skillver_2] and more", page, more, err)
	}
	page, more, err = store.SkillVersionList(ctx, "skill_a", &db.Cursor{CreatedAt: page[0].CreatedAt, ID: page[0].ID}, 1)
	if err != nil || len(page) != 1 || page[0].ID != "skillver_1" || more {
		t.Fatalf("versions page 2 = %+v, %v, %v; want [skillver_1], no more", page, more, err)
	}
	v3 := *v2
	v3.ID, v3.SkillID = "skillver_3", "skill_missing"
	if err := store.SkillVersionCreate(ctx, &v3); !errors.Is(err, db.ErrNotFound) {
		t.Fatalf("a version of a missing skill: err = %v; want ErrNotFound", err)
	}
	keys, err := store.SkillDelete(ctx, "skill_a")
	slices.Sort(keys)
	if err != nil || strings.Join(keys, ",") != "files/k1,files/k2" {
		t.Fatalf("delete skill = %v, %v; want the keys of both versions", keys, err)
	}
	if _, err := store.SkillGet(ctx, "skill_a"); !errors.Is(err, db.ErrNotFound) {
		t.Fatalf("deleted skill: err = %v; want ErrNotFound", err)
	}
	if _, err := store.SkillDelete(ctx, "skill_a"); !errors.Is(err, db.ErrNotFound) {
		t.Fatalf("deleting it again: err = %v; want ErrNotFound", err)
	}
}

// TestSkillBlobsAreReferenced: the orphan sweeps leave the bytes of a
// skill version alone and free them once the version is gone.
func TestSkillBlobsAreReferenced(t *testing.T) {
	t.Parallel()
	store := dbtest.Store(t)
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	if _, err := store.BlobPut(ctx, "files/skillblob", strings.NewReader("zip"), t0); err != nil {
		t.Fatal(err)
	}
	err := store.SkillCreate(ctx, &db.Skill{ID: "skill_b", Name: "b", DisplayName: "b", CreatedAt: t0},
		&db.SkillVersion{ID: "skillver_b", Name: "b", Description: "d", StorageKey: "files/skillblob", SizeBytes: 3, FileCount: 1, CreatedAt: t0})
	if err != nil {
		t.Fatal(err)
	}
	free, err := store.FileKeysUnreferenced(ctx, []string{"files/skillblob", "files/nobody"})
	if err != nil || strings.Join(free, ",") != "files/nobody" {
		t.Fatalf("unreferenced keys = %v, %v; want only files/nobody", free, err)
	}
	if n, err := store.BlobOrphansDelete(ctx, t0.Add(24*time.Hour), 100); err != nil || n != 0 {
		t.Fatalf("orphan sweep deleted %d blobs (%v); want none: the skill version references the blob", n, err)
	}
	if _, err := store.SkillDelete(ctx, "skill_b"); err != nil {
		t.Fatal(err)
	}
	if n, err := store.BlobOrphansDelete(ctx, t0.Add(24*time.Hour), 100); err != nil || n != 1 {
		t.Fatalf("orphan sweep after the skill's deletion deleted %d blobs (%v); want 1", n, err)
	}
}
