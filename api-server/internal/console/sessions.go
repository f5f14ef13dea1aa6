package console

import (
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// sessionStatuses are the statuses the list filters on.
var sessionStatuses = []string{"idle", "running", "rescheduling", "terminated"}

type sessionListPage struct {
	Sessions []map[string]any
	Statuses []string
	Status   string
	AgentID  string
	Archived bool
	Next     string // cursor of the next page, or ""
}

// sessionList shows the sessions, newest first, with filters and paging.
func (c *Console) sessionList(w http.ResponseWriter, r *http.Request, v *visit) error {
	q, archived := listQuery(r, 25)
	p := sessionListPage{Statuses: sessionStatuses, Status: r.FormValue("status"), AgentID: strings.TrimSpace(r.FormValue("agent_id")),
		Archived: archived}
	if p.Status != "" {
		if !slices.Contains(sessionStatuses, p.Status) {
			return badInput(fmt.Sprintf("status: %q is not one of %s", p.Status, strings.Join(sessionStatuses, ", ")))
		}
		q.Set("statuses[]", p.Status)
	}
	if p.AgentID != "" {
		q.Set("agent_id", p.AgentID)
	}
	var l list[map[string]any]
	if err := v.api.get(r.Context(), "/v1/sessions", q, &l); err != nil {
		return err
	}
	p.Sessions = l.Data
	p.Next = l.NextPage
	c.render(w, r, v, http.StatusOK, "sessions", p)
	return nil
}

type sessionNewPage struct {
	Agents       []map[string]any
	Environments []map[string]any
	AgentID      string
}

// sessionNewForm asks for the agent and environment of a new session.
func (c *Console) sessionNewForm(w http.ResponseWriter, r *http.Request, v *visit) error {
	p := sessionNewPage{AgentID: r.FormValue("agent_id")}
	var agents, envs list[map[string]any]
	if err := v.api.get(r.Context(), "/v1/agents", url.Values{"limit": {"100"}}, &agents); err != nil {
		return err
	}
	if err := v.api.get(r.Context(), "/v1/environments", url.Values{"limit": {"100"}}, &envs); err != nil {
		return err
	}
	p.Agents, p.Environments = agents.Data, envs.Data
	c.render(w, r, v, http.StatusOK, "session_new", p)
	return nil
}

// sessionCreate creates a session and opens it.
func (c *Console) sessionCreate(w http.ResponseWriter, r *http.Request, v *visit) error {
	body := map[string]any{"agent": r.PostFormValue("agent_id"), "environment_id": r.PostFormValue("environment_id")}
	if t := strings.TrimSpace(r.PostFormValue("title")); t != "" {
		body["title"] = t
	}
	var s map[string]any
	if err := v.api.post(r.Context(), "/v1/sessions", body, &s); err != nil {
		return err
	}
	http.Redirect(w, r, Prefix+"/sessions/"+url.PathEscape(str(s["id"])), http.StatusSeeOther)
	return nil
}

// timelineSize is how many of the newest events a session page shows; the
// live stream adds the ones that follow.
const timelineSize = 500

type sessionPage struct {
	Session map[string]any
	Entries []entry
	// LastID is the id of the newest event shown: the live stream
	// continues after it.
	LastID  string
	Earlier bool // older events exist than those shown
	Outputs []map[string]any
	Threads []map[string]any
}

// sessionPage shows a session: its summary, its timeline (live), its
// resources, outputs and threads, and what can be done with it.
func (c *Console) sessionPage(w http.ResponseWriter, r *http.Request, v *visit) error {
	id := r.PathValue("id")
	ctx := r.Context()
	var p sessionPage
	if err := v.api.get(ctx, "/v1/sessions/"+url.PathEscape(id), nil, &p.Session); err != nil {
		return err
	}
	var evs list[map[string]any]
	if err := v.api.get(ctx, "/v1/sessions/"+url.PathEscape(id)+"/events", url.Values{"limit": {fmt.Sprint(timelineSize)}, "order": {"desc"}}, &evs); err != nil {
		return err
	}
	slices.Reverse(evs.Data)
	p.Earlier = evs.NextPage != ""
	pending := pendingOf(evs.Data, str(p.Session["status"]))
	for _, ev := range evs.Data {
		p.Entries = append(p.Entries, entryOf(id, ev, pending))
	}
	spanLatency(p.Entries)
	if n := len(evs.Data); n > 0 {
		p.LastID = str(evs.Data[n-1]["id"])
	}
	var outputs list[map[string]any]
	if err := v.api.get(ctx, "/v1/files", url.Values{"scope_id": {id}, "limit": {"100"}}, &outputs); err != nil {
		return err
	}
	p.Outputs = outputs.Data
	var threads list[map[string]any]
	if err := v.api.get(ctx, "/v1/sessions/"+url.PathEscape(id)+"/threads", url.Values{"limit": {"100"}}, &threads); err == nil {
		p.Threads = threads.Data
	}
	c.render(w, r, v, http.StatusOK, "session", p)
	return nil
}

// sendEvents posts events to the session and answers the way the form
// was sent: 204 to a script, back to the session page otherwise.
func (c *Console) sendEvents(w http.ResponseWriter, r *http.Request, v *visit, events ...map[string]any) error {
	id := r.PathValue("id")
	if err := v.api.post(r.Context(), "/v1/sessions/"+url.PathEscape(id)+"/events", map[string]any{"events": events}, nil); err != nil {
		return err
	}
	done(w, r, Prefix+"/sessions/"+url.PathEscape(id))
	return nil
}

// call is an action that makes one API call and goes back: a POST with an
// empty object or a DELETE of api, then to back. Both are path patterns
// whose {name} segments are the request's path values (escaped).
func (c *Console) call(method, api, back string) handler {
	return func(w http.ResponseWriter, r *http.Request, v *visit) error {
		var err error
		if method == http.MethodDelete {
			err = v.api.del(r.Context(), expand(api, r))
		} else {
			err = v.api.post(r.Context(), expand(api, r), map[string]any{}, nil)
		}
		if err != nil {
			return err
		}
		done(w, r, expand(back, r))
		return nil
	}
}

// pathValue matches a {name} segment of a path pattern.
var pathValue = regexp.MustCompile(`\{([a-z]+)\}`)

// expand fills pattern's {name} segments with r's path values.
func expand(pattern string, r *http.Request) string {
	return pathValue.ReplaceAllStringFunc(pattern, func(m string) string { return url.PathEscape(r.PathValue(m[1 : len(m)-1])) })
}

// done ends a successful action: a script (X-CSRF-Token sent) gets 204, a
// plain form post goes to back.
func done(w http.ResponseWriter, r *http.Request, back string) {
	if r.Header.Get("X-CSRF-Token") != "" {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	http.Redirect(w, r, back, http.StatusSeeOther)
}

// sessionSay sends a user message: the text and, for each attached file,
// the file uploaded through the Files API and referenced as an image or a
// document block. The route caps the body (uploadLimit).
func (c *Console) sessionSay(w http.ResponseWriter, r *http.Request, v *visit) error {
	if err := r.ParseMultipartForm(32 << 20); err != nil && err != http.ErrNotMultipart {
		return badInput(fmt.Sprintf("the message form could not be read: %v", err))
	}
	var content []map[string]any
	if t := r.FormValue("text"); strings.TrimSpace(t) != "" {
		content = append(content, map[string]any{"type": "text", "text": t})
	}
	if r.MultipartForm != nil {
		for _, fh := range r.MultipartForm.File["files"] {
			f, err := fh.Open()
			if err != nil {
				return err
			}
			ct := fh.Header.Get("Content-Type")
			if mt, _, err := mime.ParseMediaType(ct); err != nil || mt == "" {
				ct = "application/octet-stream"
			}
			fid, err := v.api.upload(r.Context(), fh.Filename, ct, f)
			_ = f.Close()
			if err != nil {
				return err
			}
			kind := "document"
			if strings.HasPrefix(ct, "image/") {
				kind = "image"
			}
			content = append(content, map[string]any{"type": kind, "source": map[string]any{"type": "file", "file_id": fid}})
		}
	}
	if len(content) == 0 {
		return badInput("a message needs text or a file")
	}
	return c.sendEvents(w, r, v, map[string]any{"type": "user.message", "content": content})
}

func (c *Console) sessionInterrupt(w http.ResponseWriter, r *http.Request, v *visit) error {
	return c.sendEvents(w, r, v, map[string]any{"type": "user.interrupt"})
}

// sessionConfirm allows or denies a pending always_ask tool call.
func (c *Console) sessionConfirm(w http.ResponseWriter, r *http.Request, v *visit) error {
	ev := map[string]any{"type": "user.tool_confirmation", "tool_use_id": r.PostFormValue("tool_use_id"), "result": r.PostFormValue("result")}
	if m := strings.TrimSpace(r.PostFormValue("deny_message")); m != "" && r.PostFormValue("result") == "deny" {
		ev["deny_message"] = m
	}
	return c.sendEvents(w, r, v, ev)
}

// sessionCustomResult answers a custom tool call.
func (c *Console) sessionCustomResult(w http.ResponseWriter, r *http.Request, v *visit) error {
	return c.sendEvents(w, r, v, map[string]any{"type": "user.custom_tool_result", "custom_tool_use_id": r.PostFormValue("custom_tool_use_id"),
		"content": []map[string]any{{"type": "text", "text": r.PostFormValue("text")}}, "is_error": r.PostFormValue("is_error") == "1"})
}

// fileDownload streams a file's content from the API as an attachment,
// never rendered by the browser in the console's origin.
func (c *Console) fileDownload(w http.ResponseWriter, r *http.Request, v *visit) error {
	id := r.PathValue("id")
	var meta map[string]any
	if err := v.api.get(r.Context(), "/v1/files/"+url.PathEscape(id), nil, &meta); err != nil {
		return err
	}
	req, err := v.api.request(r.Context(), http.MethodGet, "/v1/files/"+url.PathEscape(id)+"/content", nil, nil, "")
	if err != nil {
		return err
	}
	resp, err := v.api.do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	name := str(meta["filename"])
	if i := strings.LastIndexAny(name, "/\\"); i >= 0 {
		name = name[i+1:]
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": sanitizeFilename(name)}))
	w.Header().Set("Content-Security-Policy", "sandbox; default-src 'none'")
	if n := resp.Header.Get("Content-Length"); n != "" {
		w.Header().Set("Content-Length", n)
	}
	_, err = io.Copy(w, resp.Body)
	if err != nil {
		c.deps.Logger.WarnContext(r.Context(), "console download cut", "file", id, "err", err)
	}
	return nil
}
