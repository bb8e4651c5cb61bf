package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dshd/dshd/internal/proctest"
)

// runningServer is run() started in-process.
type runningServer struct {
	url, token, home string
	line             string
	cancel           context.CancelFunc
	errc             chan error
	stopOnce         sync.Once
}

// startRun calls run in a goroutine with a fake environment and waits for
// the startup line. The server is shut down at cleanup.
func startRun(t *testing.T, args []string, env map[string]string) *runningServer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	s := &runningServer{cancel: cancel, errc: make(chan error, 1)}
	getenv := func(k string) string { return env[k] }
	go func() {
		err := run(ctx, append([]string{"dshd", "--addr", "127.0.0.1:0"}, args...), getenv, nil, pw, io.Discard)
		pw.CloseWithError(io.EOF)
		s.errc <- err
	}()
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, pr)
	}()
	select {
	case l, ok := <-lines:
		if !ok {
			cancel()
			t.Fatalf("run ended before its startup line: %v", <-s.errc)
		}
		s.line = l
	case <-time.After(20 * time.Second):
		cancel()
		t.Fatal("no startup line within 20s")
	}
	rest := strings.TrimPrefix(s.line, "dshd listening on ")
	s.url, _, _ = strings.Cut(rest, " ")
	_, h, _ := strings.Cut(s.line, "(home ")
	s.home, _, _ = strings.Cut(h, ",")
	// The line names the token's file, never the token.
	_, file, _ := strings.Cut(s.line, ", token in ")
	file, _, _ = strings.Cut(file, ") ui ")
	b, err := os.ReadFile(file)
	if err != nil {
		cancel()
		t.Fatalf("read the token file the startup line names (%q): %v", s.line, err)
	}
	s.token = strings.TrimSpace(string(b))
	t.Cleanup(func() { s.shutdown(t) })
	return s
}

// shutdown cancels run's context and waits for it to return cleanly.
func (s *runningServer) shutdown(t *testing.T) {
	t.Helper()
	s.stopOnce.Do(func() {
		s.cancel()
		select {
		case err := <-s.errc:
			if err != nil {
				t.Errorf("run returned %v after shutdown", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("run did not return within 20s of shutdown")
		}
	})
}

func (s *runningServer) request(t *testing.T, method, path, body string, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func (s *runningServer) auth() map[string]string {
	return map[string]string{"Authorization": "Bearer " + s.token}
}

// mcpInitialize is an MCP initialize request.
const mcpInitialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`

// mcpHeader is what an MCP client sends with a request, plus kv pairs.
func (s *runningServer) mcpHeader(kv ...string) map[string]string {
	h := s.auth()
	h["Content-Type"] = "application/json"
	h["Accept"] = "application/json, text/event-stream"
	for i := 0; i+1 < len(kv); i += 2 {
		h[kv[i]] = kv[i+1]
	}
	return h
}

func TestRequests(t *testing.T) {
	home := t.TempDir()
	s := startRun(t, []string{"--home", home}, nil)
	big := `{"name":"x","keys":[],"resolver":{"kind":"static","values":{"DSH_X":"` + strings.Repeat("a", 2<<20) + `"}}}`

	tests := []struct {
		name        string
		method      string
		path        string
		body        string
		header      map[string]string
		wantStatus  int
		wantCode    string // problem code; "" for a success
		wantProblem bool
	}{
		{name: "health needs no token", method: "GET", path: "/healthz", wantStatus: 200},
		{name: "contract needs no token", method: "GET", path: "/openapi.yaml", wantStatus: 200},
		{name: "no token", method: "GET", path: "/env/declarations", wantStatus: 401, wantCode: "unauthorized"},
		{name: "wrong token", method: "GET", path: "/env/declarations", header: map[string]string{"Authorization": "Bearer nope"}, wantStatus: 401, wantCode: "unauthorized"},
		{name: "not bearer", method: "GET", path: "/env/declarations", header: map[string]string{"Authorization": "Basic " + s.token}, wantStatus: 401, wantCode: "unauthorized"},
		{name: "right token", method: "GET", path: "/env/declarations", header: s.auth(), wantStatus: 200},
		{name: "scheme in any case", method: "GET", path: "/env/declarations", header: map[string]string{"Authorization": "bearer " + s.token}, wantStatus: 200},
		{name: "MCP without token", method: "POST", path: "/mcp", body: `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`, wantStatus: 401, wantCode: "unauthorized"},
		{name: "MCP wrong token", method: "GET", path: "/mcp", header: map[string]string{"Authorization": "Bearer nope"}, wantStatus: 401, wantCode: "unauthorized"},
		{name: "MCP unknown agent", method: "POST", path: "/mcp?agentId=agt_missing", header: s.mcpHeader(), body: mcpInitialize, wantStatus: 404, wantCode: "agent_not_found"},
		{name: "MCP agent named twice", method: "POST", path: "/mcp?agentId=agt_a", header: s.mcpHeader("Dsh-Agent-Id", "agt_b"), body: mcpInitialize, wantStatus: 400, wantCode: "bad_request"},
		{name: "unknown field", method: "POST", path: "/contributors", header: s.auth(),
			body:       `{"name":"a.b","keys":[{"key":"DSH_A","description":"d"}],"resolver":{"kind":"static","values":{"DSH_A":"1"}},"colour":"red"}`,
			wantStatus: 400, wantCode: "bad_request"},
		{name: "malformed JSON", method: "POST", path: "/contributors", header: s.auth(), body: `{"name":`, wantStatus: 400, wantCode: "bad_request"},
		{name: "wrong type", method: "POST", path: "/exec", header: s.auth(), body: `{"command":42}`, wantStatus: 400, wantCode: "bad_request"},
		{name: "missing field", method: "POST", path: "/exec", header: s.auth(), body: `{}`, wantStatus: 400, wantCode: "bad_request"},
		{name: "oversize body", method: "POST", path: "/contributors", header: s.auth(), body: big, wantStatus: 413, wantCode: "body_too_large"},
		{name: "unknown route", method: "GET", path: "/nope", header: s.auth(), wantStatus: 404, wantCode: "not_found"},
		{name: "wrong method", method: "PUT", path: "/jobs", header: s.auth(), wantStatus: 405, wantCode: "method_not_allowed"},
		{name: "missing job", method: "GET", path: "/jobs/job_missing", header: s.auth(), wantStatus: 404, wantCode: "job_not_found"},
		{name: "managed env", method: "POST", path: "/exec", header: s.auth(), body: `{"command":"true","env":{"DSH_HOME":"/x"}}`, wantStatus: 400, wantCode: "managed_key_in_env"},
		{name: "NUL in command", method: "POST", path: "/exec", header: s.auth(), body: `{"command":"echo a\u0000b"}`, wantStatus: 400, wantCode: "invalid_input"},
		{name: "metrics", method: "GET", path: "/metrics", header: s.auth(), wantStatus: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := s.request(t, tt.method, tt.path, tt.body, tt.header)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status = %d, want %d; body %s", resp.StatusCode, tt.wantStatus, body)
			}
			if resp.Header.Get("X-Request-ID") == "" {
				t.Error("no X-Request-ID in the response")
			}
			if tt.wantCode == "" {
				return
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("Content-Type = %q, want application/problem+json", ct)
			}
			var p struct {
				Status    int    `json:"status"`
				Code      string `json:"code"`
				Title     string `json:"title"`
				RequestID string `json:"requestId"`
			}
			if err := json.Unmarshal(body, &p); err != nil {
				t.Fatalf("problem %q: %v", body, err)
			}
			if p.Code != tt.wantCode || p.Status != tt.wantStatus || p.Title == "" {
				t.Errorf("problem = %+v, want code %q status %d and a title", p, tt.wantCode, tt.wantStatus)
			}
			if p.RequestID != resp.Header.Get("X-Request-ID") {
				t.Errorf("problem requestId %q != header %q", p.RequestID, resp.Header.Get("X-Request-ID"))
			}
		})
	}

	t.Run("contract served as written", func(t *testing.T) {
		_, body := s.request(t, "GET", "/openapi.yaml", "", nil)
		want, err := os.ReadFile("../../api/openapi.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if string(body) != string(want) {
			t.Error("GET /openapi.yaml differs from api/openapi.yaml")
		}
	})
	t.Run("request id echoed", func(t *testing.T) {
		resp, _ := s.request(t, "GET", "/healthz", "", map[string]string{"X-Request-ID": "trace-123"})
		if got := resp.Header.Get("X-Request-ID"); got != "trace-123" {
			t.Errorf("X-Request-ID = %q, want trace-123", got)
		}
	})
	t.Run("metrics count requests by route", func(t *testing.T) {
		_, body := s.request(t, "GET", "/metrics", "", s.auth())
		if !strings.Contains(string(body), `dshd_http_requests_total{method="GET",route="/env/declarations",status="401"}`) {
			t.Errorf("metrics lack the 401 count of /env/declarations:\n%s", grep(string(body), "dshd_http_requests_total"))
		}
	})
	t.Run("nothing stored by rejected requests", func(t *testing.T) {
		_, body := s.request(t, "GET", "/contributors", "", s.auth())
		if strings.Contains(string(body), `"a.b"`) || strings.Contains(string(body), `"x"`) {
			t.Errorf("a rejected registration was stored: %s", body)
		}
	})
}

func grep(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestHomeAndTokenModes(t *testing.T) {
	home := filepath.Join(t.TempDir(), "new-home")
	s := startRun(t, []string{"--home", home}, nil)
	for path, want := range map[string]os.FileMode{home: 0o700 | os.ModeDir, filepath.Join(home, "server.token"): 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s mode = %v, want %v", path, fi.Mode(), want)
		}
	}
	b, err := os.ReadFile(filepath.Join(home, "server.token"))
	if err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) != 64 || strings.Trim(tok, "0123456789abcdef") != "" {
		t.Errorf("token file holds %d characters; want 64 hex digits (256 bits)", len(tok))
	}
	if !strings.Contains(s.line, "token in "+filepath.Join(home, "server.token")) || !strings.Contains(s.line, " ui "+s.url+"/ui/ ") {
		t.Errorf("startup line %q does not say where the token and the UI are", s.line)
	}
	if strings.Contains(s.line, tok) || strings.Contains(s.line, "#") {
		t.Errorf("startup line %q carries the token or a fragment", s.line)
	}
}

func TestTokenFile(t *testing.T) {
	tf := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tf, []byte("a-token-chosen-by-the-operator-32\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startRun(t, []string{"--home", t.TempDir(), "--token-file", tf}, nil)
	if resp, body := s.request(t, "GET", "/jobs", "", map[string]string{"Authorization": "Bearer a-token-chosen-by-the-operator-32"}); resp.StatusCode != 200 {
		t.Fatalf("status = %d with the token file's token: %s", resp.StatusCode, body)
	}
}

func TestHomePrecedence(t *testing.T) {
	tmp := t.TempDir()
	userHome := filepath.Join(tmp, "user")
	cwd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(cwd, filepath.Join(tmp, "relative"))
	if err != nil {
		t.Fatal(err)
	}
	writeConfig := func(name, content string) string {
		p := filepath.Join(tmp, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfgHome := writeConfig("home.yaml", "dshHome: "+filepath.Join(tmp, "from-config")+"\n")
	cfgTilde := writeConfig("tilde.yaml", "dshHome: ~/from-config-tilde\n")

	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"flag", []string{"--home", filepath.Join(tmp, "flag")}, map[string]string{"DSH_HOME": filepath.Join(tmp, "env")}, filepath.Join(tmp, "flag")},
		{"flag beats config", []string{"--home", filepath.Join(tmp, "flag2"), "--config", cfgHome}, nil, filepath.Join(tmp, "flag2")},
		{"config beats env", []string{"--config", cfgHome}, map[string]string{"DSH_HOME": filepath.Join(tmp, "env")}, filepath.Join(tmp, "from-config")},
		{"env", nil, map[string]string{"DSH_HOME": filepath.Join(tmp, "env"), "HOME": userHome}, filepath.Join(tmp, "env")},
		{"blank env is absent", nil, map[string]string{"DSH_HOME": "  ", "HOME": userHome}, filepath.Join(userHome, ".dsh")},
		{"default", nil, map[string]string{"HOME": userHome}, filepath.Join(userHome, ".dsh")},
		{"tilde in config", []string{"--config", cfgTilde}, map[string]string{"HOME": userHome}, filepath.Join(userHome, "from-config-tilde")},
		{"tilde in env", nil, map[string]string{"DSH_HOME": "~/env-tilde", "HOME": userHome}, filepath.Join(userHome, "env-tilde")},
		{"relative flag", []string{"--home", rel}, nil, filepath.Join(tmp, "relative")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := startRun(t, tt.args, tt.env)
			if diff := cmp.Diff(tt.want, s.home); diff != "" {
				t.Errorf("home (-want +got):\n%s", diff)
			}
			if fi, err := os.Stat(tt.want); err != nil || !fi.IsDir() {
				t.Errorf("home %s not created: %v", tt.want, err)
			}
		})
	}
}

func TestRefusals(t *testing.T) {
	tmp := t.TempDir()
	conflict := filepath.Join(tmp, "conflict.yaml")
	if err := os.WriteFile(conflict, []byte("skills:\n  local:\n    dshHome: "+filepath.Join(tmp, "b")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(tmp, "short-token")
	if err := os.WriteFile(short, []byte("abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	unknown := filepath.Join(tmp, "unknown.yaml")
	if err := os.WriteFile(unknown, []byte("dshHomme: /x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badMode := filepath.Join(tmp, "containment.yaml")
	if err := os.WriteFile(badMode, []byte("jobs:\n  containment: jail\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badMCP := filepath.Join(tmp, "mcp.yaml")
	if err := os.WriteFile(badMCP, []byte("mcp:\n  maxSessions: -1\n  allowedRoots: [src]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		wantAll []string
	}{
		{"bad mcp section", []string{"--home", tmp, "--config", badMCP}, []string{"mcp.maxSessions", "mcp.allowedRoots", `"src"`}},
		{"unknown containment mode", []string{"--home", tmp, "--config", badMode}, []string{"jobs.containment", "jail"}},
		{"home conflict", []string{"--home", filepath.Join(tmp, "a"), "--config", conflict},
			[]string{"--home", "skills.local.dshHome", filepath.Join(tmp, "a"), filepath.Join(tmp, "b")}},
		{"non-loopback address", []string{"--home", tmp, "--addr", "0.0.0.0:0"}, []string{"0.0.0.0:0", "--allow-remote"}},
		{"unknown config key", []string{"--home", tmp, "--config", unknown}, []string{"dshHomme"}},
		{"short token file", []string{"--home", tmp, "--token-file", short}, []string{"token"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err := run(ctx, append([]string{"dshd", "--addr", "127.0.0.1:0"}, tt.args...), func(string) string { return "" }, nil, io.Discard, io.Discard)
			if err == nil {
				t.Fatal("run succeeded; want a refusal")
			}
			for _, want := range tt.wantAll {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %q", err, want)
				}
			}
		})
	}
}

func TestUnixSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "dshd.sock")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	pr, pw := io.Pipe()
	go func() {
		errc <- run(ctx, []string{"dshd", "--addr", "unix:" + sock, "--home", dir}, func(string) string { return "" }, nil, pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		cancel()
		t.Fatalf("no startup line: %v (run: %v)", err, <-errc)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if !strings.HasPrefix(line, "dshd listening on unix:"+sock) {
		t.Errorf("startup line %q does not name the socket", line)
	}
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := client.Get("http://dshd/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("healthz over the socket = %d", resp.StatusCode)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("run: %v", err)
	}
}

func TestGracefulShutdownStopsJobs(t *testing.T) {
	s := startRun(t, []string{"--home", t.TempDir()}, nil)
	pidFile := filepath.Join(t.TempDir(), "pid")
	resp, body := s.request(t, "POST", "/exec", `{"command":"sleep 300 & echo $! > `+pidFile+`; wait","background":true}`, s.auth())
	if resp.StatusCode != 202 {
		t.Fatalf("exec status = %d: %s", resp.StatusCode, body)
	}
	pid := proctest.ReadPID(t, pidFile)
	s.shutdown(t)
	proctest.WaitGone(t, pid)
}

// TestShutdownWithRequestsInFlight: a foreground request waiting on a long
// job and an open output stream do not hold the shutdown open; the waiting
// request is answered with its cancelled job.
func TestShutdownWithRequestsInFlight(t *testing.T) {
	s := startRun(t, []string{"--home", t.TempDir()}, nil)
	type answer struct {
		status int
		body   string
	}
	fg := make(chan answer, 1)
	go func() {
		resp, body := s.request(t, "POST", "/exec", `{"command":"sleep 300"}`, s.auth())
		fg <- answer{resp.StatusCode, string(body)}
	}()
	_, body := s.request(t, "POST", "/exec", `{"command":"sleep 300","background":true}`, s.auth())
	var bg struct{ ID string }
	if err := json.Unmarshal(body, &bg); err != nil || bg.ID == "" {
		t.Fatalf("background exec: %s", body)
	}
	req, _ := http.NewRequest("GET", s.url+"/jobs/"+bg.ID+"/output", nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	// The stream's headers come before any output exists (a stream that
	// said nothing until the first keep-alive, 15s on, would time out here).
	streamClient := &http.Client{Transport: &http.Transport{ResponseHeaderTimeout: 5 * time.Second}}
	stream, err := streamClient.Do(req)
	if err != nil {
		t.Fatalf("open the output stream of a silent job: %v", err)
	}
	defer stream.Body.Close()
	streamEnded := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, stream.Body)
		close(streamEnded)
	}()
	// Wait until the foreground job runs, then shut down.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, b := s.request(t, "GET", "/jobs?state=running", "", s.auth())
		if strings.Count(string(b), `"id"`) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("jobs never both ran: %s", b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	s.shutdown(t)
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("shutdown took %v with requests in flight", d)
	}
	select {
	case a := <-fg:
		if a.status != 200 || !strings.Contains(a.body, `"state":"cancelled"`) {
			t.Errorf("in-flight foreground request got %d %s, want 200 with the cancelled job", a.status, a.body)
		}
	case <-time.After(10 * time.Second):
		t.Error("the in-flight foreground request was never answered")
	}
	select {
	case <-streamEnded:
	case <-time.After(10 * time.Second):
		t.Error("the output stream was still open after shutdown")
	}
}

// TestConfigEnvPolicy: the config file's env policy reaches the commands.
func TestConfigEnvPolicy(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(cfg, []byte(`{"env":{"inherit":"none","set":{"EDITOR":"true","DSHD_NOTE":"from-config"}},"jobs":{"graceMs":500}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startRun(t, []string{"--home", t.TempDir(), "--config", cfg}, nil)
	resp, body := s.request(t, "POST", "/exec", `{"command":"export -p"}`, s.auth())
	if resp.StatusCode != 200 {
		t.Fatalf("exec = %d %s", resp.StatusCode, body)
	}
	var j struct {
		Stdout struct{ Text string }
	}
	if err := json.Unmarshal(body, &j); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`EDITOR="true"`, `DSHD_NOTE="from-config"`, `TERM="dumb"`, `DSH_SHELL="1"`} {
		if !strings.Contains(j.Stdout.Text, want) {
			t.Errorf("child lacks %s:\n%s", want, j.Stdout.Text)
		}
	}
	// inherit: none — nothing of the server's own environment.
	if strings.Contains(j.Stdout.Text, `declare -x PATH=`) || strings.Contains(j.Stdout.Text, `declare -x HOME=`) {
		t.Errorf("inherit none let the server's environment through:\n%s", j.Stdout.Text)
	}
}

func TestHelpAndVersion(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantErr    bool
		wantStdout []string
		wantStderr []string
	}{
		{"--help", []string{"--help"}, false, []string{"Usage: dshd", "-addr", "-home", "-version"}, nil},
		{"-h", []string{"-h"}, false, []string{"Usage: dshd"}, nil},
		{"--version", []string{"--version"}, false, []string{"dshd ", runtime.Version()}, nil},
		{"unknown flag", []string{"--bogus"}, true, nil, []string{"Usage: dshd"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			// --home points at a path that cannot be created: reaching
			// the server's setup would fail the test.
			args := append([]string{"dshd", "--home", "/proc/no-such-home"}, tt.args...)
			err := run(ctx, args, func(string) string { return "" }, nil, &stdout, &stderr)
			if gotErr := err != nil; gotErr != tt.wantErr {
				t.Fatalf("run error = %v, want error %v", err, tt.wantErr)
			}
			for _, want := range tt.wantStdout {
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
				}
			}
			for _, want := range tt.wantStderr {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
				}
			}
			if !tt.wantErr && stderr.Len() != 0 {
				t.Errorf("stderr = %q, want nothing", stderr.String())
			}
		})
	}
}

func TestAllowedHosts(t *testing.T) {
	hostname, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		addr        string
		allowRemote bool
		want        []string // each must be among the hosts
		wantAny     bool
	}{
		{name: "loopback", addr: "127.0.0.1:7433"},
		{name: "Unix socket", addr: "unix:/tmp/dshd.sock", wantAny: true},
		{name: "remote address", addr: "192.0.2.7:7433", allowRemote: true, want: []string{"192.0.2.7"}},
		{name: "remote name", addr: "dshd.lan:7433", allowRemote: true, want: []string{"dshd.lan"}},
		{name: "every IPv4 interface", addr: "0.0.0.0:7433", allowRemote: true, want: []string{"127.0.0.1", hostname}},
		{name: "every interface", addr: ":7433", allowRemote: true, want: []string{"127.0.0.1", hostname}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hosts, anyHost, err := allowedHosts(tt.addr, tt.allowRemote)
			if err != nil {
				t.Fatal(err)
			}
			if anyHost != tt.wantAny {
				t.Errorf("anyHost = %v, want %v", anyHost, tt.wantAny)
			}
			for _, w := range tt.want {
				if !slices.Contains(hosts, w) {
					t.Errorf("hosts %q lack %q", hosts, w)
				}
			}
			if len(tt.want) == 0 && len(hosts) != 0 {
				t.Errorf("hosts = %q, want none beyond loopback", hosts)
			}
			if len(tt.want) == 1 && len(hosts) != 1 {
				t.Errorf("hosts = %q, want only %q", hosts, tt.want)
			}
		})
	}
}

// TestUICommand: dshd ui prints a login URL of the running server that
// signs in once, and says what is wrong when it cannot: no token file, a
// short one, a Unix socket, a token the server does not take.
func TestUICommand(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	s := startRun(t, []string{"--home", home}, nil)
	addr := strings.TrimPrefix(s.url, "http://")
	ui := func(args ...string) (string, error) {
		t.Helper()
		var out strings.Builder
		err := run(context.Background(), append([]string{"dshd", "ui"}, args...), func(string) string { return "" }, nil, &out, io.Discard)
		return out.String(), err
	}
	out, err := ui("--addr", addr, "--home", home)
	if err != nil {
		t.Fatalf("dshd ui: %v", err)
	}
	_, code, ok := strings.Cut(strings.TrimSpace(out), s.url+"/ui/#login=")
	if !ok || code == "" || strings.Contains(out, s.token) {
		t.Fatalf("dshd ui printed %q; want %s/ui/#login=<code>, without the token", out, s.url)
	}
	if resp, body := s.request(t, "POST", "/ui/session", `{"code":"`+code+`"}`, nil); resp.StatusCode != http.StatusCreated {
		t.Errorf("sign-in with the printed code = %d: %s", resp.StatusCode, body)
	}

	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	wrong := filepath.Join(dir, "wrong")
	if err := os.WriteFile(short, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(wrong, []byte(strings.Repeat("w", 40)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		args []string
		want []string
	}{
		{"no token file", []string{"--addr", addr, "--home", filepath.Join(dir, "nohome")}, []string{"no token file at", filepath.Join(dir, "nohome", "server.token")}},
		{"short token file", []string{"--addr", addr, "--token-file", short}, []string{short, "at least 32"}},
		{"Unix socket", []string{"--addr", "unix:" + filepath.Join(dir, "s.sock"), "--home", home}, []string{"Unix socket"}},
		{"wrong token", []string{"--addr", addr, "--token-file", wrong}, []string{"401", wrong}},
		{"no server", []string{"--addr", "127.0.0.1:1", "--home", home}, []string{"is dshd running at 127.0.0.1:1"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, err := ui(tt.args...)
			if err == nil || out != "" {
				t.Fatalf("dshd ui = %q, %v; want an error and no output", out, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// workspaces.checkpointDepth is checked against workspaces.maxLayers (its
// default included): the newest checkpoints kept, a batch waiting for
// compaction and a fork's layers must fit under it.
func TestConfigCheckpointDepth(t *testing.T) {
	for _, c := range []struct {
		depth, maxLayers int
		ok               bool
	}{
		{0, 0, true}, {200, 0, true}, {201, 0, false}, {50, 100, true}, {51, 100, false}, {-1, 0, false},
	} {
		var cfg config
		cfg.Workspaces.CheckpointDepth, cfg.Workspaces.MaxLayers = c.depth, c.maxLayers
		err := cfg.validate()
		if (err == nil) != c.ok || err != nil && !strings.Contains(err.Error(), "workspaces.checkpointDepth") {
			t.Errorf("checkpointDepth %d, maxLayers %d: %v", c.depth, c.maxLayers, err)
		}
	}
}
