package tests

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

type limitedJob struct {
	ID       string  `json:"id"`
	State    string  `json:"state"`
	Signal   *string `json:"signal"`
	ExitCode *int    `json:"exitCode"`
	KilledBy *string `json:"killedBy"`
	Usage    *struct {
		CPUMs           int64  `json:"cpuMs"`
		PeakMemoryBytes *int64 `json:"peakMemoryBytes"`
	} `json:"usage"`
	Stdout output `json:"stdout"`
	Stderr output `json:"stderr"`
}

func (s *testServer) waitLimited(t *testing.T, id string) limitedJob {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var j limitedJob
		if st := s.doJSON(t, "GET", "/jobs/"+id+"?waitMs=5000", nil, &j); st != 200 {
			t.Fatalf("GET /jobs/%s = %d", id, st)
		}
		if j.State != "running" {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s still running after 60s", id)
		}
	}
}

// TestLimits runs a fork bomb and a memory hog beside an ordinary job: both
// are stopped by their limits and say why, the ordinary job and the server
// carry on. The pids limit comes from the configuration, the memory limit
// from the request.
func TestLimits(t *testing.T) {
	for _, mode := range []string{"cgroup", "group"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "cgroup" && os.Getuid() != 0 && os.Getenv("CI") != "true" {
				t.Skip("cgroup mode needs root and a writable cgroup v2 subtree")
			}
			testLimits(t, mode)
		})
	}
}

func testLimits(t *testing.T, mode string) {
	s := startServer(t, withConfig(fmt.Sprintf("jobs:\n  containment: %s\n  graceMs: 200\n  limits:\n    pids: 64\n", mode)))
	run := randomMark(t)
	t.Cleanup(func() { killPIDs(survivorsNow(run)) })
	start := func(body map[string]any) string {
		t.Helper()
		var j job
		if st := s.doJSON(t, "POST", "/exec", body, &j); st != 202 {
			t.Fatalf("exec %v = %d", body["command"], st)
		}
		return j.ID
	}
	bystander := start(map[string]any{"command": "sleep 2; echo fine", "background": true})
	// The hog holds ever more of /dev/zero: tail keeps its last 10 lines,
	// and there is no newline.
	// In cgroup mode the leader then sleeps, so it is alive when the limit
	// kills the job; in group mode tail fails and the job ends with it.
	after := "; sleep 30"
	if mode == "group" {
		after = ""
	}
	hog := start(map[string]any{
		"command":    fmt.Sprintf("export %s='%s/hog'; head -c 2000000000 /dev/zero | tail > /dev/null%s", markEnv, run, after),
		"background": true, "timeoutMs": 60000,
		"limits": map[string]any{"memoryBytes": 128 << 20},
	})

	if mode == "cgroup" {
		bomb := start(map[string]any{
			"command":    fmt.Sprintf("export %s='%s/bomb'; bomb() { bomb | bomb & }; bomb; sleep 30", markEnv, run),
			"background": true, "timeoutMs": 60000,
		})
		j := s.waitLimited(t, bomb)
		if j.KilledBy == nil || *j.KilledBy != "pids_limit" || j.State != "exited" || j.Signal == nil || *j.Signal != "SIGKILL" {
			t.Errorf("fork bomb ended %+v; want exited by SIGKILL, killedBy pids_limit", j)
		}
		if j.Usage == nil || j.Usage.CPUMs <= 0 {
			t.Errorf("fork bomb usage = %+v, want CPU time", j.Usage)
		}
		if left := survivors(run+"/bomb", 5*time.Second); len(left) > 0 {
			t.Errorf("%d process(es) of the fork bomb survived", len(left))
		}
	}

	j := s.waitLimited(t, hog)
	switch mode {
	case "cgroup":
		// dshd watches the group's memory and kills it past the limit.
		if j.KilledBy == nil || *j.KilledBy != "oom" || j.Signal == nil || *j.Signal != "SIGKILL" {
			t.Errorf("memory hog ended %+v; want SIGKILL, killedBy oom", j)
		}
	case "group":
		// RLIMIT_AS: tail's allocation fails and it says so.
		if j.KilledBy != nil || j.ExitCode == nil || *j.ExitCode == 0 || !strings.Contains(j.Stderr.Text, "memory") {
			t.Errorf("memory hog ended %+v; want tail to fail for lack of memory", j)
		}
	}
	if j.Usage == nil || j.Usage.CPUMs <= 0 {
		t.Errorf("memory hog usage = %+v, want CPU time", j.Usage)
	}

	if b := s.waitLimited(t, bystander); b.State != "exited" || b.ExitCode == nil || *b.ExitCode != 0 || b.Stdout.Text != "fine\n" || b.KilledBy != nil {
		t.Errorf("the ordinary job ended %+v; want exited 0 with its output", b)
	}
	var h struct{ Status string }
	if st := s.doJSON(t, "GET", "/healthz", nil, &h); st != 200 || h.Status != "ok" {
		t.Errorf("healthz after the limits hit = %d %+v", st, h)
	}
	if st := s.doJSON(t, "POST", "/exec", map[string]any{"command": "echo still here"}, nil); st != 200 {
		t.Errorf("a new job after the limits hit = %d", st)
	}
}
