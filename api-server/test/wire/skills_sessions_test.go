package wire

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/lib/environments"

	"github.com/mangohq/mango/api-server/internal/testserver"
	"github.com/mangohq/mango/internal/testenv"
)

// rowCounterMD is the SKILL.md of the skill the session tests use; its
// script prints how many lines a file has, tagged with the version.
const rowCounterMD = `---
name: row-counter
description: Count the rows of a text file. Use when asked how many rows or lines a file has.
---

# Row counter

Run scripts/count.sh <file>: it prints "rows: <n>".
`

func rowCounterScript(tag string) string {
	return "#!/bin/sh\necho \"rows: $(wc -l < \"$1\" | tr -d ' ') (" + tag + ")\"\n"
}

// rowCounterV1 are the files of the skill's first version, as uploaded.
var rowCounterV1 = []string{"row-counter/SKILL.md", rowCounterMD, "row-counter/scripts/count.sh", rowCounterScript("v1")}

// newRowCounter uploads the skill and returns it.
func newRowCounter(t *testing.T, client anthropic.Client) *anthropic.BetaSkill {
	t.Helper()
	sk, err := client.Beta.Skills.New(context.Background(), anthropic.BetaSkillNewParams{Files: skillFiles(rowCounterV1...)})
	if err != nil {
		t.Fatalf("create skill: %v", err)
	}
	return sk
}

// skillAgent creates an agent with the default toolset and the custom
// skill, version left to the server (latest), and checks the version the
// agent was pinned to.
func skillAgent(t *testing.T, client anthropic.Client, skillID, wantVersion string) string {
	t.Helper()
	agent, err := client.Beta.Agents.New(context.Background(), anthropic.BetaAgentNewParams{Name: "skilled",
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "fake"}, Tools: toolset,
		Skills: []anthropic.BetaManagedAgentsSkillParamsUnion{{OfCustom: &anthropic.BetaManagedAgentsCustomSkillParams{SkillID: skillID}}}})
	if err != nil {
		t.Fatalf("create agent with skill %s: %v", skillID, err)
	}
	if len(agent.Skills) != 1 || agent.Skills[0].SkillID != skillID || agent.Skills[0].Type != "custom" || agent.Skills[0].Version != wantVersion {
		t.Fatalf("agent skills = %s; want custom %s pinned to version %s", agentSkillsJSON(agent.Skills), skillID, wantVersion)
	}
	return agent.ID
}

func agentSkillsJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestSkillsInSessionsLocal is issue 32's acceptance on the local sandbox.
func TestSkillsInSessionsLocal(t *testing.T) {
	t.Parallel()
	e := newTurnEnv(t)
	env, err := e.client.Beta.Environments.New(context.Background(), anthropic.BetaEnvironmentNewParams{
		Name: fmt.Sprintf("skills-local-%d", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	skillsInSessions(t, e, env.ID, false)
}

// TestSkillsInSessionsDocker is the same on the docker sandbox.
func TestSkillsInSessionsDocker(t *testing.T) {
	t.Parallel()
	if err := exec.Command("docker", "image", "inspect", "mango-sandbox:latest").Run(); err != nil {
		testenv.Unavailable(t, "no Docker daemon or image mango-sandbox:latest (scripts/build-sandbox-image.sh): %v", err)
	}
	srv := testserver.Start(t, testserver.WithEnv("MANGO_SANDBOX_PROVIDERS", "local,docker"))
	e := &turnEnv{srv: srv, client: newClient(t, srv), root: t.TempDir()}
	startWorkerWith(t, srv, "wire-skills-docker", e.root, map[string]string{"MANGO_SANDBOX": "docker", "MANGO_DOCKER_LABELS": "mango.test=" + srv.TaskQueuePrefix})
	env, err := e.client.Beta.Environments.New(context.Background(), anthropic.BetaEnvironmentNewParams{
		Name: fmt.Sprintf("skills-docker-%d", time.Now().UnixNano()), Metadata: map[string]string{"mango.sandbox": "docker"}})
	if err != nil {
		t.Fatal(err)
	}
	skillsInSessions(t, e, env.ID, true)
}

// skillsInSessions: an agent with the uploaded skill; a scripted turn reads
// /mnt/session/skills/row-counter/SKILL.md and runs the skill's script with
// bash, by the absolute paths the system prompt gives the model. A second
// version leaves the agent pinned to the first: a new session of it still
// runs v1, and an agent created after it gets v2.
func skillsInSessions(t *testing.T, e *turnEnv, envID string, teardown bool) {
	t.Helper()
	ctx := context.Background()
	sk := newRowCounter(t, e.client)
	pinned := skillAgent(t, e.client, sk.ID, sk.LatestVersionID)
	useSkill(t, e, envID, pinned, "v1", teardown)

	v2, err := e.client.Beta.Skills.Versions.New(ctx, sk.ID, anthropic.BetaSkillVersionNewParams{
		Files: skillFiles("row-counter/SKILL.md", rowCounterMD, "row-counter/scripts/count.sh", rowCounterScript("v2"))})
	if err != nil {
		t.Fatalf("create version 2: %v", err)
	}
	got, err := e.client.Beta.Agents.Get(ctx, pinned, anthropic.BetaAgentGetParams{})
	if err != nil || len(got.Skills) != 1 || got.Skills[0].Version != sk.LatestVersionID {
		t.Fatalf("agent after a new skill version = %v, %v; want it still pinned to %s", got, err, sk.LatestVersionID)
	}
	useSkill(t, e, envID, pinned, "v1", teardown)
	useSkill(t, e, envID, skillAgent(t, e.client, sk.ID, v2.ID), "v2", teardown)
}

// useSkill runs one session of agent that reads the skill and runs its
// script; the script's output must carry tag.
func useSkill(t *testing.T, e *turnEnv, envID, agentID, tag string, teardown bool) {
	t.Helper()
	s, err := e.client.Beta.Sessions.New(context.Background(), anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agentID)}, EnvironmentID: envID})
	if err != nil {
		t.Fatal(err)
	}
	if teardown {
		t.Cleanup(func() { deleteAndWait(t, e, s.ID) })
	}
	events := e.watch(t, s.ID)
	e.say(t, s.ID, strings.Join([]string{
		`#tool read {"file_path": "/mnt/session/skills/row-counter/SKILL.md"}`,
		`#tool bash {"command": "printf 'a\\nb\\nc\\n' > rows.txt && /mnt/session/skills/row-counter/scripts/count.sh rows.txt && ls -l /mnt/session/skills/row-counter/SKILL.md"}`,
		`#reply Counted.`,
	}, "\n"))
	evs := until(t, events, "session.status_idle", 90*time.Second)
	if n := count(evs, "session.error"); n != 0 {
		t.Fatalf("the turn reported %d session.error events: %v", n, typesOf(evs))
	}
	results := all(evs, "agent.tool_result")
	if len(results) != 2 {
		t.Fatalf("tool results = %d, want 2 (%v)", len(results), typesOf(evs))
	}
	if r := resultText(results[0]); !strings.Contains(r, "# Row counter") {
		t.Fatalf("read of the skill's SKILL.md returned %q, want the file", r)
	}
	r := resultText(results[1])
	if !strings.Contains(r, "rows: 3 ("+tag+")") {
		t.Fatalf("running the skill's script returned %q, want \"rows: 3 (%s)\"", r, tag)
	}
	if !strings.Contains(r, "-r--r--r--") {
		t.Errorf("the placed SKILL.md is %q, want it read-only (-r--r--r--)", r)
	}
}

// TestSkillsInSystemPrompt: the model request of a session whose agent has
// a skill lists the skill's name, description and where its SKILL.md is.
func TestSkillsInSystemPrompt(t *testing.T) {
	t.Parallel()
	api := newMessagesAPI(t)
	srv := testserver.Start(t)
	e := &turnEnv{srv: srv, client: newClient(t, srv), root: t.TempDir()}
	e.worker = startWorkerWith(t, srv, "wire-skills-prompt", e.root, map[string]string{"MANGO_MODEL": "anthropic",
		"MANGO_MODEL_BASE_URL": api.srv.URL, "MANGO_MODEL_API_KEY": "sk-skills-test", "MANGO_ALLOW_UNSAFE_LOCAL_SANDBOX": "1"})
	sk := newRowCounter(t, e.client)
	agent := skillAgent(t, e.client, sk.ID, sk.LatestVersionID)
	env, err := e.client.Beta.Environments.New(context.Background(), anthropic.BetaEnvironmentNewParams{
		Name: fmt.Sprintf("skills-prompt-%d", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.client.Beta.Sessions.New(context.Background(), anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent)}, EnvironmentID: env.ID})
	if err != nil {
		t.Fatal(err)
	}
	events := e.watch(t, s.ID)
	e.say(t, s.ID, "hello")
	until(t, events, "session.status_idle", 60*time.Second)
	system := api.lastSystem(t)
	for _, want := range []string{"row-counter", "Count the rows of a text file.", "/mnt/session/skills/row-counter/SKILL.md"} {
		if !strings.Contains(system, want) {
			t.Errorf("system prompt of the model request lacks %q:\n%s", want, system)
		}
	}
}

// TestSkillsSelfHostedThroughSDK: the SDK's EnvironmentWorker, unchanged,
// prepares a self-hosted session with agenttoolset.SetupSkillsFromSession
// through the work item's credential; the skill's files under its Workdir
// are the files of the version the agent pins, byte for byte, and the
// skill's script runs from there.
func TestSkillsSelfHostedThroughSDK(t *testing.T) {
	t.Parallel()
	e := newSelfHostedEnv(t, nil, nil)
	e.runSDKWorker(t, "sdk-skills", sdkWorkerClient(e.srv), environments.EnvironmentWorkerOptions{Workdir: t.TempDir()})
	ctx := context.Background()
	sk := newRowCounter(t, e.client)
	agent := skillAgent(t, e.client, sk.ID, sk.LatestVersionID)
	s, err := e.client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent)}, EnvironmentID: e.envID})
	if err != nil {
		t.Fatal(err)
	}
	events := e.watch(t, s.ID)
	e.say(t, s.ID, strings.Join([]string{
		`#tool bash {"command": "cd skills/row-counter && find . -type f | sort | xargs sha256sum && printf 'a\\nb\\n' | ./scripts/count.sh /dev/stdin"}`,
		`#reply Done.`,
	}, "\n"))
	evs := until(t, events, "session.status_idle", 90*time.Second)
	results := all(evs, "user.tool_result") // posted by the SDK worker
	if len(results) != 1 {
		t.Fatalf("tool results = %d, want 1 (%v)", len(results), typesOf(evs))
	}
	out := resultText(results[0])
	var want []string
	for i := 0; i+1 < len(rowCounterV1); i += 2 {
		sum := sha256.Sum256([]byte(rowCounterV1[i+1]))
		want = append(want, hex.EncodeToString(sum[:])+"  ./"+strings.TrimPrefix(rowCounterV1[i], "row-counter/"))
	}
	sort.Strings(want)
	var got []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "  ./") {
			got = append(got, strings.TrimSpace(l))
		}
	}
	sort.Strings(got)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the SDK worker extracted under skills/row-counter:\n%s\nwant the uploaded files:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !strings.Contains(out, "rows: 2 (v1)") {
		t.Errorf("the skill's script in the SDK worker printed %q, want \"rows: 2 (v1)\"", out)
	}
}
