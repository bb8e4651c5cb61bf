package tests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	osexec "os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/benchkit"
)

// The benchmarks here measure design's budgets (docs/performance.md) against the real
// (non-race) binary over loopback HTTP, each beside its baseline measured in
// the same run. They print figures; they assert nothing about time.

// benchClient keeps connections alive, as a harness would.
var benchClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}}

func (s *testServer) post(tb testing.TB, path string, body []byte) []byte {
	req, err := http.NewRequest("POST", s.URL+path, bytes.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := benchClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	out, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode >= 300 {
		tb.Fatalf("POST %s = %d %v: %s", path, resp.StatusCode, err, out)
	}
	return out
}

func (s *testServer) get(tb testing.TB, path string) []byte {
	req, err := http.NewRequest("GET", s.URL+path, nil)
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.Token)
	resp, err := benchClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	out, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		tb.Fatalf("GET %s = %d %v", path, resp.StatusCode, err)
	}
	return out
}

// startBare starts the minimal exec server and returns its URL.
func startBare(tb testing.TB) string {
	url, _ := startBareProc(tb)
	return url
}

// startBareProc starts the bare server and returns its URL and pid.
func startBareProc(tb testing.TB) (string, int) {
	cmd := osexec.Command(bareBinary)
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		tb.Fatal(err)
	}
	return strings.TrimSpace(line), cmd.Process.Pid
}

func postBare(tb testing.TB, url string) {
	resp, err := benchClient.Post(url+"/exec", "application/json", bytes.NewReader(execTrue))
	if err != nil {
		tb.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		tb.Fatalf("bare exec = %d", resp.StatusCode)
	}
}

func spawnDirect(tb testing.TB) {
	if err := osexec.Command("bash", "-c", "true").Run(); err != nil {
		tb.Fatal(err)
	}
}

var execTrue = []byte(`{"command":"true"}`)

// percentile and us are package benchkit's, shared by every benchmark.
var (
	percentile = benchkit.Percentile
	us         = benchkit.Us
)

// BenchmarkExecForeground interleaves a direct `bash -c true` spawn (the
// physical floor), the same command through the minimal net/http exec
// server (the calibration point), and a foreground POST /exec of `true`,
// so all three see the same machine, and reports medians, p99s and ratios.
// Both servers are read with the lean client (leanConn: a server's own
// cost), and again with net/http's client (what a Go harness sees), in the
// same loop. Budget: median ≤ 1.25×, p99 ≤ 2× of direct.
func BenchmarkExecForeground(b *testing.B) {
	s := startServer(b)
	bare := startBare(b)
	leanBare := dialLean(b, bare, "/exec", "", execTrue)
	leanServed := dialLean(b, s.URL, "/exec", s.Token, execTrue)
	for range 50 { // warm up every path
		spawnDirect(b)
		leanBare.do(b)
		leanServed.do(b)
		postBare(b, bare)
		s.post(b, "/exec", execTrue)
	}
	ops := []func(){
		func() { spawnDirect(b) },
		func() { leanBare.do(b) },
		func() { leanServed.do(b) },
		func() { postBare(b, bare) },
		func() { s.post(b, "/exec", execTrue) },
	}
	times := make([][]time.Duration, len(ops))
	for i := range times {
		times[i] = make([]time.Duration, 0, b.N)
	}
	b.ResetTimer()
	for range b.N {
		for i, op := range ops {
			t0 := time.Now()
			op()
			times[i] = append(times[i], time.Since(t0))
		}
	}
	b.StopTimer()
	direct, bared, served, goBared, goServed := times[0], times[1], times[2], times[3], times[4]
	dm, bm, sm := percentile(direct, .5), percentile(bared, .5), percentile(served, .5)
	d99, s99 := percentile(direct, .99), percentile(served, .99)
	b.ReportMetric(us(dm), "direct-median-µs")
	b.ReportMetric(us(bm), "bare-median-µs")
	b.ReportMetric(us(sm), "exec-median-µs")
	b.ReportMetric(float64(bm)/float64(dm), "bare-median-ratio")
	b.ReportMetric(float64(sm)/float64(dm), "median-ratio")
	b.ReportMetric(us(d99), "direct-p99-µs")
	b.ReportMetric(us(s99), "exec-p99-µs")
	b.ReportMetric(float64(s99)/float64(d99), "p99-ratio")
	gbm, gsm := percentile(goBared, .5), percentile(goServed, .5)
	b.ReportMetric(float64(gbm)/float64(dm), "nethttp-bare-median-ratio")
	b.ReportMetric(float64(gsm)/float64(dm), "nethttp-median-ratio")
	reportLoad(b)
}

// reportLoad reports the load average of the last minute beside a
// benchmark's figures (a ratio measured on a busy machine says so), and
// logs all three.
func reportLoad(b *testing.B) {
	b.ReportMetric(benchkit.Load1(), "load1")
	b.Logf("load average %s", benchkit.LoadAvg())
}

// BenchmarkExecConcurrent8 measures throughput with 8 concurrent clients:
// direct spawning, the bare server and POST /exec, in five interleaved
// rounds of b.N requests each (1,000 with make bench's -benchtime), so
// that a change in the machine's load hits all alike. Each figure is the
// total over the rounds. The servers are read with the lean
// client (a connection per client, leanConn) and again with net/http's
// client. Beside the lean figures, each server's CPU time per request
// (user+system, from /proc), which is what bounds throughput on two cores.
// Budget: ≥ 90% of direct.
func BenchmarkExecConcurrent8(b *testing.B) {
	const clients, rounds = 8, 5
	s := startServer(b)
	bare, barePID := startBareProc(b)
	leanBare := make([]*leanConn, clients)
	leanServed := make([]*leanConn, clients)
	for i := range clients {
		leanBare[i] = dialLean(b, bare, "/exec", "", execTrue)
		leanServed[i] = dialLean(b, s.URL, "/exec", s.Token, execTrue)
	}
	per := max(b.N/clients, 1)
	run := func(op func(client int)) time.Duration {
		var wg sync.WaitGroup
		start := time.Now()
		for c := range clients {
			wg.Go(func() {
				for range per {
					op(c)
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	cpu := func(pid int, op func(int)) (time.Duration, float64) {
		c0 := cpuSeconds(b, pid)
		d := run(op)
		return d, cpuSeconds(b, pid) - c0
	}
	dshdPID := s.cmd.Process.Pid
	direct := func(int) { spawnDirect(b) }
	leanB := func(c int) { leanBare[c].do(b) }
	leanS := func(c int) { leanServed[c].do(b) }
	goB := func(int) { postBare(b, bare) }
	goS := func(int) { s.post(b, "/exec", execTrue) }
	for _, op := range []func(int){leanB, leanS, goB, goS} { // warm up
		run(op)
	}
	b.ResetTimer()
	var directD, bared, served, goBared, goServed time.Duration
	var bareCPU, servedCPU float64
	for range rounds {
		directD += run(direct)
		d, c := cpu(barePID, leanB)
		bared, bareCPU = bared+d, bareCPU+c
		d, c = cpu(dshdPID, leanS)
		served, servedCPU = served+d, servedCPU+c
		goBared += run(goB)
		goServed += run(goS)
	}
	b.StopTimer()
	ops := float64(per * clients * rounds)
	rate := func(d time.Duration) float64 { return ops / d.Seconds() }
	b.ReportMetric(rate(directD), "direct-ops/s")
	b.ReportMetric(rate(bared), "bare-ops/s")
	b.ReportMetric(rate(served), "exec-ops/s")
	b.ReportMetric(directD.Seconds()/bared.Seconds(), "bare-throughput-ratio")
	b.ReportMetric(directD.Seconds()/served.Seconds(), "throughput-ratio")
	b.ReportMetric(bareCPU/ops*1e6, "bare-cpu-µs/op")
	b.ReportMetric(servedCPU/ops*1e6, "exec-cpu-µs/op")
	b.ReportMetric(directD.Seconds()/goBared.Seconds(), "nethttp-bare-throughput-ratio")
	b.ReportMetric(directD.Seconds()/goServed.Seconds(), "nethttp-throughput-ratio")
	reportLoad(b)
}

// rssKiB reads a process's resident set (VmRSS) or its peak (VmHWM).
func rssKiB(tb testing.TB, pid int, field string) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return n
		}
	}
	tb.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// BenchmarkStream256MiB: a background job writes 256 MiB to stdout; the
// baseline is the same command's pipe read straight into io.Discard.
// Budgets: ≥ 50% of raw pipe speed; server memory growth < 64 MiB.
func BenchmarkStream256MiB(b *testing.B) {
	const size = 256 << 20
	cmd := fmt.Sprintf("head -c %d /dev/zero", size)
	s := startServer(b)
	pid := s.cmd.Process.Pid
	before := rssKiB(b, pid, "VmRSS")
	var rawTotal, servedTotal time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		c := osexec.Command("bash", "-c", cmd)
		out, err := c.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Start(); err != nil {
			b.Fatal(err)
		}
		if n, err := io.Copy(io.Discard, out); err != nil || n != size {
			b.Fatalf("raw pipe read %d bytes: %v", n, err)
		}
		if err := c.Wait(); err != nil {
			b.Fatal(err)
		}
		rawTotal += time.Since(t0)

		t1 := time.Now()
		var j job
		if err := json.Unmarshal(s.post(b, "/exec", []byte(`{"command":"`+cmd+`","background":true}`)), &j); err != nil {
			b.Fatal(err)
		}
		for j.State == "running" {
			if err := json.Unmarshal(s.get(b, "/jobs/"+j.ID+"?waitMs=60000"), &j); err != nil {
				b.Fatal(err)
			}
		}
		servedTotal += time.Since(t1)
		if j.Stdout.TotalBytes != size {
			b.Fatalf("job saw %d bytes, want %d", j.Stdout.TotalBytes, size)
		}
	}
	b.StopTimer()
	peak := rssKiB(b, pid, "VmHWM")
	mib := float64(size*b.N) / (1 << 20)
	b.ReportMetric(mib/rawTotal.Seconds(), "raw-MiB/s")
	b.ReportMetric(mib/servedTotal.Seconds(), "served-MiB/s")
	b.ReportMetric(rawTotal.Seconds()/servedTotal.Seconds(), "speed-ratio")
	b.ReportMetric(float64(peak-before)/1024, "server-growth-MiB")
}

// BenchmarkBackgroundSleeps1000 starts 1,000 background sleeps at once and
// waits until every one is reaped. Budget: server RSS < 200 MiB; the
// baseline is the server's RSS before the load.
func BenchmarkBackgroundSleeps1000(b *testing.B) {
	s := startServer(b, withConfig("jobs:\n  maxRunning: 1100\n  retainMax: 5000\n"))
	pid := s.cmd.Process.Pid
	before := rssKiB(b, pid, "VmRSS")
	b.ResetTimer()
	for range b.N {
		ids := make([]string, 1000)
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < len(ids); i += 8 {
					var j job
					if err := json.Unmarshal(s.post(b, "/exec", []byte(`{"command":"sleep 2","background":true}`)), &j); err != nil {
						b.Error(err)
						return
					}
					ids[i] = j.ID
				}
			}()
		}
		wg.Wait()
		for _, id := range ids {
			var j job
			for j.State == "" || j.State == "running" {
				if err := json.Unmarshal(s.get(b, "/jobs/"+id+"?waitMs=30000"), &j); err != nil {
					b.Fatal(err)
				}
			}
			if j.State != "exited" {
				b.Fatalf("job %s ended %s", id, j.State)
			}
		}
		var running []job
		if err := json.Unmarshal(s.get(b, "/jobs?state=running"), &running); err != nil || len(running) != 0 {
			b.Fatalf("%d jobs still running (%v)", len(running), err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(before)/1024, "rss-before-MiB")
	b.ReportMetric(float64(rssKiB(b, pid, "VmHWM"))/1024, "rss-peak-MiB")
}

// BenchmarkDeclarations10000 times GET /env/declarations with 10,000
// contributors beside GET /healthz (the HTTP floor). Budget: < 20 ms.
func BenchmarkDeclarations10000(b *testing.B) {
	s := startServer(b)
	var plugin struct{ ID string }
	if err := json.Unmarshal(s.post(b, "/plugins", []byte(`{"name":"bench","leaseSeconds":86400}`)), &plugin); err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < 10000; i += 8 {
				key := fmt.Sprintf("DSH_BENCH_%05d", i)
				s.post(b, "/contributors", fmt.Appendf(nil,
					`{"name":"bench.c%05d","plugin":%q,"keys":[{"key":%q,"description":"benchmark fact %d"}],"resolver":{"kind":"static","values":{%q:"v"}}}`,
					i, plugin.ID, key, i, key))
			}
		}()
	}
	wg.Wait()
	if n := bytes.Count(s.get(b, "/env/declarations"), []byte(`"key"`)); n < 10000 {
		b.Fatalf("%d declarations, want ≥ 10000", n)
	}
	var decl, health time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		s.get(b, "/healthz")
		t1 := time.Now()
		s.get(b, "/env/declarations")
		health += t1.Sub(t0)
		decl += time.Since(t1)
	}
	b.StopTimer()
	b.ReportMetric(float64(health.Microseconds())/float64(b.N)/1000, "healthz-ms")
	b.ReportMetric(float64(decl.Microseconds())/float64(b.N)/1000, "declarations-ms")
}
