package console

import "net/http"

// routes registers every page and action. Pages are GETs; every change
// is a POST carrying the sign-in's CSRF token (checked in signedIn).
func (c *Console) routes() {
	m := c.mux
	m.HandleFunc("GET "+Prefix+"/static/{name}", c.assets.serve)
	m.HandleFunc("GET "+Prefix+"/sign-in", c.signInForm)
	m.HandleFunc("POST "+Prefix+"/sign-in", c.signIn)
	m.Handle("POST "+Prefix+"/sign-out", c.signedIn(c.signOut))
	m.Handle("GET "+Prefix+"/{$}", c.signedIn(func(w http.ResponseWriter, r *http.Request, _ *visit) error {
		http.Redirect(w, r, Prefix+"/sessions", http.StatusSeeOther)
		return nil
	}))
	m.Handle("GET "+Prefix, http.RedirectHandler(Prefix+"/", http.StatusSeeOther))

	m.Handle("GET "+Prefix+"/sessions", c.signedIn(c.sessionList))
	m.Handle("GET "+Prefix+"/sessions/new", c.signedIn(c.sessionNewForm))
	m.Handle("POST "+Prefix+"/sessions", c.signedIn(c.sessionCreate))
	m.Handle("GET "+Prefix+"/sessions/{id}", c.signedIn(c.sessionPage))
	m.Handle("GET "+Prefix+"/sessions/{id}/live", c.signedIn(c.sessionLive))
	m.Handle("POST "+Prefix+"/sessions/{id}/messages", c.uploadLimit(c.signedIn(c.sessionSay)))
	m.Handle("POST "+Prefix+"/sessions/{id}/interrupt", c.signedIn(c.sessionInterrupt))
	m.Handle("POST "+Prefix+"/sessions/{id}/confirm", c.signedIn(c.sessionConfirm))
	m.Handle("POST "+Prefix+"/sessions/{id}/custom-result", c.signedIn(c.sessionCustomResult))
	m.Handle("POST "+Prefix+"/sessions/{id}/archive", c.signedIn(c.call(http.MethodPost, "/v1/sessions/{id}/archive", Prefix+"/sessions/{id}")))
	m.Handle("GET "+Prefix+"/files/{id}/download", c.signedIn(c.fileDownload))

	c.resourceRoutes()
}
