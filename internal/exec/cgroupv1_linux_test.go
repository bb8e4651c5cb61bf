package exec

import (
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1"

	"github.com/dshd/dshd/internal/cgroup"
	"github.com/dshd/dshd/internal/proctest"
	"github.com/dshd/dshd/internal/testenv"
)

// v1Executor returns an executor in cgroup mode whose jobs with limits get
// cgroup v1 pids and memory groups (a hybrid host such as this one and
// CI's); it skips elsewhere, and fails under CI.
func v1Executor(t *testing.T, mod func(*Options)) *Executor {
	t.Helper()
	e := newTestExecutor(t, func(o *Options) {
		o.Containment = ContainmentAuto
		if mod != nil {
			mod(o)
		}
	})
	info := e.Containment()
	if info.Mode != ContainmentCgroup || !slices.Contains(info.V1Controllers, "pids") || !slices.Contains(info.V1Controllers, "memory") {
		msg := "no hybrid cgroup host (cgroup2 without pids and memory, cgroup v1 with them): mode " + info.Mode + ", v1 " + strings.Join(info.V1Controllers, ",") + " " + info.Reason
		testenv.Need(t, "%s", msg)
	}
	return e
}

// v1Dir is where job id's group is in v1 hierarchy n.
func v1Dir(e *Executor, n cgroup1.Name, id string) string {
	return filepath.Join(e.run.V1Dir(n), id)
}

// bomb is a fork bomb that sleeps at its root, so only a limit ends it.
const bomb = `bomb() { bomb | bomb & }; bomb; sleep 30`

// TestCgroupV1ForkBomb: under pids 64 on a hybrid host the kernel's v1
// pids controller holds a fork bomb to 64 tasks (pids.peak, and the most
// the test saw in the group while it ran); dshd then ends the job as
// pids_limit, and the job's v1 groups are gone once it ended.
func TestCgroupV1ForkBomb(t *testing.T) {
	e := v1Executor(t, nil)
	j, err := e.Start(testCtx(t), Spec{Command: bomb, Background: true, Limits: Limits{Pids: 64}, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	tasks := filepath.Join(v1Dir(e, cgroup1.Pids, j.ID()), "tasks")
	seen := 0
	for {
		select {
		case <-j.proc.Done():
		default:
			if b, err := os.ReadFile(tasks); err == nil {
				seen = max(seen, len(strings.Fields(string(b))))
			}
			continue
		}
		break
	}
	s, err := j.Wait(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if s.Enforcement.Pids != EnforcedCgroupV1 || s.KilledBy != KilledByPidsLimit {
		t.Errorf("fork bomb: enforcement %+v, killedBy %q; want pids by cgroup_v1, killedBy pids_limit", s.Enforcement, s.KilledBy)
	}
	peak := s.Usage.PeakPids
	if peak > 64 || peak < 2 || seen > 64 {
		t.Errorf("fork bomb under pids 64: pids.peak %d, most tasks seen %d; want at most 64", peak, seen)
	}
	t.Logf("fork bomb under pids 64 (cgroup v1): pids.peak %d, most tasks seen %d, killed after %v", peak, seen, s.Duration)
	// Removed with its cgroup2 group once the job's last process is gone
	// (by the janitor's next round, run here at once).
	for _, n := range []cgroup1.Name{cgroup1.Pids, cgroup1.Memory} {
		waitPathGone(t, v1Dir(e, n, j.ID()), func() { e.run.SweepLingering(false) })
	}
}

// TestCgroupV1Memory: 1 GiB written to a tmpfs the job mounted in its own
// mount namespace (as the sandbox's private /tmp is) under memoryBytes
// 128 MiB: the pages are charged to the job's v1 memory group, which never
// holds more than the limit; the job ends oom, and its peak says what it
// held.
func TestCgroupV1Memory(t *testing.T) {
	e := v1Executor(t, nil)
	const limit = 128 << 20
	s := mustRun(t, e, Spec{
		Command: `unshare -m sh -c 'mount -t tmpfs -o size=2g dshdtest /mnt && head -c 1073741824 /dev/zero > /mnt/big; echo "write: $?"; sleep 30'`,
		Limits:  Limits{MemoryBytes: limit}, Timeout: time.Minute,
	})
	if s.Enforcement.MemoryBytes != EnforcedCgroupV1 || s.KilledBy != KilledByOOM {
		t.Errorf("tmpfs writer: enforcement %+v, killedBy %q, stdout %q stderr %q; want memory by cgroup_v1, killedBy oom", s.Enforcement, s.KilledBy, s.Stdout.Text, s.Stderr.Text)
	}
	if s.Usage.PeakMemoryBytes > limit || s.Usage.PeakMemoryBytes < limit/2 {
		t.Errorf("tmpfs writer peak memory %d, want near and at most %d: the tmpfs pages count", s.Usage.PeakMemoryBytes, limit)
	}
	t.Logf("1 GiB into a tmpfs under 128 MiB: killedBy %q after %v, peak %d MiB", s.KilledBy, s.Duration, s.Usage.PeakMemoryBytes>>20)
}

// TestCgroupV1Usage: a job with limits is measured by its v1 groups: a
// second-long busy loop reports about a second of CPU (cpuacct), and a
// job holding 64 MiB of tmpfs pages reports a peak above that.
func TestCgroupV1Usage(t *testing.T) {
	e := v1Executor(t, nil)
	if !e.run.V1Has("cpu") {
		testenv.Need(t, "no cgroup v1 cpu controller here")
	}
	s := mustRun(t, e, Spec{Command: `end=$((SECONDS+2)); while [ $SECONDS -lt $end ]; do :; done`, Limits: Limits{CPU: 4}})
	if s.Enforcement.CPU != EnforcedCgroupV1 || s.Usage.CPUTime < s.Duration/4 {
		t.Errorf("busy loop: enforcement %+v, CPU %v in %v; want cpu by cgroup_v1 and the loop's CPU time", s.Enforcement, s.Usage.CPUTime, s.Duration)
	}
	s = mustRun(t, e, Spec{
		Command: `unshare -m sh -c 'mount -t tmpfs dshdtest /mnt && head -c 67108864 /dev/zero > /mnt/f'`,
		Limits:  Limits{MemoryBytes: 256 << 20},
	})
	if s.ExitCode == nil || *s.ExitCode != 0 || s.Usage.PeakMemoryBytes < 64<<20 {
		t.Errorf("64 MiB in a tmpfs: exit %v, peak %d; want 0 and a peak above 64 MiB", fmtExit(s.ExitCode), s.Usage.PeakMemoryBytes)
	}
}

// TestCgroupV1Off: without the v1 groups the watcher still enforces pids,
// and the record says so. 300 sleeps rather than a fork bomb: a bomb
// under the watcher alone can reach thousands of processes on a loaded
// host (BenchmarkForkBombPeak measures it under a safety cap).
func TestCgroupV1Off(t *testing.T) {
	e := newTestExecutor(t, func(o *Options) { o.Containment = ContainmentAuto; o.NoCgroupV1 = true })
	info := e.Containment()
	if info.Mode != ContainmentCgroup {
		testenv.Need(t, "no cgroup v2 subtree here: %s", info.Reason)
	}
	if len(info.V1Controllers) != 0 {
		t.Fatalf("NoCgroupV1: v1 controllers %v", info.V1Controllers)
	}
	if slices.Contains(info.Controllers, "pids") {
		testenv.Need(t, "cgroup2 has the pids controller here, so the watcher goes untested")
	}
	j, err := e.Start(testCtx(t), Spec{Command: `for i in $(seq 300); do sleep 30 & done; wait`, Background: true, Limits: Limits{Pids: 64}, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for {
		select {
		case <-j.proc.Done():
		default:
			seen = max(seen, len(j.proc.Group().Procs()))
			time.Sleep(time.Millisecond)
			continue
		}
		break
	}
	s, _ := j.Wait(testCtx(t))
	if s.Enforcement.Pids != EnforcedWatcher || s.KilledBy != KilledByPidsLimit {
		t.Errorf("300 sleeps without v1 groups: enforcement %+v, killedBy %q; want watcher, pids_limit", s.Enforcement, s.KilledBy)
	}
	t.Logf("300 sleeps under pids 64 (watcher): most processes seen %d, killed after %v", seen, s.Duration)
}

// TestCgroupV1RecoverLeftovers: v1 groups a crashed run left (a process
// still in them) are found by the next start on the same home, their
// processes killed and the groups removed.
func TestCgroupV1RecoverLeftovers(t *testing.T) {
	home := t.TempDir()
	v1Executor(t, func(o *Options) { o.Home = t.TempDir() }) // skips off hybrid hosts
	v1, err := cgroup.OpenV1(CgroupName(home), []string{"pids", "memory"})
	if err != nil || v1 == nil {
		t.Fatalf("OpenV1: %v", err)
	}
	g, err := v1.Create("job_crashed", cgroup.Limits{Pids: 8})
	if err != nil {
		t.Fatal(err)
	}
	cmd := osexec.Command("sleep", "300")
	if err := cgroup.OnOwnThread(func() error { return g.Spawn(cmd.Start) }); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	dir := filepath.Join(v1.Dir(cgroup1.Pids), "job_crashed")
	if b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs")); strings.TrimSpace(string(b)) == "" {
		t.Fatal("the leftover's process is not in its v1 group")
	}

	e := newTestExecutor(t, func(o *Options) { o.Home = home; o.Containment = ContainmentAuto })
	select {
	case <-exited:
	case <-time.After(proctest.Deadline):
		t.Fatal("the process in a leftover v1 group was not killed")
	}
	waitPathGone(t, dir, func() {})
	_ = e
}

// waitPathGone runs poll until path is gone, and fails the test if it
// still exists after proctest.Deadline.
func waitPathGone(t *testing.T, path string, poll func()) {
	t.Helper()
	deadline := time.Now().Add(proctest.Deadline)
	for {
		poll()
		if _, err := os.Stat(path); os.IsNotExist(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s was not removed", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fmtExit shows an exit code that may be missing.
func fmtExit(code *int) string {
	if code == nil {
		return "none"
	}
	return strconv.Itoa(*code)
}
