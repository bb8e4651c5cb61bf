package httpapi

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/dshd/dshd/internal/http/api"
	"github.com/dshd/dshd/internal/uiauth"
)

// uiLogins keeps the UI's login codes and sessions (*uiauth.Store).
type uiLogins interface {
	NewCode() (uiauth.Code, error)
	Redeem(code string) (uiauth.Session, error)
	NewSession() (uiauth.Session, error)
	Check(id, key string) error
	End(id string)
	SessionTTL() time.Duration
}

var _ uiLogins = (*uiauth.Store)(nil)

// The UI's sign-in routes, served by hand (they set cookies and read the
// request's origin) and validated against the contract like the others.
const (
	loginCodesPath = "/ui/login-codes"
	uiSessionPath  = "/ui/session"
)

// uiKeyHeader carries a UI session's key. The session cookie alone
// authenticates nothing: browsers send a host's cookies to all its ports,
// so a page another program serves on this host would get it, but the key
// the page keeps is per origin. A header also keeps other sites out: a
// cross-origin page cannot send it without a CORS preflight, which dshd
// never grants.
const uiKeyHeader = "X-Dshd-UI-Key"

// authMethod says how a request was authenticated.
type authMethod int

const (
	authNone    authMethod = iota
	authBearer             // the bearer token
	authSession            // a UI session: its cookie and key
)

// authKey is the context key of the request's authMethod.
type authKey struct{}

func authFrom(ctx context.Context) authMethod {
	m, _ := ctx.Value(authKey{}).(authMethod)
	return m
}

// Reasons a request is refused as unauthorized.
var (
	errNeedsBearer = fmt.Errorf("%w: a login code needs the bearer token itself, not a UI session", errUnauthorized)
	errCrossSite   = fmt.Errorf("%w: a UI session is accepted only from the UI's own pages (same origin)", errUnauthorized)
	errNoKey       = fmt.Errorf("%w: a UI session needs its key in the %s header", errUnauthorized, uiKeyHeader)
	errBadSession  = fmt.Errorf("%w: the UI session is unknown or has expired; sign in again", errUnauthorized)
	errBadLogin    = fmt.Errorf("%w: the login code is unknown, used or expired, or the token is wrong", errUnauthorized)
)

// sessionCookieName names the session cookie after the port of the Host
// the browser used: cookies ignore ports, so two servers on one host would
// otherwise overwrite each other's.
func sessionCookieName(host string) string {
	if _, port, err := net.SplitHostPort(host); err == nil && port != "" {
		return "dshd_session_" + port
	}
	return "dshd_session"
}

// sameOrigin reports whether a browser sent r from a page of this server,
// or no browser sent it (no Sec-Fetch-Site and no Origin). A request from a
// page of another site, or from the address bar, is refused.
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
		return false
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host) && u.Scheme == requestScheme(r)
}

func requestScheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

// bearerOK reports whether r carries the bearer token. present says
// whether it carries an Authorization header at all.
func (s *Server) bearerOK(r *http.Request) (ok, present bool) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return false, false
	}
	scheme, got, found := strings.Cut(h, " ")
	return found && strings.EqualFold(scheme, "Bearer") && s.tokenOK(strings.TrimSpace(got)), true
}

// tokenOK compares got with the token in constant time.
func (s *Server) tokenOK(got string) bool {
	return subtle.ConstantTimeCompare([]byte(got), s.token) == 1
}

// sessionAuth checks a request without an Authorization header for a UI
// session: the cookie, the key header and a same-origin sender.
func (s *Server) sessionAuth(r *http.Request) error {
	c, err := r.Cookie(sessionCookieName(r.Host))
	if err != nil {
		return errUnauthorized
	}
	if !sameOrigin(r) {
		return errCrossSite
	}
	key := r.Header.Get(uiKeyHeader)
	if key == "" {
		return errNoKey
	}
	if s.logins.Check(c.Value, key) != nil {
		return errBadSession
	}
	return nil
}

// createLoginCode serves POST /ui/login-codes: a one-time login URL, for
// a bearer of the token (a UI session cannot extend itself this way).
func (s *Server) createLoginCode(w http.ResponseWriter, r *http.Request) {
	if authFrom(r.Context()) != authBearer {
		s.writeError(w, r, errNeedsBearer)
		return
	}
	code, err := s.logins.NewCode()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// The code goes in the fragment, which browsers never send to a server
	// (so it reaches no access log); the page spends it at once.
	u := requestScheme(r) + "://" + r.Host + "/ui/#login=" + code.Code
	writeJSON(w, http.StatusCreated, api.LoginCode{Url: u, ExpiresAt: code.ExpiresAt.UTC()})
}

// createUISession serves POST /ui/session: a login code or the token in,
// a session cookie and its key out.
func (s *Server) createUISession(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		s.writeError(w, r, errCrossSite)
		return
	}
	var req api.UISessionRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		s.writeError(w, r, fmt.Errorf("%w: %v", errBadRequest, err))
		return
	}
	var sess uiauth.Session
	var err error
	switch {
	case req.Code != nil && req.Token == nil:
		sess, err = s.logins.Redeem(*req.Code)
		if err != nil {
			err = errBadLogin
		}
	case req.Token != nil && req.Code == nil:
		if !s.tokenOK(strings.TrimSpace(*req.Token)) {
			err = errBadLogin
			break
		}
		sess, err = s.logins.NewSession()
	default:
		err = fmt.Errorf("%w: give exactly one of code and token", errBadRequest)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name:     sessionCookieName(r.Host),
		Value:    sess.ID,
		Path:     "/",
		MaxAge:   int(s.logins.SessionTTL().Seconds()),
		HttpOnly: true,
		Secure:   r.TLS != nil,
		SameSite: http.SameSiteStrictMode,
	})
	writeJSON(w, http.StatusCreated, api.UISession{Key: sess.Key, ExpiresAt: sess.ExpiresAt.UTC()})
}

// deleteUISession serves DELETE /ui/session: it ends the cookie's session,
// if any, and clears the cookie.
func (s *Server) deleteUISession(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		s.writeError(w, r, errCrossSite)
		return
	}
	name := sessionCookieName(r.Host)
	if c, err := r.Cookie(name); err == nil {
		s.logins.End(c.Value)
	}
	http.SetCookie(w, &http.Cookie{
		Name: name, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
	w.WriteHeader(http.StatusNoContent)
}

// writeJSON writes v as JSON with status; sign-in answers are never cached.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
