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
)

// Output delivery as a client sees it (issue: output to clients at pipe
// speed). Every figure is printed beside the fastest local read of the same
// command, bash | io.Copy(io.Discard), measured in the same run.

// outputLine is what `yes` repeats: 127 x's and a newline.
var outputLine = strings.Repeat("x", 127) + "\n"

// yesCommand prints size bytes of outputLine.
func yesCommand(size int64) string {
	return fmt.Sprintf("yes %s | head -c %d", strings.TrimSuffix(outputLine, "\n"), size)
}

// outputBenchConfig lets the whole 256 MiB stay readable from the spool.
const outputBenchConfig = "jobs:\n  spoolMaxBytes: 1073741824\n  retainMax: 100\n"

// deliveryClient reads big bodies with big buffers, as a client that wants
// throughput would.
var deliveryClient = &http.Client{Transport: &http.Transport{
	MaxIdleConnsPerHost: 64,
	MaxConnsPerHost:     64,
	ReadBufferSize:      256 << 10,
	WriteBufferSize:     64 << 10,
}}

// patternCheck verifies, at memcmp speed, that bytes are the next bytes of
// an endless repetition of outputLine.
type patternCheck struct {
	pat []byte
	off int64
	bad bool
}

func newPatternCheck() *patternCheck {
	return &patternCheck{pat: []byte(strings.Repeat(outputLine, (1<<20)/len(outputLine)+1))}
}

func (p *patternCheck) Write(b []byte) (int, error) {
	n := len(b)
	for len(b) > 0 {
		phase := int(p.off % int64(len(outputLine)))
		k := min(len(b), len(p.pat)-phase)
		if !bytes.Equal(b[:k], p.pat[phase:phase+k]) {
			p.bad = true
		}
		b = b[k:]
		p.off += int64(k)
	}
	return n, nil
}

func (p *patternCheck) verify(tb testing.TB, what string, size int64) {
	tb.Helper()
	if err := p.check(what, size); err != nil {
		tb.Fatal(err)
	}
}

func (p *patternCheck) check(what string, size int64) error {
	if p.bad || p.off != size {
		return fmt.Errorf("%s: got %d bytes (corrupt: %v), want %d bytes of the pattern", what, p.off, p.bad, size)
	}
	return nil
}

// readPipe runs cmd locally and reads its stdout to the end: the baseline.
func readPipe(tb testing.TB, cmd string, size int64) time.Duration {
	t0 := time.Now()
	c := osexec.Command("bash", "-c", cmd)
	out, err := c.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := c.Start(); err != nil {
		tb.Fatal(err)
	}
	// The fastest way to do the same work: bash | io.Copy(io.Discard),
	// checking nothing but the count.
	n, err := io.Copy(io.Discard, out)
	if err != nil {
		tb.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		tb.Fatal(err)
	}
	d := time.Since(t0)
	if n != size {
		tb.Fatalf("local pipe read %d bytes, want %d", n, size)
	}
	return d
}

// startJob starts a background job and returns its id.
func (s *testServer) startJob(tb testing.TB, cmd string) string {
	body, _ := json.Marshal(map[string]any{"command": cmd, "background": true})
	var j job
	if err := json.Unmarshal(s.post(tb, "/exec", body), &j); err != nil {
		tb.Fatal(err)
	}
	return j.ID
}

// openOutput sends GET /jobs/{id}/output (query q) and returns the body.
func (s *testServer) openOutput(tb testing.TB, id, q string) io.ReadCloser {
	req, err := http.NewRequest("GET", s.URL+"/jobs/"+id+"/output"+q, nil)
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.Token)
	resp, err := deliveryClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		tb.Fatalf("GET output%s = %d: %s", q, resp.StatusCode, b)
	}
	return resp.Body
}

// followSSE decodes a job's event stream to its exit event, writing every
// stdout byte to out.
func followSSE(body io.Reader, out io.Writer) error {
	c := newSSEClient(body)
	var buf []byte
	for {
		ev, err := c.Next()
		if err != nil {
			return fmt.Errorf("event stream ended before exit: %w", err)
		}
		switch ev.Name {
		case "stdout", "stderr":
			if buf, err = decodeChunk(buf[:0], ev.Data); err != nil {
				return err
			}
			if ev.Name == "stdout" {
				_, _ = out.Write(buf)
			}
		case "exit":
			return nil
		default:
			return fmt.Errorf("unexpected event %q", ev.Name)
		}
	}
}

// mustFollowSSE is followSSE on the benchmark's goroutine.
func mustFollowSSE(tb testing.TB, body io.Reader, out io.Writer) {
	tb.Helper()
	if err := followSSE(body, out); err != nil {
		tb.Fatal(err)
	}
}

// scanSSE reads a job's event stream the way a harness does: line by line
// with bufio.Scanner, to the exit event's data line, decoding nothing. It
// returns the bytes of the data lines it saw.
func scanSSE(body io.Reader) (int64, error) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 256<<10), 1<<20) // an event holds at most 64 KiB of output, escaped
	var n int64
	exit := false
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case bytes.HasPrefix(line, []byte("data: ")):
			if exit {
				return n, nil
			}
			n += int64(len(line))
		case bytes.Equal(line, []byte("event: exit")):
			exit = true
		}
	}
	return n, fmt.Errorf("event stream ended before its exit event: %v", sc.Err())
}

// BenchmarkOutputDelivery256MiB: a job prints 256 MiB (`yes` lines through
// `head -c`). Interleaved in each round: the same command's pipe read
// into io.Discard (the baseline, bash | io.Copy(io.Discard)); a job followed
// live over SSE by a client that scans lines (bufio.Scanner, what a harness
// does), from POST /exec to the exit event; another followed live by a Go
// client that decodes every event and checks every byte; that finished
// job's events replayed; and its raw route read to the end. Budgets: live
// SSE ≥ 50% of the local pipe, raw ≥ 80%.
func BenchmarkOutputDelivery256MiB(b *testing.B) {
	const size = 256 << 20
	cmd := yesCommand(size)
	s := startServer(b, withConfig(outputBenchConfig))
	pid := s.cmd.Process.Pid
	var pipe, scan, follow, replay, raw time.Duration
	var scanCPU, followCPU, replayCPU, rawCPU float64
	b.ResetTimer()
	for range b.N {
		pipe += readPipe(b, cmd, size)

		t0, c0 := time.Now(), cpuSeconds(b, pid)
		id := s.startJob(b, cmd)
		body := s.openOutput(b, id, "")
		n, err := scanSSE(body)
		body.Close()
		scan += time.Since(t0)
		scanCPU += cpuSeconds(b, pid) - c0
		if err != nil || n < size {
			b.Fatalf("line scanner: %d bytes of data lines, want ≥ %d: %v", n, size, err)
		}

		t0, c0 = time.Now(), cpuSeconds(b, pid)
		id = s.startJob(b, cmd)
		body = s.openOutput(b, id, "")
		check := newPatternCheck()
		mustFollowSSE(b, body, check)
		body.Close()
		follow += time.Since(t0)
		followCPU += cpuSeconds(b, pid) - c0
		check.verify(b, "SSE follower", size)

		t0, c0 = time.Now(), cpuSeconds(b, pid)
		body = s.openOutput(b, id, "")
		check = newPatternCheck()
		mustFollowSSE(b, body, check)
		body.Close()
		replay += time.Since(t0)
		replayCPU += cpuSeconds(b, pid) - c0
		check.verify(b, "SSE replay", size)

		t0, c0 = time.Now(), cpuSeconds(b, pid)
		body = s.openOutput(b, id, "?stream=stdout&offset=0")
		check = newPatternCheck()
		if _, err := io.CopyBuffer(check, body, make([]byte, 256<<10)); err != nil {
			b.Fatal(err)
		}
		body.Close()
		raw += time.Since(t0)
		rawCPU += cpuSeconds(b, pid) - c0
		check.verify(b, "raw route", size)
	}
	b.StopTimer()
	mib := float64(size*b.N) / (1 << 20)
	rate := func(d time.Duration) float64 { return mib / d.Seconds() }
	// Server CPU per job: the follow figure includes taking the output in.
	n := float64(b.N)
	b.ReportMetric(scanCPU/n, "sse-scan-server-cpu-s")
	b.ReportMetric(followCPU/n, "sse-follow-server-cpu-s")
	b.ReportMetric(replayCPU/n, "sse-replay-server-cpu-s")
	b.ReportMetric(rawCPU/n, "raw-server-cpu-s")
	b.ReportMetric(rate(pipe), "pipe-MiB/s")
	b.ReportMetric(rate(scan), "sse-scan-MiB/s")
	b.ReportMetric(pipe.Seconds()/scan.Seconds(), "sse-scan-ratio")
	b.ReportMetric(rate(follow), "sse-follow-MiB/s")
	b.ReportMetric(pipe.Seconds()/follow.Seconds(), "sse-follow-ratio")
	b.ReportMetric(rate(replay), "sse-replay-MiB/s")
	b.ReportMetric(pipe.Seconds()/replay.Seconds(), "sse-replay-ratio")
	b.ReportMetric(rate(raw), "raw-MiB/s")
	b.ReportMetric(pipe.Seconds()/raw.Seconds(), "raw-ratio")
	reportLoad(b)
}

// cpuSeconds reads a process's user+system CPU time.
func cpuSeconds(tb testing.TB, pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		tb.Fatal(err)
	}
	// Fields after the command name, which is in parentheses.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100 // USER_HZ is 100 on Linux
}

// throttled reads at most rate bytes per second.
type throttled struct {
	r     io.Reader
	rate  float64
	start time.Time
	n     int64
}

func (t *throttled) Read(p []byte) (int, error) {
	if t.start.IsZero() {
		t.start = time.Now()
	}
	if ahead := time.Duration(float64(t.n)/t.rate*float64(time.Second)) - time.Since(t.start); ahead > 0 {
		time.Sleep(ahead)
	}
	n, err := t.r.Read(p[:min(len(p), 64<<10)])
	t.n += int64(n)
	return n, err
}

// BenchmarkOutputSlowClient: one SSE client reads a 256 MiB job at 32 MiB/s.
// The job must not wait for it (job time beside the local pipe), the server
// must not buffer for it (RSS growth beside the RSS before), and the client
// must still get every byte.
func BenchmarkOutputSlowClient(b *testing.B) {
	const size = 256 << 20
	const rate = 32 << 20
	cmd := yesCommand(size)
	s := startServer(b, withConfig(outputBenchConfig))
	pid := s.cmd.Process.Pid
	before := rssKiB(b, pid, "VmRSS")
	var pipe, jobTime, client time.Duration
	b.ResetTimer()
	for range b.N {
		pipe += readPipe(b, cmd, size)
		t0 := time.Now()
		id := s.startJob(b, cmd)
		body := s.openOutput(b, id, "")
		done := make(chan time.Duration, 1)
		check := newPatternCheck()
		go func() {
			if err := followSSE(&throttled{r: body, rate: rate}, check); err != nil {
				b.Error(err)
			}
			done <- time.Since(t0)
		}()
		var j job
		for j.State == "" || j.State == "running" {
			if err := json.Unmarshal(s.get(b, "/jobs/"+id+"?waitMs=60000"), &j); err != nil {
				b.Fatal(err)
			}
		}
		jobTime += time.Since(t0)
		client += <-done
		body.Close()
		check.verify(b, "slow client", size)
	}
	b.StopTimer()
	peak := rssKiB(b, pid, "VmHWM")
	mib := float64(size*b.N) / (1 << 20)
	b.ReportMetric(mib/pipe.Seconds(), "pipe-MiB/s")
	b.ReportMetric(mib/jobTime.Seconds(), "job-MiB/s")
	b.ReportMetric(mib/client.Seconds(), "slow-client-MiB/s")
	b.ReportMetric(float64(before)/1024, "rss-before-MiB")
	b.ReportMetric(float64(peak-before)/1024, "rss-growth-MiB")
}

// BenchmarkOutputFollowers50: 50 SSE clients follow one job printing 64
// MiB, attached before it starts printing, each decoding every event.
// Budget: server RSS growth < 64 MiB. Reported beside the RSS before the
// load and the server CPU time one follower of the same job costs.
func BenchmarkOutputFollowers50(b *testing.B) {
	const size = 64 << 20
	const followers = 50
	cmd := "sleep 1; " + yesCommand(size)
	s := startServer(b, withConfig(outputBenchConfig))
	pid := s.cmd.Process.Pid
	run := func(n int) (cpu float64, wall time.Duration) {
		cpu0 := cpuSeconds(b, pid)
		t0 := time.Now()
		id := s.startJob(b, cmd)
		var wg sync.WaitGroup
		for range n {
			body := s.openOutput(b, id, "")
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer body.Close()
				check := newPatternCheck()
				if err := followSSE(body, check); err != nil {
					b.Error(err)
				} else if err := check.check("follower", size); err != nil {
					b.Error(err)
				}
			}()
		}
		wg.Wait()
		return cpuSeconds(b, pid) - cpu0, time.Since(t0)
	}
	run(1) // warm up
	before := rssKiB(b, pid, "VmRSS")
	var cpu1, cpuN float64
	var wallN time.Duration
	b.ResetTimer()
	for range b.N {
		c, _ := run(1)
		cpu1 += c
		c, w := run(followers)
		cpuN += c
		wallN += w
	}
	b.StopTimer()
	peak := rssKiB(b, pid, "VmHWM")
	gib := float64(size*followers*b.N) / (1 << 30)
	b.ReportMetric(float64(before)/1024, "rss-before-MiB")
	b.ReportMetric(float64(peak-before)/1024, "rss-growth-MiB")
	b.ReportMetric(cpu1/float64(b.N), "cpu-s-1-follower")
	b.ReportMetric(cpuN/float64(b.N), "cpu-s-50-followers")
	b.ReportMetric(gib/wallN.Seconds()*1024, "delivered-MiB/s")
}
