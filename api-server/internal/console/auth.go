package console

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/mangohq/mango/api-server/internal/auth"
	"github.com/mangohq/mango/db"
)

// Cookies of the console. Both are httpOnly, SameSite=Strict, scoped to
// Prefix, and Secure when the request came over TLS (directly or through
// a proxy that says so).
const (
	// cookieSession holds a sign-in's random token.
	cookieSession = "mango_console"
	// cookieSignIn holds the token the sign-in form must echo (login CSRF).
	cookieSignIn = "mango_console_signin"
)

// errSignedOut: no live sign-in goes with the request.
var errSignedOut = errors.New("signed out")

// randomToken returns 32 random bytes, base64url.
func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func tokenHash(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}

// sealPurpose binds a sealed key to its sign-in.
func sealPurpose(id string) string { return "console-session:" + id }

// visitOf resolves r's sign-in cookie to a visit.
func (c *Console) visitOf(r *http.Request) (*visit, error) {
	ck, err := r.Cookie(cookieSession)
	if err != nil || ck.Value == "" {
		return nil, errSignedOut
	}
	cs, err := c.deps.Store.ConsoleSessionByHash(r.Context(), tokenHash(ck.Value), c.deps.Now())
	if errors.Is(err, db.ErrNotFound) {
		return nil, errSignedOut
	}
	if err != nil {
		return nil, err
	}
	key, err := c.deps.Secrets.Open(cs.KeySealed, sealPurpose(cs.ID))
	if err != nil {
		// The vault key that sealed it was retired: sign in again.
		return nil, errSignedOut
	}
	return &visit{api: &apiClient{http: c.http, key: string(key)}, csrf: cs.CSRFToken, path: r.URL.Path}, nil
}

// secure reports whether r came over TLS.
func secure(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

func (c *Console) setCookie(w http.ResponseWriter, r *http.Request, name, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: Prefix, MaxAge: maxAge, HttpOnly: true,
		Secure: secure(r), SameSite: http.SameSiteStrictMode})
}

func (c *Console) clearCookie(w http.ResponseWriter, r *http.Request) {
	c.setCookie(w, r, cookieSession, "", -1)
}

// signInPage is the data of the sign-in page.
type signInPage struct {
	Token, Next, Error string
}

// signInForm shows the sign-in form, with a fresh login-CSRF token.
func (c *Console) signInForm(w http.ResponseWriter, r *http.Request) {
	c.showSignIn(w, r, http.StatusOK, "")
}

func (c *Console) showSignIn(w http.ResponseWriter, r *http.Request, status int, msg string) {
	w.Header().Set("Cache-Control", "no-store")
	token := randomToken()
	c.setCookie(w, r, cookieSignIn, token, 3600)
	c.render(w, r, nil, status, "signin", signInPage{Token: token, Next: safeNext(r.FormValue("next")), Error: msg})
}

// safeNext keeps a post-sign-in destination inside the console.
func safeNext(next string) string {
	if !strings.HasPrefix(next, Prefix+"/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return Prefix + "/sessions"
	}
	return next
}

// signIn exchanges an API key for a sign-in: the key must be an API key
// the API accepts (checked by calling it), is sealed with the vault keys
// and never leaves the server again; the browser gets a random token.
func (c *Console) signIn(w http.ResponseWriter, r *http.Request) {
	ck, err := r.Cookie(cookieSignIn)
	form := r.PostFormValue("signin_token")
	if err != nil || form == "" || subtle.ConstantTimeCompare([]byte(ck.Value), []byte(form)) != 1 {
		c.showSignIn(w, r, http.StatusForbidden, "The sign-in form expired. Try again.")
		return
	}
	key := strings.TrimSpace(r.PostFormValue("api_key"))
	if auth.KindOf(key) != auth.KindAPIKey || key == "" {
		c.showSignIn(w, r, http.StatusUnauthorized, "Sign in with an API key (environment keys and work tokens are for workers).")
		return
	}
	if c.deps.Secrets.Empty() {
		c.showSignIn(w, r, http.StatusServiceUnavailable, "The console keeps keys sealed with the vault keys, and none are configured (MANGO_VAULT_KEYS).")
		return
	}
	api := &apiClient{http: c.http, key: key}
	if err := api.get(r.Context(), "/v1/agents", map[string][]string{"limit": {"1"}}, nil); err != nil {
		if isStatus(err, http.StatusUnauthorized) {
			c.showSignIn(w, r, http.StatusUnauthorized, "That API key is not valid.")
			return
		}
		c.fail(w, r, nil, err)
		return
	}
	token, now := randomToken(), c.deps.Now()
	cs := db.ConsoleSession{ID: "csn_" + randomToken()[:24], CSRFToken: randomToken(), CreatedAt: now, ExpiresAt: now.Add(c.deps.SignInTTL)}
	if cs.KeySealed, err = c.deps.Secrets.Seal([]byte(key), sealPurpose(cs.ID)); err != nil {
		c.fail(w, r, nil, fmt.Errorf("seal console key: %w", err))
		return
	}
	if err := c.deps.Store.ConsoleSessionCreate(r.Context(), cs, tokenHash(token)); err != nil {
		c.fail(w, r, nil, err)
		return
	}
	c.setCookie(w, r, cookieSignIn, "", -1)
	c.setCookie(w, r, cookieSession, token, int(c.deps.SignInTTL.Seconds()))
	http.Redirect(w, r, safeNext(r.PostFormValue("next")), http.StatusSeeOther)
}

// signOut ends the sign-in server-side (its token stops working at once,
// wherever it was copied) and clears the cookie.
func (c *Console) signOut(w http.ResponseWriter, r *http.Request, _ *visit) error {
	if ck, err := r.Cookie(cookieSession); err == nil {
		if err := c.deps.Store.ConsoleSessionDelete(r.Context(), tokenHash(ck.Value)); err != nil {
			return err
		}
	}
	c.clearCookie(w, r)
	http.Redirect(w, r, Prefix+"/sign-in", http.StatusSeeOther)
	return nil
}
