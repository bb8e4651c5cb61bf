package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/testenv"
)

// healthV1 is what /healthz says of the cgroup v1 groups.
type healthV1 struct {
	Details struct {
		Containment struct {
			Mode          string            `json:"mode"`
			Controllers   []string          `json:"controllers"`
			V1Controllers []string          `json:"v1Controllers"`
			Limits        map[string]string `json:"limits"`
		} `json:"containment"`
	} `json:"details"`
}

// startHybridServer starts a server in cgroup mode whose sandboxes use
// mech, and skips (fails under CI) unless this is a hybrid host whose
// cgroup v1 hierarchies give jobs the pids and memory controllers that
// cgroup2 lacks.
func startHybridServer(t *testing.T, mech string) *testServer {
	t.Helper()
	s := startServer(t, withConfig("jobs:\n  containment: cgroup\n  graceMs: 200\nsandbox:\n  mechanism: "+mech+"\n"))
	needSandbox(t, s)
	needHybrid(t, s)
	return s
}

// needHybrid skips (fails under CI) unless s gives jobs cgroup v1 pids and
// memory groups.
func needHybrid(t *testing.T, s *testServer) {
	t.Helper()
	var h healthV1
	if st := s.DoJSON(t, "GET", "/healthz", nil, &h); st != 200 {
		t.Fatalf("GET /healthz = %d", st)
	}
	c := h.Details.Containment
	if !slices.Contains(c.V1Controllers, "pids") || !slices.Contains(c.V1Controllers, "memory") {
		msg := fmt.Sprintf("not a hybrid cgroup host (v2 controllers %v, v1 %v)", c.Controllers, c.V1Controllers)
		testenv.Need(t, "%s", msg)
	}
	if c.Limits["pids"] != "cgroup_v1" || c.Limits["memoryBytes"] != "cgroup_v1" {
		t.Errorf("healthz containment.limits = %v, want pids and memoryBytes by cgroup_v1", c.Limits)
	}
}

// v1PidsGroup returns the v1 pids group of job id on server s, "" until it
// exists.
func (s *testServer) v1PidsGroup(id string) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", s.cmd.Process.Pid))
	if err != nil {
		return ""
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) == 3 && slices.Contains(strings.Split(f[1], ","), "pids") {
			m, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/pids", f[2], "dshd-*", id))
			if len(m) == 1 {
				return m[0]
			}
		}
	}
	return ""
}

// TestKernelLimitsHybrid runs, through the real server on a hybrid host
// and under both sandbox mechanisms: a fork bomb under pids 64, which the
// kernel holds to 64 tasks while /healthz answers within 100 ms; 1 GiB
// written to the sandbox's private /tmp under memoryBytes 128 MiB, which
// the job's v1 memory group charges and stops at the limit; and a busy
// loop whose cpuMs is the CPU it used.
func TestKernelLimitsHybrid(t *testing.T) {
	for _, mech := range sandboxMechanisms {
		t.Run(mech, func(t *testing.T) { testKernelLimitsHybrid(t, mech) })
	}
}

func testKernelLimitsHybrid(t *testing.T, mech string) {
	s := startHybridServer(t, mech)
	run := randomMark(t)
	t.Cleanup(func() { killPIDs(survivorsNow(run)) })
	sb := map[string]string{"policy": "workspace-write", "network": "off"}

	var bomb job
	if st := s.DoJSON(t, "POST", "/exec", map[string]any{
		"command":    fmt.Sprintf("export %s='%s/bomb'; bomb() { bomb | bomb & }; bomb; sleep 30", markEnv, run),
		"background": true, "timeoutMs": 60000, "sandbox": sb,
		"limits": map[string]any{"pids": 64},
	}, &bomb); st != 202 {
		t.Fatalf("exec the fork bomb = %d", st)
	}
	// Until the job ends: the kernel's peak of its pids group, the most of
	// its processes seen at once, and the slowest /healthz.
	var peak, seen int
	var slowest time.Duration
	for {
		var j limitedJob
		if st := s.DoJSON(t, "GET", "/jobs/"+bomb.ID, nil, &j); st != 200 {
			t.Fatalf("GET the fork bomb = %d", st)
		}
		if g := s.v1PidsGroup(bomb.ID); g != "" {
			if b, err := os.ReadFile(filepath.Join(g, "pids.peak")); err == nil {
				n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
				peak = max(peak, n)
			}
		}
		seen = max(seen, len(survivorsNow(run+"/bomb")))
		t0 := time.Now()
		if st := s.DoJSON(t, "GET", "/healthz", nil, nil); st != 200 {
			t.Errorf("healthz during the bomb = %d", st)
		}
		slowest = max(slowest, time.Since(t0))
		if j.State != "running" {
			break
		}
	}
	// pids.peak read from outside may count dshd's spawning thread for
	// the moment it was in the group; usage.peakPids does not.
	j := s.waitLimited(t, bomb.ID)
	if j.KilledBy == nil || *j.KilledBy != "pids_limit" || j.Usage == nil || j.Usage.PeakPids == nil {
		t.Fatalf("fork bomb ended %+v; want killedBy pids_limit and usage.peakPids", j)
	}
	if jobPeak := *j.Usage.PeakPids; jobPeak < 2 || jobPeak > 64 || peak > 65 || seen > 64 {
		t.Errorf("fork bomb under pids 64: usage.peakPids %d, pids.peak %d, most processes seen %d; want at most 64", jobPeak, peak, seen)
	}
	if slowest > 100*time.Millisecond {
		t.Errorf("the slowest /healthz during the fork bomb took %v, want at most 100ms", slowest)
	}
	t.Logf("%s: fork bomb under pids 64: usage.peakPids %d, pids.peak %d, most processes seen %d, slowest /healthz %v", mech, *j.Usage.PeakPids, peak, seen, slowest)
	if left := survivors(run+"/bomb", 5*time.Second); len(left) > 0 {
		t.Errorf("%d process(es) of the fork bomb survived", len(left))
	}

	const limit = 128 << 20
	var hog job
	if st := s.DoJSON(t, "POST", "/exec", map[string]any{
		"command":    fmt.Sprintf("export %s='%s/tmpfs'; head -c 1073741824 /dev/zero > /tmp/big; echo \"write: $?\"; sleep 30", markEnv, run),
		"background": true, "timeoutMs": 60000, "sandbox": sb,
		"limits": map[string]any{"memoryBytes": limit},
	}, &hog); st != 202 {
		t.Fatalf("exec the tmpfs writer = %d", st)
	}
	j = s.waitLimited(t, hog.ID)
	if j.KilledBy == nil || *j.KilledBy != "oom" {
		t.Errorf("1 GiB into /tmp under 128 MiB ended %+v; want killedBy oom", j)
	}
	if j.Usage == nil || j.Usage.PeakMemoryBytes == nil || *j.Usage.PeakMemoryBytes > limit || *j.Usage.PeakMemoryBytes < limit/2 {
		t.Errorf("tmpfs writer usage %+v; want a peak near and at most %d (the tmpfs pages count)", j.Usage, limit)
	} else {
		t.Logf("%s: 1 GiB into /tmp under 128 MiB: killedBy oom, peak %d MiB", mech, *j.Usage.PeakMemoryBytes>>20)
	}

	// Without limits: tail holds 64 MiB (one line, no newline). Its peak
	// is the job's under both mechanisms (bubblewrap's own rusage would
	// say a few MiB: there a v1 memory group measures the job).
	var held job
	if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": "head -c 67108864 /dev/zero | tail > /dev/null", "sandbox": sb}, &held); st != 200 {
		t.Fatalf("exec the 64 MiB holder = %d", st)
	}
	if j := s.waitLimited(t, held.ID); j.Usage == nil || j.Usage.PeakMemoryBytes == nil || *j.Usage.PeakMemoryBytes < 64<<20 {
		t.Errorf("tail holding 64 MiB without limits: usage %+v; want a peak of at least 64 MiB", j.Usage)
	} else {
		t.Logf("%s: tail holding 64 MiB without limits: peak %d MiB", mech, *j.Usage.PeakMemoryBytes>>20)
	}

	// A busy loop, with limits (v1 groups) and without: cpuMs is at least
	// the CPU time bash itself says it used (`times`: user and system).
	for _, limits := range []map[string]any{{"pids": 64, "cpu": 4}, nil} {
		body := map[string]any{"command": "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; times", "sandbox": sb}
		if limits != nil {
			body["limits"] = limits
		}
		var busy job
		if st := s.DoJSON(t, "POST", "/exec", body, &busy); st != 200 {
			t.Fatalf("exec the busy loop = %d", st)
		}
		j := s.waitLimited(t, busy.ID)
		own := bashTimes(t, j.Stdout.Text)
		if j.Usage == nil || own < 100*time.Millisecond || time.Duration(j.Usage.CPUMs)*time.Millisecond < own*9/10 {
			t.Errorf("a busy loop with limits %v reports usage %+v; bash says it used %v (%q)", limits, j.Usage, own, j.Stdout.Text)
		} else {
			t.Logf("%s: busy loop with limits %v: cpuMs %d, bash's own %v", mech, limits, j.Usage.CPUMs, own)
		}
	}
}

// bashTimes parses the first line of bash's `times` ("0m1.234s 0m0.010s",
// the shell's user and system time) and returns their sum.
func bashTimes(t *testing.T, out string) time.Duration {
	t.Helper()
	line, _, _ := strings.Cut(out, "\n")
	var sum time.Duration
	for f := range strings.FieldsSeq(line) {
		m, sec, ok := strings.Cut(strings.TrimSuffix(f, "s"), "m")
		mins, err1 := strconv.Atoi(m)
		secs, err2 := strconv.ParseFloat(sec, 64)
		if !ok || err1 != nil || err2 != nil {
			t.Fatalf("times printed %q", out)
		}
		sum += time.Duration(mins)*time.Minute + time.Duration(secs*float64(time.Second))
	}
	return sum
}

// TestCrashRecoveryV1: the v1 groups of jobs running when dshd is killed
// with SIGKILL outlive it with their processes; the next start on the same
// home kills those processes and removes the groups.
func TestCrashRecoveryV1(t *testing.T) {
	home := t.TempDir()
	config := withConfig("jobs:\n  graceMs: 200\n  containment: cgroup\n")
	s := startServer(t, withHome(home), config)
	needHybrid(t, s)
	run := randomMark(t)
	t.Cleanup(func() { killPIDs(survivorsNow(run)) })
	var groups []string
	for i := range 3 {
		var j job
		if st := s.DoJSON(t, "POST", "/exec", map[string]any{
			"command":    fmt.Sprintf("export %s='%s/%d;'; sleep 300 & sleep 300", markEnv, run, i),
			"background": true, "limits": map[string]any{"pids": 16, "memoryBytes": 64 << 20},
		}, &j); st != 202 {
			t.Fatalf("exec %d = %d", i, st)
		}
		waitMarked(t, fmt.Sprintf("%s/%d", run, i))
		g := s.v1PidsGroup(j.ID)
		if g == "" {
			t.Fatalf("job %s has no v1 pids group", j.ID)
		}
		groups = append(groups, g)
	}
	s.crash(t)
	if _, sleeps := marked(run + "/"); sleeps != 6 {
		t.Fatalf("after the crash %d sleeps run, want 6", sleeps)
	}
	for _, g := range groups {
		if b, err := os.ReadFile(filepath.Join(g, "cgroup.procs")); err != nil || len(strings.Fields(string(b))) != 3 {
			t.Fatalf("v1 group %s after the crash: %q %v; want the job's 3 processes", g, b, err)
		}
	}

	startServer(t, withHome(home), config)
	if left := survivors(run+"/", 5*time.Second); len(left) > 0 {
		t.Errorf("%d process(es) of the crashed run alive after the restart", len(left))
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, g := range groups {
		for {
			if _, err := os.Stat(g); os.IsNotExist(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("v1 group %s of a lost job is left after the restart", g)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
