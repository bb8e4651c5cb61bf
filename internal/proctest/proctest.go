// Package proctest helps tests check on processes their commands start:
// read the pid a command wrote, and wait for a process to be gone. It
// imports testing and is for tests only.
package proctest

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Deadline bounds every wait in this package.
const Deadline = 15 * time.Second

// ReadPID waits until path holds a pid and a newline, as written by
// `echo $! > path`, and returns it. It fails the test after Deadline.
func ReadPID(tb testing.TB, path string) int {
	tb.Helper()
	deadline := time.Now().Add(Deadline)
	for {
		b, err := os.ReadFile(path)
		if err == nil && strings.HasSuffix(string(b), "\n") {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil || pid <= 0 {
				tb.Fatalf("pid file %s holds %q", path, b)
			}
			return pid
		}
		if time.Now().After(deadline) {
			tb.Fatalf("pid file %s not written within %s", path, Deadline)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Gone reports whether pid no longer runs. A killed orphan is reparented to
// PID 1, which in containers may be slow to reap it, or never do, so a
// zombie counts as gone: it runs no code and holds no resources.
func Gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return os.IsNotExist(err)
	}
	// Format: pid (comm) state ...; comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

// WaitGone fails the test unless pid is gone within Deadline. A process
// still alive then is killed, so a failing test leaves nothing behind.
func WaitGone(tb testing.TB, pid int) {
	tb.Helper()
	deadline := time.Now().Add(Deadline)
	for !Gone(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			tb.Fatalf("process %d still alive after %s", pid, Deadline)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// KillIfAlive is a cleanup for processes a failing test might leave.
func KillIfAlive(pid int) {
	if pid > 0 && !Gone(pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}
