package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// BenchmarkCrashRecovery50 kills the server with SIGKILL while 50
// background jobs run, restarts it on the same home, and times the restart
// until the last process of those jobs is gone. Budget: within 1 s. The
// baseline is the same server's restart to ready on a home with nothing
// left over, measured in the same run.
func BenchmarkCrashRecovery50(b *testing.B) {
	const jobs = 50
	var gone, ready, baseline time.Duration
	for range b.N {
		home := b.TempDir()
		s := startServer(b, withHome(home), withConfig("jobs:\n  retainMax: 100\n"))
		s.stop(b)
		t0 := time.Now()
		s = startServer(b, withHome(home), withConfig("jobs:\n  retainMax: 100\n"))
		baseline += time.Since(t0)

		run := randomMark(b)
		for i := range jobs {
			body := fmt.Sprintf(`{"command":"export %s='%s/%d;'; sleep 300 & sleep 300","background":true}`, markEnv, run, i)
			var j job
			if err := json.Unmarshal(s.post(b, "/exec", []byte(body)), &j); err != nil {
				b.Fatal(err)
			}
		}
		for i := range jobs {
			waitMarked(b, fmt.Sprintf("%s/%d", run, i))
		}
		s.crash(b)

		t0 = time.Now()
		done := make(chan time.Duration, 1)
		go func() {
			for time.Since(t0) < 30*time.Second {
				if pids, _ := marked(run + "/"); len(pids) == 0 {
					done <- time.Since(t0)
					return
				}
				time.Sleep(time.Millisecond)
			}
			done <- -1
		}()
		s = startServer(b, withHome(home), withConfig("jobs:\n  retainMax: 100\n"))
		ready += time.Since(t0)
		d := <-done
		if d < 0 {
			killPIDs(survivorsNow(run + "/"))
			b.Fatalf("processes of the crashed run still alive 30s after the restart")
		}
		gone += d
		s.stop(b)
	}
	n := float64(b.N)
	b.ReportMetric(float64(gone.Milliseconds())/n, "restart-to-none-left-ms")
	b.ReportMetric(float64(ready.Milliseconds())/n, "restart-to-ready-ms")
	b.ReportMetric(float64(baseline.Milliseconds())/n, "baseline-clean-restart-to-ready-ms")
}

// statusField reads a numeric field ("Threads", "VmRSS") of
// /proc/<pid>/status.
func statusField(tb testing.TB, pid int, field string) int64 {
	tb.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		tb.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return n
		}
	}
	tb.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// BenchmarkBackgroundSleeps5000 starts 5,000 background jobs that block on
// a FIFO, so that all of them run at once however long starting them takes;
// then it releases them together into 5,000 concurrent sleeps and waits
// until every one is reaped, sampling the server's OS threads and resident
// memory throughout. Budget: < 300 MiB and < 64 threads; the baseline is
// the idle server before the load.
func BenchmarkBackgroundSleeps5000(b *testing.B) {
	const jobs = 5000
	s := startServer(b, withConfig("jobs:\n  maxRunning: 5100\n  retainMax: 6000\n"))
	pid := s.cmd.Process.Pid
	threadsBefore, rssBefore := statusField(b, pid, "Threads"), statusField(b, pid, "VmRSS")
	var peakThreads atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if n := statusField(b, pid, "Threads"); n > peakThreads.Load() {
				peakThreads.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	var concurrent int
	b.ResetTimer()
	for range b.N {
		fifo := b.TempDir() + "/gate"
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			b.Fatal(err)
		}
		body := []byte(fmt.Sprintf(`{"command":"read -r _ < %s; exec sleep 2","background":true}`, fifo))
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < jobs; i += 8 {
					var j job
					if err := json.Unmarshal(s.post(b, "/exec", body), &j); err != nil || j.ID == "" {
						b.Errorf("start job: %v", err)
						return
					}
				}
			}()
		}
		wg.Wait()
		var running []job
		if err := json.Unmarshal(s.get(b, "/jobs?state=running"), &running); err != nil {
			b.Fatal(err)
		}
		concurrent = len(running)
		if concurrent != jobs {
			b.Fatalf("%d jobs running at once, want %d", concurrent, jobs)
		}
		// Opening the FIFO for writing wakes every reader; closing it
		// gives them EOF, and each job goes on to sleep.
		gate, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			b.Fatal(err)
		}
		gate.Close()
		deadline := time.Now().Add(3 * time.Minute)
		for len(running) > 0 {
			if time.Now().After(deadline) {
				b.Fatalf("%d jobs still running 3 minutes on", len(running))
			}
			time.Sleep(500 * time.Millisecond)
			if err := json.Unmarshal(s.get(b, "/jobs?state=running"), &running); err != nil {
				b.Fatal(err)
			}
		}
		var all []job
		if err := json.Unmarshal(s.get(b, "/jobs"), &all); err != nil {
			b.Fatal(err)
		}
		exited := 0
		for _, j := range all {
			if j.State == "exited" {
				exited++
			}
		}
		if exited < jobs {
			b.Fatalf("%d of %d jobs exited", exited, jobs)
		}
	}
	b.StopTimer()
	close(stop)
	<-sampled
	b.ReportMetric(float64(concurrent), "running-at-once")
	b.ReportMetric(float64(threadsBefore), "threads-before")
	b.ReportMetric(float64(peakThreads.Load()), "threads-peak")
	b.ReportMetric(float64(rssBefore)/1024, "rss-before-MiB")
	b.ReportMetric(float64(statusField(b, pid, "VmHWM"))/1024, "rss-peak-MiB")
}

// BenchmarkExecForegroundContainment interleaves foreground POST /exec of
// `true` on a server with a cgroup per job and on one with process groups
// only, and reports both medians and their ratio. Budget: cgroups at most
// 10% slower.
func BenchmarkExecForegroundContainment(b *testing.B) {
	cg := startServer(b, withConfig("jobs:\n  containment: cgroup\n"))
	pg := startServer(b, withConfig("jobs:\n  containment: group\n"))
	for range 50 {
		cg.post(b, "/exec", execTrue)
		pg.post(b, "/exec", execTrue)
	}
	withCG := make([]time.Duration, 0, b.N)
	withPG := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		// Alternate which goes first, so neither always follows the other.
		first, second := cg, pg
		if i%2 == 1 {
			first, second = pg, cg
		}
		t0 := time.Now()
		first.post(b, "/exec", execTrue)
		t1 := time.Now()
		second.post(b, "/exec", execTrue)
		d1, d2 := t1.Sub(t0), time.Since(t1)
		if first == cg {
			withCG, withPG = append(withCG, d1), append(withPG, d2)
		} else {
			withPG, withCG = append(withPG, d1), append(withCG, d2)
		}
	}
	b.StopTimer()
	cm, pm := percentile(withCG, .5), percentile(withPG, .5)
	b.ReportMetric(us(pm), "group-median-µs")
	b.ReportMetric(us(cm), "cgroup-median-µs")
	b.ReportMetric(float64(cm)/float64(pm), "cgroup-ratio")
	b.ReportMetric(us(percentile(withPG, .99)), "group-p99-µs")
	b.ReportMetric(us(percentile(withCG, .99)), "cgroup-p99-µs")
}

// BenchmarkExecForegroundLimitsV1 interleaves, on one server in cgroup
// mode, foreground POST /exec of `true` with limits (on a hybrid host the
// job is then also born in cgroup v1 pids and memory groups, created and
// removed per job) and without, and reports both medians and the
// difference: the cost of the v1 groups.
func BenchmarkExecForegroundLimitsV1(b *testing.B) {
	s := startServer(b, withConfig("jobs:\n  containment: cgroup\n"))
	var h healthV1
	if st := s.DoJSON(b, "GET", "/healthz", nil, &h); st != 200 {
		b.Fatalf("GET /healthz = %d", st)
	}
	b.Logf("v1 controllers: %v, limits enforced by %v", h.Details.Containment.V1Controllers, h.Details.Containment.Limits)
	limited := []byte(`{"command":"true","limits":{"pids":64,"memoryBytes":268435456}}`)
	for range 50 {
		s.post(b, "/exec", execTrue)
		s.post(b, "/exec", limited)
	}
	with := make([]time.Duration, 0, b.N)
	without := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		first, second := limited, execTrue
		if i%2 == 1 {
			first, second = execTrue, limited
		}
		t0 := time.Now()
		s.post(b, "/exec", first)
		t1 := time.Now()
		s.post(b, "/exec", second)
		d1, d2 := t1.Sub(t0), time.Since(t1)
		if i%2 == 0 {
			with, without = append(with, d1), append(without, d2)
		} else {
			without, with = append(without, d1), append(with, d2)
		}
	}
	b.StopTimer()
	wm, nm := percentile(with, .5), percentile(without, .5)
	b.ReportMetric(us(nm), "no-limits-median-µs")
	b.ReportMetric(us(wm), "limits-v1-median-µs")
	b.ReportMetric(us(wm-nm), "v1-cost-µs")
	b.ReportMetric(us(percentile(without, .99)), "no-limits-p99-µs")
	b.ReportMetric(us(percentile(with, .99)), "limits-v1-p99-µs")
}
