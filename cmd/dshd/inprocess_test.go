package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

// testServer is the server run() serves in-process (startRun), for the
// tests that check the whole HTTP surface against the contract but need no
// process tree of their own: the contract fuzz, the auth answers, the
// conformance of every answer and of the output events. They lived in
// tests/, which starts the binary for each test.
type testServer struct {
	URL, Token string
	*runningServer
}

// serverOption changes how startServer starts the server.
type serverOption func(*serverConfig)

type serverConfig struct{ home string }

// withHome starts the server on the given home.
func withHome(dir string) serverOption { return func(c *serverConfig) { c.home = dir } }

// startServer starts run() in-process on a loopback port and a fresh home
// (or the one given), and stops it at cleanup.
func startServer(t *testing.T, opts ...serverOption) *testServer {
	t.Helper()
	var c serverConfig
	for _, o := range opts {
		o(&c)
	}
	if c.home == "" {
		c.home = filepath.Join(t.TempDir(), "home")
	}
	s := startRun(t, []string{"--home", c.home}, nil)
	return &testServer{URL: s.url, Token: s.token, runningServer: s}
}

// do sends an authenticated request with body as JSON (unless nil).
func (s *testServer) do(t testing.TB, method, path string, body any) *http.Response {
	t.Helper()
	return s.doWith(t, method, path, body, map[string]string{"Authorization": "Bearer " + s.Token})
}

// doWith sends a request with exactly the given headers.
func (s *testServer) doWith(t testing.TB, method, path string, body any, headers map[string]string) *http.Response {
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
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

// doJSON sends an authenticated request, decodes a JSON answer into out
// (unless nil) and returns the status.
func (s *testServer) doJSON(t testing.TB, method, path string, body, out any) int {
	t.Helper()
	resp := s.do(t, method, path, body)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: decode %q: %v", method, path, data, err)
		}
	}
	return resp.StatusCode
}

// writeJSON writes v as JSON to path, making its directory.
func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
