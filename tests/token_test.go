package tests

import (
	"bytes"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// uiLogin runs "dshd ui" against s and returns the login URL it printed
// and everything it wrote.
func uiLogin(t *testing.T, s *testServer, args ...string) (loginURL, output string) {
	t.Helper()
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(serverBinary, append([]string{"ui", "--addr", u.Host, "--home", s.Home}, args...)...)
	cmd.Env = cleanEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("dshd ui: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	return strings.TrimSpace(stdout.String()), stdout.String() + stderr.String()
}

// loginCode returns the code of a login URL, checking that it is in the
// fragment of the server's UI address.
func loginCode(t *testing.T, s *testServer, loginURL string) string {
	t.Helper()
	code, ok := strings.CutPrefix(loginURL, s.URL+"/ui/#login=")
	if !ok || code == "" || strings.ContainsAny(code, "?&#") {
		t.Fatalf("login URL %q is not %s/ui/#login=<code>", loginURL, s.URL)
	}
	return code
}

// rawRequest sends one request with exactly these headers and returns the
// response and its body.
func rawRequest(t *testing.T, method, target, body string, headers map[string]string) (*http.Response, string) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, target, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// TestTokenNeverInOutput: the token is in no output of dshd (issue 24, item
// 2). The real binary runs at debug level, serves every kind of request,
// including wrong credentials, bad sign-ins and a login link, then stops;
// its stdout, stderr, every file of its home but the token file, /metrics,
// the error answers and "dshd ui"'s output are searched for the token.
func TestTokenNeverInOutput(t *testing.T) {
	t.Parallel()
	home := filepath.Join(t.TempDir(), "home")
	s := startServer(t, withHome(home), withArgs("--log-level", "debug"))
	token := s.Token
	if len(token) != 64 {
		t.Fatalf("token has %d characters, want 64", len(token))
	}
	var answers []string
	keep := func(what, body string) { answers = append(answers, what+": "+body) }

	// Ordinary traffic: an agent, a job, its output, a tool call.
	var agent struct{ ID string }
	if st := s.DoJSON(t, "POST", "/agents", map[string]any{}, &agent); st != http.StatusCreated {
		t.Fatalf("POST /agents = %d", st)
	}
	var j job
	if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": "echo hello", "agentId": agent.ID}, &j); st != http.StatusOK {
		t.Fatalf("POST /exec = %d", st)
	}
	resp, body := rawRequest(t, "GET", s.URL+"/jobs/"+j.ID+"/output", "", map[string]string{"Authorization": "Bearer " + token})
	keep("output", body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET output = %d", resp.StatusCode)
	}
	if st := s.DoJSON(t, "POST", "/agents/"+agent.ID+"/tools/bash", map[string]any{"arguments": map[string]any{"command": "true"}}, nil); st != http.StatusOK {
		t.Fatalf("tool call = %d", st)
	}

	// Wrong and malformed credentials, and bad requests that carry the
	// token in places an error might quote.
	for _, tc := range []struct {
		what, method, path, body string
		headers                  map[string]string
		status                   int
	}{
		{"token with a suffix", "GET", "/jobs", "", map[string]string{"Authorization": "Bearer " + token + "x"}, 401},
		{"token as the scheme", "GET", "/jobs", "", map[string]string{"Authorization": token}, 401},
		{"token in a cookie", "GET", "/jobs", "", map[string]string{"Cookie": "dshd_session_" + port(t, s) + "=" + token, "X-Dshd-UI-Key": token}, 401},
		{"wrong token at sign-in", "POST", "/ui/session", `{"token":"` + token + `x"}`, nil, 401},
		{"token and an unknown field at sign-in", "POST", "/ui/session", `{"token":"` + token + `","extra":1}`, nil, 400},
		{"token and a code at sign-in", "POST", "/ui/session", `{"token":"` + token + `","code":"` + token + `"}`, nil, 400},
		{"token as a login code", "POST", "/ui/session", `{"code":"` + token + `"}`, nil, 401},
		{"token too long at sign-in", "POST", "/ui/session", `{"token":"` + strings.Repeat(token, 70) + `"}`, nil, 400},
		{"token in a managed env name's value", "POST", "/exec", `{"command":"true","env":{"DSH_X":"` + token + `"}}`, map[string]string{"Authorization": "Bearer " + token}, 400},
		{"token as an unknown field", "POST", "/exec", `{"command":"true","` + token + `":1}`, map[string]string{"Authorization": "Bearer " + token}, 400},
		{"token as a job id", "GET", "/jobs/" + token, "", map[string]string{"Authorization": "Bearer " + token}, 404},
		{"wrong token over MCP", "POST", "/mcp", `{"jsonrpc":"2.0","id":1,"method":"initialize"}`, map[string]string{"Authorization": "Bearer " + token + "0"}, 401},
	} {
		resp, body := rawRequest(t, tc.method, s.URL+tc.path, tc.body, tc.headers)
		if resp.StatusCode != tc.status {
			t.Errorf("%s: status %d, want %d: %s", tc.what, resp.StatusCode, tc.status, body)
		}
		keep(tc.what, body)
		for k, vs := range resp.Header {
			keep(tc.what+" header "+k, strings.Join(vs, " "))
		}
	}
	// A login link and a sign-in with the token.
	loginURL, out := uiLogin(t, s)
	keep("dshd ui", out)
	resp, body = rawRequest(t, "POST", s.URL+"/ui/session", `{"code":"`+loginCode(t, s, loginURL)+`"}`, nil)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("sign-in with the login code = %d: %s", resp.StatusCode, body)
	}
	keep("sign-in", body+" "+strings.Join(resp.Header.Values("Set-Cookie"), " "))
	resp, body = rawRequest(t, "POST", s.URL+"/ui/session", `{"token":"`+token+`"}`, nil)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("sign-in with the token = %d: %s", resp.StatusCode, body)
	}
	keep("sign-in with the token", body+" "+strings.Join(resp.Header.Values("Set-Cookie"), " "))

	// Open routes and the UI's files.
	for _, p := range []string{"/healthz", "/ui/", "/ui/app.js", "/ui/api.js", "/openapi.yaml"} {
		_, body := rawRequest(t, "GET", s.URL+p, "", nil)
		keep(p, body)
	}
	_, metrics := rawRequest(t, "GET", s.URL+"/metrics", "", map[string]string{"Authorization": "Bearer " + token})
	if !strings.Contains(metrics, "dshd_http_requests_total") {
		t.Fatalf("GET /metrics has no request counter:\n%.500s", metrics)
	}
	keep("metrics", metrics)

	s.stop(t)
	keep("stdout", s.stdout.String())
	keep("stderr", s.stderr.String())
	if !strings.Contains(s.stderr.String(), "level=DEBUG") {
		t.Errorf("the server logged nothing at debug level; the search would prove little:\n%.1000s", s.stderr.String())
	}
	tokenFile := filepath.Join(home, "server.token")
	var files []string
	err := filepath.WalkDir(home, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path == tokenFile {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files = append(files, path)
		keep(path, string(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(files, filepath.Join(home, "sessions", agent.ID+".jsonl")) {
		t.Errorf("searched %q of the home; expected the agent's transcript among them", files)
	}

	for _, a := range answers {
		what, text, _ := strings.Cut(a, ": ")
		if what == "token as a job id" {
			// The path the client sent comes back as the problem's
			// instance; nothing else of the answer may hold the token.
			text = strings.ReplaceAll(text, "/jobs/"+token, "/jobs/<sent>")
			text = strings.ReplaceAll(text, "job "+token, "job <sent>")
		}
		if strings.Contains(text, token) {
			i := strings.Index(text, token)
			t.Errorf("%s carries the token: …%s…", what, text[max(0, i-80):min(len(text), i+80)])
		}
	}
}

// decodeBody decodes a JSON body.
func decodeBody(t *testing.T, body string, out any) {
	t.Helper()
	if err := json.Unmarshal([]byte(body), out); err != nil {
		t.Fatalf("decode %q: %v", body, err)
	}
}

// port is the port s listens on.
func port(t *testing.T, s *testServer) string {
	t.Helper()
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Port()
}

// TestUILoginFlow drives the UI's sign-in over real HTTP against the real
// binary: "dshd ui" prints a one-time URL whose code signs in once (a second
// use, a wrong code: 401 problem+json); the session cookie is HttpOnly,
// SameSite=Strict, Path=/ and holds neither the token nor the code; cookie
// and key authenticate API calls and the output stream, neither alone does;
// a cross-site state change with them is refused and changes nothing; a
// session cannot mint login codes; the token pasted in the form signs in
// too; signing out ends the session.
func TestUILoginFlow(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	cookieName := "dshd_session_" + port(t, s)

	loginURL, _ := uiLogin(t, s)
	code := loginCode(t, s, loginURL)
	signIn := func(body string, headers map[string]string) (*http.Response, string) {
		t.Helper()
		return rawRequest(t, "POST", s.URL+"/ui/session", body, headers)
	}

	resp, body := signIn(`{"code":"`+code+`"}`, map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": s.URL})
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("sign-in with a fresh code = %d: %s", resp.StatusCode, body)
	}
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == cookieName {
			cookie = c
		}
	}
	if cookie == nil {
		t.Fatalf("no %s cookie in %q", cookieName, resp.Header.Values("Set-Cookie"))
	}
	if !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || cookie.Path != "/" || cookie.Secure || cookie.MaxAge <= 0 {
		t.Errorf("cookie %q: want HttpOnly, SameSite=Strict, Path=/, a Max-Age, and no Secure over plain HTTP", resp.Header.Get("Set-Cookie"))
	}
	if cookie.Value == s.Token || cookie.Value == code || strings.Contains(cookie.Value, s.Token) || len(cookie.Value) < 40 {
		t.Errorf("cookie value %q is the token or the code, or too short to be a random id", cookie.Value)
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("sign-in Cache-Control = %q, want no-store", cc)
	}
	var session struct {
		Key       string    `json:"key"`
		ExpiresAt time.Time `json:"expiresAt"`
	}
	decodeBody(t, body, &session)
	if len(session.Key) < 40 || session.Key == cookie.Value || session.ExpiresAt.Before(time.Now().Add(time.Hour)) {
		t.Errorf("session %+v: want a random key apart from the cookie, expiring in hours", session)
	}
	withSession := func(extra ...string) map[string]string {
		h := map[string]string{"Cookie": cookieName + "=" + cookie.Value, "X-Dshd-UI-Key": session.Key}
		for i := 0; i+1 < len(extra); i += 2 {
			h[extra[i]] = extra[i+1]
		}
		return h
	}

	// The code works once; a wrong one never.
	for what, c := range map[string]string{"the used code": code, "a wrong code": code[:len(code)-2] + "xx"} {
		resp, body := signIn(`{"code":"`+c+`"}`, nil)
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(body, `"code":"unauthorized"`) {
			t.Errorf("sign-in with %s = %d %s %s, want 401 problem+json", what, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
		if len(resp.Cookies()) != 0 {
			t.Errorf("sign-in with %s set a cookie", what)
		}
	}

	// Cookie and key authenticate an API call, the browser's way.
	resp, body = rawRequest(t, "GET", s.URL+"/jobs", "", withSession("Sec-Fetch-Site", "same-origin"))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /jobs with the session = %d: %s", resp.StatusCode, body)
	}
	// Neither alone, nor a wrong key.
	for what, h := range map[string]map[string]string{
		"the cookie alone":           {"Cookie": cookieName + "=" + cookie.Value},
		"the key alone":              {"X-Dshd-UI-Key": session.Key},
		"a wrong key":                {"Cookie": cookieName + "=" + cookie.Value, "X-Dshd-UI-Key": session.Key + "x"},
		"another port's cookie name": {"Cookie": "dshd_session_1=" + cookie.Value, "X-Dshd-UI-Key": session.Key},
	} {
		if resp, body := rawRequest(t, "GET", s.URL+"/jobs", "", h); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET /jobs with %s = %d, want 401: %s", what, resp.StatusCode, body)
		}
	}

	// A state change from the UI's own page works; from another site it is
	// refused and runs nothing.
	resp, body = rawRequest(t, "POST", s.URL+"/exec", `{"command":"echo from-the-ui","background":true}`,
		withSession("Sec-Fetch-Site", "same-origin", "Origin", s.URL))
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /exec with the session from the UI = %d: %s", resp.StatusCode, body)
	}
	var bg job
	decodeBody(t, body, &bg)
	for what, h := range map[string]map[string]string{
		"Sec-Fetch-Site cross-site": withSession("Sec-Fetch-Site", "cross-site"),
		"Sec-Fetch-Site same-site":  withSession("Sec-Fetch-Site", "same-site"),
		"another Origin":            withSession("Origin", "http://evil.example"),
		"another port's Origin":     withSession("Origin", "http://127.0.0.1:1"),
	} {
		resp, body := rawRequest(t, "POST", s.URL+"/exec", `{"command":"echo cross-site-ran"}`, h)
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "same origin") {
			t.Errorf("POST /exec with the session, %s = %d, want 401 naming the same-origin rule: %s", what, resp.StatusCode, body)
		}
	}
	var jobs []struct{ ID, Command string }
	if st := s.DoJSON(t, "GET", "/jobs", nil, &jobs); st != http.StatusOK {
		t.Fatalf("GET /jobs = %d", st)
	}
	for _, j := range jobs {
		if strings.Contains(j.Command, "cross-site-ran") {
			t.Errorf("a refused cross-site request ran job %s", j.ID)
		}
	}

	// The output stream, as the UI reads it (fetch with the session).
	resp, body = rawRequest(t, "GET", s.URL+"/jobs/"+bg.ID+"/output", "", withSession("Accept", "text/event-stream", "Sec-Fetch-Site", "same-origin"))
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "from-the-ui") || !strings.Contains(body, "event: exit") {
		t.Errorf("output stream with the session = %d:\n%s", resp.StatusCode, body)
	}

	// A session cannot mint login codes (it would extend itself forever).
	if resp, body := rawRequest(t, "POST", s.URL+"/ui/login-codes", "", withSession("Sec-Fetch-Site", "same-origin")); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST /ui/login-codes with a session = %d, want 401: %s", resp.StatusCode, body)
	}
	// Nor can anyone without the token.
	if resp, body := rawRequest(t, "POST", s.URL+"/ui/login-codes", "", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST /ui/login-codes without a token = %d, want 401: %s", resp.StatusCode, body)
	}

	// The token pasted into the form signs in too; a wrong one does not;
	// another site's page cannot sign in.
	if resp, body := signIn(`{"token":"`+s.Token+`"}`, nil); resp.StatusCode != http.StatusCreated || len(resp.Cookies()) != 1 {
		t.Errorf("sign-in with the token = %d with %d cookies: %s", resp.StatusCode, len(resp.Cookies()), body)
	}
	if resp, body := signIn(`{"token":"`+s.Token[:63]+`"}`, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("sign-in with a wrong token = %d, want 401: %s", resp.StatusCode, body)
	}
	loginURL, _ = uiLogin(t, s)
	if resp, body := signIn(`{"code":"`+loginCode(t, s, loginURL)+`"}`, map[string]string{"Sec-Fetch-Site": "cross-site"}); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("cross-site sign-in = %d, want 401: %s", resp.StatusCode, body)
	}

	// Signing out ends the session and clears the cookie.
	resp, body = rawRequest(t, "DELETE", s.URL+"/ui/session", "", withSession("Sec-Fetch-Site", "same-origin"))
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE /ui/session = %d: %s", resp.StatusCode, body)
	}
	if sc := resp.Header.Get("Set-Cookie"); !strings.Contains(sc, cookieName+"=;") || !strings.Contains(sc, "Max-Age=0") {
		t.Errorf("sign-out Set-Cookie = %q, want the cookie cleared", sc)
	}
	if resp, body := rawRequest(t, "GET", s.URL+"/jobs", "", withSession()); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /jobs after sign-out = %d, want 401: %s", resp.StatusCode, body)
	}
}

// TestShortTokenFileRefused: a token file shorter than 32 characters, in
// the home or named by --token-file, stops the binary at start with a
// message naming the file; the file is left as it was, never replaced, and
// its content is not printed.
func TestShortTokenFileRefused(t *testing.T) {
	t.Parallel()
	short := "only-31-characters-long-token-x"
	if len(short) != 31 {
		t.Fatalf("test token has %d characters", len(short))
	}
	t.Run("home", func(t *testing.T) {
		home := filepath.Join(t.TempDir(), "home")
		if err := os.MkdirAll(home, 0o700); err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(home, "server.token")
		if err := os.WriteFile(file, []byte(short+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		out := refuseToStart(t, home)
		if !strings.Contains(out, file) || !strings.Contains(out, "32") || strings.Contains(out, short) {
			t.Errorf("the refusal does not name %s and the minimum, or prints the token:\n%s", file, out)
		}
		if b, err := os.ReadFile(file); err != nil || string(b) != short+"\n" {
			t.Errorf("token file now holds %q (%v); want it untouched", b, err)
		}
	})
	t.Run("--token-file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(file, []byte(short+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		out := refuseToStart(t, filepath.Join(t.TempDir(), "home"), "--token-file", file)
		if !strings.Contains(out, file) || strings.Contains(out, short) {
			t.Errorf("the refusal does not name %s, or prints the token:\n%s", file, out)
		}
	})
}
