package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestJSONBodyIsExactlyOneValidValue sends bodies that encoding/json would
// quietly repair or cut short. Each must be refused with 400 bad_request and
// run nothing: the command that runs is the one that was sent.
func TestJSONBodyIsExactlyOneValidValue(t *testing.T) {
	s := startServer(t)
	var agent struct{ ID string }
	if st := s.DoJSON(t, "POST", "/agents", nil, &agent); st != 201 {
		t.Fatalf("create agent = %d", st)
	}
	tests := []struct {
		name, path, body string
	}{
		{"invalid UTF-8", "/exec", "{\"command\":\"echo \xff\xfe\"}"},
		{"invalid UTF-8 in an env value", "/exec", "{\"command\":\"echo x\",\"env\":{\"A\":\"\xc3\"}}"},
		{"lone high surrogate", "/exec", `{"command":"echo \ud800"}`},
		{"lone low surrogate", "/exec", `{"command":"echo \udc00x"}`},
		{"high surrogate then a non-surrogate", "/exec", `{"command":"echo \ud800\u0041"}`},
		{"a second value", "/exec", `{"command":"echo first"} {"command":"echo second"}`},
		{"trailing garbage", "/exec", `{"command":"echo first"}x`},
		{"duplicate member", "/exec", `{"command":"echo first","command":"echo second"}`},
		{"tool call with a second value", "/agents/" + agent.ID + "/tools/bash", `{"arguments":{"command":"echo a"}}{}`},
		{"tool call with a lone surrogate", "/agents/" + agent.ID + "/tools/bash", `{"arguments":{"command":"echo \udfff"}}`},
		{"contributor with a duplicate member", "/contributors", `{"name":"a.b","name":"c.d","keys":[],"resolver":{"kind":"static"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, ct, body := s.SendRaw(t, "POST", tt.path, []byte(tt.body), nil)
			var p problem
			if err := json.Unmarshal(body, &p); err != nil {
				t.Fatalf("body %q: %v", body, err)
			}
			if st != 400 || ct != "application/problem+json" || p.Code != "bad_request" ||
				!strings.Contains(p.Detail, "not exactly one valid JSON value") {
				t.Errorf("= %d %s %s %q, want 400 application/problem+json bad_request saying why; body %s", st, ct, p.Code, p.Detail, body)
			}
		})
	}
	var jobs []job
	if st := s.DoJSON(t, "GET", "/jobs", nil, &jobs); st != 200 || len(jobs) != 0 {
		t.Errorf("GET /jobs = %d with %d jobs, want none: a refused body ran %+v", st, len(jobs), jobs)
	}
	var contributors []struct{ Name string }
	s.DoJSON(t, "GET", "/contributors", nil, &contributors)
	for _, c := range contributors {
		if c.Name == "a.b" || c.Name == "c.d" {
			t.Errorf("contributor %s was registered from a refused body", c.Name)
		}
	}

	// What is valid stays valid: a surrogate pair, whitespace after the value.
	st, _, body := s.SendRaw(t, "POST", "/exec", []byte("{\"command\":\"printf '%s' \\ud83d\\ude00\"} \r\n\t"), nil)
	var j job
	if err := json.Unmarshal(body, &j); err != nil || st != 200 || j.Stdout.Text != "\U0001F600" {
		t.Errorf("valid body = %d %q (%v), want 200 printing U+1F600", st, body, err)
	}
	if !strings.HasPrefix(j.ID, "job_") {
		t.Errorf("job id %q", j.ID)
	}
}

// TestHostHeader refuses requests naming a host other than a loopback one,
// as a page on another site reaches the server after DNS rebinding: open
// routes and the UI too, and with the token nothing runs.
func TestHostHeader(t *testing.T) {
	s := startServer(t)
	port := s.URL[strings.LastIndex(s.URL, ":")+1:]
	send := func(method, path, host string, body any) (*http.Response, []byte) {
		t.Helper()
		var r io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			r = bytes.NewReader(b)
		}
		req, err := http.NewRequest(method, s.URL+path, r)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		req.Header.Set("Authorization", "Bearer "+s.Token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	for _, host := range []string{"rebind.example:" + port, "rebind.example", "127.0.0.1.rebind.example", "localhost.rebind.example:" + port, "10.0.0.1:" + port} {
		for _, path := range []string{"/healthz", "/ui/", "/exec"} {
			method, body := "GET", any(nil)
			if path == "/exec" {
				method, body = "POST", map[string]any{"command": "echo rebound"}
			}
			resp, b := send(method, path, host, body)
			var p problem
			_ = json.Unmarshal(b, &p)
			if resp.StatusCode != 421 || resp.Header.Get("Content-Type") != "application/problem+json" || p.Code != "host_not_allowed" {
				t.Errorf("%s %s with Host %q = %d %s, want 421 host_not_allowed", method, path, host, resp.StatusCode, b)
			}
		}
	}
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "LocalHost", "[::1]:" + port, "127.0.0.2"} {
		if resp, b := send("GET", "/healthz", host, nil); resp.StatusCode != 200 {
			t.Errorf("GET /healthz with Host %q = %d %s, want 200", host, resp.StatusCode, b)
		}
	}
	// HTTP/1.0 lets a client leave Host out; that names no loopback host either.
	c := dialServer(t, s)
	io.WriteString(c, "GET /healthz HTTP/1.0\r\n\r\n")
	if resp, body, _ := readAnswer(t, c, 5*time.Second); resp.StatusCode != 421 {
		t.Errorf("HTTP/1.0 request without Host = %d %s, want 421", resp.StatusCode, body)
	}
	var jobs []job
	if s.DoJSON(t, "GET", "/jobs", nil, &jobs); len(jobs) != 0 {
		t.Errorf("a request with a foreign Host ran %d jobs", len(jobs))
	}
}

// TestUIHeaders checks the anti-framing and content headers of the UI, and
// that a missing UI file is a problem+json 404 like every other.
func TestUIHeaders(t *testing.T) {
	s := startServer(t)
	for _, path := range []string{"/ui/", "/ui/app.js", "/ui/style.css"} {
		resp := s.DoWith(t, "GET", path, nil, nil)
		resp.Body.Close()
		h := resp.Header
		if resp.StatusCode != 200 {
			t.Errorf("GET %s = %d", path, resp.StatusCode)
		}
		if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "default-src 'none'") {
			t.Errorf("GET %s: Content-Security-Policy %q, want default-src 'none' and frame-ancestors 'none'", path, csp)
		}
		if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("GET %s: X-Content-Type-Options %q, Referrer-Policy %q", path, h.Get("X-Content-Type-Options"), h.Get("Referrer-Policy"))
		}
	}
	for _, path := range []string{"/ui/nope.js", "/ui/nope/", "/ui/../openapi.yaml.x"} {
		resp := s.DoWith(t, "GET", path, nil, nil)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var p problem
		_ = json.Unmarshal(b, &p)
		if resp.StatusCode != 404 || resp.Header.Get("Content-Type") != "application/problem+json" || p.Code != "not_found" {
			t.Errorf("GET %s = %d %s %s, want a problem+json 404 not_found", path, resp.StatusCode, resp.Header.Get("Content-Type"), b)
		}
	}
}

// TestContentLengthWithTransferEncoding sends a request with both framing
// headers, a request-smuggling shape: it is answered, then the connection
// is closed so nothing after it can be read as another request (RFC 9112
// section 6.1).
func TestContentLengthWithTransferEncoding(t *testing.T) {
	s := startServer(t)
	c := dialServer(t, s)
	io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"+
		"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	resp, _, closed := readAnswer(t, c, 5*time.Second)
	if resp.StatusCode != 200 || !closed {
		t.Errorf("= %d, closed=%v; want 200, then the connection closed", resp.StatusCode, closed)
	}
}
