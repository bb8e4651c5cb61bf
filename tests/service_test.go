package tests

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/cgroup"
	"github.com/dshd/dshd/internal/testenv"
	"golang.org/x/sys/unix"
)

// serviceUID is the user the test runs dshd as: nobody, so that no user is
// created on the host.
const serviceUID = 65534

// TestServiceUserDelegatedCgroup runs dshd as examples/systemd/dshd.service
// does: as an unprivileged user, born in a cgroup v2 group that belongs to
// that user, as systemd's Delegate=yes hands over the service's cgroup. It
// checks what docs/operations.md says of it: a cgroup per job below the
// delegated group, limits enforced by dshd's watcher, confined policies
// through bubblewrap, and every job's process gone after SIGTERM.
func TestServiceUserDelegatedCgroup(t *testing.T) {
	t.Parallel()
	testenv.NeedRoot(t, "hands a cgroup to another user, as systemd's Delegate=yes does")
	if _, err := exec.LookPath("bwrap"); err != nil {
		testenv.Need(t, "bubblewrap (make deps installs Debian's bubblewrap)")
	}
	own, err := cgroup.OwnDir()
	if err != nil {
		testenv.Need(t, "a cgroup v2 mount: %v", err)
	}
	ownRel := ownCgroupPath(t)

	// The delegated group, as systemd makes it: owned by the service's
	// user, with the files a delegate writes.
	name := fmt.Sprintf("dshd-service-test-%d", os.Getpid())
	delegated := filepath.Join(own, name)
	if err := os.Mkdir(delegated, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeCgroupTree(t, delegated) })
	for _, f := range []string{"", "cgroup.procs", "cgroup.threads", "cgroup.subtree_control"} {
		if err := os.Chown(filepath.Join(delegated, f), serviceUID, serviceUID); err != nil {
			t.Fatal(err)
		}
	}

	// The binary, the home and a workspace where the service's user can
	// reach them.
	dir, err := os.MkdirTemp("", "dshd-service-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "dshd")
	copyFile(t, serverBinary, bin, 0o755)
	home, work := filepath.Join(dir, "home"), filepath.Join(dir, "work")
	for _, d := range []string{home, work} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, serviceUID, serviceUID); err != nil {
			t.Fatal(err)
		}
	}

	cgFD, err := unix.Open(delegated, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(cgFD)
	cmd := exec.Command(bin, "--addr", "127.0.0.1:0", "--home", home)
	cmd.Dir = work
	cmd.Env = append(slices.DeleteFunc(cleanEnv(), func(kv string) bool { return strings.HasPrefix(kv, "HOME=") }), "HOME="+home)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential:  &syscall.Credential{Uid: serviceUID, Gid: serviceUID, Groups: []uint32{}},
		UseCgroupFD: true,
		CgroupFD:    cgFD,
	}
	s := startCommand(t, cmd, home)

	var health struct {
		Details struct {
			Containment struct {
				Mode   string            `json:"mode"`
				Limits map[string]string `json:"limits"`
			} `json:"containment"`
			Sandbox struct {
				Mechanism string   `json:"mechanism"`
				Policies  []string `json:"policies"`
				Reason    string   `json:"reason"`
			} `json:"sandbox"`
		} `json:"details"`
	}
	if st := s.DoJSON(t, "GET", "/healthz", nil, &health); st != 200 {
		t.Fatalf("healthz = %d", st)
	}
	c, sb := health.Details.Containment, health.Details.Sandbox
	if c.Mode != "cgroup" {
		t.Fatalf("containment %q in a delegated group, want cgroup; stderr:\n%s", c.Mode, s.stderr)
	}
	if c.Limits["pids"] != "watcher" || c.Limits["memoryBytes"] != "watcher" {
		t.Errorf("limits enforced by %v, want dshd's watcher (a group holding dshd passes no controller down)", c.Limits)
	}
	if !slices.Contains(sb.Policies, "workspace-write") {
		testenv.Need(t, "unprivileged user namespaces for bubblewrap (sandbox: %+v)", sb)
	}
	if !strings.HasPrefix(sb.Mechanism, "bubblewrap") {
		t.Errorf("sandbox mechanism %q without root, want bubblewrap", sb.Mechanism)
	}

	// A confined job runs as the service's user, in its own group below
	// the delegated one, and cannot write outside its root.
	outside := filepath.Join("/var/tmp", name)
	var confined serviceJob
	if st := s.DoJSON(t, "POST", "/exec", map[string]any{
		"command": "id -u; grep '^0::' /proc/self/cgroup; touch inside; touch " + outside,
		"cwd":     work,
		"sandbox": map[string]any{"policy": "workspace-write", "network": "off"},
	}, &confined); st != 200 {
		t.Fatalf("confined exec = %d", st)
	}
	lines := strings.Split(confined.Stdout.Text, "\n")
	if len(lines) < 2 || lines[0] != fmt.Sprint(serviceUID) {
		t.Errorf("the job ran as %q, want uid %d", lines[0], serviceUID)
	}
	if want := "0::" + path.Join(ownRel, name) + "/"; len(lines) < 2 || !strings.HasPrefix(lines[1], want) {
		t.Errorf("the job's cgroup is %q, want one below %s", lines[1:], want)
	}
	if _, err := os.Stat(filepath.Join(work, "inside")); err != nil {
		t.Errorf("the job could not write in its root: %v (stderr %q)", err, confined.Stderr.Text)
	}
	if _, err := os.Stat(outside); err == nil {
		os.Remove(outside)
		t.Errorf("a workspace-write job wrote %s", outside)
	} else if !strings.Contains(confined.Stderr.Text, "Read-only file system") {
		t.Errorf("stderr %q does not say the file system is read-only", confined.Stderr.Text)
	}

	// A pids limit is enforced by the watcher: the job is killed past it.
	var bounded serviceJob
	if st := s.DoJSON(t, "POST", "/exec", map[string]any{
		"command":   "for i in $(seq 40); do sleep 30 & done; wait",
		"limits":    map[string]any{"pids": 16},
		"timeoutMs": 20000,
	}, &bounded); st != 200 {
		t.Fatalf("limited exec = %d", st)
	}
	if bounded.KilledBy != "pids_limit" {
		t.Errorf("a job past pids 16 ended %s, killedBy %q, want pids_limit", bounded.State, bounded.KilledBy)
	}

	// SIGTERM stops the jobs, those that left their process group too.
	var bg serviceJob
	if st := s.DoJSON(t, "POST", "/exec", map[string]any{
		"command": "setsid sleep 300 & sleep 300", "background": true,
	}, &bg); st != 202 {
		t.Fatalf("background exec = %d", st)
	}
	waitFor(t, 10*time.Second, "the background job's two sleeps", func() bool { return len(cgroupProcs(t, delegated)) >= 3 })
	s.stop(t)
	if left := cgroupProcs(t, delegated); len(left) > 0 {
		t.Errorf("processes left in the delegated group after SIGTERM: %v", left)
	}
}

// serviceJob is the part of a job these tests read.
type serviceJob struct {
	State    string `json:"state"`
	KilledBy string `json:"killedBy"`
	Stdout   output `json:"stdout"`
	Stderr   output `json:"stderr"`
}

// startCommand starts cmd, a dshd, and waits for its startup line, like
// startServer does for the servers it makes.
func startCommand(t *testing.T, cmd *exec.Cmd, home string) *testServer {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	homes.Store(home, true)
	s := &testServer{Home: home, cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s.err = cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() { s.stop(t) })
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(io.TeeReader(stdout, s.stdout))
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		_, _ = io.Copy(s.stdout, stdout)
	}()
	select {
	case l, ok := <-line:
		if !ok {
			t.Fatalf("server exited before its startup line; stderr:\n%s", s.stderr)
		}
		s.URL, s.Token = parseStartupLine(t, l)
	case <-time.After(30 * time.Second):
		t.Fatalf("no startup line within 30s; stderr:\n%s", s.stderr)
	}
	return s
}

// ownCgroupPath is the test process's cgroup v2 path ("0::<path>").
func ownCgroupPath(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			return p
		}
	}
	t.Fatalf("no cgroup v2 line in /proc/self/cgroup:\n%s", b)
	return ""
}

// cgroupProcs lists the processes in the groups under dir.
func cgroupProcs(t *testing.T, dir string) []string {
	t.Helper()
	var procs []string
	// dshd removes a job's group when the job ends, maybe in the middle of
	// the walk: a group that is gone holds no process.
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p != dir {
			return nil
		}
		if err != nil {
			return err
		}
		if d.Name() == "cgroup.procs" {
			b, err := os.ReadFile(p)
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			procs = append(procs, strings.Fields(string(b))...)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return procs
}

// removeCgroupTree kills what is left in the groups under dir and removes
// them, deepest first.
func removeCgroupTree(t *testing.T, dir string) {
	t.Helper()
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	_ = os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
	for i := len(dirs) - 1; i >= 0; i-- {
		for range 100 {
			if err := os.Remove(dirs[i]); err == nil || !strings.Contains(err.Error(), "busy") {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("could not remove the test's cgroup %s", dir)
	}
}

// copyFile copies src to dst with mode.
func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, mode); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond every 20 ms until it holds, failing after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
