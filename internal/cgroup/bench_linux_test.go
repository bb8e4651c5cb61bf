package cgroup

import (
	"fmt"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"
)

// BenchmarkSpawnFreshGroup measures what being born in a cgroup of its own
// costs a command: `bash -c true` spawned (clone3, exec) and reaped with
// no group given, into a group made for it (as every job's is: the group
// is made and removed outside the timed part), and into a group that has
// held a process before, interleaved in one loop so that the machine's
// load hits all three alike. It reports each median end to end and of the
// spawn call alone (the spawning thread waits there until the child lets
// go of the vfork). What the fresh group adds is the price of dshd's rule
// of one group per job, named by it; docs/performance.md gives the figures
// and why the rule stays.
func BenchmarkSpawnFreshGroup(b *testing.B) {
	m := openTest(b)
	reused, err := m.Create("reused", Limits{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = reused.Remove() })
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		b.Fatal(err)
	}
	defer devNull.Close()
	spawn := func(g *Group) (start, whole time.Duration) {
		sys := &syscall.SysProcAttr{Setpgid: true}
		if g != nil {
			sys.UseCgroupFD, sys.CgroupFD = true, g.FD()
		}
		t0 := time.Now()
		p, err := os.StartProcess("/bin/bash", []string{"bash", "-c", "true"},
			&os.ProcAttr{Env: []string{"PATH=/usr/bin:/bin"}, Files: []*os.File{devNull, devNull, devNull}, Sys: sys})
		start = time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
		if st, err := p.Wait(); err != nil || !st.Success() {
			b.Fatalf("bash -c true: %v %v", st, err)
		}
		return start, time.Since(t0)
	}
	spawn(reused) // the reused group has held a process before the loop
	var none, fresh, again, noneStart, freshStart, againStart []time.Duration
	for i := 0; b.Loop(); i++ {
		s, w := spawn(nil)
		none, noneStart = append(none, w), append(noneStart, s)

		g, err := m.Create(fmt.Sprintf("fresh-%d", i), Limits{})
		if err != nil {
			b.Fatal(err)
		}
		s, w = spawn(g)
		fresh, freshStart = append(fresh, w), append(freshStart, s)
		if err := g.Remove(); err != nil {
			b.Fatal(err)
		}

		s, w = spawn(reused)
		again, againStart = append(again, w), append(againStart, s)
	}
	median := func(d []time.Duration) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[len(s)/2].Nanoseconds()) / 1e3
	}
	b.ReportMetric(median(none), "none-µs")
	b.ReportMetric(median(fresh), "fresh-µs")
	b.ReportMetric(median(again), "reused-µs")
	b.ReportMetric(median(noneStart), "none-start-µs")
	b.ReportMetric(median(freshStart), "fresh-start-µs")
	b.ReportMetric(median(againStart), "reused-start-µs")
	b.ReportMetric(median(fresh)/median(none), "fresh-ratio")
}
