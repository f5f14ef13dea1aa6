-- +goose Up

-- Skills on agents and sessions (issue 32).
--
-- A skill's source is 'custom' (uploaded through the Skills API) or
-- 'anthropic' (imported at api-server start from MANGO_SKILLS_CATALOG,
-- read-only through the API). content_sha256 is the hash of a version's
-- files (skillbundle.Bundle.ContentSHA256, independent of the archive's
-- dates): the catalog importer adds a version only when it differs from
-- the latest. Versions stored before this migration have ''.
ALTER TABLE skills ADD COLUMN source text NOT NULL DEFAULT 'custom'
    CHECK (source IN ('custom', 'anthropic'));
ALTER TABLE skill_versions ADD COLUMN content_sha256 text NOT NULL DEFAULT '';

-- The skills each agent version names, with the version each resolved to
-- (db/agents.go). Written in the agent-version transaction, which holds
-- the skills FOR SHARE; deleting a skill (or a version) locks it FOR
-- UPDATE and refuses while the current version of a non-archived agent
-- names it. Rows of old agent versions go with the skill.
CREATE TABLE agent_skill_refs (
    agent_id         text NOT NULL,
    agent_version    bigint NOT NULL,
    skill_id         text NOT NULL REFERENCES skills (id) ON DELETE CASCADE,
    skill_version_id text NOT NULL REFERENCES skill_versions (id) ON DELETE CASCADE,
    PRIMARY KEY (agent_id, agent_version, skill_id),
    FOREIGN KEY (agent_id, agent_version) REFERENCES agent_versions (agent_id, version) ON DELETE CASCADE
);
CREATE INDEX agent_skill_refs_skill_idx ON agent_skill_refs (skill_id, skill_version_id);

-- A session's skills are session resources of type 'skill', one per skill
-- of its agent snapshot, mounted at /mnt/session/skills/<name>. They are
-- hidden from clients and served to workers. skill_version_id is not a
-- foreign key: a session keeps its row when the version is deleted, and
-- the worker reports the missing version at placement.
ALTER TABLE session_resources ADD COLUMN skill_id text;
ALTER TABLE session_resources ADD COLUMN skill_version_id text;
ALTER TABLE session_resources DROP CONSTRAINT session_resources_type_check;
ALTER TABLE session_resources ADD CONSTRAINT session_resources_type_check
    CHECK (type IN ('file', 'github_repository', 'skill'));
ALTER TABLE session_resources ADD CONSTRAINT session_resources_skill_check
    CHECK ((type = 'skill') = (skill_id IS NOT NULL AND skill_version_id IS NOT NULL));
-- Self-hosted workers may read the skills of their sessions (db.SkillReadable).
CREATE INDEX session_resources_skill_idx ON session_resources (skill_id, session_id) WHERE type = 'skill' AND deleted_at IS NULL;

-- +goose Down
DROP INDEX session_resources_skill_idx;
DELETE FROM session_resources WHERE type = 'skill';
ALTER TABLE session_resources DROP CONSTRAINT session_resources_skill_check;
ALTER TABLE session_resources DROP CONSTRAINT session_resources_type_check;
ALTER TABLE session_resources ADD CONSTRAINT session_resources_type_check
    CHECK (type IN ('file', 'github_repository'));
ALTER TABLE session_resources DROP COLUMN skill_version_id;
ALTER TABLE session_resources DROP COLUMN skill_id;
DROP TABLE agent_skill_refs;
DELETE FROM skills WHERE source = 'anthropic';
ALTER TABLE skill_versions DROP COLUMN content_sha256;
ALTER TABLE skills DROP COLUMN source;
