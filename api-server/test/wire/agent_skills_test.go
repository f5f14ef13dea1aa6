package wire

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/mangohq/mango/api-server/internal/testserver"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

// skillsEnv is a server whose Anthropic skills catalog holds "pdf", with
// one uploaded custom skill (csv-tools).
type skillsEnv struct {
	srv    *testserver.Server
	client anthropic.Client
	custom *anthropic.BetaSkill
	pdf    *anthropic.BetaSkill
}

func newSkillsEnv(t *testing.T) *skillsEnv {
	t.Helper()
	catalog := t.TempDir()
	for p, content := range map[string]string{
		"pdf/SKILL.md":        "---\nname: pdf\ndescription: Read and fill PDF forms.\n---\n\n# PDF\n",
		"pdf/scripts/fill.py": "#!/usr/bin/env python3\nprint('fill')\n",
	} {
		if err := os.MkdirAll(filepath.Join(catalog, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(catalog, p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e := &skillsEnv{srv: testserver.Start(t, testserver.WithEnv("MANGO_SKILLS_CATALOG", catalog))}
	e.client = newClient(t, e.srv)
	ctx := context.Background()
	var err error
	if e.custom, err = e.client.Beta.Skills.New(ctx, anthropic.BetaSkillNewParams{
		Files: skillFiles("csv-tools/SKILL.md", skillMD, "csv-tools/scripts/count.sh", countScript)}); err != nil {
		t.Fatalf("create skill: %v", err)
	}
	if e.pdf, err = e.client.Beta.Skills.Get(ctx, "pdf", anthropic.BetaSkillGetParams{}); err != nil {
		t.Fatalf("get the catalog's pdf skill: %v", err)
	}
	return e
}

func customSkill(id string, version ...string) anthropic.BetaManagedAgentsSkillParamsUnion {
	p := &anthropic.BetaManagedAgentsCustomSkillParams{SkillID: id}
	if len(version) > 0 {
		p.Version = anthropic.String(version[0])
	}
	return anthropic.BetaManagedAgentsSkillParamsUnion{OfCustom: p}
}

func anthropicSkill(id string) anthropic.BetaManagedAgentsSkillParamsUnion {
	return anthropic.BetaManagedAgentsSkillParamsUnion{OfAnthropic: &anthropic.BetaManagedAgentsAnthropicSkillParams{SkillID: id}}
}

func (e *skillsEnv) newAgent(name string, skills ...anthropic.BetaManagedAgentsSkillParamsUnion) (*anthropic.BetaManagedAgentsAgent, error) {
	return e.client.Beta.Agents.New(context.Background(), anthropic.BetaAgentNewParams{Name: name,
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "fake"}, Skills: skills})
}

// wantInvalid asserts a 400 whose message contains every one of want.
func wantInvalid(t *testing.T, what string, err error, status int, want ...string) {
	t.Helper()
	apiErr := apiErrorWithStatus(t, err, status)
	for _, w := range want {
		if !strings.Contains(apiErr.RawJSON(), w) {
			t.Errorf("%s: error %s does not mention %q", what, apiErr.RawJSON(), w)
		}
	}
}

// TestAgentSkills: an agent's skills resolve to versions (omitted: the
// latest at the time; pinned: kept after a newer upload), an update that
// resolves to the same versions makes no new agent version, and the
// refusals name the member and the id.
func TestAgentSkills(t *testing.T) {
	t.Parallel()
	e := newSkillsEnv(t)
	ctx := context.Background()
	first := e.custom.LatestVersionID
	ag, err := e.newAgent("latest", customSkill(e.custom.ID), anthropicSkill("pdf"))
	if err != nil {
		t.Fatalf("agent with a custom and a catalog skill: %v", err)
	}
	if len(ag.Skills) != 2 || ag.Skills[0].Type != "custom" || ag.Skills[0].SkillID != e.custom.ID || ag.Skills[0].Version != first ||
		ag.Skills[1].Type != "anthropic" || ag.Skills[1].SkillID != "pdf" || ag.Skills[1].Version != e.pdf.LatestVersionID {
		t.Fatalf("agent skills = %s; want csv-tools at %s and pdf at %s", ag.RawJSON(), first, e.pdf.LatestVersionID)
	}
	pinned, err := e.newAgent("pinned", customSkill(e.custom.ID, first))
	if err != nil {
		t.Fatal(err)
	}
	second, err := e.client.Beta.Skills.Versions.New(ctx, e.custom.ID, anthropic.BetaSkillVersionNewParams{
		Files: skillFiles("SKILL.md", skillMD, "scripts/count.sh", countScript+"# v2\n")})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []*anthropic.BetaManagedAgentsAgent{ag, pinned} {
		got, err := e.client.Beta.Agents.Get(ctx, a.ID, anthropic.BetaAgentGetParams{})
		if err != nil || got.Skills[0].Version != first {
			t.Fatalf("agent %s after a new skill version = %v, %v; want it still at %s", a.ID, got, err, first)
		}
	}
	// Naming the skill again without a version resolves to the new latest:
	// a new agent version; once more, nothing changes.
	upd := anthropic.BetaAgentUpdateParams{Version: anthropic.Int(ag.Version), Skills: []anthropic.BetaManagedAgentsSkillParamsUnion{
		customSkill(e.custom.ID), anthropicSkill("pdf")}}
	v2, err := e.client.Beta.Agents.Update(ctx, ag.ID, upd)
	if err != nil || v2.Version != ag.Version+1 || v2.Skills[0].Version != second.ID {
		t.Fatalf("update naming the skill again = %v, %v; want version %d at skill version %s", v2, err, ag.Version+1, second.ID)
	}
	upd.Version = anthropic.Int(v2.Version)
	if v3, err := e.client.Beta.Agents.Update(ctx, ag.ID, upd); err != nil || v3.Version != v2.Version {
		t.Fatalf("the same update again = %v, %v; want no new version (still %d)", v3, err, v2.Version)
	}
	agentSkillRefusals(t, e, first)
}

func agentSkillRefusals(t *testing.T, e *skillsEnv, version string) {
	t.Helper()
	for _, tc := range []struct {
		name   string
		skills []anthropic.BetaManagedAgentsSkillParamsUnion
		want   []string
	}{
		{"unknown custom skill", []anthropic.BetaManagedAgentsSkillParamsUnion{customSkill("skill_01nope")},
			[]string{"skills[0].skill_id", "skill_01nope"}},
		{"unknown version", []anthropic.BetaManagedAgentsSkillParamsUnion{anthropicSkill("pdf"), customSkill(e.custom.ID, "skillver_01nope")},
			[]string{"skills[1].version", "skillver_01nope"}},
		{"unknown anthropic skill", []anthropic.BetaManagedAgentsSkillParamsUnion{anthropicSkill("docx")},
			[]string{"skills[0].skill_id", "docx", "MANGO_SKILLS_CATALOG"}},
		{"custom skill as anthropic", []anthropic.BetaManagedAgentsSkillParamsUnion{anthropicSkill(e.custom.ID)},
			[]string{"skills[0].skill_id", e.custom.ID}},
		{"anthropic skill as custom", []anthropic.BetaManagedAgentsSkillParamsUnion{customSkill("pdf")}, []string{"skills[0].skill_id", "pdf"}},
		{"twice", []anthropic.BetaManagedAgentsSkillParamsUnion{customSkill(e.custom.ID), customSkill(e.custom.ID, version)},
			[]string{"skills[1].skill_id", "skills[0]"}},
	} {
		_, err := e.newAgent(tc.name, tc.skills...)
		wantInvalid(t, tc.name, err, http.StatusBadRequest, tc.want...)
	}
	// Two skills with one name would share a directory.
	other, err := e.client.Beta.Skills.New(context.Background(), anthropic.BetaSkillNewParams{
		Files: skillFiles("csv-tools/SKILL.md", skillMD)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.newAgent("same name", customSkill(e.custom.ID), customSkill(other.ID))
	wantInvalid(t, "two skills named csv-tools", err, http.StatusBadRequest, "skills[1].skill_id", "csv-tools")
}

// TestSkillsInUse: a skill or version the current version of an agent
// uses cannot be deleted (409 naming the agent) until the agent is
// archived; Anthropic skills are read-only.
func TestSkillsInUse(t *testing.T) {
	t.Parallel()
	e := newSkillsEnv(t)
	ctx := context.Background()
	first := e.custom.LatestVersionID
	if _, err := e.client.Beta.Skills.Versions.New(ctx, e.custom.ID, anthropic.BetaSkillVersionNewParams{
		Files: skillFiles("SKILL.md", skillMD)}); err != nil {
		t.Fatal(err)
	}
	ag, err := e.newAgent("user", customSkill(e.custom.ID, first))
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.client.Beta.Skills.Delete(ctx, e.custom.ID, anthropic.BetaSkillDeleteParams{})
	wantInvalid(t, "delete a skill in use", err, http.StatusConflict, ag.ID, "conflict_error")
	_, err = e.client.Beta.Skills.Versions.Delete(ctx, first, anthropic.BetaSkillVersionDeleteParams{SkillID: e.custom.ID})
	wantInvalid(t, "delete a pinned version", err, http.StatusConflict, ag.ID, first)

	_, err = e.client.Beta.Skills.Delete(ctx, "pdf", anthropic.BetaSkillDeleteParams{})
	wantInvalid(t, "delete an anthropic skill", err, http.StatusForbidden, "permission_error", "MANGO_SKILLS_CATALOG")
	_, err = e.client.Beta.Skills.Versions.New(ctx, "pdf", anthropic.BetaSkillVersionNewParams{Files: skillFiles("pdf/SKILL.md", skillMD)})
	wantInvalid(t, "a version of an anthropic skill", err, http.StatusForbidden, "permission_error", "MANGO_SKILLS_CATALOG")
	_, err = e.client.Beta.Skills.Versions.Delete(ctx, e.pdf.LatestVersionID, anthropic.BetaSkillVersionDeleteParams{SkillID: "pdf"})
	wantInvalid(t, "delete a version of an anthropic skill", err, http.StatusForbidden, "permission_error")

	if _, err := e.client.Beta.Agents.Archive(ctx, ag.ID, anthropic.BetaAgentArchiveParams{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Beta.Skills.Versions.Delete(ctx, first, anthropic.BetaSkillVersionDeleteParams{SkillID: e.custom.ID}); err != nil {
		t.Fatalf("delete the version once its agent is archived: %v", err)
	}
	if _, err := e.client.Beta.Skills.Delete(ctx, e.custom.ID, anthropic.BetaSkillDeleteParams{}); err != nil {
		t.Fatalf("delete the skill once its agent is archived: %v", err)
	}
}

// TestSkillsSourceFilter: GET /v1/skills?source=.
func TestSkillsSourceFilter(t *testing.T) {
	t.Parallel()
	e := newSkillsEnv(t)
	ctx := context.Background()
	if e.pdf.Source.Type != "anthropic" || e.pdf.DisplayName != "pdf" {
		t.Fatalf("catalog skill = %s; want source anthropic, display_name pdf", e.pdf.RawJSON())
	}
	for source, want := range map[string]string{"": e.custom.ID + ",pdf", "custom": e.custom.ID, "anthropic": "pdf"} {
		p := anthropic.BetaSkillListParams{}
		if source != "" {
			p.Source = anthropic.String(source)
		}
		page, err := e.client.Beta.Skills.List(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, s := range page.Data {
			got = append(got, s.ID)
		}
		if strings.Join(got, ",") != want {
			t.Errorf("skills of source %q = %v; want %s", source, got, want)
		}
	}
	_, err := e.client.Beta.Skills.List(ctx, anthropic.BetaSkillListParams{Source: anthropic.String("mine")})
	wantInvalid(t, "unknown source", err, http.StatusBadRequest, "source")
}

// TestSessionSkills: a session's skills (here from agent_with_overrides)
// are resources a worker lists and reads, hidden from clients; a client
// resource cannot be mounted under /mnt/session/skills.
func TestSessionSkills(t *testing.T) {
	t.Parallel()
	e := newSkillsEnv(t)
	ctx := context.Background()
	ag, err := e.newAgent("base", anthropicSkill("pdf"))
	if err != nil {
		t.Fatal(err)
	}
	env, err := e.client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "skills"})
	if err != nil {
		t.Fatal(err)
	}
	overrides := func(skills ...anthropic.BetaManagedAgentsSkillParamsUnion) anthropic.BetaSessionNewParams {
		return anthropic.BetaSessionNewParams{EnvironmentID: env.ID, Agent: anthropic.BetaSessionNewParamsAgentUnion{
			OfBetaManagedAgentsAgentWithOverrides: &anthropic.BetaManagedAgentsAgentWithOverridesParams{ID: ag.ID, Skills: skills}}}
	}
	_, err = e.client.Beta.Sessions.New(ctx, overrides(customSkill("skill_01nope")))
	wantInvalid(t, "override naming an unknown skill", err, http.StatusBadRequest, "agent.skills[0].skill_id", "skill_01nope")
	sess, err := e.client.Beta.Sessions.New(ctx, overrides(customSkill(e.custom.ID), anthropicSkill("pdf")))
	if err != nil {
		t.Fatalf("session with override skills: %v", err)
	}
	if len(sess.Agent.Skills) != 2 || sess.Agent.Skills[0].Version != e.custom.LatestVersionID || len(sess.Resources) != 0 {
		t.Fatalf("session = %s; want the skills resolved and no client resources", sess.RawJSON())
	}
	list, err := e.client.Beta.Sessions.Resources.List(ctx, sess.ID, anthropic.BetaSessionResourceListParams{})
	if err != nil || len(list.Data) != 0 {
		t.Fatalf("client resources = %v, %v; want none (skills are hidden)", list, err)
	}
	_, err = e.client.Beta.Sessions.Resources.Add(ctx, sess.ID, anthropic.BetaSessionResourceAddParams{
		BetaManagedAgentsFileResourceParams: anthropic.BetaManagedAgentsFileResourceParams{FileID: uploadCSV(t, e.client, "x.csv").ID,
			MountPath: anthropic.String("/mnt/session/skills/pdf/x.csv")}})
	wantInvalid(t, "a resource under /mnt/session/skills", err, http.StatusBadRequest, "mount_path", "/mnt/session/skills")
	workerReadsSkills(t, e, sess.ID)
}

// workerReadsSkills: the worker lists the session's two skills and reads
// the custom one's archive, the same bytes the Skills API serves.
func workerReadsSkills(t *testing.T, e *skillsEnv, sid string) {
	t.Helper()
	conn, wctx := workerConn(t, e.srv)
	res := pb.NewSessionResourcesClient(conn)
	list, err := res.ListSessionResources(wctx, &pb.ListSessionResourcesRequest{SessionId: sid})
	if err != nil || len(list.GetResources()) != 2 {
		t.Fatalf("worker's resources = %v, %v; want the two skills", list, err)
	}
	r := list.GetResources()[0]
	if r.GetType() != "skill" || r.GetMountPath() != "/mnt/session/skills/csv-tools" || r.GetSkillId() != e.custom.ID ||
		r.GetSkillVersionId() != e.custom.LatestVersionID || r.GetSkillName() != "csv-tools" || !strings.HasPrefix(r.GetSkillDescription(), "Summarise CSV") {
		t.Fatalf("worker's first skill = %v; want csv-tools at /mnt/session/skills/csv-tools", r)
	}
	if p := list.GetResources()[1]; p.GetSkillId() != "pdf" || p.GetMountPath() != "/mnt/session/skills/pdf" {
		t.Fatalf("worker's second skill = %v; want pdf", p)
	}
	stream, err := res.ReadSkillVersion(wctx, &pb.ReadSkillVersionRequest{SessionId: sid, ResourceId: r.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("read skill version: %v", err)
		}
		got = append(got, msg.GetData()...)
	}
	resp, err := e.client.Beta.Skills.Versions.Download(context.Background(), r.GetSkillVersionId(),
		anthropic.BetaSkillVersionDownloadParams{SkillID: e.custom.ID})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	want, err := io.ReadAll(resp.Body)
	if err != nil || !bytes.Equal(got, want) || len(got) == 0 {
		t.Fatalf("worker read %d bytes, the Skills API serves %d (%v); want the same archive", len(got), len(want), err)
	}
}
