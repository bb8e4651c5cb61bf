package exec

import (
	"os"
	"testing"

	"github.com/dshd/dshd/internal/cgroup"
)

// TestDescriptorsPerRunningJob: a running job holds its two output pipes
// and its pidfd, and no more, past the few groups that keep their files
// open (cgroup.KeepStats): with the usual limit of 20,000 descriptors,
// 5,000 jobs at once must fit. 600 background sleeps, counted in this
// process's descriptor table.
func TestDescriptorsPerRunningJob(t *testing.T) {
	e := newTestExecutor(t, func(o *Options) { o.Containment = ContainmentAuto; o.MaxRunning = 1000 })
	count := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	warm := mustStart(t, e, Spec{Command: "true"})
	<-warm.Done()
	before := count()
	const n = 600
	jobs := make([]*Job, 0, n)
	for range n {
		jobs = append(jobs, mustStart(t, e, Spec{Command: "exec sleep 60", Background: true}))
	}
	during := count() - before
	for _, j := range jobs {
		if _, err := e.Cancel(testCtx(t), j.ID()); err != nil {
			t.Fatal(err)
		}
	}
	// Three per job, two per group keeping its files, a few more (the
	// spares' directories, the runtime's). Five per job would be 3,000.
	limit := 3*n + 2*cgroup.MaxKeptStats + 64
	t.Logf("%d running jobs hold %d descriptors (containment %s); at most %d", n, during, e.Containment().Mode, limit)
	if during > limit {
		t.Errorf("%d running jobs hold %d descriptors, more than %d", n, during, limit)
	}
}

// TestCloseClosesEndedJobsPipes: Close returns only once the jobs that
// ended just before have closed their output pipes (our read ends are
// closed after a job's end is signalled, proc.wait), as it closes the
// pairs still waiting to be taken. The pairs are the ones made ahead, so
// the test knows them; it looks right after Close, without waiting.
func TestCloseClosesEndedJobsPipes(t *testing.T) {
	for _, mode := range []string{ContainmentAuto, ContainmentGroup} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			e, err := New(Options{Home: t.TempDir(), Environ: testEnviron(), DefaultCwd: t.TempDir(), Containment: mode})
			if err != nil {
				t.Fatal(err)
			}
			mustRun(t, e, Spec{Command: "true"}) // the filler starts
			made := readyPairs(t, e)
			var jobs []*Job
			for range len(made) { // each takes one of made, oldest first
				jobs = append(jobs, mustStart(t, e, Spec{Command: "echo out; echo err >&2"}))
			}
			for _, j := range jobs {
				<-j.Done()
			}
			waiting := readyPairs(t, e)
			if err := e.Close(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			for _, p := range append(made, waiting...) {
				for _, f := range p {
					if !closed(f) {
						t.Errorf("%s is open after Close", f.Name())
					}
				}
			}
		})
	}
}
