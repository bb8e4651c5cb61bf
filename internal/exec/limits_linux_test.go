package exec

import (
	"context"
	"errors"
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
