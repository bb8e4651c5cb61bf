package tests

import (
	"encoding/json"
	"io"
	"path/filepath"
	"strings"
	"testing"
)

// TestDurableContributorsSurviveRestart: a contributor without a plugin is
// restored when the server restarts on the same home; one under a plugin is
// not; disposal removes keys from later executions, and the name registers
// again afterwards.
func TestDurableContributorsSurviveRestart(t *testing.T) {
	t.Parallel()
	home := filepath.Join(t.TempDir(), "home")
	s := startServer(t, withHome(home))
	register := func(s *testServer, name, key, plugin string) int {
		body := map[string]any{
			"name": name, "keys": []map[string]string{{"key": key, "description": "a test fact"}},
			"resolver": map[string]any{"kind": "static", "values": map[string]string{key: "v-" + name}},
		}
		if plugin != "" {
			body["plugin"] = plugin
		}
		return s.DoJSON(t, "POST", "/contributors", body, nil)
	}
	var plugin struct{ ID string }
	if st := s.DoJSON(t, "POST", "/plugins", map[string]any{"name": "harness", "leaseSeconds": 600}, &plugin); st != 201 {
		t.Fatalf("open plugin = %d", st)
	}
	if st := register(s, "keep.me", "DSH_KEEP", ""); st != 201 {
		t.Fatalf("register durable = %d", st)
	}
	if st := register(s, "scoped.one", "DSH_SCOPED", plugin.ID); st != 201 {
		t.Fatalf("register scoped = %d", st)
	}

	s.stop(t)
	s = startServer(t, withHome(home))
	if st := s.DoJSON(t, "GET", "/contributors/keep.me", nil, nil); st != 200 {
		t.Errorf("durable contributor after restart = %d, want 200", st)
	}
	if st := s.DoJSON(t, "GET", "/contributors/scoped.one", nil, nil); st != 404 {
		t.Errorf("plugin contributor after restart = %d, want 404", st)
	}
	var j job
	s.DoJSON(t, "POST", "/exec", map[string]any{"command": "true"}, &j)
	if j.ManagedEnv["DSH_KEEP"] != "v-keep.me" {
		t.Errorf("restored contributor's key = %q", j.ManagedEnv["DSH_KEEP"])
	}

	if st := s.DoJSON(t, "DELETE", "/contributors/keep.me", nil, nil); st != 204 {
		t.Fatalf("delete = %d", st)
	}
	var after job // a fresh value: decoding into j would merge its map
	s.DoJSON(t, "POST", "/exec", map[string]any{"command": "true"}, &after)
	if _, ok := after.ManagedEnv["DSH_KEEP"]; ok {
		t.Error("a disposed contributor's key reached a later execution")
	}
	if st := register(s, "keep.me", "DSH_KEEP", ""); st != 201 {
		t.Errorf("re-register after disposal = %d, want 201", st)
	}
	if st := s.DoJSON(t, "DELETE", "/contributors/dsh.home", nil, nil); st != 409 {
		t.Errorf("deleting a built-in = %d, want 409", st)
	}
}

// TestTemplateAgentFacts: a template contributor renders the agent's
// lineage facts for each execution, and leaves keys absent whose facts are.
func TestTemplateAgentFacts(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	if st := s.DoJSON(t, "POST", "/contributors", map[string]any{
		"name": "acme.lineage",
		"keys": []map[string]string{
			{"key": "DSH_LINEAGE", "description": "agent, parent, root and depth"},
			{"key": "DSH_PARENT", "description": "the parent agent"},
			{"key": "DSH_RUN", "description": "job facts"},
			{"key": "DSH_WHERE", "description": "the job's working directory"},
		},
		"resolver": map[string]any{"kind": "template", "values": map[string]string{
			"DSH_LINEAGE": "{agent.id}/{agent.rootId}/{agent.depth}",
			"DSH_PARENT":  "{agent.parentId}",
			"DSH_RUN":     "{job.id} bg={job.background}",
			"DSH_WHERE":   "{job.cwd}",
		}},
	}, nil); st != 201 {
		t.Fatalf("register = %d", st)
	}
	var root, child agent
	s.DoJSON(t, "POST", "/agents", map[string]any{}, &root)
	s.DoJSON(t, "POST", "/agents/"+root.ID+"/spawn", map[string]any{}, &child)

	var j job
	s.DoJSON(t, "POST", "/exec", map[string]any{"command": "true", "agentId": child.ID}, &j)
	want := map[string]string{
		"DSH_LINEAGE": child.ID + "/" + root.ID + "/1",
		"DSH_PARENT":  root.ID,
		"DSH_RUN":     j.ID + " bg=false",
	}
	for k, v := range want {
		if j.ManagedEnv[k] != v {
			t.Errorf("child %s = %q, want %q", k, j.ManagedEnv[k], v)
		}
	}
	var bare job // a fresh value: decoding into j would merge its map
	s.DoJSON(t, "POST", "/exec", map[string]any{"command": "true"}, &bare)
	for _, k := range []string{"DSH_LINEAGE", "DSH_PARENT"} {
		if v, ok := bare.ManagedEnv[k]; ok {
			t.Errorf("without an agent %s = %q, want absent", k, v)
		}
	}
	if bare.ManagedEnv["DSH_RUN"] != bare.ID+" bg=false" {
		t.Errorf("DSH_RUN = %q", bare.ManagedEnv["DSH_RUN"])
	}
	// No cwd in the request and no agent: the job runs in the server's
	// default directory, and {job.cwd} says so.
	if bare.Cwd == "" || bare.ManagedEnv["DSH_WHERE"] != bare.Cwd {
		t.Errorf("DSH_WHERE = %q, job cwd %q", bare.ManagedEnv["DSH_WHERE"], bare.Cwd)
	}
}

// TestDeclarationsShowResolverWithoutSecrets: GET /env/declarations names
// each key's resolver kind and details, and a webhook URL's credentials,
// query and fragment never leave the server through it.
func TestDeclarationsShowResolverWithoutSecrets(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	if st := s.DoJSON(t, "POST", "/contributors", map[string]any{
		"name": "w", "keys": []map[string]string{{"key": "DSH_W", "description": "w"}},
		"resolver": map[string]any{"kind": "webhook", "url": "http://user:pw-secret@127.0.0.1:9/env?token=q-secret#f-secret"},
	}, nil); st != 201 {
		t.Fatalf("register webhook = %d", st)
	}
	if st := s.DoJSON(t, "POST", "/contributors", map[string]any{
		"name": "t", "keys": []map[string]string{{"key": "DSH_T", "description": "t"}},
		"resolver": map[string]any{"kind": "template", "values": map[string]string{"DSH_T": "a-{agent.id}"}},
	}, nil); st != 201 {
		t.Fatalf("register template = %d", st)
	}
	res := s.Do(t, "GET", "/env/declarations", nil)
	raw, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("GET /env/declarations = %d, %v", res.StatusCode, err)
	}
	for _, secret := range []string{"pw-secret", "q-secret", "f-secret", "user"} {
		if strings.Contains(string(raw), secret) {
			t.Errorf("GET /env/declarations shows %q: %s", secret, raw)
		}
	}
	var list struct {
		Declarations []struct{ Key, Kind, Template, WebhookURL string }
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, d := range list.Declarations {
		got[d.Key] = d.Kind + " " + d.Template + d.WebhookURL
	}
	for key, want := range map[string]string{
		"DSH_HOME": "builtin ", "DSH_T": "template a-{agent.id}", "DSH_W": "webhook http://127.0.0.1:9/env",
	} {
		if got[key] != want {
			t.Errorf("%s: %q, want %q", key, got[key], want)
		}
	}
}
