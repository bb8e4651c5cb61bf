// Package apitest is the HTTP client the tests share when they speak to a
// running dshd: the binary started by tests/ and the server cmd/dshd runs
// in-process. It fails the test on transport errors, so a test reads as the
// requests it makes and the answers it checks.
package apitest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

// Client sends requests to one server with its token.
type Client struct {
	URL   string // http://127.0.0.1:port
	Token string
}

// Problem is the part of a problem+json body tests read.
type Problem struct {
	Status int    `json:"status"`
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

// Do sends an authenticated request with body marshalled as JSON (nil: none).
func (c *Client) Do(t testing.TB, method, path string, body any) *http.Response {
	t.Helper()
	return c.DoWith(t, method, path, body, map[string]string{"Authorization": "Bearer " + c.Token})
}

// DoWith sends a request with exactly the given headers.
func (c *Client) DoWith(t testing.TB, method, path string, body any, headers map[string]string) *http.Response {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.URL+path, r)
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

// DoJSON sends an authenticated request, decodes a JSON answer into out
// (unless nil) and returns the status.
func (c *Client) DoJSON(t testing.TB, method, path string, body, out any) int {
	t.Helper()
	resp := c.Do(t, method, path, body)
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

// SendRaw sends body exactly as given, with the token, and returns the
// status, the Content-Type and the body of the answer.
func (c *Client) SendRaw(t testing.TB, method, path string, body []byte, headers map[string]string) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, c.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
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

// WriteJSON writes v as indented JSON to path, making its directory.
func WriteJSON(t testing.TB, path string, v any) {
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
