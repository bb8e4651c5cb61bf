package exec

import (
	"strings"
	"testing"

	"github.com/dshd/dshd/internal/proc"
)

// TestLeaderStartFromClock: the start time the spawn takes from the clock
// is the one the kernel reports in /proc/<pid>/stat, which crash recovery
// compares to tell the leader from a process that got its pid later.
func TestLeaderStartFromClock(t *testing.T) {
	t.Parallel()
	if proc.ClockTicks() == 0 {
		t.Fatal("no AT_CLKTCK in /proc/self/auxv")
	}
	e := newTestExecutor(t, nil)
	known := 0
	for range 30 {
		// $$ is the leader: bash execs cat in its own process.
		j := mustStart(t, e, Spec{Command: "cat /proc/$$/stat"})
		<-j.Done()
		out := j.Snapshot().Stdout.Text
		st, ok := proc.ParseStat(j.Snapshot().PID, strings.TrimSpace(out))
		if !ok {
			t.Fatalf("job printed %q, not its stat line", out)
		}
		clock := j.proc.ClockStart()
		if clock == 0 {
			continue // a tick boundary fell inside the spawn: /proc is read instead
		}
		known++
		if clock != st.Start() {
			t.Errorf("start time from the clock %d, /proc says %d", clock, st.Start())
		}
	}
	// How many spawns fall within one tick depends on the machine's load
	// (a spawn is some 0.2 ms, a tick 10 ms, but a loaded CI machine can
	// stretch a spawn); none at all means the clock is never used.
	t.Logf("the clock gave the start time of %d spawns of 30", known)
	if known == 0 {
		t.Error("the clock gave the start time of no spawn of 30: /proc was read every time")
	}
}
