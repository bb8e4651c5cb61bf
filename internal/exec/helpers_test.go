package exec

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const testDeadline = 10 * time.Second

func testEnviron() []string {
	return []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=/nonexistent-home",
		"DSH_STALE=stale",
		"DSH_SESSION_ID=parent-session",
		"DSHD_TOKEN=server-token",
		"AWS_SECRET_ACCESS_KEY=aws",
		"KEEP_ME=1",
	}
}

// newTestExecutor returns an executor on a temporary home, closed at the end
// of the test. mod adjusts the options.
func newTestExecutor(tb testing.TB, mod func(*Options)) *Executor {
	tb.Helper()
	opts := Options{
		Home:       tb.TempDir(),
		Environ:    testEnviron(),
		DefaultCwd: tb.TempDir(),
		Grace:      300 * time.Millisecond,
	}
	if mod != nil {
		mod(&opts)
	}
	e, err := New(opts)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return e
}

func testCtx(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	tb.Cleanup(cancel)
	return ctx
}

// mustRun starts s and waits for the end.
func mustRun(tb testing.TB, e *Executor, s Spec) Snapshot {
	tb.Helper()
	j, err := e.Start(testCtx(tb), s)
	if err != nil {
		tb.Fatalf("Start(%q): %v", s.Command, err)
	}
	snap, err := j.Wait(testCtx(tb))
	if err != nil {
		tb.Fatalf("Wait(%q): %v", s.Command, err)
	}
	return snap
}

// readPID waits until path holds a pid written by a test command.
func readPID(tb testing.TB, path string) int {
	tb.Helper()
	deadline := time.Now().Add(testDeadline)
	for {
		b, err := os.ReadFile(path)
		if err == nil && strings.HasSuffix(string(b), "\n") {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				tb.Fatalf("pid file %s: %v", path, err)
			}
			return pid
		}
		if time.Now().After(deadline) {
			tb.Fatalf("pid file %s not written in time", path)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// processGone reports whether pid no longer runs. A killed orphan is
// reparented to PID 1, which in containers may be slow to reap it (or never
// do), so a zombie counts as gone: it runs no code and holds no resources.
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return os.IsNotExist(err)
	}
	// Format: pid (comm) state ...; comm may contain spaces and parens.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

// waitGone fails the test unless pid is gone within the deadline.
func waitGone(tb testing.TB, pid int) {
	tb.Helper()
	deadline := time.Now().Add(testDeadline)
	for !processGone(pid) {
		if time.Now().After(deadline) {
			tb.Fatalf("process %d still alive", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// killIfAlive is a cleanup for processes a failing test might leave.
func killIfAlive(pid int) {
	if pid > 0 && !processGone(pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

func readAll(tb testing.TB, j *Job, s Stream) []byte {
	tb.Helper()
	var out []byte
	buf := make([]byte, 100<<10)
	for {
		n, err := j.ReadOutput(s, int64(len(out)), buf)
		out = append(out, buf[:n]...)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			tb.Fatalf("ReadOutput: %v", err)
		}
		if n == 0 {
			tb.Fatalf("ReadOutput returned (0, nil) on a finished job at %d", len(out))
		}
	}
}
