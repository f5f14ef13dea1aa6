package wire

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/mangohq/mango/internal/poll"
)

// allowed in the table: the credential passes; the route answers what it
// answers (the table's requests are built to change nothing that a later
// row depends on: bad parameters, unknown tool uses).
const allowed = 0

// authCall sends one request with cred as the Bearer token and returns
// its status and body. A stream's body is not read.
func authCall(t *testing.T, base, method, path, cred, body string) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, base+path, bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+cred)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.Header.Get("Content-Type") == "text/event-stream" {
		return resp.StatusCode, nil
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s %s: %v", method, path, err)
	}
	return resp.StatusCode, b
}

// TestSelfHostedAuthTable calls every work and session route, the skill
// and memory routes of a self-hosted worker, and a few others, with each
// credential: the API key, the environment key, the
// work item's secret, another environment's key, and credentials that
// are unknown or revoked.
func TestSelfHostedAuthTable(t *testing.T) {
	h := newSelfHosted(t)
	ctx := context.Background()
	skill := newRowCounter(t, h.client)
	otherSkill := newRowCounter(t, h.client) // no session has it
	sid := h.skilledSession(t, skill.ID)
	other := h.session(t, false) // a session of the environment without work
	store := newMemoryStore(t, h.client, "Attached", "")
	roStore := newMemoryStore(t, h.client, "Attached read-only", "")
	otherStore := newMemoryStore(t, h.client, "Not attached", "") // no session has it
	for st, access := range map[string]string{store: "read_write", roStore: "read_only"} {
		if r := addMemoryResource(t, h.srv, sid, `{"type":"memory_store","memory_store_id":"`+st+`","access":"`+access+`"}`); r.status != http.StatusOK {
			t.Fatalf("attach memory store: %d %s", r.status, r.body)
		}
	}
	worker := h.as(t, h.envKey)
	w, err := worker.Beta.Environments.Work.Poll(ctx, h.envID, anthropic.BetaEnvironmentWorkPollParams{})
	if err != nil || w == nil {
		t.Fatalf("poll = %v, %v", w, err)
	}
	token := sessionsToken(t, w.Secret)
	envB, err := h.client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "on-prem-b",
		Config: anthropic.BetaEnvironmentNewParamsConfigUnion{OfSelfHosted: &anthropic.BetaSelfHostedConfigParams{}}})
	if err != nil {
		t.Fatal(err)
	}
	keyB := createEnvironmentKey(t, h.srv, envB.ID)

	const noMemory = "mem_000000000000000000000000"
	work := "/v1/environments/" + h.envID + "/work"
	item := work + "/" + w.ID
	result := `{"events":[{"type":"user.tool_result","tool_use_id":"sevt_000000000000000000000000","content":[]}]}`
	message := `{"events":[{"type":"user.message","content":[{"type":"text","text":"hi"}]}]}`
	type call struct{ name, method, path, body string }
	calls := []call{
		{"work poll", http.MethodGet, work + "/poll?block_ms=0", ""},
		{"work ack", http.MethodPost, work + "/work_000000000000000000000000/ack", ""},
		{"work heartbeat", http.MethodPost, item + "/heartbeat", ""},
		{"work stop", http.MethodPost, item + "/stop", `{"force":"yes"}`},
		{"work list", http.MethodGet, work, ""},
		{"work stats", http.MethodGet, work + "/stats", ""},
		{"work get", http.MethodGet, item, ""},
		{"work update", http.MethodPost, item, `{"metadata":{}}`},
		{"session get", http.MethodGet, "/v1/sessions/" + sid, ""},
		{"session events", http.MethodGet, "/v1/sessions/" + sid + "/events", ""},
		{"session stream", http.MethodGet, "/v1/sessions/" + sid + "/events/stream", ""},
		{"session send result", http.MethodPost, "/v1/sessions/" + sid + "/events", result},
		{"session send message", http.MethodPost, "/v1/sessions/" + sid + "/events", message},
		{"other session get", http.MethodGet, "/v1/sessions/" + other, ""},
		{"session list", http.MethodGet, "/v1/sessions", ""},
		{"session update", http.MethodPost, "/v1/sessions/" + sid, `{"title":5}`},
		{"agents list", http.MethodGet, "/v1/agents", ""},
		{"environment get", http.MethodGet, "/v1/environments/" + h.envID, ""},
		{"admin key create", http.MethodPost, "/admin/environments/" + h.envID + "/keys", `{"name":5}`},
		{"skills list", http.MethodGet, "/v1/skills", ""},
		{"skill version", http.MethodGet, "/v1/skills/" + skill.ID + "/versions/" + skill.LatestVersionID, ""},
		{"skill version content", http.MethodGet, "/v1/skills/" + skill.ID + "/versions/" + skill.LatestVersionID + "/content", ""},
		{"other skill version content", http.MethodGet, "/v1/skills/" + otherSkill.ID + "/versions/latest/content", ""},
		{"memories list", http.MethodGet, "/v1/memory_stores/" + store + "/memories", ""},
		{"memory create", http.MethodPost, "/v1/memory_stores/" + store + "/memories", `{"path":5}`},
		{"memory get", http.MethodGet, "/v1/memory_stores/" + store + "/memories/" + noMemory, ""},
		{"memory update", http.MethodPost, "/v1/memory_stores/" + store + "/memories/" + noMemory, `{"content":5}`},
		{"memory delete", http.MethodDelete, "/v1/memory_stores/" + store + "/memories/" + noMemory, ""},
		{"read-only store memories list", http.MethodGet, "/v1/memory_stores/" + roStore + "/memories", ""},
		{"read-only store memory create", http.MethodPost, "/v1/memory_stores/" + roStore + "/memories", `{"path":5}`},
		{"other store memories list", http.MethodGet, "/v1/memory_stores/" + otherStore + "/memories", ""},
		{"memory store get", http.MethodGet, "/v1/memory_stores/" + store, ""},
	}
	// want[credential][call name]; a call not named is forbidden.
	creds := []struct {
		name, secret string
		want         map[string]int
	}{
		{"API key", h.srv.APIKey, map[string]int{"work get": allowed, "work update": allowed, "session get": allowed, "session events": allowed,
			"session stream": allowed, "session send result": allowed, "session send message": allowed, "other session get": allowed,
			"session list": allowed, "session update": allowed, "agents list": allowed, "environment get": allowed, "admin key create": allowed,
			"skills list": allowed, "skill version": allowed, "skill version content": allowed, "other skill version content": allowed,
			"memories list": allowed, "memory create": allowed, "memory get": allowed, "memory update": allowed, "memory delete": allowed,
			"read-only store memories list": allowed, "read-only store memory create": allowed, "other store memories list": allowed,
			"memory store get": allowed}},
		{"environment key", h.envKey, map[string]int{"work poll": allowed, "work ack": allowed, "work heartbeat": allowed, "work stop": allowed,
			"work list": allowed, "work stats": allowed, "session get": allowed, "session events": allowed, "session stream": allowed,
			"session send result": allowed, "other session get": allowed, "skill version": allowed, "skill version content": allowed}},
		{"work item secret", token, map[string]int{"work heartbeat": allowed, "work stop": allowed, "session get": allowed,
			"session events": allowed, "session stream": allowed, "session send result": allowed, "skill version": allowed,
			"skill version content": allowed, "memories list": allowed, "memory create": allowed, "memory get": allowed,
			"memory update": allowed, "memory delete": allowed, "read-only store memories list": allowed}},
		{"key of another environment", keyB, map[string]int{}},
		{"unknown environment key", "mango_envkey_unknown", nil},
		{"unknown work secret", "mango_wst_unknown", nil},
		{"unknown API key", "not-a-key-0123456789", nil},
		{"revoked environment key", revokedKey(t, h), nil},
	}
	for _, cr := range creds {
		for _, c := range calls {
			want, ok := cr.want[c.name]
			switch {
			case cr.want == nil:
				want = http.StatusUnauthorized
			case !ok:
				want = http.StatusForbidden
			}
			status, body := authCall(t, h.srv.BaseURL, c.method, c.path, cr.secret, c.body)
			if want == allowed {
				if status == http.StatusUnauthorized || status == http.StatusForbidden || status >= 500 {
					t.Errorf("%s, %s: status %d (%s), want the call allowed", cr.name, c.name, status, body)
				}
				continue
			}
			if status != want {
				t.Errorf("%s, %s: status %d (%s), want %d", cr.name, c.name, status, body, want)
				continue
			}
			checkAuthEnvelope(t, cr.name+", "+c.name, status, body)
		}
	}
}

// skilledSession creates a session of the environment, with a first
// message, whose agent (the table's, overridden) has the custom skill.
func (h *selfHosted) skilledSession(t *testing.T, skillID string) string {
	t.Helper()
	s, err := h.client.Beta.Sessions.New(context.Background(), anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfBetaManagedAgentsAgentWithOverrides: &anthropic.BetaManagedAgentsAgentWithOverridesParams{
			ID: h.agent, Skills: []anthropic.BetaManagedAgentsSkillParamsUnion{{OfCustom: &anthropic.BetaManagedAgentsCustomSkillParams{SkillID: skillID}}}}},
		EnvironmentID: h.envID,
		InitialEvents: []anthropic.BetaSessionNewParamsInitialEventUnion{{OfUserMessage: &anthropic.BetaManagedAgentsUserMessageEventParams{
			Content: []anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{{OfText: &anthropic.BetaManagedAgentsTextBlockParam{Text: "hi"}}}}}},
	})
	if err != nil {
		t.Fatalf("create session with skill %s: %v", skillID, err)
	}
	return s.ID
}

// checkAuthEnvelope: a refusal is the error envelope of its status.
func checkAuthEnvelope(t *testing.T, what string, status int, body []byte) {
	t.Helper()
	var env struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	want := map[int]string{http.StatusUnauthorized: "authentication_error", http.StatusForbidden: "permission_error"}[status]
	if err := json.Unmarshal(body, &env); err != nil || env.Type != "error" || env.Error.Type != want || env.Error.Message == "" {
		t.Errorf("%s: body %s, want an error envelope of type %s with a message", what, body, want)
	}
}

// revokedKey issues a key of the environment and revokes it before any
// use (so that no server cache knows it).
func revokedKey(t *testing.T, h *selfHosted) string {
	t.Helper()
	r := do(t, h.srv, http.MethodPost, "/admin/environments/"+h.envID+"/keys", "application/json", []byte(`{"name":"short-lived","expires_in_seconds":3600}`), nil)
	var k struct {
		ID  string `json:"id"`
		Key string `json:"key"`
	}
	if r.status != http.StatusOK || json.Unmarshal(r.body, &k) != nil {
		t.Fatalf("create key: %d %s", r.status, r.body)
	}
	r = do(t, h.srv, http.MethodPost, "/admin/environment-keys/"+k.ID+"/revoke", "", nil, nil)
	if r.status != http.StatusOK || !bytes.Contains(r.body, []byte(`"revoked_at":"`)) {
		t.Fatalf("revoke key: %d %s", r.status, r.body)
	}
	if bytes.Contains(r.body, []byte(k.Key)) {
		t.Errorf("the revoke response repeats the key's secret")
	}
	return k.Key
}

// TestSelfHostedEnvironmentKeys: keys are issued only for self-hosted
// environments, listed without their secret, and a revoked key that was
// in use stops working within the servers' cache TTL.
func TestSelfHostedEnvironmentKeys(t *testing.T) {
	h := newSelfHosted(t)
	ctx := context.Background()
	cloud, err := h.client.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "cloud"})
	if err != nil {
		t.Fatal(err)
	}
	r := do(t, h.srv, http.MethodPost, "/admin/environments/"+cloud.ID+"/keys", "application/json", []byte(`{}`), nil)
	checkEnvelope(t, r, http.StatusBadRequest, "invalid_request_error", "not self-hosted")
	r = do(t, h.srv, http.MethodPost, "/admin/environments/env_000000000000000000000000/keys", "application/json", []byte(`{}`), nil)
	checkEnvelope(t, r, http.StatusNotFound, "not_found_error", "env_000000000000000000000000")
	r = do(t, h.srv, http.MethodPost, "/admin/environments/"+h.envID+"/keys", "application/json", []byte(`{"expires_in_seconds":0}`), nil)
	checkEnvelope(t, r, http.StatusBadRequest, "invalid_request_error", "expires_in_seconds")
	r = do(t, h.srv, http.MethodPost, "/admin/environment-keys/envkey_000000000000000000000000/revoke", "", nil, nil)
	checkEnvelope(t, r, http.StatusNotFound, "not_found_error", "envkey_000000000000000000000000")

	r = do(t, h.srv, http.MethodGet, "/admin/environments/"+h.envID+"/keys", "", nil, nil)
	var list struct {
		Data []map[string]any `json:"data"`
	}
	if r.status != http.StatusOK || json.Unmarshal(r.body, &list) != nil || len(list.Data) != 1 {
		t.Fatalf("list keys: %d %s, want the one key", r.status, r.body)
	}
	if _, ok := list.Data[0]["key"]; ok || bytes.Contains(r.body, []byte(h.envKey)) {
		t.Errorf("the key list shows a secret: %s", r.body)
	}

	// The key works (and is cached), is revoked, and stops working.
	stats := func() int {
		status, _ := authCall(t, h.srv.BaseURL, http.MethodGet, "/v1/environments/"+h.envID+"/work/stats", h.envKey, "")
		return status
	}
	if s := stats(); s != http.StatusOK {
		t.Fatalf("stats with the key: %d", s)
	}
	id, _ := list.Data[0]["id"].(string)
	if r := do(t, h.srv, http.MethodPost, "/admin/environment-keys/"+id+"/revoke", "", nil, nil); r.status != http.StatusOK {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	poll.Until(t, 15*time.Second, "the revoked key to be refused", func() (bool, string) {
		s := stats()
		return s == http.StatusUnauthorized, fmt.Sprintf("status %d", s)
	})
}
