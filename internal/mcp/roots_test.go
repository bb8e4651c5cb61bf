package mcp

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// connectWithRoots opens a session with the official Go client offering
// roots; it returns the session and the Dsh-Agent-Id of the initialize
// response ("" when there is none).
func (w *world) connectWithRoots(t *testing.T, roots ...string) (*sdk.ClientSession, string) {
	t.Helper()
	var agentID string
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := http.DefaultTransport.RoundTrip(r)
		if err == nil && resp.Header.Get(AgentHeader) != "" {
			agentID = resp.Header.Get(AgentHeader)
		}
		return resp, err
	})}
	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil)
	for _, r := range roots {
		c.AddRoots(&sdk.Root{URI: "file://" + r})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: w.url, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs, agentID
}

// TestRoots: a client's root within an allowed root becomes the new
// agent's cwd; one outside leaves the default directory; without allowed
// roots, roots are never asked for and the agent is bound at initialize.
func TestRoots(t *testing.T) {
	allowed := t.TempDir()
	project := filepath.Join(allowed, "src", "project")
	if err := os.MkdirAll(project, 0o755); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	link := filepath.Join(allowed, "escape")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	w := newWorld(t, Options{AllowedRoots: []string{allowed}})

	pwd := func(cs *sdk.ClientSession) (string, string) {
		t.Helper()
		out := strings.Fields(text(t, bash(t, cs, `pwd; echo "$DSH_SESSION_ID"`)))
		if len(out) < 2 {
			t.Fatalf("pwd and DSH_SESSION_ID: %q", out)
		}
		return out[0], out[len(out)-1]
	}

	cs, header := w.connectWithRoots(t, outside, project)
	if header != "" {
		t.Errorf("initialize answered Dsh-Agent-Id %s; the agent is made at the first call", header)
	}
	if !strings.Contains(cs.InitializeResult().Instructions, allowed) {
		t.Errorf("instructions %q do not say where commands run", cs.InitializeResult().Instructions)
	}
	dir, id := pwd(cs)
	if dir != project {
		t.Errorf("pwd = %s, want the client's permitted root %s", dir, project)
	}
	a, err := w.agents.Get(context.Background(), id)
	if err != nil || a.Cwd != project {
		t.Errorf("agent %s = %+v, %v; want its cwd %s", id, a, err, project)
	}
	if again, id2 := pwd(cs); again != project || id2 != id {
		t.Errorf("second call: %s as %s, want %s as %s", again, id2, project, id)
	}

	// A root outside (directly, or through a symlink inside): the default.
	for _, root := range []string{outside, link} {
		cs, _ := w.connectWithRoots(t, root)
		if dir, _ := pwd(cs); dir == root || strings.HasPrefix(dir, outside) {
			t.Errorf("root %s: pwd = %s, want the default directory", root, dir)
		}
	}

	// No allowed roots: bound at initialize, roots never used.
	w2 := newWorld(t, Options{})
	cs, header = w2.connectWithRoots(t, project)
	if header == "" {
		t.Error("without allowed roots the initialize response lacks Dsh-Agent-Id")
	}
	if dir, id := pwd(cs); dir == project || id != header {
		t.Errorf("without allowed roots: pwd %s as %s, want the default directory as %s", dir, id, header)
	}
}
