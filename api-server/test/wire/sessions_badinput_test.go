package wire

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/mangohq/mango/api-server/internal/ids"
	"github.com/mangohq/mango/api-server/internal/testserver"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

func TestSessionValidation(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	client := newClient(t, srv)
	agent, envID := fixture(t, client)
	ctx := context.Background()
	// An environment that selects a provider this server does not enable.
	r := do(t, srv, http.MethodPost, "/v1/environments", "application/json", []byte(`{"name":"remote","metadata":{"mango.sandbox":"e2b"}}`), nil)
	var remote struct{ ID string }
	_ = json.Unmarshal(r.body, &remote)
	r = do(t, srv, http.MethodPost, "/v1/environments", "application/json", []byte(`{"name":"local-explicit","metadata":{"mango.sandbox":"local"}}`), nil)
	var localEnv struct{ ID string }
	_ = json.Unmarshal(r.body, &localEnv)

	create := func(body string) rawResponse {
		return do(t, srv, http.MethodPost, "/v1/sessions", "application/json", []byte(body), nil)
	}
	base := fmt.Sprintf(`"agent":%q,"environment_id":%q`, agent.ID, envID)
	tests := []struct {
		name    string
		body    string
		status  int
		errType string
		message string
	}{
		{"missing agent", fmt.Sprintf(`{"environment_id":%q}`, envID), 400, "invalid_request_error", "agent: is required"},
		{"missing environment", fmt.Sprintf(`{"agent":%q}`, agent.ID), 400, "invalid_request_error", "environment_id: is required"},
		{"unknown agent", fmt.Sprintf(`{"agent":"agent_000000000000000000000000","environment_id":%q}`, envID), 404, "not_found_error", "agent"},
		{"malformed agent id", fmt.Sprintf(`{"agent":"bogus","environment_id":%q}`, envID), 404, "not_found_error", "agent"},
		{"unknown agent version", fmt.Sprintf(`{"agent":{"type":"agent","id":%q,"version":9},"environment_id":%q}`, agent.ID, envID), 404, "not_found_error", "version 9"},
		{"bad agent type", fmt.Sprintf(`{"agent":{"type":"robot","id":%q},"environment_id":%q}`, agent.ID, envID), 400, "invalid_request_error", "agent.type"},
		{"override bad model", fmt.Sprintf(`{"agent":{"type":"agent_with_overrides","id":%q,"model":{"id":"m","speed":"warp"}},"environment_id":%q}`, agent.ID, envID), 400, "invalid_request_error", "agent.model.speed"},
		{"override unknown field", fmt.Sprintf(`{"agent":{"type":"agent_with_overrides","id":%q,"name":"x"},"environment_id":%q}`, agent.ID, envID), 400, "invalid_request_error", `unknown field "name"`},
		{"unknown environment", fmt.Sprintf(`{"agent":%q,"environment_id":"env_000000000000000000000000"}`, agent.ID), 404, "not_found_error", "environment"},
		{"provider not enabled", fmt.Sprintf(`{"agent":%q,"environment_id":%q}`, agent.ID, remote.ID), 400, "invalid_request_error", "not enabled"},
		{"provider enabled", fmt.Sprintf(`{"agent":%q,"environment_id":%q}`, agent.ID, localEnv.ID), 200, "", ""},
		{"unknown field", `{` + base + `,"colour":1}`, 400, "invalid_request_error", `unknown field "colour"`},
		{"title too long", `{` + base + `,"title":"` + strings.Repeat("t", 513) + `"}`, 400, "invalid_request_error", "title"},
		{"metadata 17", `{` + base + `,"metadata":` + string(mustJSON(metadataOf(17, 4, 4))) + `}`, 400, "invalid_request_error", "at most 16"},
		{"initial events 50", `{` + base + `,"initial_events":[` + strings.TrimSuffix(strings.Repeat(msg+",", 50), ",") + `]}`, 200, "", ""},
		{"initial events 51", `{` + base + `,"initial_events":[` + strings.TrimSuffix(strings.Repeat(msg+",", 51), ",") + `]}`, 400, "invalid_request_error", "at most 50"},
		{"initial interrupt", `{` + base + `,"initial_events":[{"type":"user.interrupt"}]}`, 400, "invalid_request_error", "not accepted here"},
		{"vaults", `{` + base + `,"vault_ids":["v1"]}`, 400, "invalid_request_error", "vault_ids"},
		{"budget", `{` + base + `,"budget":{"type":"limit"}}`, 400, "invalid_request_error", "budget"},
		{"trailing JSON", `{` + base + `} {}`, 400, "invalid_request_error", "after the JSON value"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := create(tc.body)
			if tc.status == 200 {
				if r.status != 200 {
					t.Fatalf("status %d: %s", r.status, r.body)
				}
				return
			}
			checkEnvelope(t, r, tc.status, tc.errType, tc.message)
		})
	}
	// Initial events start the session running.
	r = create(`{` + base + `,"initial_events":[` + msg + `]}`)
	var started struct{ ID, Status string }
	_ = json.Unmarshal(r.body, &started)
	if started.Status != "running" {
		t.Errorf("session with an initial user.message is %q, want running", started.Status)
	}

	sendAndQueryValidation(t, srv)
	_ = ctx
}

// sendAndQueryValidation: on a new session, bad events, an answer to an
// action the session is not waiting for, bad list and stream queries and
// unknown sessions are refused in the error envelope.
func sendAndQueryValidation(t *testing.T, srv *testserver.Server) {
	t.Helper()
	id := newSession(t, srv)
	for _, tc := range []struct {
		name, body, message string
	}{
		{"no events", `{"events":[]}`, "at least one"},
		{"missing events", `{}`, "at least one"},
		{"unknown type", `{"events":[{"type":"user.dance"}]}`, "unknown event type"},
		{"agent event", `{"events":[{"type":"agent.message","content":[]}]}`, "unknown event type"},
		{"empty content", `{"events":[{"type":"user.message","content":[]}]}`, "at least one content block"},
		{"image block without source type", `{"events":[{"type":"user.message","content":[{"type":"image","source":{}}]}]}`, "source.type: is required"},
		{"text missing", `{"events":[{"type":"user.message","content":[{"type":"text"}]}]}`, "text: is required"},
		{"text wrong type", `{"events":[{"type":"user.message","content":[{"type":"text","text":5}]}]}`, "text"},
		{"confirmation without result", `{"events":[{"type":"user.tool_confirmation","tool_use_id":"x"}]}`, "result"},
		{"deny_message with allow", `{"events":[{"type":"user.tool_confirmation","tool_use_id":"x","result":"allow","deny_message":"no"}]}`, "deny_message"},
		{"custom result without id", `{"events":[{"type":"user.custom_tool_result","content":[]}]}`, "custom_tool_use_id"},
		{"interrupt extra field", `{"events":[{"type":"user.interrupt","why":"x"}]}`, `unknown field "why"`},
		{"51 events", `{"events":[` + strings.TrimSuffix(strings.Repeat(msg+",", 51), ",") + `]}`, "at most 50"},
	} {
		t.Run("send "+tc.name, func(t *testing.T) {
			r := do(t, srv, http.MethodPost, "/v1/sessions/"+id+"/events", "application/json", []byte(tc.body), nil)
			checkEnvelope(t, r, http.StatusBadRequest, "invalid_request_error", tc.message)
		})
	}
	// Answers to actions the session is not waiting for conflict.
	r := send(t, srv, id, `{"type":"user.tool_confirmation","tool_use_id":"sevt_x","result":"allow"}`)
	checkEnvelope(t, r, http.StatusConflict, "conflict_error", "not waiting")

	for _, q := range []string{"limit=0", "order=sideways", "types[]=", "created_at[gt]=soon", "page=@@"} {
		r := do(t, srv, http.MethodGet, "/v1/sessions/"+id+"/events?"+q, "", nil, nil)
		checkEnvelope(t, r, http.StatusBadRequest, "invalid_request_error", "")
	}
	for _, q := range []string{"statuses[]=sleeping", "order=up", "agent_version=0", "created_at[lt]=x", "page=bm9wZQ"} {
		r := do(t, srv, http.MethodGet, "/v1/sessions?"+q, "", nil, nil)
		checkEnvelope(t, r, http.StatusBadRequest, "invalid_request_error", "")
	}
	r = do(t, srv, http.MethodGet, "/v1/sessions/"+id+"/events/stream?event_deltas[]=agent.tool_use", "", nil, nil)
	checkEnvelope(t, r, http.StatusBadRequest, "invalid_request_error", "event_deltas")
	for _, path := range []string{"/v1/sessions/sesn_000000000000000000000000", "/v1/sessions/nope", "/v1/sessions/sesn_000000000000000000000000/events", "/v1/sessions/x/events/stream"} {
		r := do(t, srv, http.MethodGet, path, "", nil, nil)
		checkEnvelope(t, r, http.StatusNotFound, "not_found_error", "session")
	}
}

// TestRequiredActionResumes parks a session the way a worker does (idle,
// requires_action) and checks that answers resume it only when complete.
func TestRequiredActionResumes(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	id := newSession(t, srv)
	send(t, srv, id, msg) // running
	a, b := ids.New(ids.Event), ids.New(ids.Event)
	conn, ctx := workerConn(t, srv)
	if _, err := pb.NewControlPlaneClient(conn).ParkTurn(ctx, &pb.ParkTurnRequest{SessionId: id, RequiredActionEventIds: []string{a, b}}); err != nil {
		t.Fatalf("park: %v", err)
	}
	status := func() string {
		r := do(t, srv, http.MethodGet, "/v1/sessions/"+id, "", nil, nil)
		var s struct{ Status string }
		_ = json.Unmarshal(r.body, &s)
		return s.Status
	}
	if r := send(t, srv, id, `{"type":"user.tool_confirmation","tool_use_id":"`+a+`","result":"deny","deny_message":"no"}`); r.status != 200 {
		t.Fatalf("answer a: %d %s", r.status, r.body)
	}
	if s := status(); s != "idle" {
		t.Errorf("after one of two answers: %s, want idle", s)
	}
	r := send(t, srv, id, `{"type":"user.tool_confirmation","tool_use_id":"`+a+`","result":"allow"}`)
	checkEnvelope(t, r, http.StatusConflict, "conflict_error", "not waiting")
	if r := send(t, srv, id, `{"type":"user.custom_tool_result","custom_tool_use_id":"`+b+`","content":[{"type":"text","text":"42"}]}`); r.status != 200 {
		t.Fatalf("answer b: %d %s", r.status, r.body)
	}
	if s := status(); s != "running" {
		t.Errorf("after both answers: %s, want running", s)
	}
}

// TestLimitedNetworkingNeedsEgressControl: a session whose environment
// limits networking (or lists packages) is refused (422) on a provider
// whose workers do not report egress control (package installation), and
// accepted once one does.
func TestLimitedNetworkingNeedsEgressControl(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	client := newClient(t, srv)
	agent, _ := fixture(t, client)
	r := do(t, srv, http.MethodPost, "/v1/environments", "application/json",
		[]byte(`{"name":"locked","config":{"type":"cloud","networking":{"type":"limited","allowed_hosts":["api.example.com"]}}}`), nil)
	var env struct{ ID string }
	_ = json.Unmarshal(r.body, &env)
	body := []byte(fmt.Sprintf(`{"agent":%q,"environment_id":%q}`, agent.ID, env.ID))
	r = do(t, srv, http.MethodPost, "/v1/sessions", "application/json", body, nil)
	checkEnvelope(t, r, http.StatusUnprocessableEntity, "invalid_request_error", "cannot enforce egress")

	// A worker of the provider reports the capability: accepted.
	heartbeat(t, srv, "w-egress", "local", "limited_networking")
	r = do(t, srv, http.MethodPost, "/v1/sessions", "application/json", body, nil)
	if r.status != http.StatusOK {
		t.Fatalf("with egress control: %d %s", r.status, r.body)
	}

	// Packages likewise need a provider that installs them.
	r = do(t, srv, http.MethodPost, "/v1/environments", "application/json",
		[]byte(`{"name":"tooled","config":{"type":"cloud","packages":{"pip":["requests"]}}}`), nil)
	_ = json.Unmarshal(r.body, &env)
	body = []byte(fmt.Sprintf(`{"agent":%q,"environment_id":%q}`, agent.ID, env.ID))
	r = do(t, srv, http.MethodPost, "/v1/sessions", "application/json", body, nil)
	checkEnvelope(t, r, http.StatusUnprocessableEntity, "invalid_request_error", "does not install packages")
	heartbeat(t, srv, "w-packages", "local", "packages")
	r = do(t, srv, http.MethodPost, "/v1/sessions", "application/json", body, nil)
	if r.status != http.StatusOK {
		t.Fatalf("with package installation: %d %s", r.status, r.body)
	}
}
