package tests

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/testenv"
)

// watchStream is a client of a watch: its events as "type path" (or
// "renamed from>to"), with their ids.
type watchStream struct {
	cancel context.CancelFunc
	events chan wireEvent
	status int
	body   string
}

func (s *testServer) watch(t *testing.T, path, lastID string) *watchStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", s.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.Token)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	ws := &watchStream{cancel: cancel, events: make(chan wireEvent, 1024), status: resp.StatusCode}
	t.Cleanup(cancel)
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		ws.body = string(b)
		close(ws.events)
		return ws
	}
	go func() {
		defer resp.Body.Close()
		defer close(ws.events)
		c := newSSEClient(resp.Body)
		for {
			ev, err := c.Next()
			if err != nil {
				return
			}
			ev.Data = append([]byte(nil), ev.Data...)
			ws.events <- ev
		}
	}()
	return ws
}

// until reads events until one is want, failing on an overflow (unless
// want is one) or after a minute; it returns the event's id and what it
// saw before.
func (w *watchStream) until(t *testing.T, want string) (id string, seen []string) {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		select {
		case ev, ok := <-w.events:
			if !ok {
				t.Fatalf("the stream ended before %q; saw %q", want, seen)
			}
			var d struct{ Type, Path, From, Reason string }
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				t.Fatalf("event %s: %q: %v", ev.Name, ev.Data, err)
			}
			if d.Type != ev.Name {
				t.Errorf("event %q carries type %q", ev.Name, d.Type)
			}
			got := d.Type + " " + d.Path
			switch d.Type {
			case "renamed":
				got = d.Type + " " + d.From + ">" + d.Path
			case "overflow":
				got = "overflow"
				if want != "overflow" {
					t.Errorf("overflow before %q: %s (saw %q)", want, d.Reason, seen)
				}
			}
			if got == want {
				return ev.ID, seen
			}
			seen = append(seen, got)
		case <-deadline:
			t.Fatalf("no %q within a minute; saw %q", want, seen)
		}
	}
}

// TestFilesWatch: a watch of an agent's directory, shared and snapshot
// (its view: what the model's bash does through the mount, across the
// checkpoint each call makes), sees the model's bash create, write, move
// and remove through the bash tool; a client that reconnects with
// Last-Event-ID gets what happened while it was away; one whose watch is
// gone is told by an overflow event.
func TestFilesWatch(t *testing.T) {
	t.Parallel()
	testenv.NeedRoot(t, "snapshot views and both mechanisms need root")
	for _, mech := range sandboxMechanisms {
		t.Run(mech, func(t *testing.T) { testFilesWatch(t, mech) })
	}
}

func testFilesWatch(t *testing.T, mech string) {
	s := startSandboxServer(t, mech)
	ww := map[string]any{"policy": "workspace-write", "network": "off"}
	type agentCase struct{ name, id string }
	wsShared := filesDir(t, "watch-shared")
	agents := []agentCase{{"shared", s.newAgent(t, "/agents", map[string]any{"cwd": wsShared, "sandbox": ww}).ID}}
	var h struct {
		Details struct {
			Workspaces *struct{ Snapshot bool } `json:"workspaces"`
		} `json:"details"`
	}
	if s.DoJSON(t, "GET", "/healthz", nil, &h); h.Details.Workspaces != nil && h.Details.Workspaces.Snapshot {
		wsSnap := filesDir(t, "watch-snap")
		parent := s.newAgent(t, "/agents", map[string]any{"cwd": wsSnap, "sandbox": ww})
		fork := s.newAgent(t, "/agents/"+parent.ID+"/fork", map[string]any{"workspace": "snapshot", "sandbox": ww})
		agents = append(agents, agentCase{"snapshot", fork.ID})
	} else {
		testenv.Need(t, "snapshot workspaces")
	}
	for _, a := range agents {
		t.Run(a.name, func(t *testing.T) {
			bash := func(cmd string) {
				t.Helper()
				if r := s.callTool(t, a.id, "bash", map[string]any{"command": cmd + " && echo done"}); !strings.Contains(r.Text, "done") {
					t.Fatalf("bash %q: %q", cmd, r.Text)
				}
			}
			path := "/agents/" + a.id + "/files/?watch=true&recursive=true"
			w := s.watch(t, path, "")
			if w.status != 200 {
				t.Fatalf("watch = %d %s", w.status, w.body)
			}
			// One tool call each: a snapshot view is mounted afresh after
			// every call, and the watch follows it.
			bash("echo x > a.txt")
			w.until(t, "created a.txt")
			w.until(t, "modified a.txt")
			bash("mv a.txt b.txt")
			w.until(t, "renamed a.txt>b.txt")
			bash("mkdir -p d/e && echo y > d/e/c")
			w.until(t, "created d")
			w.until(t, "created d/e/c")
			bash("mv d/e/c d/e/c2")
			last, _ := w.until(t, "renamed d/e/c>d/e/c2")
			bash("rm b.txt")
			w.until(t, "deleted b.txt")
			s.wantFile(t, "PUT", "/agents/"+a.id+"/files/d/up.txt", []byte("u"), 200, "")
			w.until(t, "modified d/up.txt")
			w.cancel()

			// Resumed from the id of the mv: the rm and the upload again,
			// and what happened while the client was away.
			bash("rm -r d")
			r := s.watch(t, path, last)
			if r.status != 200 {
				t.Fatalf("resume = %d %s", r.status, r.body)
			}
			r.until(t, "deleted b.txt")
			r.until(t, "modified d/up.txt")
			r.until(t, "deleted d/e/c2")
			r.until(t, "deleted d")
			r.cancel()

			// A watch no longer kept: an overflow first, then live events.
			g := s.watch(t, path, "wnosuchwatch.7")
			if g.status != 200 {
				t.Fatalf("resume of an unknown watch = %d %s", g.status, g.body)
			}
			g.until(t, "overflow")
			bash("touch z")
			g.until(t, "created z")
		})
	}

	// Refusals, as for reads; a bad Last-Event-ID.
	id := agents[0].id
	f := "/agents/" + id + "/files/"
	if err := os.WriteFile(filepath.Join(wsShared, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, code string }{
		{f + s.Home + "?watch=true", "path_hidden"},
		{f + "/proc?watch=true&recursive=true", "path_hidden"},
		{f + tokenFileOf(t, s) + "?watch=true", "path_hidden"},
		{f + "file?watch=true", "not_a_directory"},
		{f + "nothing?watch=true", "path_not_found"},
		{f + "?watch=maybe", "bad_request"},
		{f + "?watch=true&depth=2", "bad_request"},
	} {
		st, code, b := s.fileReq(t, "GET", c.path, nil)
		if code != c.code {
			t.Errorf("GET %s = %d %q, want %q: %s", c.path, st, code, c.code, b)
		}
	}
	st, code, _ := s.fileReq(t, "GET", f+"?watch=true", nil, "Last-Event-ID", "garbage")
	if st != 400 || code != "bad_request" {
		t.Errorf("a bad Last-Event-ID = %d %q", st, code)
	}
}
