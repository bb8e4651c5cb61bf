package tests

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/testenv"

	"github.com/dshd/dshd/internal/apitest"
	"github.com/dshd/dshd/internal/proctest"
)

// TestTokenNeverReachesChildren puts the server token in variables whose
// names match no credential pattern (the server's own environment, the
// config's env.set, a request's explicit env) and checks that neither a
// command nor a hook sees it, whatever the name
// (docs/design.md#invariants, invariant 11).
func TestTokenNeverReachesChildren(t *testing.T) {
	t.Parallel()
	const token = "d2f1c0b7a6e5d4c3b2a1f0e9d8c7b6a5"
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(dir, "home")
	hookEnv := filepath.Join(dir, "hook.env")
	apitest.WriteJSON(t, filepath.Join(home, "hooks", "claude-code.json"), map[string]any{"hooks": map[string]any{
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
	if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": "env -0", "env": map[string]string{"EXPLICIT_AUTH": token}}, &j); st != 200 {
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
	if st := s.DoJSON(t, "POST", "/agents", map[string]any{}, &a); st != 201 {
		t.Fatalf("create agent = %d", st)
	}
	var res struct{ IsError bool }
	if st := s.DoJSON(t, "POST", "/agents/"+a.ID+"/tools/bash", map[string]any{"arguments": map[string]any{"command": "true"}}, &res); st != 200 || res.IsError {
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
	t.Parallel()
	home := filepath.Join(t.TempDir(), "home")
	s := startServer(t, withHome(home))
	if st := s.DoJSON(t, "POST", "/contributors", map[string]any{
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
	if st := s.DoJSON(t, "GET", "/contributors/keep.me", nil, nil); st != 200 {
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
	if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": cmd, "background": true}, &j); st != 202 {
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
	t.Parallel()
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
	checkNoCgroupLeft(t, home)
	return string(out)
}

// TestUnsafeHomeRefused: links and foreign entries where dshd writes in its
// home make it refuse to start, naming the path, and leave their targets
// untouched; modes that are too wide are tightened.
func TestUnsafeHomeRefused(t *testing.T) {
	t.Parallel()
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
			testenv.Need(t, "needs root to give a directory to another user")
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

// spoolJob is the part of a job these tests read about dropped output.
type spoolJob struct {
	ID     string `json:"id"`
	State  string `json:"state"`
	Stdout struct {
		TotalBytes    int64  `json:"totalBytes"`
		DroppedBytes  int64  `json:"droppedBytes"`
		DroppedReason string `json:"droppedReason"`
	} `json:"stdout"`
}

// metric returns the value of the first /metrics sample whose line starts
// with prefix (name and labels), or -1.
func (s *testServer) metric(t *testing.T, prefix string) float64 {
	t.Helper()
	resp := s.Do(t, "GET", "/metrics", nil)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /metrics = %d %v", resp.StatusCode, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, prefix+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			return v
		}
	}
	return -1
}

// TestSpoolBudget: the spools of all jobs share one budget. A stream that
// needs room evicts finished jobs, oldest first; when only running jobs
// hold the budget, its further bytes are dropped with a reason. /metrics
// reports the budget, its use, evictions and dropped bytes.
func TestSpoolBudget(t *testing.T) {
	const (
		budget = 3 << 20
		size   = 2000000
	)
	s := startServer(t, withConfig(fmt.Sprintf("jobs:\n  captureBytes: 65536\n  spoolMaxBytes: %d\n  spoolTotalBytes: %d\n", 2<<20, budget)))
	run := func(cmd string, background bool) spoolJob {
		t.Helper()
		var j spoolJob
		st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": cmd, "background": background}, &j)
		if st != 200 && st != 202 {
			t.Fatalf("exec %q = %d", cmd, st)
		}
		return j
	}
	get := func(id string) (spoolJob, int) {
		var j spoolJob
		st := s.DoJSON(t, "GET", "/jobs/"+id, nil, &j)
		return j, st
	}
	head := fmt.Sprintf("head -c %d /dev/zero", size)

	a := run(head, false)
	b := run(head, false)
	if _, st := get(a.ID); st != 404 {
		t.Errorf("the oldest finished job is still recorded (%d) though the budget needed its room", st)
	}
	if n := len(s.rawOutput(t, b.ID)); n != size {
		t.Errorf("job b's whole output is %d bytes readable, want %d", n, size)
	}

	// A running job holds 2 MB of the 3 MiB; the next one evicts b and gets
	// the rest, then drops.
	c := run(head+"; exec sleep 60", true)
	deadline := time.Now().Add(30 * time.Second)
	for {
		j, st := get(c.ID)
		if st != 200 {
			t.Fatalf("GET running job = %d", st)
		}
		if j.Stdout.TotalBytes == size {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("running job wrote %d bytes within 30s, want %d", j.Stdout.TotalBytes, size)
		}
		time.Sleep(20 * time.Millisecond)
	}
	d := run(head, false)
	if _, st := get(b.ID); st != 404 {
		t.Errorf("finished job b is still recorded (%d) though the budget needed its room", st)
	}
	d, _ = get(d.ID)
	wantKept := int64(budget - size)
	if d.Stdout.TotalBytes != size || d.Stdout.DroppedBytes != size-wantKept || d.Stdout.DroppedReason != "spool_budget" {
		t.Errorf("job d stdout: total %d dropped %d (%q), want total %d dropped %d (spool_budget)",
			d.Stdout.TotalBytes, d.Stdout.DroppedBytes, d.Stdout.DroppedReason, size, size-wantKept)
	}
	if n := int64(len(s.rawOutput(t, d.ID))); n != wantKept {
		t.Errorf("job d has %d bytes readable, want %d", n, wantKept)
	}
	if c, _ := get(c.ID); c.State != "running" || c.Stdout.DroppedBytes != 0 {
		t.Errorf("the running job was touched: state %s dropped %d", c.State, c.Stdout.DroppedBytes)
	}
	for prefix, want := range map[string]float64{
		"dshd_spool_budget_bytes":                                budget,
		"dshd_spool_bytes":                                       budget,
		"dshd_spool_evicted_jobs_total":                          2,
		`dshd_output_dropped_bytes_total{reason="spool_budget"}`: float64(size - wantKept),
	} {
		if got := s.metric(t, prefix); got != want {
			t.Errorf("%s = %v, want %v", prefix, got, want)
		}
	}
	var du int64
	des, err := os.ReadDir(filepath.Join(s.Home, "jobs"))
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		// The spools only: jobs/ also holds the index of running jobs.
		if !de.Type().IsRegular() || !strings.HasPrefix(de.Name(), "job_") {
			continue
		}
		if fi, err := de.Info(); err == nil {
			du += fi.Size()
		}
	}
	if du > budget {
		t.Errorf("spool files hold %d bytes, over the %d budget", du, budget)
	}
	resp := s.Do(t, "DELETE", "/jobs/"+c.ID, nil)
	resp.Body.Close()
}

// smallDisk mounts a tmpfs of size bytes for the test and unmounts it at
// cleanup (registered first, so it runs after a server on it has stopped).
// It needs root; elsewhere the test is skipped, except in CI (testenv).
func smallDisk(t *testing.T, size int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Need(t, "needs root to mount a small tmpfs for a real full disk")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		testenv.Need(t, "cannot mount a tmpfs here (%v): the host lacks the feature", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fillDisk writes a file in dir until the file system is full and returns
// its path.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "filler")
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	for i := 0; i < 1<<16; i++ {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill disk: %v", err)
			}
			return p
		}
	}
	t.Fatal("the disk did not fill up")
	return ""
}

// checkTranscript fails unless every line of the agent's transcript file
// is a JSON object and event seqs run 1, 2, 3… without a gap.
func checkTranscript(t *testing.T, s *testServer, agentID string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.Home, "sessions", agentID+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	return checkTranscriptBytes(t, b)
}

// checkTranscriptBytes is checkTranscript for a transcript read otherwise.
func checkTranscriptBytes(t *testing.T, b []byte) int {
	t.Helper()
	if len(b) == 0 || b[len(b)-1] != '\n' {
		t.Fatalf("transcript does not end with a whole line: %q", b[max(0, len(b)-80):])
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	for i, line := range lines {
		var ev struct {
			Type string `json:"type"`
			Seq  int    `json:"seq"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("transcript line %d is not JSON (%v): %q", i+1, err, line)
		}
		if i > 0 && ev.Seq != i {
			t.Fatalf("transcript line %d has seq %d, want %d", i+1, ev.Seq, i)
		}
	}
	return len(lines) - 1
}

// TestDiskFull runs dshd on a real, small file system and fills it: output
// spools, transcripts and the contributors file hit ENOSPC. The server
// stays up, answers 507 insufficient_storage where it could not store
// what a request asked for, drops spool bytes with reason disk_full, and
// corrupts nothing already stored; once room is back everything works.
func TestDiskFull(t *testing.T) {
	home := smallDisk(t, 4<<20)
	s := startServer(t, withHome(home))
	var a agent
	if st := s.DoJSON(t, "POST", "/agents", map[string]any{}, &a); st != 201 {
		t.Fatalf("create agent = %d", st)
	}
	register := func(name string) int {
		return s.DoJSON(t, "POST", "/contributors", map[string]any{
			"name": name, "keys": []map[string]string{{"key": "DSH_" + strings.ToUpper(name), "description": "a test fact"}},
			"resolver": map[string]any{"kind": "static", "values": map[string]string{"DSH_" + strings.ToUpper(name): "v"}},
		}, nil)
	}
	if st := register("first"); st != 201 {
		t.Fatalf("register = %d", st)
	}
	state, err := os.ReadFile(filepath.Join(home, "contributors.json"))
	if err != nil {
		t.Fatal(err)
	}
	toolCall := func() (int, string) {
		resp := s.Do(t, "POST", "/agents/"+a.ID+"/tools/bash", map[string]any{"arguments": map[string]any{"command": "echo " + strings.Repeat("x", 300)}})
		defer resp.Body.Close()
		var p struct{ Code string }
		_ = json.NewDecoder(resp.Body).Decode(&p)
		return resp.StatusCode, p.Code
	}
	if st, _ := toolCall(); st != 200 {
		t.Fatalf("tool call = %d", st)
	}

	filler := fillDisk(t, home)

	// Output spool: the job runs to its end; what did not fit is dropped.
	var j spoolJob
	if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": "head -c 1000000 /dev/zero"}, &j); st != 200 {
		t.Fatalf("exec on a full disk = %d", st)
	}
	if j.State != "exited" || j.Stdout.TotalBytes != 1000000 || j.Stdout.DroppedBytes == 0 || j.Stdout.DroppedReason != "disk_full" {
		t.Errorf("job on a full disk: state %s total %d dropped %d (%q), want exited, 1000000, some dropped (disk_full)",
			j.State, j.Stdout.TotalBytes, j.Stdout.DroppedBytes, j.Stdout.DroppedReason)
	}
	if n := int64(len(s.rawOutput(t, j.ID))); n != 1000000-j.Stdout.DroppedBytes {
		t.Errorf("readable output %d bytes, want total minus dropped (%d)", n, 1000000-j.Stdout.DroppedBytes)
	}

	// Contributors file: refused with a code, nothing changed.
	var p struct{ Code string }
	if st := s.DoJSON(t, "POST", "/contributors", map[string]any{
		"name": "second", "keys": []map[string]string{{"key": "DSH_SECOND", "description": "a test fact"}},
		"resolver": map[string]any{"kind": "static", "values": map[string]string{"DSH_SECOND": "v"}},
	}, &p); st != 507 || p.Code != "insufficient_storage" {
		t.Errorf("register on a full disk = %d %q, want 507 insufficient_storage", st, p.Code)
	}
	if st := s.DoJSON(t, "GET", "/contributors/second", nil, nil); st != 404 {
		t.Errorf("a contributor that could not be saved is registered (%d)", st)
	}
	if now, err := os.ReadFile(filepath.Join(home, "contributors.json")); err != nil || !bytes.Equal(now, state) {
		t.Errorf("contributors file changed on a failed save: %v", err)
	}
	if m, _ := filepath.Glob(filepath.Join(home, ".contributors.json.*.tmp")); len(m) > 0 {
		t.Errorf("temporary files left behind: %v", m)
	}

	// Transcripts: appends fit in the last page for a while, then fail
	// whole; every answer is 200 or 507 with its code.
	var refused int
	for i := 0; i < 40 && refused == 0; i++ {
		switch st, code := toolCall(); {
		case st == 507 && code == "insufficient_storage":
			refused++
		case st != 200:
			t.Fatalf("tool call on a full disk = %d %q, want 200 or 507 insufficient_storage", st, code)
		}
	}
	if refused == 0 {
		t.Error("40 tool calls on a full disk were all stored")
	}
	if st := s.DoJSON(t, "POST", "/agents", map[string]any{}, &p); st != 507 || p.Code != "insufficient_storage" {
		t.Errorf("create agent on a full disk = %d %q, want 507 insufficient_storage", st, p.Code)
	}
	checkTranscript(t, s, a.ID)
	if got := s.metric(t, `dshd_output_dropped_bytes_total{reason="disk_full"}`); got <= 0 {
		t.Errorf("dropped disk_full bytes metric = %v, want > 0", got)
	}

	// Room again: everything works, and the transcript is still whole.
	if err := os.Remove(filepath.Join(filler)); err != nil {
		t.Fatal(err)
	}
	if st := register("second"); st != 201 {
		t.Errorf("register after freeing room = %d", st)
	}
	before := checkTranscript(t, s, a.ID)
	if st, _ := toolCall(); st != 200 {
		t.Errorf("tool call after freeing room = %d", st)
	}
	if after := checkTranscript(t, s, a.ID); after != before+2 {
		t.Errorf("transcript has %d events after one more call, want %d", after, before+2)
	}
}
