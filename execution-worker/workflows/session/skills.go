package session

import (
	"path"

	"github.com/mangohq/mango/execution-worker/agentruntime"
	"github.com/mangohq/mango/execution-worker/sessionfiles"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// sessionSkills returns the skills among a session's resources (deleted
// ones left out) as the system prompt lists them: SKILL.md at the skill's
// mount path in a cloud sandbox, or under skills/<name> relative to the
// working directory where the SDK's self-hosted worker extracts it.
func sessionSkills(resources []*pb.SessionResource, selfHosted bool) []agentruntime.Skill {
	var skills []agentruntime.Skill
	for _, r := range resources {
		if r.GetType() != "skill" || r.GetDeleted() {
			continue
		}
		dir := r.GetMountPath()
		if selfHosted {
			dir = path.Join(sessionfiles.SelfHostedSkillsDir, r.GetSkillName())
		}
		skills = append(skills, agentruntime.Skill{Name: r.GetSkillName(), Description: r.GetSkillDescription(),
			Manifest: path.Join(dir, sessionfiles.SkillManifest)})
	}
	return skills
}
