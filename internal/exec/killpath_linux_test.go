package exec

import (
	"encoding/json"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/proc"
	"github.com/dshd/dshd/internal/proctest"
	"github.com/dshd/dshd/internal/testenv"
)

// TestCancelKillsNestedCgroup: cancel ends with cgroup.kill, which reaches
// what no listing does. The job moves a process that left its group into a
// cgroup nested in the job's own: neither the process group nor the job's
// cgroup.procs name it, only the kill of the whole subtree reaches it. The
// cancel comes only once the process leads a group of its own (setsid has
// run): before, the SIGTERM to the job's group reached it, and the test
// passed with the kill path's cgroup.kill taken out.
func TestCancelKillsNestedCgroup(t *testing.T) {
	e := newTestExecutor(t, func(o *Options) { o.Containment = ContainmentAuto; o.Grace = 200 * time.Millisecond })
	if e.Containment().Mode != ContainmentCgroup {
		testenv.Need(t, "no cgroup v2 subtree here: %s", e.Containment().Reason)
	}
	cmd := `rel=$(sed -n 's/^0:://p' /proc/self/cgroup)
for m in /sys/fs/cgroup/unified /sys/fs/cgroup; do [ -e "$m$rel/cgroup.procs" ] && cg=$m$rel && break; done
mkdir "$cg/nested" || exit 1
setsid sleep 300 & pid=$!
echo $pid > "$cg/nested/cgroup.procs" || exit 1
echo $pid; wait`
	j, err := e.Start(testCtx(t), Spec{Command: cmd, Background: true})
	if err != nil {
		t.Fatal(err)
	}
	pid := strings.TrimSpace(waitOutput(t, j, "\n"))
	n, err := strconv.Atoi(pid)
	if err != nil {
		t.Fatalf("job printed %q, not a pid; stderr %q", pid, j.Snapshot().Stderr.Text)
	}
	t.Cleanup(func() { _ = syscall.Kill(n, syscall.SIGKILL) })
	for deadline := time.Now().Add(testDeadline); ; time.Sleep(time.Millisecond) {
		if st, ok := proc.ReadStat(n); !ok {
			t.Fatalf("process %d ended before the cancel", n)
		} else if st.PGID() == n {
			break // out of the job's process group, its session its own
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d never left the job's process group", n)
		}
	}
	if _, err := e.Cancel(testCtx(t), j.ID()); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)
}

// TestRecoverLostKillsGroup: the next start after a crash stops every
// process of a lost job's group, not only its leader.
func TestRecoverLostKillsGroup(t *testing.T) {
	home := t.TempDir()
	leader := osexec.Command("bash", "-c", "sleep 300 & echo $!; wait")
	leader.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := leader.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-leader.Process.Pid, syscall.SIGKILL); _ = leader.Wait() })
	buf := make([]byte, 32)
	k, err := out.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(string(buf[:k])))
	if err != nil {
		t.Fatal(err)
	}
	st, ok := proc.ReadStat(leader.Process.Pid)
	if !ok {
		t.Fatal("no stat for the leader")
	}
	dir := filepath.Join(home, "jobs", "running")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(indexEntry{ID: "job_group", Command: "sleep 300 & wait", PID: leader.Process.Pid, LeaderStart: st.Start()})
	if err := os.WriteFile(filepath.Join(dir, "job_group.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	newTestExecutor(t, func(o *Options) { o.Home = home; o.Containment = ContainmentGroup })
	deadline := time.Now().Add(proctest.Deadline)
	for !proctest.Gone(child) {
		if time.Now().After(deadline) {
			t.Fatalf("the lost job's leader was stopped but its child %d runs on", child)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCgroupJobEnds: a job in cgroup mode ends, its group released and its
// v1 groups measured, within a bound: releasing the group once held the
// proc's lock while measuring the v1 groups, which take it too, and every
// cgroup-mode job hung in its waiter.
func TestCgroupJobEnds(t *testing.T) {
	e := newTestExecutor(t, func(o *Options) { o.Containment = ContainmentAuto })
	if e.Containment().Mode != ContainmentCgroup {
		testenv.Need(t, "no cgroup v2 subtree here: %s", e.Containment().Reason)
	}
	for _, lim := range []Limits{{}, {Pids: 64}} {
		j, err := e.Start(testCtx(t), Spec{Command: "true", Limits: lim})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-j.proc.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("limits %+v: the job of `true` did not end within 10s", lim)
		}
		if s := j.Snapshot(); s.ExitCode == nil || *s.ExitCode != 0 {
			t.Fatalf("limits %+v: %+v", lim, s)
		}
	}
}

// TestCgroupGroupsRemoved: a job's empty cgroup goes after its end is
// recorded, not before its response, and Close waits for every such
// removal: after jobs ending at once and a Close right behind them, no job
// group and no subtree is left.
func TestCgroupGroupsRemoved(t *testing.T) {
	t.Parallel()
	e, err := New(Options{Home: t.TempDir(), Environ: testEnviron(), DefaultCwd: t.TempDir(), Containment: ContainmentAuto})
	if err != nil {
		t.Fatal(err)
	}
	if e.Containment().Mode != ContainmentCgroup {
		_ = e.Close(testCtx(t))
		testenv.Need(t, "no cgroup v2 subtree here: %s", e.Containment().Reason)
	}
	dir := e.Containment().CgroupDir
	const n = 16
	jobs := make([]*Job, 0, n)
	for i := range n {
		j, err := e.Start(testCtx(t), Spec{Command: "true", Limits: Limits{Pids: int64(64 * (i % 2))}})
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	first := jobs[0]
	if _, err := first.Wait(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	group := filepath.Join(dir, first.ID())
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, err := os.Stat(group); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the group of an ended job, %s, is still there after 5s", group)
		}
	}
	for _, j := range jobs {
		if _, err := j.Wait(testCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		left, _ := os.ReadDir(dir)
		t.Fatalf("after Close the subtree %s is still there (%v), holding %d entries", dir, err, len(left))
	}
}
