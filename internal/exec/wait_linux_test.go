package exec

import (
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/proc"
)

func osThreads(tb testing.TB) int {
	tb.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		tb.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				tb.Fatal(err)
			}
			return n
		}
	}
	tb.Fatal("no Threads: line in /proc/self/status")
	return 0
}

// TestNoThreadPerJob runs 300 jobs at once: waiting for them must not park
// an OS thread each (a blocking wait per job would add 300).
func TestNoThreadPerJob(t *testing.T) {
	const jobs = 300
	e := newTestExecutor(t, func(o *Options) { o.MaxRunning = jobs + 10 })
	var parked atomic.Int64
	allParked := make(chan struct{})
	proc.SetParkedHook(func() {
		if parked.Add(1) == jobs {
			close(allParked)
		}
	})
	defer proc.SetParkedHook(nil)
	before := osThreads(t)
	var js []*Job
	for range jobs {
		j, err := e.Start(testCtx(t), Spec{Command: "sleep 30", Background: true})
		if err != nil {
			t.Fatal(err)
		}
		js = append(js, j)
	}
	// Every waiter has found its job running and parked: a waiter that
	// held a thread would be holding it now.
	select {
	case <-allParked:
	case <-time.After(time.Minute):
		t.Fatalf("only %d of %d waiters parked in the poller within a minute", parked.Load(), jobs)
	}
	during := osThreads(t)
	for _, j := range js {
		j.proc.Stop(proc.StopCancel)
	}
	for _, j := range js {
		if s, err := j.Wait(testCtx(t)); err != nil || s.State != StateCancelled {
			t.Fatalf("job %s: %v, state %s", j.ID(), err, s.State)
		}
	}
	if grew := during - before; grew > 50 {
		t.Errorf("OS threads grew by %d (from %d) with %d running jobs; waiting must not take a thread per job", grew, before, jobs)
	}
	t.Logf("OS threads: %d before, %d with %d running jobs", before, during, jobs)
}

func TestExitStatusThroughPidfd(t *testing.T) {
	e := newTestExecutor(t, nil)
	for _, tc := range []struct {
		cmd    string
		code   int // -1: signal
		signal string
	}{
		{"exit 0", 0, ""},
		{"exit 7", 7, ""},
		{"exit 255", 255, ""},
		{"kill -TERM $$", -1, "SIGTERM"},
		{"kill -SEGV $$", -1, "SIGSEGV"},
	} {
		s := mustRun(t, e, Spec{Command: tc.cmd})
		switch {
		case tc.code >= 0 && (s.ExitCode == nil || *s.ExitCode != tc.code || s.Signal != ""):
			t.Errorf("%q: exit %v signal %q, want exit %d", tc.cmd, s.ExitCode, s.Signal, tc.code)
		case tc.code < 0 && (s.ExitCode != nil || s.Signal != tc.signal):
			t.Errorf("%q: exit %v signal %q, want signal %s", tc.cmd, s.ExitCode, s.Signal, tc.signal)
		}
	}
}
