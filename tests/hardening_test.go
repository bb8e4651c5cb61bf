package tests

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// problem is the part of a problem+json body these tests read.
type problem struct {
	Status int    `json:"status"`
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

// sendRaw sends body exactly as given, with the token, and returns the
// status, the Content-Type and the body of the answer.
func (s *testServer) sendRaw(t *testing.T, method, path string, body []byte, headers map[string]string) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, s.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.Token)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), b
}

// TestJSONBodyIsExactlyOneValidValue sends bodies that encoding/json would
// quietly repair or cut short. Each must be refused with 400 bad_request and
// run nothing: the command that runs is the one that was sent.
func TestJSONBodyIsExactlyOneValidValue(t *testing.T) {
	s := startServer(t)
	var agent struct{ ID string }
	if st := s.doJSON(t, "POST", "/agents", nil, &agent); st != 201 {
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
			st, ct, body := s.sendRaw(t, "POST", tt.path, []byte(tt.body), nil)
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
	if st := s.doJSON(t, "GET", "/jobs", nil, &jobs); st != 200 || len(jobs) != 0 {
		t.Errorf("GET /jobs = %d with %d jobs, want none: a refused body ran %+v", st, len(jobs), jobs)
	}
	var contributors []struct{ Name string }
	s.doJSON(t, "GET", "/contributors", nil, &contributors)
	for _, c := range contributors {
		if c.Name == "a.b" || c.Name == "c.d" {
			t.Errorf("contributor %s was registered from a refused body", c.Name)
		}
	}

	// What is valid stays valid: a surrogate pair, whitespace after the value.
	st, _, body := s.sendRaw(t, "POST", "/exec", []byte("{\"command\":\"printf '%s' \\ud83d\\ude00\"} \r\n\t"), nil)
	var j job
	if err := json.Unmarshal(body, &j); err != nil || st != 200 || j.Stdout.Text != "\U0001F600" {
		t.Errorf("valid body = %d %q (%v), want 200 printing U+1F600", st, body, err)
	}
	if !strings.HasPrefix(j.ID, "job_") {
		t.Errorf("job id %q", j.ID)
	}
}
