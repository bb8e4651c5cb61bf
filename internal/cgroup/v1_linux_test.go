package cgroup

import (
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/dshd/dshd/internal/testenv"
	"golang.org/x/sys/unix"
)

// openV1 opens v1 groups for pids and memory, skipping (failing under CI)
// where this is not a hybrid host that has them.
func openV1(t *testing.T) *V1 {
	t.Helper()
	v, err := OpenV1(fmt.Sprintf("dshd-test-%d", os.Getpid()), []string{"pids", "memory"})
	if err == nil && (v == nil || !v.Has("pids") || !v.Has("memory")) {
		err = fmt.Errorf("v1 controllers %v", v.Controllers())
	}
	if err != nil {
		testenv.Need(t, "no cgroup v1 pids and memory here: %v", err)
	}
	t.Cleanup(v.Close)
	return v
}

// v1Of returns the v1 group of hierarchy ctrl in a /proc/.../cgroup file.
func v1Of(t *testing.T, path, ctrl string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) == 3 && f[1] == ctrl {
			return f[2]
		}
	}
	t.Fatalf("no %s line in %s: %q", ctrl, path, b)
	return ""
}

// TestV1SpawnPlacesTheChildNotTheProcess: a process started through Spawn
// is in the job's pids and memory groups from its start (a program that
// only prints its own groups shows them), pids.max is the job's limit
// once Spawn returns, and neither the spawning thread nor any other
// thread of this process is left in them.
func TestV1SpawnPlacesTheChildNotTheProcess(t *testing.T) {
	v := openV1(t)
	g, err := v.Create("job_place", Limits{Pids: 5, MemoryBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Remove() })
	if got := readString(filepath.Join(g.dir(cgroup1.Pids), "pids.max")); got != "6" {
		t.Errorf("pids.max before the spawn = %q, want 6 (one slot for the spawning thread)", got)
	}
	cmd := osexec.Command("cat", "/proc/self/cgroup")
	var out strings.Builder
	cmd.Stdout = &out
	var spawner int
	err = OnOwnThread(func() error {
		return g.Spawn(func() error {
			spawner = unix.Gettid()
			return cmd.Start()
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := readString(filepath.Join(g.dir(cgroup1.Pids), "pids.max")); got != "5" {
		t.Errorf("pids.max after the spawn = %q, want the job's 5", got)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	for _, ctrl := range []string{"pids", "memory"} {
		want := filepath.Join(v.own[cgroup1.Name(ctrl)], v.name, "job_place")
		if got := v1Of(t, "/proc/self/cgroup", ctrl); got == want {
			t.Errorf("this process is in the job's %s group", ctrl)
		}
		if !strings.Contains(out.String(), ":"+ctrl+":"+want+"\n") {
			t.Errorf("the child's groups %q, want %s in %s", out.String(), ctrl, want)
		}
		tasks, _ := os.ReadFile(filepath.Join(g.dir(cgroup1.Name(ctrl)), "tasks"))
		if strings.TrimSpace(string(tasks)) != "" {
			t.Errorf("%s group holds tasks %q after its only process exited", ctrl, tasks)
		}
	}
	// No thread of this process is in the job's groups.
	threads, _ := os.ReadDir("/proc/self/task")
	for _, th := range threads {
		b, err := os.ReadFile("/proc/self/task/" + th.Name() + "/cgroup")
		if err != nil {
			continue // the thread has exited since
		}
		if strings.Contains(string(b), "/job_place\n") {
			t.Errorf("thread %s is in the job's groups: %q", th.Name(), b)
		}
	}
	// The spawning thread, if it still runs, is back in this process's
	// groups.
	if _, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", spawner)); err == nil {
		for _, ctrl := range []string{"pids", "memory"} {
			if got, want := v1Of(t, fmt.Sprintf("/proc/self/task/%d/cgroup", spawner), ctrl), v1Of(t, "/proc/self/cgroup", ctrl); got != want {
				t.Errorf("the spawning thread is in %s group %s, want this process's %s", ctrl, got, want)
			}
		}
	}
}

// TestV1PidsLimit: a shell born in a group with pids 5 runs 4 sleeps
// beside itself (pids.peak 5); with those 5 in the group, one more process
// spawned into it fails to fork (the kernel counts it, pids.events max).
func TestV1PidsLimit(t *testing.T) {
	v := openV1(t)
	g, err := v.Create("job_pids", Limits{Pids: 5})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Remove() })
	// bash forks its four sleeps only once Spawn's thread has left the
	// group (the test writes a line then): a peak reached exactly as the
	// thread leaves cannot be told from one it held (see PidsPeak).
	cmd := osexec.Command("bash", "-c", `read go; sleep 2 & sleep 2 & sleep 2 & sleep 2 & echo started; wait`)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	runtime.LockOSThread() // Spawn nests: this thread stays locked
	defer runtime.UnlockOSThread()
	if err := g.Spawn(cmd.Start); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// bash and its sleeps, then the group (before the subtree).
		for _, pid := range g.Procs() {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		_ = cmd.Wait()
		for deadline := time.Now().Add(5 * time.Second); len(g.Procs()) > 0 && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		_ = g.Remove()
	})
	if _, err := in.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	if n, _ := out.Read(buf); string(buf[:n]) != "started\n" {
		t.Fatalf("bash printed %q", buf[:n])
	}
	if peak := g.PidsPeak(); peak != 5 {
		t.Errorf("pids.peak = %d, want 5", peak)
	}
	// Spawn's thread joins the full group (a move is never refused), and
	// the fork from it is.
	sixth := osexec.Command("true")
	if err := g.Spawn(sixth.Start); err == nil {
		_ = sixth.Wait()
		t.Fatal("a sixth process was spawned into a group with pids 5")
	} else {
		t.Logf("the sixth: %v", err)
	}
	if n := len(g.Procs()); n != 5 {
		t.Errorf("%d processes in the group, want 5", n)
	}
	if _, hits := g.Events(); hits == 0 {
		t.Errorf("pids.events max = 0, want the refused fork counted")
	}
}
