package exec

import (
	"context"
	"fmt"
	osexec "os/exec"
	"runtime"
	"sort"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/shellenv"
)

// The floor: what spawning `bash -c true` costs straight from Go.
func BenchmarkSpawnDirect(b *testing.B) {
	for b.Loop() {
		if err := osexec.Command("bash", "-c", "true").Run(); err != nil {
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
			if err := osexec.Command("bash", "-c", "true").Run(); err != nil {
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
		if err := osexec.Command("bash", "-c", "true").Run(); err != nil {
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
