package proc

import (
	"os"
	osexec "os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMarkCloexec checks both ways of marking descriptors close-on-exec
// (close_range, and the /proc/self/fd walk for kernels without it): a
// descriptor open across exec reaches a child before, and not after.
func TestMarkCloexec(t *testing.T) {
	for name, mark := range map[string]func(int) error{"close_range": markCloexecFrom, "proc": markCloexecListed} {
		t.Run(name, func(t *testing.T) {
			f, err := os.CreateTemp(t.TempDir(), "inherited")
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			fd, err := syscall.Dup(int(f.Fd())) // dup leaves close-on-exec off
			if err != nil {
				t.Fatal(err)
			}
			defer syscall.Close(fd)
			probe := "[ -e /proc/$$/fd/" + strconv.Itoa(fd) + " ] && echo open || echo closed"
			run := func() string {
				var out strings.Builder
				cmd := osexec.Command("bash", "-c", probe)
				cmd.Stdout = &out
				if err := runChild(t, cmd); err != nil {
					t.Fatal(err)
				}
				return strings.TrimSpace(out.String())
			}
			if got := run(); got != "open" {
				t.Fatalf("before: a child sees descriptor %d %s, want open (the baseline)", fd, got)
			}
			if err := mark(fd); err != nil {
				t.Fatal(err)
			}
			if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
				t.Errorf("descriptor %d flags = %#x, %v; want FD_CLOEXEC", fd, flags, err)
			}
			if got := run(); got != "closed" {
				t.Errorf("after: a child sees descriptor %d %s, want closed", fd, got)
			}
		})
	}
}

// runChild runs cmd to its end registered with the process's reaper, as the
// runner's own children are, so that a reaper pass (once a test has made
// the process a subreaper) cannot reap it before cmd.Wait does.
func runChild(tb testing.TB, cmd *osexec.Cmd) error {
	tb.Helper()
	registered := reaperOf.spawning()
	err := cmd.Start()
	pid := 0
	if err == nil {
		pid = cmd.Process.Pid
	}
	registered(pid)
	if err != nil {
		return err
	}
	defer reaperOf.reaped(pid)
	return cmd.Wait()
}
