package httpapi

import (
	"context"
	"errors"
	"fmt"

	"github.com/mangohq/mango/api-server/internal/agentspec"
	"github.com/mangohq/mango/api-server/internal/apierror"
	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/db"
)

// Skills of agents. An agent version's skills are resolved when it is
// written (agent create and update, session create with
// agent_with_overrides): a version omitted or "latest" becomes the
// skill's latest version id, a given version must exist; a custom skill
// must be an uploaded one, an anthropic skill one imported from the
// catalog. Two skills of one agent cannot share an id or a name (they
// would share a directory in the sandbox).

// resolvedSkill is a skill of an agent resolved to one version.
type resolvedSkill struct {
	SkillID   string
	VersionID string
	Name      string
}

// resolveSkills resolves skills in place (Version becomes a version id).
// prefix ("" or "agent.") starts the member paths that errors name.
func (a *API) resolveSkills(ctx context.Context, skills []agentspec.Skill, prefix string) ([]resolvedSkill, error) {
	out := make([]resolvedSkill, 0, len(skills))
	byID, byName := map[string]int{}, map[string]int{}
	for i := range skills {
		sk := &skills[i]
		p := fmt.Sprintf("%sskills[%d]", prefix, i)
		if j, dup := byID[sk.SkillID]; dup {
			return nil, apierror.Invalid("%s.skill_id: skill %q is also %sskills[%d]; list each skill once", p, sk.SkillID, prefix, j)
		}
		byID[sk.SkillID] = i
		r, err := a.resolveSkill(ctx, sk, p)
		if err != nil {
			return nil, err
		}
		if j, dup := byName[r.Name]; dup {
			return nil, apierror.Invalid("%s.skill_id: skill %q is named %q like %sskills[%d]; two skills of an agent cannot share a name",
				p, sk.SkillID, r.Name, prefix, j)
		}
		byName[r.Name] = i
		sk.Version = r.VersionID
		out = append(out, *r)
	}
	return out, nil
}

func (a *API) resolveSkill(ctx context.Context, sk *agentspec.Skill, p string) (*resolvedSkill, error) {
	var stored *db.Skill
	var err error
	if sk.Type == db.SkillAnthropic || ids.Valid(ids.Skill, sk.SkillID) {
		stored, err = a.deps.Store.SkillGet(ctx, sk.SkillID)
	} else {
		err = db.ErrNotFound
	}
	switch {
	case errors.Is(err, db.ErrNotFound) || (err == nil && stored.Source != sk.Type):
		if sk.Type == db.SkillAnthropic {
			return nil, apierror.Invalid("%s.skill_id: no Anthropic skill %q in this server's skills catalog (MANGO_SKILLS_CATALOG)", p, sk.SkillID)
		}
		return nil, apierror.Invalid("%s.skill_id: no custom skill %q (upload it with POST /v1/skills)", p, sk.SkillID)
	case err != nil:
		return nil, err
	}
	if sk.Version == "latest" {
		return &resolvedSkill{SkillID: sk.SkillID, VersionID: stored.LatestVersionID, Name: stored.Name}, nil
	}
	if !ids.Valid(ids.SkillVersion, sk.Version) {
		return nil, skillVersionInvalid(p, sk)
	}
	v, err := a.deps.Store.SkillVersionGet(ctx, sk.SkillID, sk.Version)
	switch {
	case errors.Is(err, db.ErrNotFound):
		return nil, skillVersionInvalid(p, sk)
	case err != nil:
		return nil, err
	}
	return &resolvedSkill{SkillID: sk.SkillID, VersionID: v.ID, Name: v.Name}, nil
}

func skillVersionInvalid(p string, sk *agentspec.Skill) error {
	return apierror.Invalid("%s.version: skill %q has no version %q (omit version or send \"latest\" for its latest)", p, sk.SkillID, sk.Version)
}

// skillRefs are the references an agent version records.
func skillRefs(rs []resolvedSkill) []db.SkillRef {
	out := make([]db.SkillRef, 0, len(rs))
	for _, r := range rs {
		out = append(out, db.SkillRef{SkillID: r.SkillID, VersionID: r.VersionID})
	}
	return out
}

// sessionSkills are the skill resources of a new session.
func sessionSkills(rs []resolvedSkill) []db.SessionSkill {
	out := make([]db.SessionSkill, 0, len(rs))
	for _, r := range rs {
		out = append(out, db.SessionSkill{ResourceID: ids.New(ids.Resource), SkillID: r.SkillID, VersionID: r.VersionID, Name: r.Name})
	}
	return out
}

// skillRefGone answers an agent or session write whose skill was deleted
// after it was resolved.
func skillRefGone(err error, prefix string) error {
	if errors.Is(err, db.ErrSkillRefMissing) {
		return apierror.Invalid("%sskills: a skill or skill version it names was deleted while the request was handled", prefix)
	}
	return err
}
