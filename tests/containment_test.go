package tests

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/testenv"
)

// escapes are the ways a command leaves processes behind. Each runs an
// escaping `sleep` and keeps its leader busy in a second one, so every kill
// path finds the job running.
var escapes = []struct {
	name string
	cmd  string
	// traceable is false where the escaping process's parent exits at once:
	// without cgroups nothing ties it to its job any more, and it dies at
	// shutdown.
	traceable bool
}{
	{"background", `sleep 300 & sleep 300`, true},
	{"nohup", `nohup sleep 300 >/dev/null 2>&1 & sleep 300`, true},
	{"disown", `sleep 300 & disown; sleep 300`, true},
	{"double fork", `(setsid sh -c 'sleep 300 &' &); sleep 300`, false},
	{"setsid", `setsid sleep 300 & sleep 300`, true},
	{"setsid -f", `setsid -f sleep 300; sleep 300`, false},
	{"trap TERM", `trap '' TERM; sh -c "trap '' TERM; sleep 300" & sleep 300`, true},
}

// markEnv is the variable only this test sets; survivors are found by it in
// /proc/<pid>/environ, which every descendant inherits.
const markEnv = "DSHD_CONTAINMENT_TEST_MARK"

// marked returns the live processes whose environment carries a mark
// starting with prefix, and how many of them are `sleep`. Zombies have an
// empty environ and do not count: they run nothing.
func marked(prefix string) (pids []int, sleeps int) {
	entries, _ := os.ReadDir("/proc")
	needle := []byte(markEnv + "=" + prefix)
	for _, de := range entries {
		pid, err := strconv.Atoi(de.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", de.Name(), "environ"))
		if err != nil || !bytes.Contains(env, needle) {
			continue
		}
		pids = append(pids, pid)
		if comm, _ := os.ReadFile(filepath.Join("/proc", de.Name(), "comm")); strings.TrimSpace(string(comm)) == "sleep" {
			sleeps++
		}
	}
	return pids, sleeps
}

// waitSleeps waits up to 15s until n of the processes marked prefix run
// sleep, and returns the marked pids and how many run sleep. A command's
// background child is bash, then nohup, before it is sleep: the command
// can return before its child has exec'd.
func waitSleeps(prefix string, n int) (pids []int, sleeps int) {
	deadline := time.Now().Add(15 * time.Second)
	for {
		pids, sleeps = marked(prefix)
		if sleeps >= n || time.Now().After(deadline) {
			return pids, sleeps
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitMarked waits until the job marked mark runs both of its sleeps.
func waitMarked(t testing.TB, mark string) {
	t.Helper()
	if !started(mark) {
		t.Fatalf("job %s did not start its two sleeps within 15s", mark)
	}
}

// started reports whether the job marked mark runs both of its sleeps
// within 15s.
func started(mark string) bool {
	_, n := waitSleeps(mark+";", 2)
	return n >= 2
}

// survivors waits up to d for the processes marked with prefix to go and
// returns those still alive then.
func survivors(prefix string, d time.Duration) []int {
	deadline := time.Now().Add(d)
	for {
		pids, _ := marked(prefix)
		if len(pids) == 0 || time.Now().After(deadline) {
			return pids
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func killPIDs(pids []int) {
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

func randomMark(t testing.TB) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// TestContainment runs every escape through every kill path — timeout,
// cancel, tool timeout, job_kill and shutdown — and counts the processes
// left, with a cgroup per job and with the process-group fallback forced,
// unconfined and in a workspace-write sandbox with the network off (the
// namespaces mechanism: the sandboxed bash is the job's leader).
func TestContainment(t *testing.T) {
	for _, mode := range []string{"cgroup", "group"} {
		for _, sandboxed := range []bool{false, true} {
			name := mode
			if sandboxed {
				name += "/sandboxed"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel() // each its own server, home and mark
				if mode == "cgroup" && os.Getuid() != 0 {
					testenv.Need(t, "cgroup mode needs root and a writable cgroup v2 subtree")
				}
				testContainment(t, mode, sandboxed)
			})
		}
	}
}

func testContainment(t *testing.T, mode string, sandboxed bool) {
	const grace = 300 * time.Millisecond
	config := fmt.Sprintf("jobs:\n  graceMs: %d\n  containment: %s\n", grace.Milliseconds(), mode)
	if sandboxed {
		config += "sandbox:\n  policy: workspace-write\n  network: \"off\"\n  mechanism: namespaces\n"
	}
	s := startServer(t, withConfig(config))
	if sandboxed {
		needSandbox(t, s)
	}
	run := randomMark(t)
	t.Cleanup(func() { killPIDs(survivorsNow(run)) })

	var health struct {
		Details struct {
			Containment struct {
				Mode      string  `json:"mode"`
				Requested string  `json:"requested"`
				Reason    *string `json:"reason"`
				Subreaper bool    `json:"subreaper"`
			} `json:"containment"`
		} `json:"details"`
	}
	if st := s.DoJSON(t, "GET", "/healthz", nil, &health); st != 200 {
		t.Fatalf("healthz = %d", st)
	}
	if c := health.Details.Containment; c.Mode != mode || c.Requested != mode || (mode == "group") != c.Subreaper || (mode == "group") != (c.Reason != nil) {
		t.Fatalf("healthz containment = %+v, want mode %s", c, mode)
	}

	var a agent
	if st := s.DoJSON(t, "POST", "/agents", map[string]any{}, &a); st != 201 && st != 200 {
		t.Fatalf("create agent = %d", st)
	}
	mark := func(path, escape string) string { return run + "/" + path + "/" + escape }
	command := func(m, cmd string) string { return "export " + markEnv + "='" + m + ";'; " + cmd }

	paths := []struct {
		name string
		// kill starts the job marked m running cmd and ends it through the
		// path, returning once the job is reported finished.
		kill func(t *testing.T, m, cmd string)
	}{
		{"timeout", func(t *testing.T, m, cmd string) {
			var j job
			if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": command(m, cmd), "background": true, "timeoutMs": 3000}, &j); st != 202 {
				t.Fatalf("exec = %d", st)
			}
			waitMarked(t, m)
			if j = s.waitJob(t, j.ID); j.State != "timed_out" {
				t.Errorf("state = %q, want timed_out", j.State)
			}
		}},
		{"cancel", func(t *testing.T, m, cmd string) {
			var j job
			if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": command(m, cmd), "background": true}, &j); st != 202 {
				t.Fatalf("exec = %d", st)
			}
			waitMarked(t, m)
			resp := s.Do(t, "DELETE", "/jobs/"+j.ID, nil)
			resp.Body.Close()
			if j = s.waitJob(t, j.ID); j.State != "cancelled" {
				t.Errorf("state = %q, want cancelled", j.State)
			}
		}},
		{"tool timeout", func(t *testing.T, m, cmd string) {
			ready := make(chan bool, 1)
			go func() { ready <- started(m) }()
			r := s.callTool(t, a.ID, "bash", map[string]any{"command": command(m, cmd), "timeout": 3000})
			if !<-ready {
				t.Fatalf("job %s did not start its two sleeps within 15s", m)
			}
			if !strings.Contains(r.Text, "timed out") {
				t.Errorf("tool result %q does not say it timed out", r.Text)
			}
		}},
		{"job_kill", func(t *testing.T, m, cmd string) {
			r := s.callTool(t, a.ID, "bash", map[string]any{"command": command(m, cmd), "run_in_background": true})
			if r.JobID == "" {
				t.Fatalf("background tool call gave no job id: %+v", r)
			}
			waitMarked(t, m)
			s.callTool(t, a.ID, "job_kill", map[string]any{"jobId": r.JobID})
			if j := s.waitJob(t, r.JobID); j.State != "cancelled" {
				t.Errorf("state = %q, want cancelled", j.State)
			}
		}},
	}
	// Every path and escape at once (each job has its own mark); the group
	// returns when all have, before shutdown.
	t.Run("kill", func(t *testing.T) {
		for _, p := range paths {
			t.Run(p.name, func(t *testing.T) {
				t.Parallel()
				for _, e := range escapes {
					t.Run(e.name, func(t *testing.T) {
						t.Parallel()
						m := mark(p.name, e.name)
						p.kill(t, m, e.cmd)
						left := survivors(m+";", grace+3*time.Second)
						switch {
						case len(left) == 0:
						case mode == "group" && !e.traceable:
							t.Logf("%d process(es) left until shutdown (no cgroup ties them to the job)", len(left))
						default:
							t.Errorf("%d process(es) survived the %s: %v", len(left), p.name, left)
						}
					})
				}
			})
		}
	})

	t.Run("shutdown", func(t *testing.T) {
		for _, e := range escapes {
			m := mark("shutdown", e.name)
			var j job
			if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": command(m, e.cmd), "background": true}, &j); st != 202 {
				t.Fatalf("exec = %d", st)
			}
			waitMarked(t, m)
		}
		s.stop(t)
		// Shutdown leaves nothing of any path or escape, traceable or not.
		if left := survivors(run+"/", 3*time.Second); len(left) > 0 {
			t.Errorf("%d process(es) survived shutdown: %v", len(left), left)
		}
	})
}

func survivorsNow(prefix string) []int {
	pids, _ := marked(prefix)
	return pids
}
