package exec

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/testenv"
)

func TestKilledByAndUsage(t *testing.T) {
	e := newTestExecutor(t, nil)
	timedOut := mustRun(t, e, Spec{Command: "sleep 30", Timeout: 100 * time.Millisecond})
	if timedOut.KilledBy != KilledByTimeout {
		t.Errorf("timed out job: KilledBy = %q, want %q", timedOut.KilledBy, KilledByTimeout)
	}

	j, err := e.Start(testCtx(t), Spec{Command: "sleep 30", Background: true})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := e.Cancel(testCtx(t), j.ID()); err != nil || s.KilledBy != KilledByCancel {
		t.Errorf("cancelled job: KilledBy = %q (%v), want %q", s.KilledBy, err, KilledByCancel)
	}

	busy := mustRun(t, e, Spec{Command: "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done"})
	if busy.KilledBy != "" || busy.Usage.CPUTime <= 0 || busy.Usage.PeakMemoryBytes <= 0 {
		t.Errorf("busy job: KilledBy %q, usage %+v; want not killed, CPU time and peak memory", busy.KilledBy, busy.Usage)
	}

	e2 := newTestExecutor(t, nil)
	j2, err := e2.Start(testCtx(t), Spec{Command: "sleep 30", Background: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := e2.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := j2.Snapshot(); s.KilledBy != KilledByShutdown {
		t.Errorf("job stopped by Close: KilledBy = %q, want %q", s.KilledBy, KilledByShutdown)
	}
}

// TestSnapshotLimitsAndEnforcement: a job records the limits in effect
// (its spec's, completed by the defaults) and how this host enforces each.
func TestSnapshotLimitsAndEnforcement(t *testing.T) {
	t.Run("group", func(t *testing.T) {
		e := newTestExecutor(t, func(o *Options) {
			o.Containment = ContainmentGroup
			o.Limits = Limits{Pids: 512, CPU: 2}
		})
		s := mustRun(t, e, Spec{Command: "true", Limits: Limits{MemoryBytes: 1 << 30}})
		if want := (Limits{Pids: 512, MemoryBytes: 1 << 30, CPU: 2}); s.Limits != want {
			t.Errorf("Limits = %v, want %v", s.Limits, want)
		}
		want := LimitEnforcement{Pids: EnforcedNone, MemoryBytes: EnforcedRlimit, CPU: EnforcedNone}
		if s.Enforcement != want {
			t.Errorf("Enforcement = %+v, want %+v", s.Enforcement, want)
		}
		if s := mustRun(t, newTestExecutor(t, func(o *Options) { o.Containment = ContainmentGroup }), Spec{Command: "true"}); s.Enforcement != (LimitEnforcement{}) || !s.Limits.IsZero() {
			t.Errorf("a job without limits: %v %+v, want none", s.Limits, s.Enforcement)
		}
	})
	t.Run("cgroup", func(t *testing.T) {
		// Without v1 groups: the controllers cgroup2 lacks fall to the
		// watcher (TestCgroupV1Limits covers the v1 groups).
		e := newTestExecutor(t, func(o *Options) { o.Containment = ContainmentAuto; o.NoCgroupV1 = true })
		info := e.Containment()
		if info.Mode != ContainmentCgroup {
			testenv.Need(t, "no cgroup v2 subtree here: %s", info.Reason)
		}
		s := mustRun(t, e, Spec{Command: "true", Limits: Limits{Pids: 64, MemoryBytes: 1 << 30, CPU: 1}})
		has := func(c string) bool { return slices.Contains(info.Controllers, c) }
		want := LimitEnforcement{Pids: EnforcedWatcher, MemoryBytes: EnforcedWatcher, CPU: EnforcedNone}
		if e.run.CanFreeze() {
			want.CPU = EnforcedWatcher // frozen past its share
		}
		if has("pids") {
			want.Pids = EnforcedCgroup
		}
		if has("memory") {
			want.MemoryBytes = EnforcedCgroup
		}
		if has("cpu") {
			want.CPU = EnforcedCgroup
		}
		if s.Enforcement != want {
			t.Errorf("Enforcement with controllers %v = %+v, want %+v", info.Controllers, s.Enforcement, want)
		}
	})
}

// TestCPULimitByFreezing: in cgroup mode without the cpu controller, a
// busy job limited to a tenth of a CPU gets about that, and one frozen
// when it is cancelled still sees its SIGTERM at once.
func TestCPULimitByFreezing(t *testing.T) {
	e := newTestExecutor(t, func(o *Options) {
		o.Containment = ContainmentAuto
		o.Grace = 5 * time.Second
		o.NoCgroupV1 = true // the watcher, not cpu.cfs_quota_us
	})
	info := e.Containment()
	if info.Mode != ContainmentCgroup {
		testenv.Need(t, "no cgroup v2 subtree here: %s", info.Reason)
	}
	if slices.Contains(info.Controllers, "cpu") || !e.run.CanFreeze() {
		testenv.Need(t, "the cpu controller is delegated (or cgroup.freeze is missing): cpu.max, not the watcher, limits CPU here, so the watcher goes untested")
	}
	busy := `end=$((SECONDS+2)); while [ $SECONDS -lt $end ]; do :; done; echo done`
	s := mustRun(t, e, Spec{Command: busy, Limits: Limits{CPU: 0.1}})
	if s.Enforcement.CPU != EnforcedWatcher || s.ExitCode == nil || *s.ExitCode != 0 || s.Stdout.Text != "done\n" {
		t.Fatalf("limited busy job: enforcement %+v, exit %v, stdout %q", s.Enforcement, s.ExitCode, s.Stdout.Text)
	}
	// 0.1 of the wall time it ran, plus the burst it may bank, plus what it
	// could use between two rounds of the watch: the longest gap the watch
	// saw in this run (the interval on a quiet machine, more under load),
	// so the bound neither flakes nor loosens with the load; and 20 ms for
	// the freeze to take hold.
	gap := e.run.LongestWatchGap()
	bound := time.Duration(0.1*float64(s.Duration)) + 10*time.Millisecond + gap + 20*time.Millisecond
	if s.Usage.CPUTime > bound {
		t.Errorf("a job limited to 0.1 CPU used %v in %v, want at most %v (longest watch gap %v)", s.Usage.CPUTime, s.Duration, bound, gap)
	}
	t.Logf("limited to 0.1 CPU: used %v of CPU in %v (longest watch gap %v)", s.Usage.CPUTime, s.Duration, gap)

	// Frozen most of the time; a cancel thaws it so its trap runs.
	j, err := e.Start(testCtx(t), Spec{Command: `trap 'echo got-term; exit 0' TERM; while :; do :; done`, Background: true, Limits: Limits{CPU: 0.01}})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // long enough to be frozen
	start := time.Now()
	snap, err := e.Cancel(testCtx(t), j.ID())
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 3*time.Second || snap.Stdout.Text != "got-term\n" {
		t.Errorf("cancelling a throttled job took %v, stdout %q; want the trap's output well within the 5 s grace", took, snap.Stdout.Text)
	}
}

// TestMemoryLimitBeforeFirstInstruction starts 200 jobs at once in group
// mode, each with a memory limit, whose command reads its own RLIMIT_AS
// first thing, and a child's: every one must be limited (a limit set after
// the spawn leaves a window in which the command runs without it).
func TestMemoryLimitBeforeFirstInstruction(t *testing.T) {
	const jobs = 200
	const limit = 512 << 20
	e := newTestExecutor(t, func(o *Options) {
		o.Containment = ContainmentGroup
		o.MaxRunning = jobs
	})
	cmd := `ulimit -v; ulimit -Hv; grep '^Max address space' /proc/self/limits`
	js := make([]*Job, jobs)
	for i := range js {
		j, err := e.Start(testCtx(t), Spec{Command: cmd, Background: true, Limits: Limits{MemoryBytes: limit}})
		if err != nil {
			t.Fatal(err)
		}
		js[i] = j
	}
	want := fmt.Sprintf("%d\n%d\nMax address space %d %d bytes", limit>>10, limit>>10, limit, limit)
	unlimited := 0
	for _, j := range js {
		s, err := j.Wait(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(strings.Fields(s.Stdout.Text), " "); got != strings.Join(strings.Fields(want), " ") {
			unlimited++
			if unlimited <= 3 {
				t.Errorf("job %s saw %q, want %q", s.ID, s.Stdout.Text, want)
			}
		}
	}
	if unlimited > 0 {
		t.Errorf("%d of %d jobs ran some instruction without their memory limit", unlimited, jobs)
	}
}
