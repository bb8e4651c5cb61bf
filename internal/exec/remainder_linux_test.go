package exec

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/proc"
	"github.com/dshd/dshd/internal/testenv"
)

// sleepers returns the pids of processes running `sleep arg`.
func sleepers(arg string) []int {
	var pids []int
	for _, st := range proc.ScanProcs() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", st.PID()))
		if err == nil && string(b) == "sleep\x00"+arg+"\x00" && st.State() != 'Z' {
			pids = append(pids, st.PID())
		}
	}
	return pids
}

// TestRemainderAccounted: a foreground job whose leader exits while a
// process it started runs on (`nohup sleep … &`) says so on its record,
// holds its agent's background slot while that process runs, and Cancel
// kills it; one that ends on its own frees the slot by itself. In both
// containment modes.
func TestRemainderAccounted(t *testing.T) {
	for _, mode := range []string{ContainmentCgroup, ContainmentGroup} {
		t.Run(mode, func(t *testing.T) {
			e := newTestExecutor(t, func(o *Options) {
				o.Containment = ContainmentAuto
				if mode == ContainmentGroup {
					o.Containment = ContainmentGroup
				}
				o.MaxBackgroundPerAgent = 1
			})
			if e.Containment().Mode != mode {
				testenv.Need(t, "no cgroup v2 subtree here: %s", e.Containment().Reason)
			}
			arg := fmt.Sprintf("777.%d", rand.IntN(1e9))
			t.Cleanup(func() {
				for _, pid := range sleepers(arg) {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			})
			s := mustRun(t, e, Spec{AgentID: "a1", Command: "nohup sleep " + arg + " >/dev/null 2>&1 & echo started"})
			if s.State != StateExited || strings.TrimSpace(s.Stdout.Text) != "started" {
				t.Fatalf("job = %s, stdout %q", s.State, s.Stdout.Text)
			}
			// nohup may not have exec'd sleep yet when the leader ends.
			for deadline := time.Now().Add(2 * time.Second); len(sleepers(arg)) == 0 && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond)
			}
			if len(sleepers(arg)) != 1 {
				t.Fatalf("sleep %s is not running", arg)
			}
			if s.Remaining == nil || s.Remaining.Processes != 1 || !s.Remaining.Since.Equal(*s.EndedAt) {
				t.Errorf("Remaining = %+v, want 1 process since %v", s.Remaining, s.EndedAt)
			}
			// Busy counts the leftover (its agent's only), not another
			// agent's jobs.
			if n := e.Busy([]string{"a1"}, 0); n != 1 {
				t.Errorf("Busy(a1) with the leftover = %d, want 1", n)
			}
			if n := e.Busy([]string{"a2"}, 0); n != 0 {
				t.Errorf("Busy(a2) = %d, want 0", n)
			}
			// The leftover counts as the agent's one background job.
			_, err := e.Start(testCtx(t), Spec{AgentID: "a1", Command: "true", Background: true})
			var tm *TooManyJobsError
			if !errors.As(err, &tm) || tm.Limit != "agent" {
				t.Errorf("a background job beside the leftover: %v, want the agent's cap", err)
			}
			// Cancel kills it, though the job had finished.
			c, err := e.Cancel(testCtx(t), s.ID)
			if err != nil {
				t.Fatal(err)
			}
			if left := sleepers(arg); len(left) > 0 {
				t.Errorf("sleep %s still runs after Cancel: %v", arg, left)
			}
			if c.Remaining != nil || c.State != StateExited {
				t.Errorf("after Cancel: state %s, Remaining %+v; want exited, none", c.State, c.Remaining)
			}
			if n := e.Busy([]string{"a1"}, 0); n != 0 {
				t.Errorf("Busy(a1) once the leftover is killed = %d, want 0", n)
			}
			if j, err := e.Start(testCtx(t), Spec{AgentID: "a1", Command: "true", Background: true}); err != nil {
				t.Errorf("a background job once the leftover is gone: %v", err)
			} else {
				j.Wait(testCtx(t))
			}

			// A leftover that ends by itself frees the slot by itself.
			s = mustRun(t, e, Spec{AgentID: "a1", Command: "sleep 0.3 & echo started"})
			if s.Remaining == nil {
				t.Errorf("a job leaving `sleep 0.3` has no Remaining")
			}
			deadline := time.Now().Add(5 * time.Second)
			for {
				j, _ := e.Job(s.ID)
				if j.Snapshot().Remaining == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("Remaining still %+v 5 s after its process ended", j.Snapshot().Remaining)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if j, err := e.Start(testCtx(t), Spec{AgentID: "a1", Command: "true", Background: true}); err != nil {
				t.Errorf("a background job once the leftover ended: %v", err)
			} else {
				j.Wait(testCtx(t))
			}
		})
	}
}
