package wire

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/chromedp"

	"github.com/mangohq/mango/internal/poll"
)

// TestConsoleInBrowser drives the console in headless Chromium as a user
// does: a signed-out browser sees nothing; sign in; create an agent (tools
// always_ask) and an environment and a session through the console's
// forms; send a message and see the turn's preview text before its
// message is committed; allow a pending tool call and see its output;
// interrupt a long tool; download the output file the agent left. No
// page reports an error along the way.
func TestConsoleInBrowser(t *testing.T) {
	t.Parallel()
	e := newTurnEnv(t)
	b := newBrowser(t, e.srv.BaseURL)

	b.open("/console/sessions")
	if loc := b.location(); loc != "/console/sign-in" {
		t.Fatalf("a signed-out browser at /console/sessions is at %s, want the sign-in page", loc)
	}
	if n := evalJS[int](b, `document.querySelectorAll('nav, table, #timeline').length`); n != 0 {
		t.Errorf("the signed-out page shows %d navigation or data elements", n)
	}
	b.signIn(e.srv.APIKey)

	sid := consoleSession(t, e, b)
	b.open("/console/sessions/" + sid)
	b.wait("the live stream", `window.mangoConsole && window.mangoConsole.live`, 30*time.Second)

	// Preview text arrives while the message is generated, before the
	// committed agent.message replaces it.
	b.fill("#text", "#slow 150ms\n#reply one two three four five six seven eight")
	b.click(`form.composer button[type=submit]`)
	b.wait("preview text before the message", `(() => {
		const p = document.querySelector('#preview .preview-text');
		return p && p.textContent.includes('two') && !document.querySelector('#timeline [data-type="agent.message"]');
	})()`, 30*time.Second)
	b.wait("the agent's message", `document.querySelector('#timeline [data-type="agent.message"]')?.textContent.includes('one two three four five six seven eight')`, 30*time.Second)
	b.wait("the preview to go", `!document.querySelector('#preview .preview-entry')`, 10*time.Second)

	// A message with a file attached: it reaches the model as a document
	// block of the uploaded file.
	attachment := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(attachment, []byte("attached notes\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b.fill("#text", "#echo-blocks")
	b.do("attach a file", chromedp.SetUploadFiles(chromedp.CSS("#files"), []string{attachment}))
	b.click(`form.composer button[type=submit]`)
	b.wait("the model's view of the attachment", `[...document.querySelectorAll('#timeline [data-type="agent.message"]')].some(el => /blocks: text; document /.test(el.textContent))`, 30*time.Second)
	if v := evalJS[string](b, `document.getElementById('files').value`); v != "" {
		t.Errorf("the file input still holds %q after sending", v)
	}

	// An always_ask call: the Allow button appears, and after it the output.
	b.fill("#text", `#tool bash {"command":"echo console-approved-$((6*7))"}`)
	b.click(`form.composer button[type=submit]`)
	b.wait("the pending tool call's Allow button", `!!document.querySelector('form.action[data-for]:not([hidden]) button[value=allow]')`, 30*time.Second)
	b.click(`form.action[data-for]:not([hidden]) button[value=allow]`)
	b.wait("the tool's output", `[...document.querySelectorAll('#timeline [data-type="agent.tool_result"]')].some(el => el.textContent.includes('console-approved-42'))`, 30*time.Second)
	b.wait("idle", `document.querySelector('#status .status')?.textContent.trim() === 'idle'`, 30*time.Second)
	if n := evalJS[int](b, `[...document.querySelectorAll('form.action')].filter(f => f.getClientRects().length > 0).length`); n != 0 {
		t.Errorf("%d action forms still shown after the call was answered", n)
	}

	// A long tool, interrupted.
	b.fill("#text", `#tool bash {"command":"sleep 28.5"}`)
	b.click(`form.composer button[type=submit]`)
	b.wait("the long call's Allow button", `!!document.querySelector('form.action[data-for]:not([hidden]) button[value=allow]')`, 30*time.Second)
	b.click(`form.action[data-for]:not([hidden]) button[value=allow]`)
	b.wait("the long call running", `document.querySelector('#status .status')?.textContent.trim() === 'running'`, 30*time.Second)
	start := time.Now()
	b.click(`#interrupt`)
	b.wait("idle after the interrupt", `document.querySelector('#status .status')?.textContent.trim() === 'idle' && !!document.querySelector('#timeline [data-type="user.interrupt"]')`, 20*time.Second)
	t.Logf("interrupt to idle in the page: %v", time.Since(start))

	// An output file, downloaded by clicking its link.
	b.fill("#text", `#tool bash {"command":"mkdir -p /mnt/session/outputs && printf 'console report\\n' > /mnt/session/outputs/report.txt"}`)
	b.click(`form.composer button[type=submit]`)
	b.wait("the Allow button of the call writing the output", `!!document.querySelector('form.action[data-for]:not([hidden]) button[value=allow]')`, 30*time.Second)
	b.click(`form.action[data-for]:not([hidden]) button[value=allow]`)
	b.wait("the output listed", `[...document.querySelectorAll('#outputs a')].some(a => a.textContent === 'report.txt')`, 30*time.Second)
	got := b.download(`#outputs a[download]`)
	if got != "console report\n" {
		t.Errorf("downloaded output = %q, want %q", got, "console report\n")
	}

	if errs := b.pageErrors(); len(errs) > 0 {
		t.Errorf("the pages reported errors: %v", errs)
	}
}

// consoleSession creates, through the console's forms, an agent whose
// tools always ask, an environment, and a session of both; it returns the
// session's id.
func consoleSession(t *testing.T, e *turnEnv, b *browser) string {
	t.Helper()
	b.open("/console/agents/new")
	b.fill("#name", "console agent")
	b.fill("#model", "fake")
	b.do("choose always_ask", chromedp.SetValue(chromedp.CSS("#permission_policy"), "always_ask"))
	b.submitNav(`form[action="/console/agents"] button[type=submit]`)
	agentID, ok := strings.CutPrefix(b.location(), "/console/agents/")
	if !ok || !strings.HasPrefix(agentID, "agent_") {
		t.Fatalf("after creating an agent the browser is at %s, showing: %s", b.location(), evalJS[string](b, `document.body.innerText`))
	}
	b.open("/console/environments/new")
	b.fill("#name", fmt.Sprintf("console env %d", time.Now().UnixNano()))
	b.submitNav(`form[action="/console/environments"] button[type=submit]`)
	envID, ok := strings.CutPrefix(b.location(), "/console/environments/")
	if !ok || !strings.HasPrefix(envID, "env_") {
		t.Fatalf("after creating an environment the browser is at %s, showing: %s", b.location(), evalJS[string](b, `document.body.innerText`))
	}
	agent, err := e.client.Beta.Agents.Get(context.Background(), agentID, anthropic.BetaAgentGetParams{})
	if err != nil || !strings.Contains(agent.RawJSON(), `"always_ask"`) {
		t.Fatalf("the agent made in the console: %v, %v; want its toolset always_ask", agent, err)
	}
	b.open("/console/sessions/new?agent_id=" + agentID)
	b.do("choose the environment", chromedp.SetValue(chromedp.CSS("#environment_id"), envID))
	b.fill("#title", "console session")
	b.submitNav(`form[action="/console/sessions"] button[type=submit]`)
	loc := b.location()
	sid, ok := strings.CutPrefix(loc, "/console/sessions/")
	if !ok || !strings.HasPrefix(sid, "sesn_") {
		t.Fatalf("after creating a session the browser is at %s, showing: %s", loc, evalJS[string](b, `document.body.innerText`))
	}
	return sid
}

// download clicks the link sel, lets Chromium save the file, and returns
// its content.
func (b *browser) download(sel string) string {
	b.t.Helper()
	dir := b.t.TempDir()
	c := chromedp.FromContext(b.ctx)
	if _, err := cdp.Call(b.ctx, c.Browser, cdpbrowser.SetDownloadBehavior, cdpbrowser.SetDownloadBehaviorParams{
		Behavior: cdpbrowser.SetDownloadBehaviorBehaviorAllow, DownloadPath: dir}); err != nil {
		b.t.Fatalf("allow downloads: %v", err)
	}
	b.click(sel)
	var body []byte
	poll.Until(b.t, 30*time.Second, "the download in "+dir, func() (bool, string) {
		entries, _ := os.ReadDir(dir)
		for _, en := range entries {
			if strings.HasSuffix(en.Name(), ".crdownload") {
				continue
			}
			body, _ = os.ReadFile(filepath.Join(dir, en.Name()))
			return true, ""
		}
		return false, "no file yet"
	})
	return string(body)
}

// hostileMessage is hostile markdown (raw HTML, script, event handlers,
// javascript: links) scripting the fake model to reply with more of it;
// hostileCall makes it call a custom tool with a hostile input.
const (
	hostileMessage = "<script>window.pwned='user-script'</script>\n<img src=x onerror=\"window.pwned='user-img'\">\n" +
		"[user link](javascript:window.pwned='user-link') <a href=\"javascript:window.pwned='user-a'\">a</a> <iframe src=\"javascript:window.pwned='frame'\"></iframe>\n" +
		"#reply **hostile done** <script>window.pwned='agent'</script> [agent link](javascript:window.pwned='agent-link') <img src=x onerror=\"window.pwned='agent-img'\"> <style>body{display:none}</style>"
	hostileCall = "#tool hostile_tool {\"html\":\"<script>window.pwned='input'</script>\",\"link\":\"javascript:window.pwned='input-link'\"}"
)

// hostileChecks is true when nothing in the timeline is live markup that
// came from content: no script, image, frame, style or javascript: link,
// no element with an inline handler, no escape character shown, and no
// script ran (window.pwned).
const hostileChecks = `(() => {
	const tl = document.getElementById('timeline');
	const bad = tl.querySelectorAll('script, img, iframe, style, object, embed, a[href^="javascript:" i], [onerror], [onclick], [onload]');
	const esc = tl.textContent.includes('\u001b');
	return JSON.stringify({pwned: window.pwned ?? null, bad: bad.length, esc, visible: getComputedStyle(document.body).display !== 'none'});
})()`

// TestConsoleHostileTranscript: a transcript full of hostile content (raw
// HTML and scripts in user and agent messages, a javascript: link in
// markdown, a hostile tool input, a 5 MB tool output with ANSI escapes)
// renders inert, both as it arrives live and when the page is loaded
// afresh: no script runs, no page error is reported, the huge output is
// clipped and the page stays responsive.
func TestConsoleHostileTranscript(t *testing.T) {
	t.Parallel()
	e := newTurnEnv(t)
	b := newBrowser(t, e.srv.BaseURL)
	b.signIn(e.srv.APIKey)
	custom := anthropic.BetaAgentNewParamsToolUnion{OfCustom: &anthropic.BetaManagedAgentsCustomToolParams{Name: "hostile_tool", Description: "returns hostile output",
		InputSchema: anthropic.BetaManagedAgentsCustomToolInputSchemaParam{Properties: map[string]any{}}}}
	sid := e.session(t, []anthropic.BetaAgentNewParamsToolUnion{custom})
	events := e.watch(t, sid)

	b.open("/console/sessions/" + sid)
	b.wait("the live stream", `window.mangoConsole && window.mangoConsole.live`, 30*time.Second)
	e.say(t, sid, hostileMessage)
	until(t, events, "session.status_idle", 30*time.Second)
	// A custom tool call answered through the console's form.
	e.say(t, sid, hostileCall)
	until(t, events, "session.status_idle", 30*time.Second)
	b.wait("the custom call's form", `!!document.querySelector('form.action[data-for] textarea[name=text]') && document.querySelector('form.action[data-for]').getClientRects().length > 0`, 30*time.Second)
	b.fill(`form.action[data-for] textarea[name=text]`, "answered in the console")
	b.click(`form.action[data-for] button[type=submit]`)
	until(t, events, "session.status_idle", 30*time.Second)
	b.wait("the reply using the answer", `[...document.querySelectorAll('#timeline [data-type="agent.message"]')].some(el => el.textContent.includes('answered in the console'))`, 30*time.Second)

	e.say(t, sid, hostileCall)
	evs := until(t, events, "session.status_idle", 30*time.Second)
	use := last(evs, "agent.custom_tool_use")
	if use == nil {
		t.Fatalf("no custom tool call in %v", typesOf(evs))
	}
	// 5 MB of output in all: five blocks of the API's largest (1 MiB).
	blocks := []any{map[string]any{"type": "text", "text": "\x1b[31mRED\x1b[0m \x1b]0;title\x07<script>window.pwned='output'</script>\n"}}
	for range 5 {
		blocks = append(blocks, map[string]any{"type": "text", "text": strings.Repeat("A line of tool output that goes on.\n", 1000<<10/36)})
	}
	e.sendRaw(t, sid, map[string]any{"type": "user.custom_tool_result", "custom_tool_use_id": use["id"], "content": blocks})
	until(t, events, "session.status_idle", 60*time.Second)

	check := func(when string) {
		t.Helper()
		b.wait("the agent's reply "+when, `document.querySelector('#timeline [data-type="agent.message"] strong')?.textContent === 'hostile done'`, 60*time.Second)
		got := evalJS[string](b, hostileChecks)
		if got != `{"pwned":null,"bad":0,"esc":false,"visible":true}` {
			t.Errorf("%s: hostile content is not inert: %s", when, got)
		}
		out := evalJS[int](b, `[...document.querySelectorAll('#timeline [data-type="user.custom_tool_result"] pre.text')].pop().textContent.length`)
		if out <= 0 || out > 100<<10 {
			t.Errorf("%s: the 5 MB output shows %d characters, want it clipped to at most 100 KiB", when, out)
		}
		if !evalJS[bool](b, `[...document.querySelectorAll('#timeline [data-type="user.custom_tool_result"] pre.text')].pop().textContent.startsWith('RED <script>')`) {
			t.Errorf("%s: the output does not start with its text, escapes removed and markup shown as text", when)
		}
	}
	check("arriving live")
	start := time.Now()
	b.open("/console/sessions/" + sid)
	b.wait("a responsive page", `document.querySelectorAll('#timeline .entry').length > 0`, 30*time.Second)
	load := time.Since(start)
	check("loaded afresh")
	if load > 15*time.Second {
		t.Errorf("the page with a 5 MB output took %v to load", load)
	}
	t.Logf("session page with the hostile transcript loaded in %v", load)
	if errs := b.pageErrors(); len(errs) > 0 {
		t.Errorf("the pages reported errors: %v", errs)
	}

	// A script without the CSRF token is refused, in the browser too.
	status := evalJS[int](b, `(async () => (await fetch(location.pathname + '/interrupt', {method: 'POST'})).status)()`)
	if status != 403 {
		t.Errorf("a post without the CSRF token answered %d, want 403", status)
	}
}

// TestConsoleLiveLatency measures, with 10 tabs open on one session, the
// time from an event's commit (its processed_at) to its entry appearing in
// each tab (the page records when each event's frame arrived): every
// event of 10 scripted turns reaches every tab, and the p50 and p95 are
// logged (the closing figures come from here). The bound checked is loose:
// absolute latency targets belong to benchmarks on a quiet machine.
func TestConsoleLiveLatency(t *testing.T) {
	t.Parallel()
	e := newTurnEnv(t)
	b := newBrowser(t, e.srv.BaseURL)
	b.signIn(e.srv.APIKey)
	sid := e.session(t, nil)
	events := e.watch(t, sid)
	tabs := []*browser{b}
	for len(tabs) < 10 {
		tabs = append(tabs, b.tab())
	}
	for _, tab := range tabs {
		tab.open("/console/sessions/" + sid)
		tab.wait("the live stream", `window.mangoConsole && window.mangoConsole.live`, 30*time.Second)
	}
	before, err := e.client.Beta.Sessions.Events.List(context.Background(), sid, anthropic.BetaSessionEventListParams{Limit: anthropic.Int(1000)})
	if err != nil {
		t.Fatal(err)
	}
	shown := map[string]bool{} // rendered with the pages, not live
	for _, ev := range before.Data {
		shown[ev.ID] = true
	}
	for i := range 10 {
		e.say(t, sid, fmt.Sprintf("#reply turn %d", i))
		until(t, events, "session.status_idle", 30*time.Second)
	}
	list, err := e.client.Beta.Sessions.Events.List(context.Background(), sid, anthropic.BetaSessionEventListParams{Limit: anthropic.Int(1000)})
	if err != nil {
		t.Fatal(err)
	}
	var lat []time.Duration
	for i, tab := range tabs {
		tab.wait("every event in tab "+fmt.Sprint(i), fmt.Sprintf(`document.querySelectorAll('#timeline > .entry').length >= %d`, len(list.Data)), 30*time.Second)
		seen := evalJS[map[string]float64](tab, `window.mangoConsole.seen`)
		for _, ev := range list.Data {
			if shown[ev.ID] {
				continue
			}
			at, ok := seen[ev.ID]
			if !ok {
				t.Errorf("tab %d never showed event %s (%s)", i, ev.ID, ev.Type)
				continue
			}
			lat = append(lat, time.UnixMicro(int64(at*1000)).Sub(ev.ProcessedAt))
		}
	}
	p50, p95 := percentile(lat, 0.50), percentile(lat, 0.95)
	t.Logf("commit to page, %d events x %d tabs: p50 %v, p95 %v, max %v", len(list.Data), len(tabs), p50, p95, percentile(lat, 1))
	if p95 > 5*time.Second {
		t.Errorf("p95 commit-to-page latency %v with 10 tabs", p95)
	}
}

// percentile returns the q-quantile of ds (nearest rank).
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(i, 0)]
}

// a11yChecks lists what a page lacks for a keyboard or screen reader user
// on a narrow screen: a form control without a label, a button or link
// without text, no main landmark or page heading, no language, content
// wider than the screen.
const a11yChecks = `(() => {
	const out = [];
	const visible = (el) => el.offsetParent !== null || el.getClientRects().length > 0;
	for (const el of document.querySelectorAll('input:not([type=hidden]), select, textarea')) {
		if (visible(el) && el.labels.length === 0 && !el.getAttribute('aria-label') && !el.getAttribute('aria-labelledby')) {
			out.push('unlabelled ' + el.tagName + '#' + el.id + '[name=' + el.name + ']');
		}
	}
	for (const el of document.querySelectorAll('button, a[href]')) {
		if (visible(el) && !el.textContent.trim() && !el.getAttribute('aria-label')) out.push('no text: ' + el.outerHTML.slice(0, 80));
	}
	if (!document.querySelector('main')) out.push('no main');
	if (document.querySelectorAll('h1').length !== 1) out.push(document.querySelectorAll('h1').length + ' h1');
	if (!document.documentElement.lang) out.push('no lang');
	if (document.documentElement.scrollWidth > window.innerWidth + 1) {
		const wide = [...document.querySelectorAll('main *')].filter(el => el.getBoundingClientRect().right > window.innerWidth + 1 && !el.closest('.table-wrap, pre'));
		out.push('wider than the screen: ' + document.documentElement.scrollWidth + ' > ' + window.innerWidth + ' ' + wide.slice(0, 3).map(el => el.tagName + '.' + el.className).join(' '));
	}
	return out;
})()`

// TestConsoleAccessible visits every page of the console on a narrow
// screen (390 px): each has labelled controls, named buttons and links, a
// main landmark, one heading and a language, fits the screen, and the
// first Tab reaches the skip link with a visible focus ring.
func TestConsoleAccessible(t *testing.T) {
	t.Parallel()
	e := newTurnEnv(t)
	b := newBrowser(t, e.srv.BaseURL)
	b.do("a narrow screen", chromedp.EmulateViewport(390, 844))
	b.signIn(e.srv.APIKey)
	sid := e.session(t, toolset)
	events := e.watch(t, sid)
	e.say(t, sid, `#tool bash {"command":"echo a-rather-long-output-line-without-any-spaces-that-could-push-the-page-wider-than-a-phone-screen-if-it-did-not-wrap"}`)
	until(t, events, "session.status_idle", 30*time.Second)
	s, err := e.client.Beta.Sessions.Get(context.Background(), sid, anthropic.BetaSessionGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	pages := []string{"/console/sessions", "/console/sessions/new", "/console/sessions/" + sid,
		"/console/agents", "/console/agents/new", "/console/agents/" + s.Agent.ID,
		"/console/environments", "/console/environments/new", "/console/environments/" + s.EnvironmentID,
		"/console/files", "/console/vaults", "/console/vaults/new", "/console/deployments", "/console/deployments/new",
		"/console/webhooks", "/console/webhooks/new", "/console/providers"}
	for _, p := range pages {
		b.open(p)
		if problems := evalJS[[]string](b, a11yChecks); len(problems) > 0 {
			t.Errorf("%s: %v", p, problems)
		}
	}
	// The checks see what they look for.
	b.open("/console/files")
	broken := evalJS[[]string](b, `(() => {
		const m = document.querySelector('main');
		m.append(document.createElement('input'));
		const wide = document.createElement('p');
		wide.textContent = 'x'.repeat(400);
		m.append(wide);
		return `+a11yChecks+`;
	})()`)
	if len(broken) != 2 {
		t.Errorf("the checks found %v on a page given an unlabelled input and a wide block, want those 2 (%s)", broken, evalJS[string](b, `document.documentElement.scrollWidth + ' ' + window.innerWidth + ' ' + document.body.scrollWidth`))
	}

	b.open("/console/sessions")
	b.do("press Tab", chromedp.KeyEvent("\t"))
	focus := evalJS[string](b, `document.activeElement.className + ' ' + getComputedStyle(document.activeElement).outlineStyle`)
	if focus != "skip solid" {
		t.Errorf("after one Tab the focus is on %q, want the skip link with a visible outline (\"skip solid\")", focus)
	}
	if errs := b.pageErrors(); len(errs) > 0 {
		t.Errorf("the pages reported errors: %v", errs)
	}
}
