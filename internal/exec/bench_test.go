package exec

import (
	"context"
	"fmt"
	"os"
	osexec "os/exec"
	"runtime"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/cgroup"
	"github.com/dshd/dshd/internal/shellenv"
)

// The floor: what spawning `bash -c true` costs straight from Go.
func BenchmarkSpawnDirect(b *testing.B) {
	for b.Loop() {
		if err := runChild(b, osexec.Command("bash", "-c", "true")); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExecutorForeground is a foreground job of `true`: Start, Wait.
func BenchmarkExecutorForeground(b *testing.B) {
	e := newTestExecutor(b, func(o *Options) { o.Environ = testEnviron() })
	ctx := context.Background()
	spec := Spec{Command: "true", Managed: shellenv.NewOverlay(map[string]string{"DSH_HOME": "/h", "DSH_SHELL": "1"})}
	b.ReportAllocs()
	for b.Loop() {
		runTrue(b, e, ctx, spec)
	}
}

func runTrue(b *testing.B, e *Executor, ctx context.Context, spec Spec) {
	j, err := e.Start(ctx, spec)
	if err != nil {
		b.Fatal(err)
	}
	if s, err := j.Wait(ctx); err != nil || s.ExitCode == nil || *s.ExitCode != 0 {
		b.Fatalf("wait: %v %+v", err, s)
	}
}

// parallelism gives 8 goroutines in total whatever GOMAXPROCS is.
func parallelism() int {
	p := 8 / max(1, testingProcs())
	return max(1, p)
}

func BenchmarkSpawnDirectParallel8(b *testing.B) {
	b.SetParallelism(parallelism())
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := runChild(b, osexec.Command("bash", "-c", "true")); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkExecutorForegroundParallel8(b *testing.B) {
	e := newTestExecutor(b, func(o *Options) { o.Environ = testEnviron() })
	ctx := context.Background()
	spec := Spec{Command: "true", Managed: shellenv.NewOverlay(map[string]string{"DSH_HOME": "/h", "DSH_SHELL": "1"})}
	b.ReportAllocs()
	b.SetParallelism(parallelism())
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			runTrue(b, e, ctx, spec)
		}
	})
}

// BenchmarkLatency runs both sides interleaved, so machine noise hits them
// alike, and reports medians, p99s and their ratio.
func BenchmarkLatency(b *testing.B) {
	e := newTestExecutor(b, func(o *Options) { o.Environ = testEnviron() })
	ctx := context.Background()
	spec := Spec{Command: "true", Managed: shellenv.NewOverlay(map[string]string{"DSH_HOME": "/h", "DSH_SHELL": "1"})}
	var direct, exec []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if err := runChild(b, osexec.Command("bash", "-c", "true")); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		runTrue(b, e, ctx, spec)
		direct = append(direct, t1.Sub(t0))
		exec = append(exec, time.Since(t1))
	}
	q := func(d []time.Duration, p float64) time.Duration {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return d[min(len(d)-1, int(p*float64(len(d))))]
	}
	dm, em := q(direct, 0.5), q(exec, 0.5)
	dp, ep := q(direct, 0.99), q(exec, 0.99)
	b.ReportMetric(float64(dm.Microseconds()), "direct-p50-µs")
	b.ReportMetric(float64(em.Microseconds()), "exec-p50-µs")
	b.ReportMetric(float64(em)/float64(dm), "p50-ratio")
	b.ReportMetric(float64(ep)/float64(dp), "p99-ratio")
	b.ReportMetric(0, "ns/op")
}

func testingProcs() int { return runtime.GOMAXPROCS(0) }

// BenchmarkGroupMemoryLimit is a foreground job of `true` in group mode,
// with and without a memory limit: the limit costs the exec of the shell
// that sets RLIMIT_AS (commandLine).
func BenchmarkGroupMemoryLimit(b *testing.B) {
	for _, lim := range []int64{0, 512 << 20} {
		b.Run(fmt.Sprintf("memoryBytes=%d", lim), func(b *testing.B) {
			e := newTestExecutor(b, func(o *Options) { o.Containment = ContainmentGroup })
			spec := Spec{Command: "true", Limits: Limits{MemoryBytes: lim}}
			for b.Loop() {
				runTrue(b, e, context.Background(), spec)
			}
		})
	}
}

// BenchmarkForkBombPeak runs a fork bomb under pids 64 with the cgroup v1
// groups of a hybrid host (the kernel's pids.peak) and without them (the
// watcher: the most processes seen in the job's cgroup, sampled every
// millisecond), and reports the highest peak of each and how long each
// took to end the job. The watcher's bomb is born in a v1 pids group
// capped at benchBombCap, so it cannot take the host down: a peak at the
// cap means "at least".
func BenchmarkForkBombPeak(b *testing.B) {
	v1 := newTestExecutor(b, func(o *Options) { o.Containment = ContainmentAuto })
	w := newTestExecutor(b, func(o *Options) { o.Containment = ContainmentAuto; o.NoCgroupV1 = true })
	if !slices.Contains(v1.Containment().V1Controllers, "pids") {
		b.Skip("no cgroup v1 pids controller for jobs here")
	}
	v, err := cgroup.OpenV1(fmt.Sprintf("dshd-bench-%d", os.Getpid()), []string{"pids"})
	if err != nil || v == nil {
		b.Fatalf("a v1 pids group for the safety cap: %v", err)
	}
	defer v.Close()
	capped, err := v.Create("cap", cgroup.Limits{Pids: benchBombCap})
	if err != nil {
		b.Fatal(err)
	}
	defer capped.Remove()
	ctx := context.Background()
	spec := Spec{Command: `bomb() { bomb | bomb & }; bomb; sleep 30`, Background: true, Limits: Limits{Pids: 64}, Timeout: time.Minute}
	var v1Peak, wPeak int64
	var v1Took, wTook time.Duration
	for b.Loop() {
		j, err := v1.Start(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		s, _ := j.Wait(ctx)
		v1Peak, v1Took = max(v1Peak, s.Usage.PeakPids), max(v1Took, s.Duration)
		if err := cgroup.OnOwnThread(func() error {
			return capped.Spawn(func() error { j, err = w.Start(ctx, spec); return err })
		}); err != nil {
			b.Fatal(err)
		}
		seen := 0
		for done := false; !done; {
			select {
			case <-j.proc.Done():
				done = true
			case <-time.After(time.Millisecond):
				seen = max(seen, len(j.proc.Group().Procs()))
			}
		}
		s, _ = j.Wait(ctx)
		wPeak, wTook = max(wPeak, int64(seen)), max(wTook, s.Duration)
	}
	for deadline := time.Now().Add(10 * time.Second); len(capped.Procs()) > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond) // the last bomb's processes are dying
	}
	b.ReportMetric(float64(v1Peak), "v1-peak-tasks")
	b.ReportMetric(float64(wPeak), "watcher-peak-procs")
	b.ReportMetric(float64(v1Took.Milliseconds()), "v1-end-ms")
	b.ReportMetric(float64(wTook.Milliseconds()), "watcher-end-ms")
}

// benchBombCap bounds the fork bomb BenchmarkForkBombPeak runs under the
// watcher.
const benchBombCap = 4096
