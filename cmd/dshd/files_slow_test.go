package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFileUploadOutlivesBodyTimeout: an upload to the file routes that keeps
// arriving may take longer than http.bodyTimeoutMs (it bounds a pause, not
// the whole body), and one that stalls for longer is cut off with 408,
// leaving no file and no temporary file behind.
func TestFileUploadOutlivesBodyTimeout(t *testing.T) {
	s := startServer(t, withConfig(slowConfig))
	ws := t.TempDir()
	var a struct{ ID string }
	if st := s.DoJSON(t, "POST", "/agents", map[string]any{"cwd": ws}, &a); st != 201 {
		t.Fatalf("POST /agents = %d", st)
	}
	auth := "Authorization: Bearer " + s.Token + "\r\n"
	const payload = "0123456789abcdefghij" // 20 bytes, one every 100 ms: 2 s > 500 ms

	t.Run("steady", func(t *testing.T) {
		c := dialServer(t, s)
		io.WriteString(c, "PUT /agents/"+a.ID+"/files/steady.txt HTTP/1.1\r\nHost: 127.0.0.1\r\n"+auth+"Content-Length: 20\r\n\r\n")
		start := time.Now()
		for i := range len(payload) {
			time.Sleep(100 * time.Millisecond)
			if _, err := c.Write([]byte{payload[i]}); err != nil {
				t.Fatalf("write byte %d after %v: %v", i, time.Since(start), err)
			}
		}
		resp, body, _ := readAnswer(t, c, 5*time.Second)
		if resp.StatusCode != 200 {
			t.Fatalf("= %d %s, want 200", resp.StatusCode, body)
		}
		var w struct{ Size int64 }
		if err := json.Unmarshal([]byte(body), &w); err != nil || w.Size != 20 {
			t.Errorf("answer %s", body)
		}
		if got, _ := os.ReadFile(filepath.Join(ws, "steady.txt")); string(got) != payload {
			t.Errorf("file = %q", got)
		}
		if time.Since(start) < time.Second {
			t.Errorf("the upload took %v: it did not outlast the 500 ms body deadline", time.Since(start))
		}
	})
	t.Run("stalled", func(t *testing.T) {
		c := dialServer(t, s)
		io.WriteString(c, "PUT /agents/"+a.ID+"/files/stalled.txt HTTP/1.1\r\nHost: 127.0.0.1\r\n"+auth+"Content-Length: 20\r\n\r\n01234")
		resp, body, closed := readAnswer(t, c, 5*time.Second)
		if resp.StatusCode != 408 || !strings.Contains(body, `"code":"body_timeout"`) || !closed {
			t.Errorf("= %d %s, closed=%v; want 408 body_timeout and the connection closed", resp.StatusCode, body, closed)
		}
		ents, _ := os.ReadDir(ws)
		for _, e := range ents {
			if e.Name() != "steady.txt" {
				t.Errorf("left behind: %s", e.Name())
			}
		}
	})
}
