package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTokenNeverReachesChildren puts the server token in variables whose
// names match no credential pattern (the server's own environment, the
// config's env.set, a request's explicit env) and checks that neither a
// command nor a hook sees it, whatever the name (DESIGN §8).
func TestTokenNeverReachesChildren(t *testing.T) {
	const token = "d2f1c0b7a6e5d4c3b2a1f0e9d8c7b6a5"
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(dir, "home")
	hookEnv := filepath.Join(dir, "hook.env")
	writeJSON(t, filepath.Join(home, "hooks", "claude-code.json"), map[string]any{"hooks": map[string]any{
		"PreToolUse": []any{map[string]any{"matcher": "Bash", "hooks": []any{
			map[string]any{"type": "command", "command": "env -0 > " + hookEnv},
		}}},
	}})
	s := startServer(t, withHome(home), withArgs("--token-file", tokenFile),
		withEnv("DSHD_BEARER="+token, "PADDED_BEARER=  "+token+"\n", "PLAIN_VAR=plain"),
		withConfig("env:\n  set:\n    CONFIGURED_AUTH: \""+token+"\"\n"))
	if s.Token != token {
		t.Fatalf("server token = %q, want the token file's", s.Token)
	}

	var j job
	if st := s.doJSON(t, "POST", "/exec", map[string]any{"command": "env -0", "env": map[string]string{"EXPLICIT_AUTH": token}}, &j); st != 200 {
		t.Fatalf("POST /exec = %d", st)
	}
	env := childEnv(t, string(s.rawOutput(t, j.ID)))
	if env["PLAIN_VAR"] != "plain" {
		t.Fatalf("child PLAIN_VAR = %q: the environment was not inherited at all", env["PLAIN_VAR"])
	}
	for k, v := range env {
		if strings.Contains(v, token) {
			t.Errorf("command sees the token in %s", k)
		}
	}

	var a agent
	if st := s.doJSON(t, "POST", "/agents", map[string]any{}, &a); st != 201 {
		t.Fatalf("create agent = %d", st)
	}
	var res struct{ IsError bool }
	if st := s.doJSON(t, "POST", "/agents/"+a.ID+"/tools/bash", map[string]any{"arguments": map[string]any{"command": "true"}}, &res); st != 200 || res.IsError {
		t.Fatalf("tool call = %d, isError %v", st, res.IsError)
	}
	b, err := os.ReadFile(hookEnv)
	if err != nil {
		t.Fatalf("the hook did not run: %v", err)
	}
	henv := childEnv(t, string(b))
	if henv["PLAIN_VAR"] != "plain" {
		t.Fatalf("hook PLAIN_VAR = %q: the environment was not inherited at all", henv["PLAIN_VAR"])
	}
	for k, v := range henv {
		if strings.Contains(v, token) {
			t.Errorf("hook sees the token in %s", k)
		}
	}
}

// TestLeftoverContributorTempsRemovedAtStart: a crash during a contributor
// save leaves ".contributors.json.*.tmp" behind; the next start removes
// them and keeps everything else.
func TestLeftoverContributorTempsRemovedAtStart(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	s := startServer(t, withHome(home))
	if st := s.doJSON(t, "POST", "/contributors", map[string]any{
		"name": "keep.me", "keys": []map[string]string{{"key": "DSH_KEEP", "description": "a test fact"}},
		"resolver": map[string]any{"kind": "static", "values": map[string]string{"DSH_KEEP": "kept"}},
	}, nil); st != 201 {
		t.Fatalf("register = %d", st)
	}
	s.stop(t)

	leftovers := []string{".contributors.json.123456.tmp", ".contributors.json.987654321.tmp"}
	for _, name := range leftovers {
		if err := os.WriteFile(filepath.Join(home, name), []byte(`{"version":1,"contrib`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	unrelated := filepath.Join(home, "contributors.json.tmp.notes")
	if err := os.WriteFile(unrelated, []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}

	s = startServer(t, withHome(home))
	for _, name := range leftovers {
		if _, err := os.Lstat(filepath.Join(home, name)); err == nil {
			t.Errorf("%s survived the start", name)
		}
	}
	if _, err := os.Stat(unrelated); err != nil {
		t.Errorf("an unrelated file was removed: %v", err)
	}
	if st := s.doJSON(t, "GET", "/contributors/keep.me", nil, nil); st != 200 {
		t.Errorf("durable contributor after restart = %d, want 200", st)
	}
}
