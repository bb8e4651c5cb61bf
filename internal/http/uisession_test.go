package httpapi

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	contract "github.com/dshd/dshd/api"
	"github.com/dshd/dshd/internal/uiauth"
)

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// signInServer serves the UI's sign-in and /metrics over real HTTP (TLS
// when tls), with logins on clock.
func signInServer(t *testing.T, clock *fakeClock, tls bool) (*httptest.Server, string) {
	t.Helper()
	token := strings.Repeat("k", 40)
	h, err := NewServer(Deps{
		Token: token, Spec: contract.OpenAPI, Logger: discardLogger(),
		UI:       fstest.MapFS{"index.html": {Data: []byte("<!doctype html>")}},
		Logins:   uiauth.New(uiauth.Options{Now: clock.Now}),
		Gatherer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	if tls {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv, token
}

func send(t *testing.T, srv *httptest.Server, method, path, body string, headers map[string]string) (*http.Response, string) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, srv.URL+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// newCode mints a login code with the token.
func newCode(t *testing.T, srv *httptest.Server, token string) string {
	t.Helper()
	resp, body := send(t, srv, "POST", "/ui/login-codes", "", map[string]string{"Authorization": "Bearer " + token})
	_, code, ok := strings.Cut(body, "#login=")
	code, _, _ = strings.Cut(code, `"`)
	if resp.StatusCode != http.StatusCreated || !ok || code == "" {
		t.Fatalf("POST /ui/login-codes = %d: %s", resp.StatusCode, body)
	}
	return code
}

// TestLoginCodeAndSessionExpire: over real HTTP, a login code still works
// 59 s after it was minted and is 401 problem+json at 60 s; a session
// authenticates until its lifetime ends, then is 401.
func TestLoginCodeAndSessionExpire(t *testing.T) {
	clock := &fakeClock{now: time.Date(2025, 4, 1, 12, 0, 0, 0, time.UTC)}
	srv, token := signInServer(t, clock, false)

	late := newCode(t, srv, token)
	clock.Add(uiauth.DefaultCodeTTL)
	resp, body := send(t, srv, "POST", "/ui/session", `{"code":"`+late+`"}`, nil)
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Content-Type") != problemContentType {
		t.Errorf("sign-in with an expired code = %d %s: %s, want 401 problem+json", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}

	code := newCode(t, srv, token)
	clock.Add(uiauth.DefaultCodeTTL - time.Second)
	resp, body = send(t, srv, "POST", "/ui/session", `{"code":"`+code+`"}`, nil)
	if resp.StatusCode != http.StatusCreated || len(resp.Cookies()) != 1 {
		t.Fatalf("sign-in 59 s after the code was minted = %d: %s", resp.StatusCode, body)
	}
	c := resp.Cookies()[0]
	_, key, _ := strings.Cut(body, `"key":"`)
	key, _, _ = strings.Cut(key, `"`)
	session := map[string]string{"Cookie": c.Name + "=" + c.Value, uiKeyHeader: key}
	clock.Add(uiauth.DefaultSessionTTL - time.Second)
	if resp, body := send(t, srv, "GET", "/metrics", "", session); resp.StatusCode != http.StatusOK {
		t.Errorf("GET /metrics with the session just before it ends = %d: %.200s", resp.StatusCode, body)
	}
	clock.Add(time.Second)
	if resp, body := send(t, srv, "GET", "/metrics", "", session); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /metrics with an ended session = %d, want 401: %.200s", resp.StatusCode, body)
	}
}

// TestSessionCookieSecureOverTLS: over TLS the session cookie is Secure
// too, and a login URL says https.
func TestSessionCookieSecureOverTLS(t *testing.T) {
	clock := &fakeClock{now: time.Now()}
	srv, token := signInServer(t, clock, true)
	resp, body := send(t, srv, "POST", "/ui/login-codes", "", map[string]string{"Authorization": "Bearer " + token})
	if !strings.Contains(body, `"url":"https://`) {
		t.Errorf("login URL over TLS = %s (status %d), want https", body, resp.StatusCode)
	}
	resp, body = send(t, srv, "POST", "/ui/session", `{"token":"`+token+`"}`, nil)
	if resp.StatusCode != http.StatusCreated || len(resp.Cookies()) != 1 {
		t.Fatalf("sign-in with the token = %d: %s", resp.StatusCode, body)
	}
	if c := resp.Cookies()[0]; !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
		t.Errorf("cookie over TLS %q: want Secure, HttpOnly, SameSite=Strict", resp.Header.Get("Set-Cookie"))
	}
}
