package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// agentRoutes registers the agent pages.
func (c *Console) agentRoutes() {
	m := c.mux
	m.Handle("GET "+Prefix+"/agents", c.signedIn(c.listOf("/v1/agents", "agents")))
	m.Handle("GET "+Prefix+"/agents/new", c.signedIn(c.agentNewForm))
	m.Handle("POST "+Prefix+"/agents", c.signedIn(c.agentCreate))
	m.Handle("GET "+Prefix+"/agents/{id}", c.signedIn(c.agentPage))
	m.Handle("POST "+Prefix+"/agents/{id}/archive", c.signedIn(c.call(http.MethodPost, "/v1/agents/{id}/archive", Prefix+"/agents/{id}")))
}

// agentToolset is the type of the built-in toolset (bash, files, web).
const agentToolset = "agent_toolset_20260401"

// agentPolicies are the permission policies the new-agent form offers
// for the built-in toolset's default.
var agentPolicies = []string{"always_allow", "always_ask"}

// agentNewForm asks for a new agent's name, model, prompt and tools.
func (c *Console) agentNewForm(w http.ResponseWriter, r *http.Request, v *visit) error {
	c.render(w, r, v, http.StatusOK, "agent_new", map[string]any{"Policies": agentPolicies})
	return nil
}

// agentCreate creates an agent from the form and opens it.
func (c *Console) agentCreate(w http.ResponseWriter, r *http.Request, v *visit) error {
	body := map[string]any{"name": strings.TrimSpace(r.PostFormValue("name")), "model": strings.TrimSpace(r.PostFormValue("model"))}
	for _, k := range []string{"description", "system"} {
		if s := r.PostFormValue(k); strings.TrimSpace(s) != "" {
			body[k] = s
		}
	}
	tools, err := agentTools(r)
	if err != nil {
		return err
	}
	if tools != nil {
		body["tools"] = tools
	}
	var a map[string]any
	if err := v.api.post(r.Context(), "/v1/agents", body, &a); err != nil {
		return err
	}
	http.Redirect(w, r, Prefix+"/agents/"+url.PathEscape(str(a["id"])), http.StatusSeeOther)
	return nil
}

// agentTools reads the tools of the new-agent form: the raw JSON when
// given (it replaces the checkbox), else the built-in toolset with its
// default permission policy when checked, else none (nil).
func agentTools(r *http.Request) ([]any, error) {
	if raw := strings.TrimSpace(r.PostFormValue("tools_json")); raw != "" {
		return parseTools(raw)
	}
	if r.PostFormValue("toolset") != "1" {
		return nil, nil
	}
	policy := r.PostFormValue("permission_policy")
	if !slices.Contains(agentPolicies, policy) {
		return nil, badInput(fmt.Sprintf("permission policy: %q is not one of %s", policy, strings.Join(agentPolicies, ", ")))
	}
	return []any{map[string]any{"type": agentToolset, "default_config": map[string]any{"permission_policy": map[string]any{"type": policy}}}}, nil
}

// parseTools reads the advanced tools field: one JSON array.
func parseTools(raw string) ([]any, error) {
	const want = `expected a JSON array of tool objects, e.g. [{"type":"agent_toolset_20260401"}]`
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.UseNumber()
	var tools []any
	if err := dec.Decode(&tools); err != nil {
		return nil, badInput(fmt.Sprintf("tools (JSON): %v; %s", err, want))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, badInput("tools (JSON): there is more after the array; " + want)
	}
	if tools == nil {
		return nil, badInput("tools (JSON): got null; " + want)
	}
	return tools, nil
}

type agentPage struct {
	Agent    map[string]any
	Versions []agentVersionRow
	// MoreVersions says older versions exist than those listed.
	MoreVersions bool
	// From and To are the versions compared (From 0: nothing to compare,
	// the agent has one version).
	From, To int64
	// Diff is the line diff of From's and To's configurations, nil when
	// they are the same.
	Diff []diffLine
}

// agentVersionRow is a version in the versions list: N, and Prev, the
// one before it (0 for the first).
type agentVersionRow struct {
	Agent   map[string]any
	N, Prev int64
}

// agentPage shows an agent: its current configuration, its JSON, its
// versions and what changed between two of them.
func (c *Console) agentPage(w http.ResponseWriter, r *http.Request, v *visit) error {
	ctx := r.Context()
	path := "/v1/agents/" + url.PathEscape(r.PathValue("id"))
	var p agentPage
	if err := v.api.get(ctx, path, nil, &p.Agent); err != nil {
		return err
	}
	var vs list[map[string]any]
	if err := v.api.get(ctx, path+"/versions", url.Values{"limit": {"100"}}, &vs); err != nil {
		return err
	}
	for _, a := range vs.Data {
		n := num(a["version"])
		p.Versions = append(p.Versions, agentVersionRow{Agent: a, N: n, Prev: n - 1})
	}
	p.MoreVersions = vs.NextPage != ""
	var err error
	if p.From, p.To, err = diffRange(r, num(p.Agent["version"])); err != nil {
		return err
	}
	if p.From > 0 {
		from, err := agentVersion(ctx, v, path, p.From, p.Agent)
		if err != nil {
			return err
		}
		to, err := agentVersion(ctx, v, path, p.To, p.Agent)
		if err != nil {
			return err
		}
		p.Diff = foldUnchanged(lineDiff(configLines(from), configLines(to)), 3)
	}
	c.render(w, r, v, http.StatusOK, "agent", p)
	return nil
}

// diffRange reads the versions to compare (?from=N&to=M) of an agent at
// version cur: by default the previous one and cur; from 0 when the
// agent has a single version and none was asked for.
func diffRange(r *http.Request, cur int64) (from, to int64, err error) {
	version := func(name string, def int64) (int64, error) {
		s := strings.TrimSpace(r.FormValue(name))
		if s == "" {
			return def, nil
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1 || n > cur {
			return 0, badInput(fmt.Sprintf("%s: %q is not a version of this agent; expected a whole number from 1 to %d", name, s, cur))
		}
		return n, nil
	}
	if to, err = version("to", cur); err != nil {
		return 0, 0, err
	}
	from, err = version("from", to-1)
	return from, to, err
}

// agentVersion returns version n of the agent at path; current, the
// agent as just read, serves when it is that version.
func agentVersion(ctx context.Context, v *visit, path string, n int64, current map[string]any) (map[string]any, error) {
	if num(current["version"]) == n {
		return current, nil
	}
	var a map[string]any
	err := v.api.get(ctx, path, url.Values{"version": {strconv.FormatInt(n, 10)}}, &a)
	return a, err
}

// configLines is an agent version's configuration as indented JSON
// lines: the version's JSON without its identity and timestamps, which
// differ between any two versions.
func configLines(a map[string]any) []string {
	cfg := make(map[string]any, len(a))
	for k, x := range a {
		switch k {
		case "type", "id", "version", "created_at", "updated_at", "archived_at":
		default:
			cfg[k] = x
		}
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // the page escapes; \u003c would hide a change
	enc.SetIndent("", "  ")
	if err := enc.Encode(cfg); err != nil {
		return []string{err.Error()}
	}
	return strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
}

// diffLine is one line of a line diff.
type diffLine struct {
	// Op is "add" (only in the new text), "del" (only in the old one),
	// "same", or "skip": a run of unchanged lines left out, Text says
	// how many.
	Op   string
	Text string
}

// Mark is the line's marker, so a change never shows by colour alone.
func (d diffLine) Mark() string {
	switch d.Op {
	case "add":
		return "+"
	case "del":
		return "-"
	}
	return " "
}

// maxDiffCells caps the table of the LCS: texts whose differing middle
// would need more are shown as the old lines removed and the new added.
const maxDiffCells = 1 << 21

// lineDiff returns the lines of a and b as a diff: the longest common
// subsequence of lines kept, the others removed (from a) or added (from
// b), removals before additions in each changed run.
func lineDiff(a, b []string) []diffLine {
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	out := make([]diffLine, 0, len(a)+len(b))
	for _, s := range a[:pre] {
		out = append(out, diffLine{"same", s})
	}
	out = append(out, lcsDiff(a[pre:len(a)-suf], b[pre:len(b)-suf])...)
	for _, s := range a[len(a)-suf:] {
		out = append(out, diffLine{"same", s})
	}
	return out
}

// lcsDiff diffs a and b by their longest common subsequence of lines.
func lcsDiff(a, b []string) []diffLine {
	n, m := len(a), len(b)
	var out []diffLine
	if (n+1)*(m+1) > maxDiffCells {
		for _, s := range a {
			out = append(out, diffLine{"del", s})
		}
		for _, s := range b {
			out = append(out, diffLine{"add", s})
		}
		return out
	}
	// l[i*(m+1)+j] is the length of the LCS of a[i:] and b[j:].
	w := m + 1
	l := make([]int32, (n+1)*w)
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			switch {
			case a[i] == b[j]:
				l[i*w+j] = l[(i+1)*w+j+1] + 1
			case l[(i+1)*w+j] >= l[i*w+j+1]:
				l[i*w+j] = l[(i+1)*w+j]
			default:
				l[i*w+j] = l[i*w+j+1]
			}
		}
	}
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && a[i] == b[j]:
			out = append(out, diffLine{"same", a[i]})
			i, j = i+1, j+1
		case j == m || (i < n && l[(i+1)*w+j] >= l[i*w+j+1]):
			out = append(out, diffLine{"del", a[i]})
			i++
		default:
			out = append(out, diffLine{"add", b[j]})
			j++
		}
	}
	return out
}

// foldUnchanged keeps the changed lines and up to context unchanged
// lines on each side of them; every other run of two or more unchanged
// lines becomes one "skip" line. It returns nil when nothing changed.
func foldUnchanged(lines []diffLine, context int) []diffLine {
	near := make([]bool, len(lines))
	changed := false
	for i, d := range lines {
		if d.Op == "same" {
			continue
		}
		changed = true
		for k := max(0, i-context); k <= min(len(lines)-1, i+context); k++ {
			near[k] = true
		}
	}
	if !changed {
		return nil
	}
	var out []diffLine
	for i := 0; i < len(lines); {
		if near[i] {
			out = append(out, lines[i])
			i++
			continue
		}
		k := i
		for k < len(lines) && !near[k] {
			k++
		}
		if k-i == 1 {
			out = append(out, lines[i]) // a marker would take as much room
		} else {
			out = append(out, diffLine{"skip", fmt.Sprintf("… %d unchanged lines", k-i)})
		}
		i = k
	}
	return out
}
