package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/proctest"
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

// TestShutdownKillsJobsWithLongGrace: a grace longer than the old fixed
// shutdown budget (15 s) used to end dshd with exit 1 and leave a job that
// ignores SIGTERM running. Shutdown now waits out the grace and always ends
// with the final SIGKILL.
func TestShutdownKillsJobsWithLongGrace(t *testing.T) {
	t.Parallel()
	s := startServer(t, withConfig("jobs:\n  graceMs: 16000\n"))
	dir := t.TempDir()
	var j job
	cmd := "trap '' TERM; echo $$ > " + filepath.Join(dir, "pid") + "; sleep 1000 & echo $! > " + filepath.Join(dir, "child") + "; wait"
	if st := s.doJSON(t, "POST", "/exec", map[string]any{"command": cmd, "background": true}, &j); st != 202 {
		t.Fatalf("exec = %d", st)
	}
	pids := []int{proctest.ReadPID(t, filepath.Join(dir, "pid")), proctest.ReadPID(t, filepath.Join(dir, "child"))}
	s.stop(t) // fails the test unless dshd exits 0
	for _, pid := range pids {
		proctest.WaitGone(t, pid)
	}
}

// TestGraceAboveMaximumRefusesToStart: a grace the shutdown could not wait
// out in bounded time is refused at startup, naming the setting.
func TestGraceAboveMaximumRefusesToStart(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("jobs:\n  graceMs: 600000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := refuseToStart(t, filepath.Join(t.TempDir(), "home"), "--config", cfg)
	if !strings.Contains(out, "jobs.graceMs") || !strings.Contains(out, "60000") {
		t.Errorf("error does not name the setting and its maximum:\n%s", out)
	}
}

// refuseToStart runs dshd on home with args and returns its output; the
// test fails if it starts (a server that starts is killed after 30 s).
func refuseToStart(t *testing.T, home string, args ...string) string {
	t.Helper()
	cmd := exec.Command(serverBinary, append([]string{"--addr", "127.0.0.1:0", "--home", home}, args...)...)
	cmd.Env = cleanEnv()
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
		}
	}()
	out, err := cmd.CombinedOutput()
	if err == nil || strings.Contains(string(out), "dshd listening on") {
		t.Fatalf("server started:\n%s", out)
	}
	return string(out)
}

// TestUnsafeHomeRefused: links and foreign entries where dshd writes in its
// home make it refuse to start, naming the path, and leave their targets
// untouched; modes that are too wide are tightened.
func TestUnsafeHomeRefused(t *testing.T) {
	t.Run("sessions is a link", func(t *testing.T) {
		home := filepath.Join(t.TempDir(), "home")
		target := t.TempDir()
		if err := os.MkdirAll(home, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(home, "sessions")); err != nil {
			t.Fatal(err)
		}
		out := refuseToStart(t, home)
		if !strings.Contains(out, filepath.Join(home, "sessions")) || !strings.Contains(out, "symbolic link") {
			t.Errorf("the refusal does not name the link:\n%s", out)
		}
		if des, _ := os.ReadDir(target); len(des) != 0 {
			t.Errorf("dshd wrote %d entries into the link's target", len(des))
		}
	})
	t.Run("jobs is a link", func(t *testing.T) {
		home := filepath.Join(t.TempDir(), "home")
		target := t.TempDir()
		victim := filepath.Join(target, "job_precious.stdout")
		if err := os.WriteFile(victim, []byte("keep"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(home, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(home, "jobs")); err != nil {
			t.Fatal(err)
		}
		out := refuseToStart(t, home)
		if !strings.Contains(out, filepath.Join(home, "jobs")) {
			t.Errorf("the refusal does not name the link:\n%s", out)
		}
		if b, err := os.ReadFile(victim); err != nil || string(b) != "keep" {
			t.Errorf("a file in the link's target was changed: %q %v", b, err)
		}
	})
	t.Run("server.token is a link", func(t *testing.T) {
		home := filepath.Join(t.TempDir(), "home")
		target := filepath.Join(t.TempDir(), "elsewhere")
		if err := os.WriteFile(target, []byte(strings.Repeat("x", 64)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(home, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(home, "server.token")); err != nil {
			t.Fatal(err)
		}
		out := refuseToStart(t, home)
		if !strings.Contains(out, filepath.Join(home, "server.token")) {
			t.Errorf("the refusal does not name the link:\n%s", out)
		}
		if fi, err := os.Stat(target); err != nil || fi.Mode().Perm() != 0o644 {
			t.Errorf("the link's target was chmodded: %v %v", fi.Mode(), err)
		}
	})
	t.Run("foreign-owned sessions", func(t *testing.T) {
		if os.Geteuid() != 0 {
			if os.Getenv("CI") == "true" {
				t.Fatal("this test needs root (to give a directory to another user), and CI runs as root")
			}
			t.Skip("needs root to give a directory to another user")
		}
		home := filepath.Join(t.TempDir(), "home")
		sessions := filepath.Join(home, "sessions")
		if err := os.MkdirAll(sessions, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(sessions, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		out := refuseToStart(t, home)
		if !strings.Contains(out, sessions) || !strings.Contains(out, "uid 65534") {
			t.Errorf("the refusal does not name the directory and its owner:\n%s", out)
		}
	})
	t.Run("wide modes are tightened", func(t *testing.T) {
		home := filepath.Join(t.TempDir(), "home")
		for _, d := range []string{"sessions", "jobs"} {
			if err := os.MkdirAll(filepath.Join(home, d), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(filepath.Join(home, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(home, "contributors.json"), []byte(`{"version":1,"contributors":[]}`), 0o644); err != nil {
			t.Fatal(err)
		}
		s := startServer(t, withHome(home))
		for name, want := range map[string]os.FileMode{"sessions": 0o700, "jobs": 0o700, "contributors.json": 0o600, "server.token": 0o600, ".": 0o700} {
			fi, err := os.Lstat(filepath.Join(s.Home, name))
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			if fi.Mode().Perm() != want {
				t.Errorf("%s has mode %v, want %v", name, fi.Mode().Perm(), want)
			}
		}
	})
}
