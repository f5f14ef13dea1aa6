package httpapi

import (
	"strings"
	"testing"

	"github.com/mangohq/mango/db"
)

// TestMemoryMountName: a store's folder name is its name lowercased, with
// runs of characters other than ASCII letters and digits as one "-", trimmed, at most 64 characters, and
// the store id when nothing usable is left.
func TestMemoryMountName(t *testing.T) {
	const id = "memstore_0123456789abcdefghijklmn"
	long := strings.Repeat("a", 70)
	for name, want := range map[string]string{
		"User Preferences":             "user-preferences",
		"  --Team: notes!! v2 ":        "team-notes-v2",
		"a.b_c-d":                      "a-b-c-d",
		"Ünïcode café":                 "n-code-caf",
		"日本語":                          id,
		"":                             id,
		"..":                           id,
		"-.-":                          id,
		"notes.v2":                     "notes-v2",
		long:                           long[:64],
		strings.Repeat("a", 63) + " b": strings.Repeat("a", 63),
		"x/../../etc":                  "x-etc",
	} {
		got := memoryMountName(name, id)
		if got != want {
			t.Errorf("memoryMountName(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestMemoryMountDedupe: stores of one session whose names give the same
// folder get -2, -3, ... in order, after the mount paths already taken.
func TestMemoryMountDedupe(t *testing.T) {
	rs := []db.ResourceCreate{
		{Type: db.ResourceMemoryStore, MemoryStoreID: "memstore_a", StoreName: "Notes"},
		{Type: db.ResourceFile, MountPath: "/mnt/session/uploads/x"},
		{Type: db.ResourceMemoryStore, MemoryStoreID: "memstore_b", StoreName: "notes"},
		{Type: db.ResourceMemoryStore, MemoryStoreID: "memstore_c", StoreName: "NOTES!"},
		{Type: db.ResourceMemoryStore, MemoryStoreID: "memstore_d", StoreName: "Other"},
	}
	assignMemoryMounts(rs, map[string]bool{"/mnt/memory/notes": true})
	want := []string{"/mnt/memory/notes-2", "/mnt/session/uploads/x", "/mnt/memory/notes-3", "/mnt/memory/notes-4", "/mnt/memory/other"}
	for i, r := range rs {
		if r.MountPath != want[i] {
			t.Errorf("resource %d mount path = %q, want %q", i, r.MountPath, want[i])
		}
	}
}
