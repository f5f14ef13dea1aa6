package session

import (
	"slices"
	"strings"
	"testing"

	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// memoryResources are a session's resources: three memory stores (one
// deleted) and a skill.
func memoryResources(mount func(string) string) []*pb.SessionResource {
	return []*pb.SessionResource{
		{Id: "sesrsc_1", Type: "memory_store", MountPath: mount("/mnt/memory/team-notes"), MemoryStoreId: "memstore_a", MemoryAccess: "read_write",
			MemoryStoreName: "Team notes", MemoryStoreDescription: "Learned.", MemoryInstructions: "Keep it short."},
		{Id: "sesrsc_2", Type: "skill", MountPath: "/mnt/session/skills/pdf", SkillName: "pdf"},
		{Id: "sesrsc_3", Type: "memory_store", MountPath: mount("/mnt/memory/refs"), MemoryStoreId: "memstore_b", MemoryAccess: "read_only", MemoryStoreName: "refs"},
		{Id: "sesrsc_4", Type: "memory_store", MountPath: mount("/mnt/memory/gone"), MemoryStoreId: "memstore_c", MemoryAccess: "read_only",
			MemoryStoreName: "gone", Deleted: true},
	}
}

// The turn's system prompt lists the session's memory stores at their
// mount paths, or (self-hosted: no mount path) under memory/<store name>
// relative to the working directory, as the SDK's worker places them;
// the read_only mounts are the write and edit tools' read-only roots.
func TestBuildCoreListsMemoryStores(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, environment string
		mount             func(string) string
		want              []string
		readOnly          []string
	}{
		{"cloud", `{"type":"cloud"}`, func(p string) string { return p }, []string{
			"- refs (/mnt/memory/refs, read_only)\n- Team notes (/mnt/memory/team-notes, read_write): Learned.\n  Instructions: Keep it short."},
			[]string{"/mnt/memory/refs"}},
		{"self-hosted", `{"type":"self_hosted"}`, func(string) string { return "" }, []string{
			"Relative paths are relative to the working directory.",
			"- Team notes (memory/Team notes, read_write): Learned.\n  Instructions: Keep it short.\n- refs (memory/refs, read_only)"},
			nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr := &turn{a: &TurnActivities{}, sid: "sesn_1", store: &cpStore{}, run: &pb.GetRunResponse{
				Agent: `{"system":"You are helpful.","model":{"id":"m"}}`, Tools: `[]`, EnvironmentConfig: tc.environment,
				TurnContext: &pb.TurnContext{Resources: memoryResources(tc.mount)},
			}}
			if err := tr.buildCore(t.Context()); err != nil {
				t.Fatalf("buildCore = %v", err)
			}
			sys := tr.agent.System
			if !strings.Contains(sys, "\n\n# Memory\n") || strings.Contains(sys, "gone") || strings.Index(sys, "# Skills") > strings.Index(sys, "# Memory") {
				t.Errorf("system prompt =\n%s\nwant the skills, then the memory section without the deleted store", sys)
			}
			for _, w := range tc.want {
				if !strings.Contains(sys, w) {
					t.Errorf("system prompt =\n%s\nwant it to contain %q", sys, w)
				}
			}
			if !slices.Equal(tr.readOnly, tc.readOnly) {
				t.Errorf("read-only roots %q, want %q", tr.readOnly, tc.readOnly)
			}
		})
	}
}
