package console

import (
	"context"
	"net/http"
	"net/url"
	"strings"
)

// deploymentRoutes registers the deployment pages.
func (c *Console) deploymentRoutes() {
	m := c.mux
	m.Handle("GET "+Prefix+"/deployments", c.signedIn(c.deploymentList))
	m.Handle("GET "+Prefix+"/deployments/new", c.signedIn(c.deploymentNewForm))
	m.Handle("POST "+Prefix+"/deployments", c.signedIn(c.deploymentCreate))
	m.Handle("GET "+Prefix+"/deployments/{id}", c.signedIn(c.deploymentPage))
	for _, action := range []string{"run", "pause", "unpause", "archive"} {
		m.Handle("POST "+Prefix+"/deployments/{id}/"+action, c.signedIn(c.call(http.MethodPost, "/v1/deployments/{id}/"+action, Prefix+"/deployments/{id}")))
	}
}

type deploymentListPage struct {
	Deployments []map[string]any
	// Names are the names of the agents and environments, by id.
	Names    map[string]string
	Archived bool
	Next     string // cursor of the next page, or ""
}

// deploymentList shows the deployments, newest first, with their status,
// schedule and upcoming runs.
func (c *Console) deploymentList(w http.ResponseWriter, r *http.Request, v *visit) error {
	q, archived := listQuery(r, 50)
	p := deploymentListPage{Archived: archived}
	var l list[map[string]any]
	if err := v.api.get(r.Context(), "/v1/deployments", q, &l); err != nil {
		return err
	}
	p.Deployments = l.Data
	ae, err := listAgentsAndEnvironments(r.Context(), v)
	if err != nil {
		return err
	}
	p.Names = ae.names()
	p.Next = l.NextPage
	c.render(w, r, v, http.StatusOK, "deployments", p)
	return nil
}

// agentsAndEnvironments are the first 100 agents and environments (not
// archived): the create form's choices, and the names the pages show for
// a deployment's ids.
type agentsAndEnvironments struct {
	Agents       []map[string]any
	Environments []map[string]any
}

func listAgentsAndEnvironments(ctx context.Context, v *visit) (agentsAndEnvironments, error) {
	var agents, envs list[map[string]any]
	if err := v.api.get(ctx, "/v1/agents", url.Values{"limit": {"100"}}, &agents); err != nil {
		return agentsAndEnvironments{}, err
	}
	if err := v.api.get(ctx, "/v1/environments", url.Values{"limit": {"100"}}, &envs); err != nil {
		return agentsAndEnvironments{}, err
	}
	return agentsAndEnvironments{Agents: agents.Data, Environments: envs.Data}, nil
}

// names are the agents' and environments' names by id.
func (ae agentsAndEnvironments) names() map[string]string {
	out := map[string]string{}
	for _, xs := range [][]map[string]any{ae.Agents, ae.Environments} {
		for _, x := range xs {
			out[str(x["id"])] = str(x["name"])
		}
	}
	return out
}

type deploymentNewPage struct {
	agentsAndEnvironments
	AgentID string
}

// deploymentNewForm asks for a new deployment's name, agent, environment,
// initial message and optional schedule.
func (c *Console) deploymentNewForm(w http.ResponseWriter, r *http.Request, v *visit) error {
	ae, err := listAgentsAndEnvironments(r.Context(), v)
	if err != nil {
		return err
	}
	c.render(w, r, v, http.StatusOK, "deployment_new", deploymentNewPage{agentsAndEnvironments: ae, AgentID: r.FormValue("agent_id")})
	return nil
}

// deploymentBody is the create request of the form's values: the message
// becomes the one initial user.message; a cron expression needs a time
// zone, and a time zone alone is no schedule.
func deploymentBody(r *http.Request) (map[string]any, error) {
	text := r.PostFormValue("message")
	if strings.TrimSpace(text) == "" {
		return nil, badInput("initial message: enter the text each run's session starts with")
	}
	body := map[string]any{
		"name":           strings.TrimSpace(r.PostFormValue("name")),
		"agent":          r.PostFormValue("agent_id"),
		"environment_id": r.PostFormValue("environment_id"),
		"initial_events": []map[string]any{{"type": "user.message", "content": []map[string]any{{"type": "text", "text": text}}}},
	}
	if d := strings.TrimSpace(r.PostFormValue("description")); d != "" {
		body["description"] = d
	}
	expr, tz := strings.TrimSpace(r.PostFormValue("cron")), strings.TrimSpace(r.PostFormValue("timezone"))
	if expr != "" {
		if tz == "" {
			return nil, badInput("time zone: a cron schedule needs an IANA time zone, such as UTC or Europe/Berlin")
		}
		body["schedule"] = map[string]any{"type": "cron", "expression": expr, "timezone": tz}
	}
	return body, nil
}

// deploymentCreate creates a deployment and opens it.
func (c *Console) deploymentCreate(w http.ResponseWriter, r *http.Request, v *visit) error {
	body, err := deploymentBody(r)
	if err != nil {
		return err
	}
	var d map[string]any
	if err := v.api.post(r.Context(), "/v1/deployments", body, &d); err != nil {
		return err
	}
	http.Redirect(w, r, Prefix+"/deployments/"+url.PathEscape(str(d["id"])), http.StatusSeeOther)
	return nil
}

// initialEvent is an initial event as the deployment page shows it.
type initialEvent struct {
	Type  string
	Text  string
	Files []string
}

type deploymentPage struct {
	Deployment map[string]any
	Names      map[string]string
	Initial    []initialEvent
	Runs       []map[string]any
	RunsNext   string // cursor of the next page of runs, or ""
}

// deploymentPage shows a deployment: its configuration, schedule and
// upcoming runs, what can be done with it, and its runs, newest first.
func (c *Console) deploymentPage(w http.ResponseWriter, r *http.Request, v *visit) error {
	id := r.PathValue("id")
	ctx := r.Context()
	var p deploymentPage
	if err := v.api.get(ctx, "/v1/deployments/"+url.PathEscape(id), nil, &p.Deployment); err != nil {
		return err
	}
	events, _ := p.Deployment["initial_events"].([]any)
	for _, e := range events {
		ev, _ := e.(map[string]any)
		text, files := contentText(ev["content"])
		p.Initial = append(p.Initial, initialEvent{Type: str(ev["type"]), Text: text, Files: files})
	}
	q := url.Values{"deployment_id": {id}, "limit": {"50"}}
	if pg := r.FormValue("runs_page"); pg != "" {
		q.Set("page", pg)
	}
	var runs list[map[string]any]
	if err := v.api.get(ctx, "/v1/deployment_runs", q, &runs); err != nil {
		return err
	}
	p.Runs = runs.Data
	if runs.NextPage != "" {
		p.RunsNext = runs.NextPage
	}
	ae, err := listAgentsAndEnvironments(ctx, v)
	if err != nil {
		return err
	}
	p.Names = ae.names()
	c.render(w, r, v, http.StatusOK, "deployment", p)
	return nil
}
