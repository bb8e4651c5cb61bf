package mcp

import (
	"bufio"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sseReader reads an SSE response line by line.
type sseReader struct {
	t    *testing.T
	resp *http.Response
	sc   *bufio.Scanner
}

// startCall posts a tools/call and returns as soon as its response's
// headers arrive (failing the test if they do not within 30s).
func startCall(t *testing.T, url, session, body string) *sseReader {
	t.Helper()
	req := raw("POST", url, session, body, "application/json")
	type answer struct {
		resp *http.Response
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		got <- answer{resp, err}
	}()
	select {
	case a := <-got:
		if a.err != nil {
			t.Fatal(a.err)
		}
		t.Cleanup(func() { a.resp.Body.Close() })
		sc := bufio.NewScanner(a.resp.Body)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		return &sseReader{t: t, resp: a.resp, sc: sc}
	case <-time.After(30 * time.Second):
		t.Fatal("no response headers within 30s")
	}
	return nil
}

// next is the stream's next line; ok is false at its end.
func (r *sseReader) next() (line string, ok bool) {
	if !r.sc.Scan() {
		return "", false
	}
	return r.sc.Text(), true
}

// until reads lines up to the first that has prefix, and returns it.
func (r *sseReader) until(prefix string) string {
	r.t.Helper()
	for {
		line, ok := r.next()
		if !ok {
			r.t.Fatalf("the stream ended before a line starting %q (%v)", prefix, r.sc.Err())
		}
		if strings.HasPrefix(line, prefix) {
			return line
		}
	}
}

// waitFile is a command that waits for path to exist, then prints done.
func waitFile(path string) string {
	return `while [ ! -e ` + path + ` ]; do sleep 0.02; done; echo done`
}

// TestStreamOpensAtOnce: a tool call's answer starts when the call does,
// with or without a progress token, and carries keep-alive comments while
// a silent command runs; the result follows at its end.
func TestStreamOpensAtOnce(t *testing.T) {
	w := newWorld(t, Options{KeepAlive: 10 * time.Millisecond})
	session := w.open(t)
	for _, progress := range []bool{false, true} {
		name := "no progress"
		meta := ""
		if progress {
			name, meta = "progress", `,"_meta":{"progressToken":"p"}`
		}
		t.Run(name, func(t *testing.T) {
			release := filepath.Join(t.TempDir(), "release")
			r := startCall(t, w.url, session, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"bash","arguments":{"command":"`+waitFile(release)+`"}`+meta+`}}`)
			// The headers came while the command waits on the test.
			if r.resp.StatusCode != 200 || !strings.HasPrefix(r.resp.Header.Get("Content-Type"), "text/event-stream") {
				line, _ := r.next()
				t.Fatalf("answer = %d %s %s, want 200 text/event-stream", r.resp.StatusCode, r.resp.Header.Get("Content-Type"), line)
			}
			if first, _ := r.next(); first != ": ok" {
				t.Errorf("first line = %q, want the opening comment", first)
			}
			r.until(": keep-alive")
			r.until(": keep-alive")
			if err := os.WriteFile(release, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if data := r.until(`data: {"jsonrpc":"2.0","id":2,`); !strings.Contains(data, `"text":"done"`) {
				t.Errorf("result = %s, want the call's with done", data)
			}
			for {
				line, ok := r.next()
				if !ok {
					break
				}
				if line != "" && !strings.HasPrefix(line, ":") {
					t.Errorf("after the result: %q", line)
				}
			}
		})
	}
}
