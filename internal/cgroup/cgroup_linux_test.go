package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/testenv"
)

func TestOwnDir(t *testing.T) {
	hybrid := `25 30 0:22 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
26 25 0:23 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
27 25 0:24 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw
`
	pure := `30 1 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate
`
	container := `40 1 0:26 /system.slice/ctr.scope /sys/fs/cgroup rw - cgroup2 cgroup2 rw
`
	spaced := `40 1 0:26 / /mnt/cg\0402 rw - cgroup2 cgroup2 rw
`
	for _, tc := range []struct {
		name, cgroup, mountinfo, want, wantErr string
	}{
		{"hybrid root", "4:memory:/x\n0::/\n", hybrid, "/sys/fs/cgroup/unified", ""},
		{"hybrid nested", "0::/system.slice/dshd.service\n", hybrid, "/sys/fs/cgroup/unified/system.slice/dshd.service", ""},
		{"pure v2", "0::/user.slice/u.service\n", pure, "/sys/fs/cgroup/user.slice/u.service", ""},
		{"namespaced mount root", "0::/system.slice/ctr.scope/sub\n", container, "/sys/fs/cgroup/sub", ""},
		{"escaped mount point", "0::/a\n", spaced, "/mnt/cg 2/a", ""},
		{"v1 only", "4:memory:/x\n", hybrid, "", "no cgroup v2 entry"},
		{"no cgroup2 mount", "0::/\n", "26 25 0:23 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n", "", "no cgroup2 mount"},
		{"outside mount root", "0::/other\n", container, "", "no cgroup2 mount"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ownDir([]byte(tc.cgroup), []byte(tc.mountinfo))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ownDir = %q, %v; want error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ownDir = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// openTest opens a manager on this host, skipping (failing under CI=true)
// where the host gives no usable cgroup v2 subtree.
func openTest(t testing.TB) *Manager {
	t.Helper()
	name := fmt.Sprintf("dshd-test-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "_"))
	m, err := Open(name, []string{"/bin/sh", "-c", ":"})
	if err != nil {
		testenv.Need(t, "needs root and a writable cgroup v2 subtree: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Rmdir(m.Dir()); err != nil {
			t.Errorf("remove %s: %v", m.Dir(), err)
		}
	})
	return m
}

func TestGroupKillsEscapedProcesses(t *testing.T) {
	m := openTest(t)
	g, err := m.Create("job_1", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(t.TempDir(), "pid")
	// A grandchild that leaves the session and ignores SIGTERM.
	script := fmt.Sprintf(`setsid sh -c 'trap "" TERM; sleep 300' & echo $! > %s; sleep 300`, pidFile)
	attr := &syscall.ProcAttr{
		Env: []string{"PATH=/usr/bin:/bin"},
		Sys: &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: g.FD(), Setpgid: true},
	}
	pid, err := syscall.ForkExec("/bin/sh", []string{"sh", "-c", script}, attr)
	g.CloseFD()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(g.Procs()) < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := len(g.Procs()); n < 3 {
		t.Fatalf("group has %d processes, want at least 3", n)
	}
	if !g.Populated() {
		t.Fatal("Populated = false with processes in the group")
	}
	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
		t.Fatal(err)
	}
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("leader ended with %v, want SIGKILL", ws)
	}
	if !g.WaitEmpty(5 * time.Second) {
		t.Fatalf("group still populated after cgroup.kill: %v", g.Procs())
	}
	if u := g.Usage(); u.CPU <= 0 {
		t.Errorf("Usage().CPU = %v, want > 0", u.CPU)
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(g.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("group dir still there after Remove: %v", err)
	}
}

// A job may make groups of its own inside its group (a container,
// systemd-run, another dshd): cgroup.kill reaches their processes, and
// Remove takes the nested groups away with the job's, deepest first.
func TestRemoveNestedGroups(t *testing.T) {
	m := openTest(t)
	g, err := m.Create("job_nested", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	deeper := filepath.Join(g.Path(), "nested", "deeper")
	if err := os.MkdirAll(deeper, 0o755); err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Open(deeper, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	attr := &syscall.ProcAttr{Sys: &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}}
	pid, err := syscall.ForkExec("/bin/sleep", []string{"sleep", "300"}, attr)
	syscall.Close(fd)
	g.CloseFD()
	if err != nil {
		t.Fatal(err)
	}
	if !g.Populated() {
		t.Fatal("Populated = false with a process in a nested group")
	}
	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
		t.Fatal(err)
	}
	if !g.WaitEmpty(5 * time.Second) {
		t.Fatalf("group still populated after cgroup.kill: %v", g.Procs())
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(g.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("group dir still there after Remove: %v", err)
	}
}

func TestLeftoversAndLimits(t *testing.T) {
	m := openTest(t)
	g, err := m.Create("job_left", Limits{Pids: 5, MemoryBytes: 64 << 20, CPU: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Remove()
	g.CloseFD()
	for c, file := range map[string]string{"pids": "pids.max", "memory": "memory.max", "cpu": "cpu.max"} {
		got := readString(filepath.Join(g.Path(), file))
		if m.Has(c) && got == "" {
			t.Errorf("%s enabled but %s unreadable", c, file)
		}
	}
	if m.Has("pids") {
		if got := readString(filepath.Join(g.Path(), "pids.max")); got != "5" {
			t.Errorf("pids.max = %q, want 5", got)
		}
	}
	left, err := m.Leftovers()
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0].Name() != "job_left" {
		t.Fatalf("Leftovers = %v, want [job_left]", left)
	}
	if _, err := m.Create("job_left", Limits{}); err == nil {
		t.Error("Create of an existing group succeeded")
	}
}

func TestOpenRefusesBadName(t *testing.T) {
	for _, name := range []string{"", "a/b", "..", "."} {
		if _, err := openAt(t.TempDir(), name, nil); !errors.Is(err, ErrUnavailable) {
			t.Errorf("openAt(%q) = %v, want ErrUnavailable", name, err)
		}
	}
}

func TestOpenWithoutCgroupKill(t *testing.T) {
	// A plain directory is not a cgroup: Open must say why it is unusable.
	_, err := openAt(t.TempDir(), "dshd", nil)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "cgroup.kill") {
		t.Fatalf("openAt(plain dir) = %v, want ErrUnavailable naming cgroup.kill", err)
	}
}

// TestKeptStats: with its files kept open, a group reads the kernel's
// current cgroup.events and cpu.stat at every call (pread from the start,
// not a stale copy), as reading them by path does; Remove closes them.
func TestKeptStats(t *testing.T) {
	m := openTest(t)
	g, err := m.Create("job_kept", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	tokens := len(keptStats)
	if err := g.KeepStats(); err != nil {
		t.Fatal(err)
	}
	if g.stats == nil || len(keptStats) != tokens+1 {
		t.Fatalf("KeepStats kept nothing (%d of %d tokens taken before)", tokens, cap(keptStats))
	}
	kept := []int{g.stats.events, g.stats.cpu}
	if g.Populated() {
		t.Fatal("Populated = true for a new group")
	}
	if u := g.Usage(); u.CPU != 0 {
		t.Errorf("Usage().CPU = %v for a new group", u.CPU)
	}
	// A process that burns some CPU, born in the group.
	pid, err := syscall.ForkExec("/bin/sh", []string{"sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; sleep 300"}, &syscall.ProcAttr{
		Env: []string{"PATH=/usr/bin:/bin"},
		Sys: &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: g.FD()},
	})
	g.CloseFD() // the kept files stay readable without the directory's descriptor
	if err != nil {
		t.Fatal(err)
	}
	if !g.Populated() {
		t.Fatal("Populated = false with a process in the group")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := syscall.Wait4(pid, nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	if !g.WaitEmpty(5 * time.Second) {
		t.Fatal("Populated still true after the process was reaped")
	}
	byPath := Group{path: g.path, fd: -1, m: m}
	if kept, path := g.Usage().CPU, byPath.Usage().CPU; kept <= 0 || kept != path {
		t.Errorf("Usage().CPU = %v from the kept file, %v by path; want the same, > 0", kept, path)
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	for _, fd := range kept {
		if _, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd)); err == nil {
			// The number may have been reused by a file opened since; it
			// must not still be the group's.
			if target, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd)); strings.Contains(target, "job_kept") {
				t.Errorf("fd %d still open on %s after Remove", fd, target)
			}
		}
	}
	if g.Populated() {
		t.Error("Populated = true for a removed group")
	}
	if len(keptStats) != tokens {
		t.Errorf("Remove did not give its token back: %d taken, %d before", len(keptStats), tokens)
	}
}

// TestKeptStatsBounded: past MaxKeptStats groups keeping their files open
// (thousands of jobs at once would run out of descriptors), a group keeps
// none and reads them by path, with the same answers.
func TestKeptStatsBounded(t *testing.T) {
	m := openTest(t)
	taken := 0
	for len(keptStats) < cap(keptStats) {
		keptStats <- struct{}{}
		taken++
	}
	defer func() {
		for range taken {
			<-keptStats
		}
	}()
	g, err := m.Create("job_unkept", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.KeepStats(); err != nil {
		t.Fatal(err)
	}
	if g.stats != nil {
		t.Fatal("a group kept its files past the bound")
	}
	pid, err := syscall.ForkExec("/bin/sh", []string{"sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; sleep 300"}, &syscall.ProcAttr{
		Env: []string{"PATH=/usr/bin:/bin"},
		Sys: &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: g.FD()},
	})
	g.CloseFD()
	if err != nil {
		t.Fatal(err)
	}
	if !g.Populated() {
		t.Fatal("Populated = false with a process in the group")
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	if _, err := syscall.Wait4(pid, nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	if !g.WaitEmpty(5 * time.Second) {
		t.Fatal("Populated still true after the process was reaped")
	}
	if u := g.Usage(); u.CPU <= 0 {
		t.Errorf("Usage().CPU = %v, want > 0", u.CPU)
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	if len(keptStats) != cap(keptStats) {
		t.Errorf("a group that kept nothing gave a token back")
	}
}
