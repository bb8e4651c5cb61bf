package exec

import (
	"context"
	"errors"
	"io"
	"os"
	osexec "os/exec"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/proc"
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

// runChild runs cmd to its end as the executor runs its own children:
// registered with the process's reaper (internal/proc's reap_linux.go), which, once a job
// has made the process a subreaper, reaps every zombie child it does not
// know, and so could reap cmd before cmd.Wait does (which then fails with
// ECHILD).
func runChild(tb testing.TB, cmd *osexec.Cmd) error {
	tb.Helper()
	registered := proc.RegisterChild()
	err := cmd.Start()
	pid := 0
	if err == nil {
		pid = cmd.Process.Pid
	}
	registered(pid)
	if err != nil {
		return err
	}
	defer proc.ChildReaped(pid)
	return cmd.Wait()
}
