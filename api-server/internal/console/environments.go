package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// environmentRoutes registers the environment pages.
func (c *Console) environmentRoutes() {
	m := c.mux
	m.Handle("GET "+Prefix+"/environments", c.signedIn(c.listOf("/v1/environments", "environments")))
	m.Handle("GET "+Prefix+"/environments/new", c.signedIn(c.environmentNewForm))
	m.Handle("POST "+Prefix+"/environments", c.signedIn(c.environmentCreate))
	m.Handle("GET "+Prefix+"/environments/{id}", c.signedIn(c.environmentPage))
	m.Handle("POST "+Prefix+"/environments/{id}/archive", c.signedIn(c.call(http.MethodPost, "/v1/environments/{id}/archive", Prefix+"/environments/{id}")))
	m.Handle("POST "+Prefix+"/environments/{id}/delete", c.signedIn(c.call(http.MethodDelete, "/v1/environments/{id}", Prefix+"/environments")))
}

// environmentNewForm asks for a new environment's name, description and
// configuration.
func (c *Console) environmentNewForm(w http.ResponseWriter, r *http.Request, v *visit) error {
	c.render(w, r, v, http.StatusOK, "environment_new", nil)
	return nil
}

// environmentCreate creates an environment from the form and opens it.
func (c *Console) environmentCreate(w http.ResponseWriter, r *http.Request, v *visit) error {
	body := map[string]any{"name": strings.TrimSpace(r.PostFormValue("name"))}
	if d := strings.TrimSpace(r.PostFormValue("description")); d != "" {
		body["description"] = d
	}
	if raw := strings.TrimSpace(r.PostFormValue("config")); raw != "" {
		cfg, err := parseEnvironmentConfig(raw)
		if err != nil {
			return err
		}
		body["config"] = cfg
	}
	var e map[string]any
	if err := v.api.post(r.Context(), "/v1/environments", body, &e); err != nil {
		return err
	}
	http.Redirect(w, r, Prefix+"/environments/"+url.PathEscape(str(e["id"])), http.StatusSeeOther)
	return nil
}

// parseEnvironmentConfig reads the config field: one JSON object.
func parseEnvironmentConfig(raw string) (map[string]any, error) {
	const want = `expected a JSON object such as {"type":"cloud","networking":{"type":"unrestricted"}} or {"type":"self_hosted"}`
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.UseNumber()
	var cfg map[string]any
	if err := dec.Decode(&cfg); err != nil {
		return nil, badInput(fmt.Sprintf("config (JSON): %v; %s", err, want))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, badInput("config (JSON): there is more after the object; " + want)
	}
	if cfg == nil {
		return nil, badInput("config (JSON): got null; " + want)
	}
	return cfg, nil
}

// environmentPage shows an environment: its settings, its configuration
// and what can be done with it.
func (c *Console) environmentPage(w http.ResponseWriter, r *http.Request, v *visit) error {
	var e map[string]any
	if err := v.api.get(r.Context(), "/v1/environments/"+url.PathEscape(r.PathValue("id")), nil, &e); err != nil {
		return err
	}
	c.render(w, r, v, http.StatusOK, "environment", e)
	return nil
}
