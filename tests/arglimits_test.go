package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOversizedExecutionsRefusedBeforeSpawn sends commands and environments
// the kernel cannot take (execve's E2BIG). Each is refused with problem+json
// 413 argument_too_large, whatever mix of characters makes the command too
// long (the contract's maxLength counts characters, the kernel bytes: one
// fault, one answer), nothing runs, and the server stays up;
// through the bash tool the model reads the same reason in an isError result.
func TestOversizedExecutionsRefusedBeforeSpawn(t *testing.T) {
	t.Parallel()
	// A body limit above the kernel's argument space (2 MiB with the usual
	// 8 MiB stack) lets a whole environment too big for execve arrive.
	s := startServer(t, withConfig("http:\n  maxBodyBytes: 8388608\n"))
	marker := filepath.Join(t.TempDir(), "ran")
	touch := "touch " + marker + " #"
	long := func(n int) string { return touch + strings.Repeat("a", n-len(touch)) }
	tests := []struct {
		name   string
		body   map[string]any
		status int
		code   string
	}{
		// Over the contract's maxLength (characters) too: the same answer.
		{"command over one argument's limit", map[string]any{"command": long(200_000)}, 413, "argument_too_large"},
		{"command just over one argument's limit", map[string]any{"command": long(131_072)}, 413, "argument_too_large"},
		// Bytes are what the kernel counts.
		{"command of multi-byte characters within maxLength but over the byte limit", map[string]any{"command": touch + strings.Repeat("é", 70_000)}, 413, "argument_too_large"},
		{"command of multi-byte characters one byte over", map[string]any{"command": long(131_072-2) + "é"}, 413, "argument_too_large"},
		{"env value over one argument's limit", map[string]any{"command": touch, "env": map[string]string{"BIG": strings.Repeat("v", 131_072)}}, 413, "argument_too_large"},
		{"environment over the whole argument space", map[string]any{"command": touch, "env": bigEnv(24, 120_000)}, 413, "argument_too_large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.body)
			if err != nil {
				t.Fatal(err)
			}
			st, ct, out := s.SendRaw(t, "POST", "/exec", b, nil)
			var p problem
			if err := json.Unmarshal(out, &p); err != nil {
				t.Fatalf("body %q: %v", out, err)
			}
			if st != tt.status || ct != "application/problem+json" || p.Code != tt.code {
				t.Fatalf("POST /exec = %d %s %+v, want %d problem+json %s", st, ct, p, tt.status, tt.code)
			}
			if _, err := os.Stat(marker); !os.IsNotExist(err) {
				t.Fatalf("an oversized command ran (marker: %v)", err)
			}
		})
	}

	// Just within the limit still runs.
	ok := "echo ok #" + strings.Repeat("a", 131_071-len("echo ok #"))
	var job struct {
		State  string
		Stdout struct{ Text string }
	}
	if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": ok}, &job); st != 200 || job.State != "exited" || job.Stdout.Text != "ok\n" {
		t.Fatalf("a command of exactly 131,071 bytes = %d %+v, want it to run", st, job)
	}
	okMixed := ok[:131_071-2] + "é"
	if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": okMixed}, &job); st != 200 || job.State != "exited" || job.Stdout.Text != "ok\n" {
		t.Fatalf("a command of exactly 131,071 bytes ending in a 2-byte character = %d %+v, want it to run", st, job)
	}

	var agent struct{ ID string }
	if st := s.DoJSON(t, "POST", "/agents", nil, &agent); st != 201 {
		t.Fatalf("create agent = %d", st)
	}
	r := s.callTool(t, agent.ID, "bash", map[string]any{"command": long(200_000)})
	if !r.IsError || !strings.Contains(r.Text, "at most 131071") {
		t.Fatalf("bash tool with an oversized command = %+v, want isError naming the limit", r)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("an oversized tool command ran (marker: %v)", err)
	}
	if st := s.DoJSON(t, "GET", "/healthz", nil, nil); st != 200 {
		t.Fatalf("healthz after oversized requests = %d", st)
	}
}

// bigEnv returns n variables of size bytes each.
func bigEnv(n, size int) map[string]string {
	env := make(map[string]string, n)
	for i := range n {
		env[fmt.Sprintf("BIG_%d", i)] = strings.Repeat("v", size)
	}
	return env
}

// TestNoSilentAdjustments: a foreground timeout over the maximum is refused
// with 422 timeout_too_long, not shortened; a plugin lease of 0 or below is
// 422 invalid_plugin, as the contract says, not a silent default.
func TestNoSilentAdjustments(t *testing.T) {
	t.Parallel()
	s := startServer(t, withConfig("jobs:\n  maxTimeoutMs: 5000\n"))
	marker := filepath.Join(t.TempDir(), "ran")
	tests := []struct {
		name, path string
		body       map[string]any
		status     int
		code       string
	}{
		{"foreground timeout over the maximum", "/exec", map[string]any{"command": "touch " + marker, "timeoutMs": 5001}, 422, "timeout_too_long"},
		{"plugin lease of 0", "/plugins", map[string]any{"name": "p", "leaseSeconds": 0}, 422, "invalid_plugin"},
		{"negative plugin lease", "/plugins", map[string]any{"name": "p", "leaseSeconds": -5}, 422, "invalid_plugin"},
		{"plugin lease over a day", "/plugins", map[string]any{"name": "p", "leaseSeconds": 86401}, 422, "invalid_plugin"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, _ := json.Marshal(tt.body)
			st, ct, out := s.SendRaw(t, "POST", tt.path, b, nil)
			var p problem
			_ = json.Unmarshal(out, &p)
			if st != tt.status || ct != "application/problem+json" || p.Code != tt.code {
				t.Fatalf("POST %s = %d %s %s, want %d %s", tt.path, st, ct, out, tt.status, tt.code)
			}
		})
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("a refused command ran (marker: %v)", err)
	}
	var plugins []any
	if st := s.DoJSON(t, "GET", "/plugins", nil, &plugins); st != 200 || len(plugins) != 0 {
		t.Fatalf("refused plugins were opened: %d %v", st, plugins)
	}
	// The maximum itself, and background jobs beyond it, still run.
	var job struct{ State string }
	if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": "true", "timeoutMs": 5000}, &job); st != 200 || job.State != "exited" {
		t.Fatalf("timeout at the maximum = %d %+v", st, job)
	}
	if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": "true", "timeoutMs": 60000, "background": true}, &job); st != 202 {
		t.Fatalf("background timeout over the foreground maximum = %d", st)
	}
}
