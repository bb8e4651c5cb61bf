package exec

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
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

func TestNegativeLimitsRefused(t *testing.T) {
	for _, l := range []Limits{{Pids: -1}, {MemoryBytes: -1}, {CPU: -0.5}} {
		s := Spec{Command: "true", Limits: l}
		if err := validateSpec(&s); !errors.Is(err, ErrInvalidInput) {
			t.Errorf("validateSpec with limits %+v = %v, want ErrInvalidInput", l, err)
		}
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
		e := newTestExecutor(t, func(o *Options) { o.Containment = ContainmentAuto })
		info := e.Containment()
		if info.Mode != ContainmentCgroup {
			t.Skipf("no cgroup v2 subtree here: %s", info.Reason)
		}
		s := mustRun(t, e, Spec{Command: "true", Limits: Limits{Pids: 64, MemoryBytes: 1 << 30, CPU: 1}})
		has := func(c string) bool { return slices.Contains(info.Controllers, c) }
		want := LimitEnforcement{Pids: EnforcedWatcher, MemoryBytes: EnforcedWatcher, CPU: EnforcedNone}
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
