package session

import (
	"strings"
	"testing"

	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// skillResources are a session's resources: two skills (one deleted) and
// a file.
func skillResources() []*pb.SessionResource {
	return []*pb.SessionResource{
		{Id: "sesrsc_1", Type: "skill", MountPath: "/mnt/session/skills/pdf", SkillId: "skill_pdf", SkillName: "pdf", SkillDescription: "Reads PDF files."},
		{Id: "sesrsc_2", Type: "file", MountPath: "/mnt/session/uploads/a.txt", FileId: "file_1"},
		{Id: "sesrsc_3", Type: "skill", MountPath: "/mnt/session/skills/old", SkillId: "skill_old", SkillName: "old", SkillDescription: "Deleted.", Deleted: true},
		{Id: "sesrsc_4", Type: "skill", MountPath: "/mnt/session/skills/csv", SkillId: "skill_csv", SkillName: "csv", SkillDescription: "Cleans CSV files."},
	}
}

// The turn's system prompt is the agent's followed by the session's
// skills, at their sandbox paths, or relative to the working directory in
// a self-hosted session.
func TestBuildCoreListsSkills(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, environment string
		want              []string
	}{
		{"cloud", `{"type":"cloud"}`, []string{
			"- csv (/mnt/session/skills/csv/SKILL.md): Cleans CSV files.\n- pdf (/mnt/session/skills/pdf/SKILL.md): Reads PDF files."}},
		{"self-hosted", `{"type":"self_hosted"}`, []string{
			"Relative paths are relative to the working directory.",
			"- csv (skills/csv/SKILL.md): Cleans CSV files.\n- pdf (skills/pdf/SKILL.md): Reads PDF files."}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr := &turn{a: &TurnActivities{}, sid: "sesn_1", store: &cpStore{}, run: &pb.GetRunResponse{
				Agent: `{"system":"You are helpful.","model":{"id":"m"}}`, Tools: `[]`, EnvironmentConfig: tc.environment,
				TurnContext: &pb.TurnContext{Resources: skillResources()},
			}}
			if err := tr.buildCore(t.Context()); err != nil {
				t.Fatalf("buildCore = %v", err)
			}
			sys := tr.agent.System
			if !strings.HasPrefix(sys, "You are helpful.\n\n# Skills\n") || strings.Contains(sys, "skills/old") || strings.Contains(sys, "uploads") {
				t.Errorf("system prompt =\n%s\nwant the agent's, then the skills section without the deleted skill or the file", sys)
			}
			for _, w := range tc.want {
				if !strings.Contains(sys, w) {
					t.Errorf("system prompt =\n%s\nwant it to contain %q", sys, w)
				}
			}
		})
	}
	// No skills: the agent's system prompt unchanged.
	tr := &turn{a: &TurnActivities{}, sid: "sesn_1", store: &cpStore{}, run: &pb.GetRunResponse{
		Agent: `{"system":"You are helpful.","model":{"id":"m"}}`, Tools: `[]`}}
	if err := tr.buildCore(t.Context()); err != nil {
		t.Fatalf("buildCore = %v", err)
	}
	if tr.agent.System != "You are helpful." {
		t.Errorf("system prompt without skills = %q, want the agent's", tr.agent.System)
	}
}
