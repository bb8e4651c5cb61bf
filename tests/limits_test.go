package tests

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/testenv"
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
		PeakPids        *int64 `json:"peakPids"`
	} `json:"usage"`
	Stdout output `json:"stdout"`
	Stderr output `json:"stderr"`
}

func (s *testServer) waitLimited(t *testing.T, id string) limitedJob {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var j limitedJob
		if st := s.DoJSON(t, "GET", "/jobs/"+id+"?waitMs=5000", nil, &j); st != 200 {
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
			if mode == "cgroup" && os.Getuid() != 0 {
				testenv.Need(t, "cgroup mode needs root and a writable cgroup v2 subtree")
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
		if st := s.DoJSON(t, "POST", "/exec", body, &j); st != 202 {
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
		// The kernel (memory.max, or a hybrid host's v1 memory group)
		// OOM-kills the hog and dshd ends the job; without a memory
		// controller dshd's watcher kills it past the limit.
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
	if st := s.DoJSON(t, "GET", "/healthz", nil, &h); st != 200 || h.Status != "ok" {
		t.Errorf("healthz after the limits hit = %d %+v", st, h)
	}
	if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": "echo still here"}, nil); st != 200 {
		t.Errorf("a new job after the limits hit = %d", st)
	}
}

// agentLimits is the limits part of an agent or a job record.
type agentLimits struct {
	Pids        *int64   `json:"pids"`
	MemoryBytes *int64   `json:"memoryBytes"`
	CPU         *float64 `json:"cpu"`
	Enforcement *struct {
		Pids        string `json:"pids"`
		MemoryBytes string `json:"memoryBytes"`
		CPU         string `json:"cpu"`
	} `json:"enforcement"`
}

func (l *agentLimits) String() string {
	if l == nil {
		return "<none>"
	}
	s := fmt.Sprintf("pids %v memoryBytes %v cpu %v", deref(l.Pids), deref(l.MemoryBytes), deref(l.CPU))
	if l.Enforcement != nil {
		s += fmt.Sprintf(" enforced %+v", *l.Enforcement)
	}
	return s
}

// TestAgentLimits: the harness sets limits on an agent at creation; a
// spawned child inherits them and may only tighten them (422
// limits_looser otherwise), as may an /exec of the agent; every job the
// agent's calls start, model tool calls included, runs under them, and the
// job record says which limits applied and how this host enforced each.
// They survive a restart. In cgroup mode the kernel (a delegated
// controller, or on a hybrid host like this one a v1 group) or, without
// either, dshd's watcher ends a fork bomb and a memory hog; in group mode
// memory is RLIMIT_AS and the process limit is not enforced.
func TestAgentLimits(t *testing.T) {
	for _, mode := range []string{"cgroup", "group"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "cgroup" && os.Getuid() != 0 {
				testenv.Need(t, "cgroup mode needs root and a writable cgroup v2 subtree")
			}
			testAgentLimits(t, mode)
		})
	}
}

func testAgentLimits(t *testing.T, mode string) {
	cfg := fmt.Sprintf("jobs:\n  containment: %s\n  graceMs: 200\n  limits:\n    pids: 256\n", mode)
	s := startServer(t, withConfig(cfg))
	run := randomMark(t)
	t.Cleanup(func() { killPIDs(survivorsNow(run)) })

	var health struct {
		Details struct {
			Containment struct {
				Mode          string            `json:"mode"`
				Controllers   []string          `json:"controllers"`
				V1Controllers []string          `json:"v1Controllers"`
				Limits        map[string]string `json:"limits"`
			} `json:"containment"`
		} `json:"details"`
	}
	if st := s.DoJSON(t, "GET", "/healthz", nil, &health); st != 200 || health.Details.Containment.Mode != mode {
		t.Fatalf("healthz = %d, containment %+v; want mode %s", st, health.Details.Containment, mode)
	}
	// How this host enforces each limit: the kernel where the controller
	// is delegated, else dshd's watcher (cgroup mode: cgroup.freeze for the
	// CPU share, where the kernel has it) or RLIMIT_AS / nothing (group
	// mode). /healthz says so, and every job below must say the same.
	delegated := func(c string) bool { return slices.Contains(health.Details.Containment.Controllers, c) }
	want := map[string]string{"pids": "none", "memoryBytes": "rlimit", "cpu": "none"}
	if mode == "cgroup" {
		want = map[string]string{"pids": "watcher", "memoryBytes": "watcher", "cpu": "watcher"}
		if got := health.Details.Containment.Limits["cpu"]; got == "none" {
			t.Logf("this host cannot freeze a cgroup (no cgroup.freeze before Linux 5.2): cpu is not enforced")
			want["cpu"] = "none"
		}
		for name, ctrl := range map[string]string{"pids": "pids", "memoryBytes": "memory", "cpu": "cpu"} {
			if delegated(ctrl) {
				want[name] = "cgroup"
			} else if slices.Contains(health.Details.Containment.V1Controllers, ctrl) {
				want[name] = "cgroup_v1" // a hybrid host's v1 hierarchy
			}
		}
	}
	if !maps.Equal(health.Details.Containment.Limits, want) {
		t.Errorf("healthz containment.limits = %v, want %v", health.Details.Containment.Limits, want)
	}

	type agent struct {
		ID     string       `json:"id"`
		Limits *agentLimits `json:"limits"`
	}
	var root agent
	if st := s.DoJSON(t, "POST", "/agents", map[string]any{"limits": map[string]any{"pids": 32, "memoryBytes": 128 << 20}}, &root); st != 201 {
		t.Fatalf("POST /agents with limits = %d", st)
	}
	if l := root.Limits; l == nil || deref(l.Pids) != int64(32) || deref(l.MemoryBytes) != int64(128<<20) || l.CPU != nil {
		t.Errorf("root agent limits = %v, want pids 32, memoryBytes 128 MiB", l)
	}
	var prob struct {
		Status int    `json:"status"`
		Code   string `json:"code"`
	}
	if st := s.DoJSON(t, "POST", "/agents/"+root.ID+"/spawn", map[string]any{"limits": map[string]any{"pids": 64}}, &prob); st != 422 || prob.Code != "limits_looser" {
		t.Errorf("spawn with more pids than the parent = %d %+v, want 422 limits_looser", st, prob)
	}
	var child agent
	if st := s.DoJSON(t, "POST", "/agents/"+root.ID+"/spawn", map[string]any{"limits": map[string]any{"pids": 16, "cpu": 0.5}}, &child); st != 201 {
		t.Fatalf("spawn with fewer pids = %d", st)
	}
	if l := child.Limits; l == nil || deref(l.Pids) != int64(16) || deref(l.MemoryBytes) != int64(128<<20) || deref(l.CPU) != 0.5 {
		t.Errorf("child limits = %v, want pids 16, the parent's memory, cpu 0.5", l)
	}
	prob.Code = ""
	if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": "true", "agentId": child.ID, "limits": map[string]any{"memoryBytes": 256 << 20}}, &prob); st != 422 || prob.Code != "limits_looser" {
		t.Errorf("exec with more memory than the agent = %d %+v, want 422 limits_looser", st, prob)
	}

	checkJob := func(id string, wantPids int64) limitedJob {
		t.Helper()
		j := s.waitLimited(t, id)
		var rec struct {
			Limits *agentLimits `json:"limits"`
		}
		if st := s.DoJSON(t, "GET", "/jobs/"+id, nil, &rec); st != 200 {
			t.Fatalf("GET /jobs/%s = %d", id, st)
		}
		l := rec.Limits
		if l == nil || deref(l.Pids) != wantPids || deref(l.MemoryBytes) != int64(128<<20) || deref(l.CPU) != 0.5 || l.Enforcement == nil ||
			l.Enforcement.Pids != want["pids"] || l.Enforcement.MemoryBytes != want["memoryBytes"] || l.Enforcement.CPU != want["cpu"] {
			t.Errorf("job %s limits = %v; want pids %d, memoryBytes 128 MiB, cpu 0.5, enforced %v", id, l, wantPids, want)
		}
		return j
	}

	// A memory hog started by the harness as the child: the agent's memory
	// limit applies although the request names only a tighter pids limit.
	after := "; sleep 30"
	if mode == "group" {
		after = ""
	}
	var hog job
	if st := s.DoJSON(t, "POST", "/exec", map[string]any{
		"command":    fmt.Sprintf("export %s='%s/hog'; head -c 2000000000 /dev/zero | tail > /dev/null%s", markEnv, run, after),
		"agentId":    child.ID,
		"background": true, "timeoutMs": 60000,
		"limits": map[string]any{"pids": 12},
	}, &hog); st != 202 {
		t.Fatalf("exec the memory hog = %d", st)
	}
	j := checkJob(hog.ID, 12)
	switch mode {
	case "cgroup":
		if j.KilledBy == nil || *j.KilledBy != "oom" || j.Signal == nil || *j.Signal != "SIGKILL" {
			t.Errorf("memory hog ended %+v; want SIGKILL, killedBy oom", j)
		}
	case "group":
		if j.KilledBy != nil || j.ExitCode == nil || *j.ExitCode == 0 || !strings.Contains(j.Stderr.Text, "memory") {
			t.Errorf("memory hog ended %+v; want tail to fail for lack of memory", j)
		}
	}

	// A fork bomb sent by the model through the bash tool: the model
	// cannot name limits, the agent's apply. Only where a process limit is
	// enforced: in group mode it would take the host down.
	if mode == "cgroup" {
		var res struct {
			IsError bool   `json:"isError"`
			Text    string `json:"text"`
			JobID   string `json:"jobId"`
		}
		if st := s.DoJSON(t, "POST", "/agents/"+child.ID+"/tools/bash", map[string]any{"arguments": map[string]any{
			"command": fmt.Sprintf("export %s='%s/bomb'; bomb() { bomb | bomb & }; bomb; sleep 30", markEnv, run),
			"timeout": 60000, "limits": map[string]any{"pids": 100000},
		}}, &res); st != 200 || res.JobID == "" {
			t.Fatalf("bash tool call = %d %+v", st, res)
		}
		j := checkJob(res.JobID, 16)
		if j.KilledBy == nil || *j.KilledBy != "pids_limit" {
			t.Errorf("fork bomb ended %+v; want killedBy pids_limit", j)
		}
		if left := survivors(run+"/bomb", 5*time.Second); len(left) > 0 {
			t.Errorf("%d process(es) of the fork bomb survived", len(left))
		}
	}

	// A CPU limit tighter than the agent's: a busy loop gets about its share
	// (cgroup mode; in group mode nothing enforces it, and the record says
	// so). An unlimited twin runs beside it for comparison.
	if want["cpu"] != "none" {
		busy := "end=$((SECONDS+3)); while [ $SECONDS -lt $end ]; do :; done; echo done"
		var limitedCPU, twin job
		if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": busy, "agentId": child.ID, "background": true, "limits": map[string]any{"cpu": 0.1}}, &limitedCPU); st != 202 {
			t.Fatalf("exec the CPU-limited loop = %d", st)
		}
		if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": busy, "background": true}, &twin); st != 202 {
			t.Fatalf("exec the unlimited loop = %d", st)
		}
		l, u := s.waitLimited(t, limitedCPU.ID), s.waitLimited(t, twin.ID)
		var rec struct {
			DurationMs int64        `json:"durationMs"`
			Limits     *agentLimits `json:"limits"`
		}
		s.DoJSON(t, "GET", "/jobs/"+limitedCPU.ID, nil, &rec)
		if l.ExitCode == nil || *l.ExitCode != 0 || l.Stdout.Text != "done\n" || l.Usage == nil || u.Usage == nil {
			t.Fatalf("CPU-limited loop ended %+v (twin %+v); want exit 0 with its output", l, u)
		}
		if rec.Limits == nil || deref(rec.Limits.CPU) != 0.1 || rec.Limits.Enforcement == nil || rec.Limits.Enforcement.CPU != want["cpu"] {
			t.Errorf("CPU-limited job limits = %v, want cpu 0.1 enforced by %s", rec.Limits, want["cpu"])
		}
		// A tenth of the wall time it ran, plus a watch interval of CPU and
		// the banked burst (10 ms), plus 50 ms for reading it late.
		bound := rec.DurationMs/10 + 110
		if l.Usage.CPUMs > bound {
			t.Errorf("a loop limited to 0.1 CPU used %d ms of CPU in %d ms, want at most %d", l.Usage.CPUMs, rec.DurationMs, bound)
		}
		t.Logf("CPU in %d ms: limited to 0.1 CPU %d ms, unlimited twin %d ms", rec.DurationMs, l.Usage.CPUMs, u.Usage.CPUMs)
		if u.Usage.CPUMs < 2*bound {
			t.Logf("the machine is too loaded for the unlimited twin to show the difference (it got %d ms)", u.Usage.CPUMs)
		}
	}

	// The limits are in the agent's header: a restarted server keeps them.
	s.stop(t)
	s2 := startServer(t, withHome(s.Home), withConfig(cfg))
	var again agent
	if st := s2.DoJSON(t, "GET", "/agents/"+child.ID, nil, &again); st != 200 || again.Limits == nil || deref(again.Limits.Pids) != int64(16) || deref(again.Limits.MemoryBytes) != int64(128<<20) {
		t.Errorf("child after restart = %d, limits %v; want pids 16, memoryBytes 128 MiB", st, again.Limits)
	}
	prob.Code = ""
	if st := s2.DoJSON(t, "POST", "/exec", map[string]any{"command": "true", "agentId": child.ID, "limits": map[string]any{"pids": 17}}, &prob); st != 422 || prob.Code != "limits_looser" {
		t.Errorf("exec with more pids than the agent after restart = %d %+v, want 422 limits_looser", st, prob)
	}
}
