package wire

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// browser is a headless Chromium (Debian's chromium package) driven over
// the DevTools protocol, with the errors its pages report collected:
// uncaught exceptions, console errors and the browser's own log errors
// (a Content-Security-Policy violation is one).
type browser struct {
	t    *testing.T
	ctx  context.Context
	base string

	mu     sync.Mutex
	errors []string
}

// newBrowser starts Chromium for the console at base (a server's URL).
// Without Chromium the test is skipped, or fails when the services are
// required (make test installs it).
func newBrowser(t *testing.T, base string) *browser {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("MANGO_REQUIRE_SERVICES") != "" {
			t.Fatalf("chromium not found (apt-get install chromium; make test installs it): %v", err)
		}
		t.Skip("chromium not installed")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("disable-gpu", true), chromedp.WindowSize(1280, 900))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	b := &browser{t: t, base: base}
	ctx, cancel := chromedp.NewContext(alloc, chromedp.WithListener(b.listen))
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b.ctx = ctx
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return b
}

// tab opens another tab of the same browser (same cookies).
func (b *browser) tab() *browser {
	ctx, cancel := chromedp.NewContext(b.ctx, chromedp.WithListener(b.listen))
	b.t.Cleanup(cancel)
	t := &browser{t: b.t, ctx: ctx, base: b.base}
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		b.t.Fatalf("open a tab: %v", err)
	}
	return t
}

func (b *browser) listen(ev any) {
	var msg string
	switch e := ev.(type) {
	case *runtime.EventExceptionThrown:
		msg = "exception: " + e.ExceptionDetails.Text
		if e.ExceptionDetails.Exception != nil {
			msg += " " + e.ExceptionDetails.Exception.Description
		}
	case *runtime.EventConsoleAPICalled:
		if e.Type != runtime.ConsoleAPICalledTypeError {
			return
		}
		msg = "console.error"
		for _, a := range e.Args {
			msg += " " + string(a.Value)
		}
	case *cdplog.EventEntryAdded:
		if e.Entry.Level != cdplog.EntryLevelError {
			return
		}
		msg = "log: " + e.Entry.Text
	default:
		return
	}
	b.mu.Lock()
	b.errors = append(b.errors, msg)
	b.mu.Unlock()
}

// pageErrors returns the errors reported so far.
func (b *browser) pageErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errors...)
}

// do runs actions with a timeout.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("browser: %s: %v", what, err)
	}
}

// open navigates to a console path and waits for its scripts to start.
func (b *browser) open(path string) {
	b.t.Helper()
	b.do("open "+path, chromedp.Navigate(b.base+path))
	b.wait("the console script on "+path, `document.readyState === 'complete'`, 30*time.Second)
}

// wait evaluates a JavaScript condition every 50 ms until it is truthy
// (an evaluation that fails, as one does while a page is replaced, counts
// as false).
func (b *browser) wait(what, cond string, timeout time.Duration) {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	var lastErr error
	for {
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("!!("+cond+")"))
		cancel()
		if err == nil && ok {
			return
		}
		if err != nil {
			lastErr = err
		}
		if time.Now().After(deadline) {
			text, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`(document.body?.innerText ?? '').slice(-3000)`))
			b.t.Fatalf("browser: waiting for %s (%s) for %v; last error %v; page errors: %v; the page ends with:\n%s", what, cond, timeout, lastErr, b.pageErrors(), text)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// evalJS evaluates an expression (awaiting a promise) and decodes its
// value.
func evalJS[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("browser: evaluate %s: %v", expr, err)
	}
	return v
}

// fill sets a form field's value.
func (b *browser) fill(sel, value string) {
	b.t.Helper()
	b.do("fill "+sel, chromedp.SetValue(chromedp.CSS(sel), value))
}

// click clicks the element sel as a user's click does (a submit button
// submits its form as its submitter, a download link downloads), through
// the element itself: a timeline that scrolls to a new entry between the
// aim and the press of a mouse click cannot make it miss.
func (b *browser) click(sel string) {
	b.t.Helper()
	if !evalJS[bool](b, `(() => { const el = document.querySelector(`+strconv.Quote(sel)+`); if (!el) return false; el.click(); return true; })()`) {
		b.t.Fatalf("browser: nothing to click at %s; the page ends with:\n%s", sel, evalJS[string](b, `(document.body?.innerText ?? '').slice(-2000)`))
	}
}

// submitNav clicks sel (a submit button) and waits for the page it leads
// to.
func (b *browser) submitNav(sel string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	if _, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(sel))); err != nil {
		b.t.Fatalf("browser: submit %s: %v", sel, err)
	}
	b.wait("the page after "+sel, `document.readyState === 'complete'`, 30*time.Second)
}

// location is the page's path.
func (b *browser) location() string {
	return evalJS[string](b, `location.pathname`)
}

// signIn signs in with key through the sign-in form.
func (b *browser) signIn(key string) {
	b.t.Helper()
	b.open("/console/sign-in")
	b.fill("#api_key", key)
	b.submitNav(`form[action="/console/sign-in"] button[type=submit]`)
	if loc := b.location(); loc != "/console/sessions" {
		b.t.Fatalf("after sign-in the browser is at %s, want /console/sessions", loc)
	}
}
