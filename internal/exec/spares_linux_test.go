package exec

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/proc"
	"github.com/dshd/dshd/internal/shellenv"
	"github.com/dshd/dshd/internal/testenv"
)

// sparesExecutor is an executor with a cgroup per job, or the test is
// skipped (testenv.Need) where the host has no cgroup v2 subtree.
func sparesExecutor(t *testing.T) *Executor {
	t.Helper()
	e := newTestExecutor(t, func(o *Options) { o.Containment = ContainmentAuto })
	if e.Containment().Mode != ContainmentCgroup {
		testenv.Need(t, "no cgroup v2 subtree here: %s", e.Containment().Reason)
	}
	return e
}

// groupsIn lists the job groups in the executor's subtree.
func groupsIn(t *testing.T, e *Executor) []string {
	t.Helper()
	ents, err := os.ReadDir(e.Containment().CgroupDir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range ents {
		if de.IsDir() {
			names = append(names, de.Name())
		}
	}
	return names
}

// ownCgroup is a command printing the last element of its cgroup v2 path.
const ownCgroup = `sed -n 's|^0::.*/||p' /proc/self/cgroup`

// TestSparesAreJobGroups: groups made ahead of their jobs are the jobs'
// groups as any other, <subtree>/<job id>, with the job's process born in
// it; ids keep increasing in the order jobs start; the spares waiting are
// empty groups named by ids after every id handed out; Close removes them
// with the subtree.
func TestSparesAreJobGroups(t *testing.T) {
	t.Parallel()
	e := sparesExecutor(t)
	var ids []string
	for i := range 12 {
		j := mustStart(t, e, Spec{Command: ownCgroup})
		<-j.Done()
		snap := j.Snapshot()
		if got := strings.TrimSpace(snap.Stdout.Text); got != j.ID() {
			t.Fatalf("job %d (%s) ran in cgroup %q", i, j.ID(), got)
		}
		ids = append(ids, j.ID())
	}
	if !slices.IsSorted(ids) || len(slices.Compact(slices.Clone(ids))) != len(ids) {
		t.Fatalf("ids not strictly increasing: %v", ids)
	}
	// The last job's end removes its group and the filler has made the
	// spares: wait for the subtree to settle on spares alone.
	var groups []string
	deadline := time.Now().Add(5 * time.Second)
	for {
		groups = groupsIn(t, e)
		if len(groups) == proc.SparesWanted && !slices.Contains(groups, ids[len(ids)-1]) || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if len(groups) != proc.SparesWanted {
		t.Fatalf("subtree holds %v, want %d spares", groups, proc.SparesWanted)
	}
	for _, g := range groups {
		if !strings.HasPrefix(g, "job_") || g <= ids[len(ids)-1] {
			t.Errorf("spare %q: not a job id after the last one handed out (%s)", g, ids[len(ids)-1])
		}
		b, err := os.ReadFile(filepath.Join(e.Containment().CgroupDir, g, "cgroup.procs"))
		if err != nil || len(b) != 0 {
			t.Errorf("spare %s holds %q (%v)", g, b, err)
		}
	}
	// A job takes the oldest spare.
	j := mustStart(t, e, Spec{Command: ownCgroup})
	<-j.Done()
	if slices.Min(groups) != j.ID() {
		t.Errorf("job %s did not take the oldest spare of %v", j.ID(), groups)
	}
	dir := e.Containment().CgroupDir
	if err := e.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("after Close the subtree %s is still there (%v): %v", dir, err, groupsIn(t, e))
	}
}

// TestStaleSparesPassedOver: a spare older than its bound is not taken (its
// id would say the job began before it did); it is removed, and the job
// gets a fresh id and group.
func TestStaleSparesPassedOver(t *testing.T) {
	t.Parallel()
	e := warmSpares(t)
	stale := e.run.AgeSpares()
	j := mustStart(t, e, Spec{Command: ownCgroup})
	<-j.Done()
	if slices.Contains(stale, j.ID()) {
		t.Fatalf("job took the stale spare %s", j.ID())
	}
	if got := strings.TrimSpace(j.Snapshot().Stdout.Text); got != j.ID() {
		t.Fatalf("job %s ran in cgroup %q", j.ID(), got)
	}
	for _, id := range stale {
		if !gone(filepath.Join(e.Containment().CgroupDir, id)) {
			t.Errorf("stale spare %s was not removed", id)
		}
	}
}

// TestSpareOfUnstartedJobRemoved: a reservation released without a start
// leaves no group behind, nor does one whose start fails.
func TestSpareOfUnstartedJobRemoved(t *testing.T) {
	t.Parallel()
	e := warmSpares(t)

	r, err := e.Reserve(testCtx(t), Spec{Command: "true"})
	if err != nil {
		t.Fatal(err)
	}
	released := filepath.Join(e.Containment().CgroupDir, r.ID())
	if _, err := os.Stat(released); err != nil {
		t.Fatalf("the reservation %s holds no spare: %v", r.ID(), err)
	}
	r.Release()
	if !gone(released) {
		t.Errorf("released reservation's group %s is still there", released)
	}

	// A start that fails at the spawn (its directory went away after the
	// reservation): the spare it took goes with it.
	waitSpares(t, e, proc.SparesWanted)
	cwd := t.TempDir()
	r, err = e.Reserve(testCtx(t), Spec{Command: "true", Cwd: cwd})
	if err != nil {
		t.Fatal(err)
	}
	failed := filepath.Join(e.Containment().CgroupDir, r.ID())
	if _, err := os.Stat(failed); err != nil {
		t.Fatalf("the reservation %s holds no spare: %v", r.ID(), err)
	}
	if err := os.Remove(cwd); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Start(shellenv.Overlay{}); err == nil {
		t.Fatal("a job in a removed directory started")
	}
	if !gone(failed) {
		t.Errorf("failed start's group %s is still there", failed)
	}
}

// warmSpares is sparesExecutor once a first job has run and the spares
// are all ready.
func warmSpares(t *testing.T) *Executor {
	t.Helper()
	e := sparesExecutor(t)
	j := mustStart(t, e, Spec{Command: "true"})
	<-j.Done()
	waitSpares(t, e, proc.SparesWanted)
	return e
}

// waitSpares waits until n spares are ready.
func waitSpares(t *testing.T, e *Executor, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; {
		ready := e.run.ReadySpares()
		if ready >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d spares ready after 5 s, want %d", ready, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// gone waits up to 5 s for path to disappear.
func gone(path string) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if _, err := os.Stat(path); os.IsNotExist(err) {
			return true
		}
	}
	return false
}

// TestProbeNotReapedBySubreaper: the cgroup probe at an executor's start
// (a child that the probe's own Wait4 reaps) is not taken by the reaper,
// which runs once any executor of the process has made it a subreaper.
// Once, in CI, a parallel test's reaper took it, and the executor fell
// back to group mode with "wait for probe: no child processes". Here a
// goroutine runs reaper passes back to back while executors start.
func TestProbeNotReapedBySubreaper(t *testing.T) {
	if err := proc.StartSubreaper(); err != nil {
		testenv.Need(t, "cannot become a child subreaper: %v", err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				proc.ReapAdopted()
			}
		}
	}()
	defer func() {
		close(stop)
		<-done
	}()
	for i := range 30 {
		e := newTestExecutor(t, func(o *Options) { o.Containment = ContainmentAuto })
		info := e.Containment()
		if err := e.Close(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		if info.Mode != ContainmentCgroup {
			if strings.Contains(info.Reason, "no child processes") {
				t.Fatalf("executor %d: the reaper took the probe: %s", i, info.Reason)
			}
			testenv.Need(t, "no cgroup v2 subtree here: %s", info.Reason)
		}
	}
}
