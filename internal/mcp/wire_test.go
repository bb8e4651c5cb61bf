package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/exec"
)

// rpcAnswer is one JSON-RPC message of a response, its id as sent.
type rpcAnswer struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// post sends one raw JSON-RPC body to the endpoint and returns the
// response and the JSON-RPC messages in it (plain JSON or SSE data lines).
func post(t *testing.T, url, session, body string, header ...string) (*http.Response, []rpcAnswer) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return send(t, req)
}

func send(t *testing.T, req *http.Request) (*http.Response, []rpcAnswer) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	var msgs [][]byte
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		for _, line := range bytes.Split(raw, []byte("\n")) {
			if d, ok := bytes.CutPrefix(line, []byte("data: ")); ok && len(bytes.TrimSpace(d)) > 0 {
				msgs = append(msgs, d)
			}
		}
	} else if len(bytes.TrimSpace(raw)) > 0 {
		msgs = append(msgs, raw)
	}
	var out []rpcAnswer
	for _, m := range msgs {
		var a rpcAnswer
		if err := json.Unmarshal(m, &a); err != nil {
			t.Fatalf("%s %s: answer %q is not JSON: %v", req.Method, req.URL, m, err)
		}
		out = append(out, a)
	}
	return resp, out
}

func initBody(id string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
}

// open initializes a session with raw posts and returns its id.
func (w *world) open(t *testing.T) string {
	t.Helper()
	resp, ans := post(t, w.url, "", initBody("1"))
	session := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != 200 || session == "" || len(ans) != 1 || ans[0].Error != nil {
		t.Fatalf("initialize = %d, session %q, %+v", resp.StatusCode, session, ans)
	}
	if resp, _ := post(t, w.url, session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); resp.StatusCode != 202 {
		t.Fatalf("notifications/initialized = %d", resp.StatusCode)
	}
	return session
}

// TestIDsEchoed: every request id comes back byte for byte, whatever the
// SDK would have made of it, on initialize and on later requests, in JSON
// and SSE answers alike.
func TestIDsEchoed(t *testing.T) {
	w := newWorld(t, Options{})
	for _, id := range []string{"1.5", "18446744073709551616", "9007199254740993", "1e2", "-0", "1.0", `"a\u0041<&>"`, `"plain"`, "7"} {
		resp, ans := post(t, w.url, "", initBody(id))
		if resp.StatusCode != 200 || len(ans) != 1 || string(ans[0].ID) != id || ans[0].Error != nil {
			t.Errorf("initialize with id %s: %d, answers %+v; want the id back as sent", id, resp.StatusCode, ans)
		}
	}
	session := w.open(t)
	for _, id := range []string{"2.5", "18446744073709551616", "-9223372036854775809", "9007199254740993", "3E0", `"x\/y"`, "42"} {
		resp, ans := post(t, w.url, session, `{"jsonrpc":"2.0","id":`+id+`,"method":"tools/list"}`)
		if resp.StatusCode != 200 || len(ans) != 1 || string(ans[0].ID) != id || ans[0].Error != nil || len(ans[0].Result) == 0 {
			t.Errorf("tools/list with id %s: %d, answers %+v; want the id back as sent", id, resp.StatusCode, ans)
		}
	}
	// A tool call with such an id, and its answer.
	resp, ans := post(t, w.url, session, `{"jsonrpc":"2.0","id":12345678901234567890.5,"method":"tools/call","params":{"name":"bash","arguments":{"command":"echo hi"}}}`)
	if resp.StatusCode != 200 || len(ans) != 1 || string(ans[0].ID) != "12345678901234567890.5" || !strings.Contains(string(ans[0].Result), "hi") {
		t.Errorf("tools/call: %d, %+v", resp.StatusCode, ans)
	}
}

// TestCancelByUnusualID: a notifications/cancelled naming an id the SDK
// could not hold stops that call's job, and only that id does.
func TestCancelByUnusualID(t *testing.T) {
	w := newWorld(t, Options{})
	session := w.open(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	call := raw("POST", w.url, session, `{"jsonrpc":"2.0","id":9007199254740993,"method":"tools/call","params":{"name":"bash","arguments":{"command":"sleep 30"}}}`, "application/json")
	go func() {
		// A cancelled request gets no answer (TestCancelledGetsNoAnswer).
		if resp, err := http.DefaultClient.Do(call.WithContext(ctx)); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	running := func() int { return len(w.jobs.Jobs("", exec.StateRunning)) }
	deadline := time.Now().Add(10 * time.Second)
	for running() == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if running() != 1 {
		t.Fatalf("%d jobs running, want the call's", running())
	}
	// 9007199254740992 is the same id to the SDK: it must not cancel.
	post(t, w.url, session, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":9007199254740992}}`)
	time.Sleep(500 * time.Millisecond)
	if running() != 1 {
		t.Fatal("a cancellation naming another id stopped the call")
	}
	post(t, w.url, session, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":9007199254740993}}`)
	deadline = time.Now().Add(10 * time.Second)
	for running() != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if running() != 0 {
		t.Error("the cancelled call's job still runs")
	}
}

// TestTransportErrorsAreJSONRPC: what the transport refuses is answered
// as a JSON-RPC error in application/json, with the HTTP status the
// specification gives, and the request's id when it has one.
func TestTransportErrorsAreJSONRPC(t *testing.T) {
	w := newWorld(t, Options{})
	session := w.open(t)
	cases := []struct {
		name   string
		req    func() *http.Request
		status int
		code   int
		id     string
	}{
		{"malformed body", func() *http.Request { return raw("POST", w.url, "", "{not json", "application/json") }, 400, -32700, "null"},
		{"unknown session", func() *http.Request {
			return raw("POST", w.url, "no-such-session", `{"jsonrpc":"2.0","id":7.5,"method":"tools/list"}`, "application/json")
		}, 404, -32001, "7.5"},
		{"wrong content type", func() *http.Request {
			return raw("POST", w.url, session, `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`, "text/plain")
		}, 415, -32600, "3"},
		{"GET without session", func() *http.Request { return raw("GET", w.url, "", "", "") }, 400, -32600, "null"},
		{"second initialize", func() *http.Request { return raw("POST", w.url, session, initBody("99.5"), "application/json") }, 400, -32600, "99.5"},
		{"request without session", func() *http.Request {
			return raw("POST", w.url, "", `{"jsonrpc":"2.0","id":8,"method":"tools/list"}`, "application/json")
		}, 400, -32600, "8"},
		{"call without session", func() *http.Request {
			return raw("POST", w.url, "", `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"bash","arguments":{"command":"true"}}}`, "application/json")
		}, 400, -32600, "9"},
		{"older protocol version", func() *http.Request {
			return withVersion(raw("POST", w.url, session, `{"jsonrpc":"2.0","id":10,"method":"tools/list"}`, "application/json"), "2024-11-05")
		}, 400, -32022, "10"},
		{"newer protocol version", func() *http.Request {
			return withVersion(raw("POST", w.url, session, `{"jsonrpc":"2.0","id":11,"method":"tools/list"}`, "application/json"), "2099-01-01")
		}, 400, -32022, "11"},
		{"initialize with an unknown protocol version header", func() *http.Request {
			return withVersion(raw("POST", w.url, "", initBody("12"), "application/json"), "2025-01-01")
		}, 400, -32022, "12"},
		{"GET with an unknown protocol version", func() *http.Request { return withVersion(raw("GET", w.url, session, "", ""), "2025-01-01") }, 400, -32022, "null"},
	}
	for _, c := range cases {
		resp, ans := send(t, c.req())
		ct := resp.Header.Get("Content-Type")
		if c.status != 0 && resp.StatusCode != c.status {
			t.Errorf("%s: status %d, want %d", c.name, resp.StatusCode, c.status)
		}
		if len(ans) != 1 || ans[0].Error == nil || ans[0].Error.Code != c.code || string(ans[0].ID) != c.id || ans[0].Error.Message == "" {
			t.Errorf("%s: %s answers %d, want one error with code %d and id %s", c.name, ct, len(ans), c.code, c.id)
			for _, a := range ans {
				t.Logf("id %s, error %+v", a.ID, a.Error)
			}
			continue
		}
		if !strings.HasPrefix(ct, "application/json") {
			t.Errorf("%s: Content-Type %q, want application/json", c.name, ct)
		}
	}
	// The session survives the refused second initialize.
	if resp, ans := post(t, w.url, session, `{"jsonrpc":"2.0","id":5,"method":"tools/list"}`); resp.StatusCode != 200 || len(ans) != 1 || ans[0].Error != nil {
		t.Errorf("tools/list after the second initialize: %d %+v", resp.StatusCode, ans)
	}
}

func withVersion(r *http.Request, v string) *http.Request {
	r.Header.Set("MCP-Protocol-Version", v)
	return r
}

func raw(method, url, session, body, ct string) *http.Request {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		panic(err)
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	return req
}

// TestSessionCap: an initialize beyond MaxSessions is a JSON-RPC error
// that creates no agent; ending a session makes room again.
func TestSessionCap(t *testing.T) {
	w := newWorld(t, Options{MaxSessions: 2})
	first := w.open(t)
	w.open(t)
	before, err := w.agents.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	resp, ans := post(t, w.url, "", initBody(`"third"`))
	if resp.StatusCode != http.StatusTooManyRequests || len(ans) != 1 || ans[0].Error == nil || ans[0].Error.Code != codeTooManySessions ||
		string(ans[0].ID) != `"third"` || !strings.Contains(ans[0].Error.Message, "mcp.maxSessions") || resp.Header.Get(AgentHeader) != "" {
		t.Fatalf("third initialize = %d %+v, want 429 and a JSON-RPC error naming mcp.maxSessions", resp.StatusCode, ans)
	}
	after, err := w.agents.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Errorf("the refused initialize made agents: %d, then %d", len(before), len(after))
	}
	del := raw("DELETE", w.url, first, "", "")
	if resp, _ := send(t, del); resp.StatusCode != 200 && resp.StatusCode != 204 {
		t.Fatalf("DELETE = %d", resp.StatusCode)
	}
	deadline := time.Now().Add(5 * time.Second)
	for w.h.Sessions() != 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := w.h.Sessions(); n != 1 {
		t.Fatalf("%d sessions open after DELETE, want 1", n)
	}
	w.open(t)
}

// TestSessionIdle: a session unused for SessionTimeout ends (its requests
// are then 404) and no longer counts against the cap.
func TestSessionIdle(t *testing.T) {
	w := newWorld(t, Options{MaxSessions: 1, SessionTimeout: 300 * time.Millisecond})
	session := w.open(t)
	// A call longer than the timeout keeps the session: it is not idle.
	_, ans := post(t, w.url, session, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bash","arguments":{"command":"sleep 0.6; echo kept"}}}`)
	if len(ans) != 1 || !strings.Contains(string(ans[0].Result), "kept") {
		t.Fatalf("long call = %+v", ans)
	}
	deadline := time.Now().Add(5 * time.Second)
	for w.h.Sessions() != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := w.h.Sessions(); n != 0 {
		t.Fatalf("%d sessions open after the idle timeout, want 0", n)
	}
	resp, ans := post(t, w.url, session, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	if resp.StatusCode != 404 || len(ans) != 1 || ans[0].Error == nil || ans[0].Error.Code != codeSessionNotFound {
		t.Errorf("request on the expired session = %d %+v, want 404 session not found", resp.StatusCode, ans)
	}
	w.open(t) // the cap has room again
}

// logBuffer records log records' levels and messages.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestClientMistakesLogQuietly: nothing a client gets wrong is logged at
// ERROR or WARN.
func TestClientMistakesLogQuietly(t *testing.T) {
	logs := &logBuffer{}
	w := newWorld(t, Options{Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	session := w.open(t)
	post(t, w.url, session, initBody("2"))
	post(t, w.url, "", "{not json")
	post(t, w.url, "nope", `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`)
	post(t, w.url, session, `{"jsonrpc":"2.0","id":6,"method":"no/such/method"}`)
	out := logs.String()
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "level=ERROR") || strings.Contains(line, "level=WARN") {
			t.Errorf("a client's mistake logged as %s", line)
		}
	}
	if !strings.Contains(out, "MCP initialize on an initialized session") {
		t.Errorf("the second initialize is not logged; logs:\n%s", out)
	}
}

// TestWireSplitToken: a token split across writes is still swapped back,
// and what was held back goes out on Flush.
func TestWireSplitToken(t *testing.T) {
	m := newIDMap()
	msgs, batch, ok := parse([]byte(`{"jsonrpc":"2.0","id":1.5,"method":"ping"}`))
	if !ok {
		t.Fatal("parse failed")
	}
	body, back, done := m.swap("s", msgs, batch)
	defer done()
	var sent struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &sent); err != nil || !strings.HasPrefix(sent.ID, m.prefix) {
		t.Fatalf("swapped body %s: id %q, want a token", body, sent.ID)
	}
	answer := `data: {"jsonrpc":"2.0","id":"` + sent.ID + `","result":{}}` + "\n\n"
	for cut := 1; cut < len(answer); cut++ {
		rec := httptest.NewRecorder()
		w := &wire{ResponseWriter: rec, back: back, prefix: `"` + m.prefix}
		_, _ = w.Write([]byte(answer[:cut]))
		_, _ = w.Write([]byte(answer[cut:]))
		w.Flush()
		w.finish()
		if want := `data: {"jsonrpc":"2.0","id":1.5,"result":{}}` + "\n\n"; rec.Body.String() != want {
			t.Fatalf("cut at %d: %q, want %q", cut, rec.Body.String(), want)
		}
	}
}

// TestPlainIDAgreesWithDecoding: every id the fast path takes as echoed is
// one the SDK echoes (decoding it as the SDK does says so too), and the
// usual ids take the fast path.
func TestPlainIDAgreesWithDecoding(t *testing.T) {
	for _, id := range []string{"0", "7", "-7", "42", "123456789012345", "-123456789012345", `"plain"`, `"a-b_c.d:e/f"`, `""`, `" "`} {
		if !plainID([]byte(id)) {
			t.Errorf("plainID(%s) = false, want the fast path", id)
		}
		if !decodedEchoes([]byte(id)) {
			t.Errorf("plainID(%s) = true but decoding says the SDK changes it", id)
		}
	}
	for _, id := range []string{"-0", "00", "01", "-", "1.5", "1e2", "1.0", "3E0", "1234567890123456", "9007199254740993", "18446744073709551616",
		`"a\u0041"`, `"x\/y"`, `"<"`, `">"`, `"&"`, `"é"`, "\"\x01\"", `"a"b"`, `"`, "null", "true", "[]", "{}", ""} {
		if plainID([]byte(id)) {
			t.Errorf("plainID(%q) = true, want the decoding path", id)
		}
	}
}
