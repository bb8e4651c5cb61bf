package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/dshd/dshd/internal/apitest"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
)

// loadContract loads and validates api/openapi.yaml.
func loadContract(t testing.TB) *openapi3.T {
	t.Helper()
	b, err := os.ReadFile("../../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return doc
}

var pathParam = regexp.MustCompile(`\{[^}]+\}`)

// TestEveryOperationDeclaresWhatAuthAnswers sends every operation of the
// contract to the real server without a token. Operations that need one
// must answer 401 and declare it; the open ones must answer 2xx. Either way
// the status answered must be declared for that operation.
func TestEveryOperationDeclaresWhatAuthAnswers(t *testing.T) {
	doc := loadContract(t)
	s := startServer(t)
	paths := doc.Paths.InMatchingOrder()
	sort.Strings(paths)
	n := 0
	for _, p := range paths {
		for method, op := range doc.Paths.Value(p).Operations() {
			n++
			open := op.Security != nil && len(*op.Security) == 0
			// An open operation whose body is the credential (the UI's
			// sign-in) cannot succeed without one: it must say 400.
			needsBody := op.RequestBody != nil && op.RequestBody.Value != nil && op.RequestBody.Value.Required
			url := pathParam.ReplaceAllString(p, "x")
			resp := s.DoWith(t, method, url, nil, map[string]string{})
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			got := resp.StatusCode
			switch {
			case open && needsBody && got != http.StatusBadRequest:
				t.Errorf("%s %s (open, credential in the body) without a body = %d, want 400", method, p, got)
			case open && !needsBody && (got < 200 || got > 299):
				t.Errorf("%s %s (open) without a token = %d, want 2xx", method, p, got)
			case !open && got != http.StatusUnauthorized:
				t.Errorf("%s %s without a token = %d, want 401", method, p, got)
			}
			if op.Responses.Value(strconv.Itoa(got)) == nil {
				t.Errorf("%s %s answered %d, which the contract does not declare for it", method, p, got)
			}
		}
	}
	if n < 25 {
		t.Errorf("checked %d operations; the contract lost some", n)
	}
}

// conformingClient validates every request it sends and every response it
// gets against the contract: the status must be declared for the operation,
// and a JSON body must match its schema.
type conformingClient struct {
	t      *testing.T
	doc    *openapi3.T
	router routers.Router
	mu     sync.Mutex
	seen   map[string]bool // "METHOD /path/template status"
}

func newConformingClient(t *testing.T, baseURL string) *conformingClient {
	doc := loadContract(t)
	doc.Servers = openapi3.Servers{{URL: baseURL}}
	r, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return &conformingClient{t: t, doc: doc, router: r, seen: map[string]bool{}}
}

// RoundTrip sends req and checks its response against the contract.
func (c *conformingClient) RoundTrip(req *http.Request) (*http.Response, error) {
	c.t.Helper()
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		c.t.Errorf("%s %s: no such operation in the contract: %v", req.Method, req.URL.Path, err)
		return http.DefaultTransport.RoundTrip(req)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	c.check(req, route, params, resp, body)
	return resp, nil
}

// check checks a response to req, whose body was read whole, against the
// contract (RoundTrip's check, for a test that must read a stream itself).
func (c *conformingClient) check(req *http.Request, route *routers.Route, params map[string]string, resp *http.Response, body []byte) {
	c.t.Helper()
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options: &openapi3filter.Options{
			IncludeResponseStatus: true,
			MultiError:            true,
			// Only JSON bodies are checked against a schema; the others
			// (YAML, JSONL, SSE, raw bytes, Prometheus text) are strings.
			ExcludeResponseBody: ct != "application/json" && ct != "application/problem+json",
		},
	}
	if err := openapi3filter.ValidateResponse(req.Context(), in); err != nil {
		c.t.Errorf("%s %s → %d does not conform to the contract: %v\nbody: %.500s", req.Method, req.URL.Path, resp.StatusCode, err, body)
	}
	if ct == "text/event-stream" {
		// The contract's schema of an event stream describes one event.
		schema := eventSchema(c.t, route.Operation, resp.StatusCode)
		for _, err := range checkEvents(schema, body) {
			c.t.Errorf("%s %s: %v", req.Method, req.URL.Path, err)
		}
	}
	c.mu.Lock()
	c.seen[route.Method+" "+route.Path+" "+strconv.Itoa(resp.StatusCode)] = true
	c.mu.Unlock()
}

// TestResponsesConformToContract drives every operation of the real server
// through a client that checks each answer against the contract.
func TestResponsesConformToContract(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	apitest.WriteJSON(t, filepath.Join(home, "hooks", "claude-code.json"), map[string]any{"hooks": map[string]any{
		"SessionStart": []any{map[string]any{"hooks": []any{map[string]any{"type": "command", "command": `echo '{"hookSpecificOutput":{"additionalContext":"ctx"}}'`}}}},
		"PreToolUse":   []any{map[string]any{"matcher": "Bash", "hooks": []any{map[string]any{"type": "command", "command": `echo '{"systemMessage":"careful"}'`}}}},
	}})
	s := startServer(t, withHome(home))
	cc := newConformingClient(t, s.URL)
	client := &http.Client{Transport: cc}
	call := func(method, path string, body any, headers map[string]string) (int, []byte) {
		t.Helper()
		var r io.Reader
		if body != nil {
			b, err := json.Marshal(body)
			if err != nil {
				t.Fatal(err)
			}
			r = bytes.NewReader(b)
		}
		req, err := http.NewRequest(method, s.URL+path, r)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+s.Token)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	id := func(b []byte) string {
		var v struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(b, &v); err != nil || v.ID == "" {
			t.Fatalf("no id in %s", b)
		}
		return v.ID
	}
	want := func(got, want int, what string, body []byte) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %d, want %d: %s", what, got, want, body)
		}
	}

	st, b := call("GET", "/healthz", nil, nil)
	want(st, 200, "healthz", b)

	// The UI's sign-in: a login code, spent once, then sign-out.
	st, b = call("POST", "/ui/login-codes", nil, nil)
	want(st, 201, "login code", b)
	var lc struct{ URL string }
	_ = json.Unmarshal(b, &lc)
	_, code, _ := strings.Cut(lc.URL, "#login=")
	st, b = call("POST", "/ui/session", map[string]string{"code": code}, nil)
	want(st, 201, "sign-in", b)
	st, b = call("POST", "/ui/session", map[string]string{"code": code}, nil)
	want(st, 401, "sign-in with a spent code", b)
	st, b = call("POST", "/ui/session", map[string]any{"code": code, "token": s.Token}, nil)
	want(st, 400, "sign-in with both a code and the token", b)
	st, b = call("DELETE", "/ui/session", nil, nil)
	want(st, 204, "sign-out", b)
	st, b = call("GET", "/openapi.yaml", nil, nil)
	want(st, 200, "openapi.yaml", b)
	st, b = call("GET", "/openapi.json", nil, nil)
	want(st, 200, "openapi.json", b)
	var fromJSON map[string]any
	if err := json.Unmarshal(b, &fromJSON); err != nil || fromJSON["openapi"] != "3.0.3" {
		t.Errorf("/openapi.json is not the contract as JSON: %v %.200s", err, b)
	}
	st, b = call("GET", "/env/declarations", nil, nil)
	want(st, 200, "declarations", b)

	st, b = call("POST", "/plugins", map[string]any{"name": "h", "leaseSeconds": 60}, nil)
	want(st, 201, "open plugin", b)
	plugin := id(b)
	for _, r := range []map[string]any{
		{"kind": "static", "values": map[string]any{"DSH_A": "a"}},
		{"kind": "template", "values": map[string]any{"DSH_B": "{agent.id}"}},
		{"kind": "webhook", "url": "http://127.0.0.1:9/none", "timeoutMs": 100},
	} {
		key := map[string]string{"static": "DSH_A", "template": "DSH_B", "webhook": "DSH_C"}[r["kind"].(string)]
		st, b = call("POST", "/contributors", map[string]any{"name": "c." + r["kind"].(string), "plugin": plugin,
			"keys": []any{map[string]any{"key": key, "description": "d"}}, "resolver": r}, nil)
		want(st, 201, "register "+r["kind"].(string), b)
	}
	st, b = call("POST", "/contributors", map[string]any{"name": "c.static", "keys": []any{map[string]any{"key": "DSH_D", "description": "d"}},
		"resolver": map[string]any{"kind": "static"}}, nil)
	want(st, 409, "duplicate contributor", b)
	st, b = call("POST", "/contributors", map[string]any{"name": "c.bad", "keys": []any{map[string]any{"key": "HOME", "description": "d"}},
		"resolver": map[string]any{"kind": "static"}}, nil)
	want(st, 422, "invalid key", b)
	st, b = call("GET", "/contributors", nil, nil)
	want(st, 200, "contributors", b)
	st, b = call("GET", "/contributors/c.webhook", nil, nil)
	want(st, 200, "contributor", b)
	// The webhook cannot answer: commands fail with 502, and nothing runs.
	st, b = call("POST", "/exec", map[string]any{"command": "true"}, nil)
	want(st, 502, "exec with a failing webhook", b)
	st, b = call("DELETE", "/contributors/c.webhook", nil, nil)
	want(st, 204, "delete contributor", b)
	st, b = call("DELETE", "/contributors/dsh.home", nil, nil)
	want(st, 409, "delete builtin", b)
	st, b = call("GET", "/plugins", nil, nil)
	want(st, 200, "plugins", b)
	st, b = call("GET", "/plugins/"+plugin, nil, nil)
	want(st, 200, "plugin", b)
	st, b = call("POST", "/plugins/"+plugin+"/renew", map[string]any{"leaseSeconds": 120}, nil)
	want(st, 200, "renew", b)

	st, b = call("POST", "/agents", map[string]any{"cwd": t.TempDir()}, nil)
	want(st, 201, "create agent", b)
	agent := id(b)
	st, b = call("POST", "/agents", map[string]any{"cwd": "relative/dir"}, nil)
	want(st, 422, "create agent with a relative cwd", b)
	st, b = call("GET", "/agents", nil, nil)
	want(st, 200, "agents", b)
	st, b = call("GET", "/agents/"+agent, nil, nil)
	want(st, 200, "agent", b)
	st, b = call("GET", "/agents/agt_nope", nil, nil)
	want(st, 404, "unknown agent", b)
	st, b = call("POST", "/agents/"+agent+"/tools/bash", map[string]any{"callId": "call_1", "arguments": map[string]any{"command": "echo $DSH_A"}}, nil)
	want(st, 200, "bash tool", b)
	st, b = call("POST", "/agents/"+agent+"/tools/bash", map[string]any{"arguments": map[string]any{"command": 42}}, nil)
	want(st, 200, "bash tool with bad arguments (an error result)", b)
	st, b = call("POST", "/agents/"+agent+"/tools/bash", map[string]any{"arguments": `{"command":"echo string arguments"}`}, nil)
	want(st, 200, "bash tool with arguments as a string", b)
	st, b = call("POST", "/agents/"+agent+"/tools/bash", map[string]any{"arguments": "echo not an object"}, nil)
	want(st, 200, "bash tool with a string that holds no object (an error result)", b)
	st, b = call("POST", "/agents/"+agent+"/tools/bash", map[string]any{"arguments": []any{"echo"}}, nil)
	want(st, 400, "bash tool with arguments neither object nor string", b)
	st, b = call("POST", "/agents/"+agent+"/tools/nope", map[string]any{"arguments": map[string]any{}}, nil)
	want(st, 404, "unknown tool", b)
	st, b = call("POST", "/agents/"+agent+"/resume", nil, nil)
	want(st, 200, "resume", b)
	st, b = call("POST", "/agents/"+agent+"/fork", map[string]any{}, nil)
	want(st, 201, "fork", b)
	st, b = call("POST", "/agents/"+agent+"/spawn", map[string]any{}, nil)
	want(st, 201, "spawn", b)
	st, b = call("POST", "/agents", map[string]any{"limits": map[string]any{"pids": 64, "memoryBytes": 1 << 30, "cpu": 0.5}}, nil)
	want(st, 201, "create agent with limits", b)
	limited := id(b)
	st, b = call("POST", "/agents/"+limited+"/spawn", map[string]any{"limits": map[string]any{"pids": 65}}, nil)
	want(st, 422, "spawn with looser limits", b)
	st, b = call("POST", "/agents/"+limited+"/fork", map[string]any{"limits": map[string]any{"pids": 32}}, nil)
	want(st, 201, "fork with tighter limits", b)
	st, b = call("POST", "/exec", map[string]any{"command": "true", "agentId": limited}, nil)
	want(st, 200, "exec under an agent's limits", b)
	st, b = call("GET", "/agents/"+agent+"/transcript", nil, nil)
	want(st, 200, "transcript", b)
	st, b = call("GET", "/agents/"+agent+"/transcript", nil, map[string]string{"Accept": "application/json"})
	want(st, 200, "transcript as JSON", b)
	var tr struct {
		Header struct{ ID string } `json:"header"`
		Events []struct {
			Type string `json:"type"`
		} `json:"events"`
	}
	if err := json.Unmarshal(b, &tr); err != nil || tr.Header.ID != agent || len(tr.Events) < 6 {
		t.Errorf("transcript as JSON = %v, %+v", err, tr)
	}
	for _, f := range []string{"", "?format=generic", "?format=openai", "?format=openai-strict", "?format=openai-responses", "?format=anthropic"} {
		st, b = call("GET", "/tools"+f, nil, nil)
		want(st, 200, "tools"+f, b)
	}
	st, b = call("GET", "/tools?format=klingon", nil, nil)
	want(st, 400, "tools in an unknown format", b)

	st, b = call("POST", "/exec", map[string]any{"command": "echo hi", "agentId": agent}, nil)
	want(st, 200, "exec", b)
	st, b = call("POST", "/exec", map[string]any{"command": "true", "env": map[string]string{"DSH_X": "1"}}, nil)
	want(st, 400, "exec with a managed name in env", b)
	st, b = call("POST", "/exec", map[string]any{"command": "sleep 30", "background": true}, nil)
	want(st, 202, "background exec", b)
	job := id(b)
	st, b = call("GET", "/jobs", nil, nil)
	want(st, 200, "jobs", b)
	st, b = call("GET", "/jobs/"+job+"?waitMs=10", nil, nil)
	want(st, 200, "job", b)
	st, b = call("GET", "/jobs/job_nope", nil, nil)
	want(st, 404, "unknown job", b)
	st, b = call("GET", "/jobs/"+job+"/output?stream=stdout&offset=0", nil, nil)
	want(st, 200, "raw output", b)
	st, b = call("POST", "/jobs/"+job+"/stdin", map[string]any{"data": "x"}, nil)
	want(st, 409, "write to a job without open input", b)
	st, b = call("POST", "/jobs/"+job+"/resize", map[string]any{"cols": 100, "rows": 30}, nil)
	want(st, 409, "resize a job without a terminal", b)
	st, b = call("POST", "/jobs/"+job+"/signal", map[string]any{"signal": "SIGSEGV"}, nil)
	want(st, 400, "a signal outside the allowlist", b)
	st, b = call("POST", "/exec", map[string]any{"command": "cat", "background": true, "tty": true, "cols": 100, "rows": 30}, nil)
	want(st, 202, "terminal exec", b)
	term := id(b)
	st, b = call("POST", "/jobs/"+term+"/stdin", map[string]any{"data": "hi\n"}, nil)
	want(st, 200, "write to a terminal job", b)
	st, b = call("POST", "/jobs/"+term+"/resize", map[string]any{"cols": 120, "rows": 40}, nil)
	want(st, 200, "resize", b)
	st, b = call("POST", "/jobs/"+term+"/signal", map[string]any{"signal": "SIGTERM"}, nil)
	want(st, 200, "signal", b)
	st, b = call("GET", "/jobs/"+term+"?waitMs=5000", nil, nil)
	want(st, 200, "terminal job", b)
	st, b = call("POST", "/jobs/"+term+"/stdin", map[string]any{"close": true}, nil)
	want(st, 409, "close the input of an ended job", b)
	st, b = call("POST", "/jobs/"+job+"/stdin", map[string]any{"data": "x", "base64": "eA=="}, nil)
	want(st, 400, "data and base64 at once", b)
	st, b = call("DELETE", "/jobs/"+job, nil, nil)
	if st != 200 && st != 202 {
		t.Errorf("cancel = %d", st)
	}
	st, b = call("GET", "/jobs/"+job+"/output", nil, nil)
	want(st, 200, "SSE output", b)
	st, b = call("GET", "/skills", nil, nil)
	want(st, 200, "skills", b)
	st, b = call("GET", "/hooks", nil, nil)
	want(st, 200, "hooks", b)
	st, b = call("GET", "/metrics", nil, nil)
	want(st, 200, "metrics", b)
	st, b = call("DELETE", "/plugins/"+plugin, nil, nil)
	want(st, 204, "close plugin", b)
	st, b = call("DELETE", "/plugins/"+plugin, nil, nil)
	want(st, 404, "close plugin again", b)

	if len(cc.seen) < 40 {
		t.Errorf("only %d operation/status pairs exercised", len(cc.seen))
	}
}

// eventSchema returns the schema the contract gives op's text/event-stream
// answer with status.
func eventSchema(t *testing.T, op *openapi3.Operation, status int) *openapi3.Schema {
	t.Helper()
	r := op.Responses.Status(status)
	if r == nil || r.Value == nil || r.Value.Content.Get("text/event-stream") == nil {
		t.Fatalf("%s declares no text/event-stream answer for %d", op.OperationID, status)
	}
	return r.Value.Content.Get("text/event-stream").Schema.Value
}

// contractEvent is one event of a stream as the contract's event schemas
// describe it: its id and event lines, and its data line decoded as JSON.
type contractEvent struct {
	ID    string `json:"id"`
	Event string `json:"event"`
	Data  any    `json:"data"`
}

// parseEvents decodes every event of an SSE body as the SSE standard says
// a client must (fields id, event, data, retry; comments; dispatch on a
// blank line; an event without data is not dispatched), with each event's
// data decoded as JSON. A body that ends inside an event is an error.
func parseEvents(body []byte) ([]contractEvent, error) {
	var (
		out      []contractEvent
		id, name string
		data     []string
		pending  bool // a field of an undispatched event was read
	)
	text := strings.ReplaceAll(strings.ReplaceAll(string(body), "\r\n", "\n"), "\r", "\n")
	lines := strings.Split(text, "\n")
	if lines[len(lines)-1] != "" {
		return out, fmt.Errorf("the stream ends inside a line: %q", lines[len(lines)-1])
	}
	for _, line := range lines[:len(lines)-1] {
		if line == "" {
			if data != nil {
				joined := strings.Join(data, "\n")
				var v any
				if err := json.Unmarshal([]byte(joined), &v); err != nil {
					return out, fmt.Errorf("event %s %s: data is not JSON: %v: %.200s", id, name, err, joined)
				}
				if name == "" {
					name = "message"
				}
				out = append(out, contractEvent{ID: id, Event: name, Data: v})
			}
			name, data, pending = "", nil, false
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue // a comment (keep-alive)
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		pending = true
		switch field {
		case "id":
			id = value // the last event id persists, as the standard says
		case "event":
			name = value
		case "data":
			data = append(data, value)
		}
	}
	if pending {
		return out, errors.New("the stream ends inside an event")
	}
	return out, nil
}

// checkEvents checks every event of an SSE body against schema.
func checkEvents(schema *openapi3.Schema, body []byte) []error {
	events, err := parseEvents(body)
	if err != nil {
		return []error{err}
	}
	var errs []error
	for _, ev := range events {
		if err := checkEvent(schema, ev); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

func checkEvent(schema *openapi3.Schema, ev contractEvent) error {
	// VisitJSON takes what encoding/json decodes into any.
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	if err := schema.VisitJSON(v, openapi3.MultiErrors()); err != nil {
		return fmt.Errorf("event %s %s does not match the contract: %v", ev.ID, ev.Event, err)
	}
	return nil
}

// TestOutputEventsMatchContract follows a job's output whose events take
// every form the contract describes (a text chunk, a chunk that is not
// UTF-8, output ending inside a character, the exit event) and checks each
// streamed event against the contract's event schema. It also checks that
// the schema refuses events that break it, so the check can fail.
func TestOutputEventsMatchContract(t *testing.T) {
	s := startServer(t)
	var job struct{ ID string }
	// stdout: text, then (after stderr's binary) a last byte that starts a
	// two-byte character the job never finishes.
	// Each part waits until the client has received the one before (the
	// test touches a file when it sees it), so every form arrives as an
	// event of its own however late the client connects or reads.
	sig := t.TempDir()
	wait := func(name string) string {
		return `until [ -e '` + filepath.Join(sig, name) + `' ]; do sleep 0.01; done; `
	}
	cmd := wait("connected") + `printf 'h\303\251llo\n'; ` + wait("text") + `printf '\377\000bin' >&2; ` + wait("binary") + `printf 'end \303'`
	if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": cmd, "background": true}, &job); st != 202 {
		t.Fatalf("POST /exec = %d", st)
	}
	cc := newConformingClient(t, s.URL)
	req, err := http.NewRequest("GET", s.URL+"/jobs/"+job.ID+"/output", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.Token)
	req.Header.Set("Accept", "text/event-stream")
	// The stream is read here as it comes (the job waits for each event to
	// arrive), then checked as the conforming client checks every answer,
	// every event against the schema.
	route, params, err := cc.router.FindRoute(req)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	touch := func(name string) {
		if err := os.WriteFile(filepath.Join(sig, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	touch("connected")
	var body []byte
	var sentText, sentBinary bool
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		body = append(append(body, line...), '\n')
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		switch {
		case !sentText && bytes.Contains(body, []byte("event: stdout\n")):
			sentText = true
			touch("text")
		case !sentBinary && bytes.Contains(body, []byte("event: stderr\n")):
			sentBinary = true
			touch("binary")
		}
	}
	resp.Body.Close()
	if err := sc.Err(); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET output = %d, %v", resp.StatusCode, err)
	}
	cc.check(req, route, params, resp, body)
	events, err := parseEvents(body)
	if err != nil {
		t.Fatal(err)
	}
	// Every form was streamed, so every branch of the schema was checked.
	var sawText, sawBinary, sawCutChar, sawExit bool
	var stdout []byte
	for _, ev := range events {
		switch d := ev.Data.(type) {
		case string:
			sawText = sawText || ev.Event == "stdout"
			stdout = append(stdout, d...)
		case map[string]any:
			if b64, ok := d["base64"].(string); ok {
				raw, err := base64.StdEncoding.DecodeString(b64)
				if err != nil {
					t.Errorf("event %s: base64 %q: %v", ev.ID, b64, err)
				}
				sawBinary = sawBinary || (ev.Event == "stderr" && bytes.Equal(raw, []byte("\xff\x00bin")))
				if ev.Event == "stdout" {
					sawCutChar = sawCutChar || bytes.HasSuffix(raw, []byte{0xc3})
					stdout = append(stdout, raw...)
				}
			}
			sawExit = sawExit || (ev.Event == "exit" && d["state"] == "exited")
		}
	}
	if !sawText || !sawBinary || !sawCutChar || !sawExit {
		t.Errorf("streamed text %v, binary %v, cut character %v, exit %v; want every form: %q", sawText, sawBinary, sawCutChar, sawExit, body)
	}
	if want := "h\u00e9llo\nend \xc3"; string(stdout) != want {
		t.Errorf("stdout over SSE = %q, want %q", stdout, want)
	}

	schema := eventSchema(t, cc.doc.Paths.Find("/jobs/{id}/output").Get, 200)
	for _, bad := range []contractEvent{
		{ID: "7", Event: "stdout", Data: "x"},                                    // id without stderr offset
		{ID: "7.0", Event: "stdout", Data: 42.0},                                 // data neither string nor base64
		{ID: "7.0", Event: "stderr", Data: map[string]any{"b64": "AA=="}},        // wrong member
		{ID: "7.0.exit", Event: "exit", Data: "done"},                            // exit without the job
		{ID: "7.0", Event: "exit", Data: map[string]any{}},                       // exit id without .exit
		{ID: "7.0", Event: "stdin", Data: "x"},                                   // no such event
		{ID: "7.0", Event: "stdout", Data: map[string]any{"base64": "not b64!"}}, // not base64
	} {
		if err := checkEvent(schema, bad); err == nil {
			t.Errorf("event %+v passes the contract's schema; it must not", bad)
		}
	}
}
