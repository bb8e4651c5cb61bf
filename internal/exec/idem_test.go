package exec

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/shellenv"
)

// TestIdempotencyKeysPersist: keys outlive the executor (a restart) for
// their window, a failed start leaves its key unused, a line cut short by a
// crash is skipped, and a key whose window has passed is free again.
func TestIdempotencyKeysPersist(t *testing.T) {
	home, cwd := t.TempDir(), t.TempDir()
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	open := func() *Executor {
		e, err := New(Options{Home: home, Environ: testEnviron(), DefaultCwd: cwd, Now: clock, IdempotencyWindow: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	closeE := func(e *Executor) {
		ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	spec := Spec{Command: "echo run >> count", IdempotencyKey: "k", AgentID: "agt_a"}
	e := open()
	first := mustRun(t, e, spec)
	bad := Spec{Command: "true", Cwd: filepath.Join(cwd, "missing"), IdempotencyKey: "failed"}
	if _, err := e.Start(testCtx(t), bad); !errors.Is(err, ErrInvalidCwd) {
		t.Fatalf("Start in a missing cwd = %v", err)
	}
	closeE(e)

	path := filepath.Join(home, "jobs", idemFileName)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString(`{"op":"put","key":"cut`) // a crash in the middle of a line
	_ = f.Close()

	e = open()
	if _, err := e.Start(testCtx(t), spec); !errors.Is(err, ErrIdempotencyJobGone) || !strings.Contains(err.Error(), first.ID) {
		t.Errorf("same key after a restart = %v, want ErrIdempotencyJobGone naming %s", err, first.ID)
	}
	other := spec
	other.Command = "echo other"
	if _, err := e.Start(testCtx(t), other); !errors.Is(err, ErrIdempotencyKeyReused) {
		t.Errorf("another request after a restart = %v, want ErrIdempotencyKeyReused", err)
	}
	bad.Cwd = ""
	mustRun(t, e, bad) // the failed start left its key unused
	if b, _ := os.ReadFile(filepath.Join(cwd, "count")); string(b) != "run\n" {
		t.Errorf("command ran %d times, want once", strings.Count(string(b), "run"))
	}
	closeE(e)

	mu.Lock()
	now = now.Add(time.Hour)
	mu.Unlock()
	e = open()
	defer closeE(e)
	if again := mustRun(t, e, spec); again.ID == first.ID {
		t.Error("a key past its window returned the old job")
	}
	if b, _ := os.ReadFile(filepath.Join(cwd, "count")); string(b) != "run\nrun\n" {
		t.Errorf("after the window the command ran %d times in all, want twice", strings.Count(string(b), "run"))
	}
	if fi, err := os.Lstat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v, mode %v; want 0600", err, fi.Mode())
	}
}

// TestIdempotencyCompaction: the key file is rewritten once it holds more
// than twice the live keys, keeping every live key.
func TestIdempotencyCompaction(t *testing.T) {
	e := newTestExecutor(t, nil)
	for i := range 1100 {
		r, err := e.Reserve(testCtx(t), Spec{Command: "true", IdempotencyKey: "k", Cwd: filepath.Join(t.TempDir(), "missing")})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Start(shellenv.Overlay{}); !errors.Is(err, ErrInvalidCwd) {
			t.Fatalf("start %d = %v", i, err)
		}
	}
	live := mustRun(t, e, Spec{Command: "true", IdempotencyKey: "live"})
	path := filepath.Join(e.opts.Home, "jobs", idemFileName)
	before, _ := os.ReadFile(path)
	e.idemMaybeCompact()
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(after), "\n"); n != 1 || !strings.Contains(string(after), live.ID) {
		t.Errorf("after compaction (%d lines before) the file has %d lines: %s", strings.Count(string(before), "\n"), n, after)
	}
	if got, err := e.Start(testCtx(t), Spec{Command: "true", IdempotencyKey: "live"}); err != nil || got.ID() != live.ID {
		t.Errorf("live key after compaction = %v, %v", got, err)
	}
	mustRun(t, e, Spec{Command: "true", IdempotencyKey: "after"}) // appends to the new file
	if b, _ := os.ReadFile(path); strings.Count(string(b), "\n") != 2 {
		t.Errorf("append after compaction: %s", b)
	}
}
