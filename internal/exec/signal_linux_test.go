package exec

import (
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/testenv"
)

// TestOneSIGTERMPerProcess cancels jobs whose leader counts its SIGTERMs
// (a trap that does not exit, in a busy loop that runs it at once) and
// whose child, in the same group, counts its own: each must see exactly
// one, in both containment modes, with and without a descendant that left
// the group. The grace's SIGKILL ends them.
func TestOneSIGTERMPerProcess(t *testing.T) {
	for _, mode := range []string{ContainmentCgroup, ContainmentGroup} {
		t.Run(mode, func(t *testing.T) {
			e := newTestExecutor(t, func(o *Options) {
				o.Containment = ContainmentAuto
				if mode == ContainmentGroup {
					o.Containment = ContainmentGroup
				}
				o.Grace = 400 * time.Millisecond
			})
			if e.Containment().Mode != mode {
				testenv.Need(t, "no cgroup v2 subtree here: %s", e.Containment().Reason)
			}
			const rounds = 12
			for i := range rounds {
				cmd := `trap 'echo T' TERM; (trap 'echo C' TERM; echo ready; while :; do :; done) & echo ready; while :; do :; done`
				ready := 2
				if i%2 == 1 {
					// A descendant outside the group: signalled on its own.
					cmd = `setsid bash -c "trap 'echo S' TERM; echo ready; while :; do :; done" & ` + cmd
					ready = 3
				}
				j, err := e.Start(testCtx(t), Spec{Command: cmd, Background: true})
				if err != nil {
					t.Fatal(err)
				}
				ctx := testCtx(t)
				for strings.Count(j.Snapshot().Stdout.Text, "ready") < ready { // every trap is set
					select {
					case <-ctx.Done():
						t.Fatalf("round %d: the traps were not set: %q", i, j.Snapshot().Stdout.Text)
					case <-time.After(5 * time.Millisecond):
					}
				}
				snap, err := e.Cancel(testCtx(t), j.ID())
				if err != nil {
					t.Fatal(err)
				}
				lines := strings.Fields(snap.Stdout.Text)
				want := map[string]int{"T": 1, "C": 1}
				if i%2 == 1 {
					want["S"] = 1
				}
				got := map[string]int{}
				for _, l := range lines {
					got[l]++
				}
				for k, n := range want {
					if got[k] != n {
						t.Errorf("round %d: %q trap ran %d times, want %d (stdout %q)", i, k, got[k], n, snap.Stdout.Text)
					}
				}
			}
		})
	}
}
