package tests

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/dshd/dshd/internal/cgroup"
	"github.com/dshd/dshd/internal/testenv"
	"golang.org/x/sys/unix"
)

// TestServerLeavesOwnCgroup starts dshd alone in a cgroup that offers a
// controller, as systemd's Delegate=yes hands a service its group: dshd
// moves itself into the leaf dshd.server, so its group holds no process and
// can pass controllers down to the jobs' groups (the kernel's "no internal
// processes" rule). The baseline: with another process in the group, dshd
// stays, and the same group cannot pass a controller down.
//
// The controller used is the one this host's cgroup v2 root offers (on a
// hybrid host the limit controllers are bound to v1; hugetlb is not): the
// move is the same for any.
func TestServerLeavesOwnCgroup(t *testing.T) {
	t.Parallel()
	testenv.NeedRoot(t, "creates cgroups and enables a controller in the cgroup v2 root")
	own, err := cgroup.OwnDir()
	if err != nil {
		testenv.Need(t, "a cgroup v2 mount: %v", err)
	}
	offered := strings.Fields(readText(t, filepath.Join(own, "cgroup.controllers")))
	if len(offered) == 0 {
		testenv.Need(t, "a controller offered by the test's own cgroup v2 group %s", own)
	}
	ctrl := offered[0]
	// Enable ctrl below own (allowed where own is the root, or holds no
	// process), and put it back as it was.
	if !slices.Contains(strings.Fields(readText(t, filepath.Join(own, "cgroup.subtree_control"))), ctrl) {
		if err := os.WriteFile(filepath.Join(own, "cgroup.subtree_control"), []byte("+"+ctrl), 0); err != nil {
			testenv.Need(t, "enabling %s below %s: %v", ctrl, own, err)
		}
		t.Cleanup(func() { _ = os.WriteFile(filepath.Join(own, "cgroup.subtree_control"), []byte("-"+ctrl), 0) })
	}
	ownRel := ownCgroupPath(t)

	for _, tc := range []struct {
		name  string
		alone bool
	}{{"alone", true}, {"shared", false}} {
		t.Run(tc.name, func(t *testing.T) {
			parent := filepath.Join(own, fmt.Sprintf("dshd-leaf-test-%d-%s", os.Getpid(), tc.name))
			if err := os.Mkdir(parent, 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { removeCgroupTree(t, parent) })
			if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+"+ctrl), 0); err != nil {
				t.Fatal(err)
			}
			svc := filepath.Join(parent, "svc")
			if err := os.Mkdir(svc, 0o755); err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(strings.Fields(readText(t, filepath.Join(svc, "cgroup.controllers"))), ctrl) {
				t.Fatalf("%s does not offer %s", svc, ctrl)
			}
			cgFD, err := unix.Open(svc, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(cgFD)
			born := &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: cgFD}

			if !tc.alone {
				// A supervisor's process in the group: not dshd's to move.
				other := exec.Command("sleep", "300")
				other.SysProcAttr = born
				if err := other.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
			}

			home := t.TempDir()
			cmd := exec.Command(serverBinary, "--addr", "127.0.0.1:0", "--home", home)
			cmd.Dir = t.TempDir()
			cmd.Env = cleanEnv()
			cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: cgFD, Setpgid: true}
			s := startCommand(t, cmd, home)

			svcRel := path.Join(ownRel, filepath.Base(parent), "svc")
			server := cgroupOf(t, cmd.Process.Pid)
			var job serviceJob
			if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": "grep '^0::' /proc/self/cgroup"}, &job); st != 200 {
				t.Fatalf("exec = %d", st)
			}
			if want := "0::" + svcRel + "/dshd-"; !strings.HasPrefix(job.Stdout.Text, want) {
				t.Errorf("the job's cgroup is %q, want one below %s", job.Stdout.Text, want)
			}
			pass := os.WriteFile(filepath.Join(svc, "cgroup.subtree_control"), []byte("+"+ctrl), 0)

			if tc.alone {
				if want := path.Join(svcRel, cgroup.ServerLeaf); server != want {
					t.Errorf("dshd alone in its group is in %q, want the leaf %q; stderr:\n%s", server, want, s.stderr)
				}
				if procs := strings.Fields(readText(t, filepath.Join(svc, "cgroup.procs"))); len(procs) != 0 {
					t.Errorf("processes left in dshd's own group: %v", procs)
				}
				if pass != nil {
					t.Errorf("dshd's own group cannot pass %s to the jobs' groups: %v", ctrl, pass)
				}
				return
			}
			if server != svcRel {
				t.Errorf("dshd sharing its group with another process moved to %q, want it to stay in %q", server, svcRel)
			}
			if !errors.Is(pass, syscall.EBUSY) {
				t.Errorf("enabling %s in a group holding processes: %v, want EBUSY (the rule the move exists for)", ctrl, pass)
			}
		})
	}
}

// cgroupOf is pid's cgroup v2 path.
func cgroupOf(t *testing.T, pid int) string {
	t.Helper()
	for _, l := range strings.Split(readText(t, fmt.Sprintf("/proc/%d/cgroup", pid)), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			return p
		}
	}
	t.Fatalf("no cgroup v2 line for pid %d", pid)
	return ""
}

func readText(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
