package console

import "net/http"

// providerRoutes registers the sandbox providers page.
func (c *Console) providerRoutes() {
	c.mux.Handle("GET "+Prefix+"/providers", c.signedIn(c.providerList))
}

// providerList shows the sandbox providers and their workers, live or
// not, as the operator endpoint GET /admin/providers reports them.
func (c *Console) providerList(w http.ResponseWriter, r *http.Request, v *visit) error {
	var health struct {
		Data []map[string]any `json:"data"`
	}
	if err := v.api.get(r.Context(), "/admin/providers", nil, &health); err != nil {
		return err
	}
	c.render(w, r, v, http.StatusOK, "providers", health.Data)
	return nil
}
