package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"net/http"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/microcosm-cc/bluemonday"
	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/extension"
)

//go:embed static templates
var files embed.FS

// assets are the embedded static files under names that change with
// their content (console.<hash>.js), served as immutable.
type assets struct {
	byName   map[string]string // console.js -> console.0123abcd.js
	byHashed map[string]asset
}

type asset struct {
	body        []byte
	contentType string
}

func loadAssets() (*assets, error) {
	as := &assets{byName: map[string]string{}, byHashed: map[string]asset{}}
	entries, err := fs.ReadDir(files, "static")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		b, err := files.ReadFile("static/" + e.Name())
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(b)
		ext := path.Ext(e.Name())
		hashed := strings.TrimSuffix(e.Name(), ext) + "." + hex.EncodeToString(sum[:6]) + ext
		ct := map[string]string{".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}[ext]
		as.byName[e.Name()] = hashed
		as.byHashed[hashed] = asset{body: b, contentType: ct}
	}
	return as, nil
}

// url is the path of the named asset.
func (as *assets) url(name string) (string, error) {
	h, ok := as.byName[name]
	if !ok {
		return "", fmt.Errorf("no asset %q", name)
	}
	return Prefix + "/static/" + h, nil
}

// serve answers GET /console/static/{name}.
func (as *assets) serve(w http.ResponseWriter, r *http.Request) {
	a, ok := as.byHashed[r.PathValue("name")]
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", a.contentType)
	w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	_, _ = w.Write(a.body)
}

// pages are the parsed templates: each page is the layout with the
// page's "content" (and the shared partials).
type pages struct {
	byName map[string]*template.Template
	// fragments renders partials alone (live timeline entries).
	fragments *template.Template
}

func loadPages(as *assets) (*pages, error) {
	funcs := templateFuncs(as)
	base, err := template.New("base").Funcs(funcs).ParseFS(files, "templates/layout.html", "templates/partials/*.html")
	if err != nil {
		return nil, err
	}
	ps := &pages{byName: map[string]*template.Template{}, fragments: base}
	names, err := fs.Glob(files, "templates/pages/*.html")
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		t, err := template.Must(base.Clone()).ParseFS(files, n)
		if err != nil {
			return nil, err
		}
		ps.byName[strings.TrimSuffix(path.Base(n), ".html")] = t
	}
	return ps, nil
}

// view is what every page template receives.
type view struct {
	// Title is the page's title (the page sets it with {{define "title"}}).
	SignedIn bool
	CSRF     string
	Path     string
	Data     any
}

// render writes the page name with data (v nil: signed out).
func (c *Console) render(w http.ResponseWriter, r *http.Request, v *visit, status int, name string, data any) {
	t, ok := c.pages.byName[name]
	if !ok {
		http.Error(w, "no such page", http.StatusInternalServerError)
		return
	}
	vw := view{Data: data, Path: r.URL.Path}
	if v != nil {
		vw.SignedIn, vw.CSRF = true, v.csrf
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout", vw); err != nil {
		c.deps.Logger.ErrorContext(r.Context(), "console render failed", "page", name, "err", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fragment renders the partial name with data.
func (c *Console) fragment(name string, data any) (string, error) {
	var buf bytes.Buffer
	if err := c.pages.fragments.ExecuteTemplate(&buf, name, data); err != nil {
		return "", err
	}
	return buf.String(), nil
}

func templateFuncs(as *assets) template.FuncMap {
	return template.FuncMap{
		"asset":    as.url,
		"markdown": renderMarkdown,
		"clip":     clip,
		"pretty":   prettyJSON,
		"ago":      ago,
		"when":     func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
		"cents":    cents,
		"num":      num,
		"str":      str,
		"dict":     dict,
		"usage":    usageLine,
		"nav": func(cur, section string) bool {
			return cur == Prefix+"/"+section || strings.HasPrefix(cur, Prefix+"/"+section+"/")
		},
	}
}

// dict builds a map for passing several values to a partial.
func dict(kv ...any) (map[string]any, error) {
	if len(kv)%2 != 0 {
		return nil, fmt.Errorf("dict: odd number of arguments")
	}
	m := make(map[string]any, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		k, ok := kv[i].(string)
		if !ok {
			return nil, fmt.Errorf("dict: key %v is not a string", kv[i])
		}
		m[k] = kv[i+1]
	}
	return m, nil
}

// str renders a decoded JSON value as text ("" for null).
func str(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case json.Number:
		return x.String()
	case bool:
		return strconv.FormatBool(x)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// num reads a decoded JSON number (0 when it is not one).
func num(v any) int64 {
	switch x := v.(type) {
	case string:
		return num(json.Number(x))
	case json.Number:
		n, err := x.Int64()
		if err != nil {
			f, _ := x.Float64()
			return int64(math.Round(f))
		}
		return n
	case float64:
		return int64(x)
	case int64:
		return x
	case int:
		return int64(x)
	}
	return 0
}

// cents shows a list cost given in US cents as dollars.
func cents(v any) string {
	n := num(v)
	return fmt.Sprintf("$%d.%02d", n/100, n%100)
}

// ago is a short age: 5s, 3m, 2h, 4d.
func ago(v any) string {
	var t time.Time
	switch x := v.(type) {
	case time.Time:
		t = x
	case string:
		var err error
		if t, err = time.Parse(time.RFC3339Nano, x); err != nil {
			return ""
		}
	default:
		return ""
	}
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// maxShown caps the text of one piece of content on a page: a 5 MB tool
// output shows its first maxShown bytes and says how much there was.
const maxShown = 64 << 10

// ansi matches terminal escape sequences (CSI, OSC and two-character
// escapes), which tool output carries and a page must not.
var ansi = regexp.MustCompile(`\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-Z\\-_])`)

// clip makes content fit to show: terminal escapes and other control
// characters (but newlines and tabs) removed, cut at maxShown bytes.
func clip(v any) string {
	s := str(v)
	total := len(s)
	if total > 4*maxShown {
		s = s[:4*maxShown] // no need to clean what will not be shown
	}
	s = ansi.ReplaceAllString(s, "")
	s = strings.Map(func(r rune) rune {
		if (r < 0x20 && r != '\n' && r != '\t') || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return -1
		}
		return r
	}, s)
	if len(s) > maxShown {
		cut := maxShown
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + fmt.Sprintf("\n… (%d bytes in all; shown: the first %d)", total, cut)
	}
	return s
}

// prettyJSON indents a decoded JSON value for display (clipped).
func prettyJSON(v any) string {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return ""
	}
	return clip(string(b))
}

var (
	md = goldmark.New(goldmark.WithExtensions(extension.GFM)) // raw HTML is never rendered (no html.WithUnsafe)
	// mdPolicy keeps the markup markdown makes, with http(s) and mailto
	// links only (rel="nofollow noreferrer", new tab) and no images: an
	// image would be a request to wherever the content points.
	mdPolicy = func() *bluemonday.Policy {
		p := bluemonday.NewPolicy()
		p.AllowElements("p", "br", "hr", "strong", "em", "del", "code", "pre", "blockquote", "ul", "ol", "li",
			"h1", "h2", "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr", "th", "td")
		p.AllowAttrs("href").OnElements("a")
		p.AllowURLSchemes("http", "https", "mailto")
		p.RequireParseableURLs(true)
		p.RequireNoReferrerOnLinks(true)
		p.RequireNoFollowOnLinks(true)
		p.AddTargetBlankToFullyQualifiedLinks(true)
		p.AllowAttrs("align").Matching(regexp.MustCompile(`^(left|right|center)$`)).OnElements("th", "td")
		return p
	}()
)

// renderMarkdown renders markdown content safely: no raw HTML, sanitized.
func renderMarkdown(v any) template.HTML {
	var buf bytes.Buffer
	if err := md.Convert([]byte(clip(v)), &buf); err != nil {
		return template.HTML(template.HTMLEscapeString(clip(v))) //nolint:gosec // escaped
	}
	return template.HTML(mdPolicy.SanitizeBytes(buf.Bytes())) //nolint:gosec // sanitized by mdPolicy
}
