package tests

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	osexec "os/exec"
	"testing"
	"time"

	"github.com/creack/pty"
)

// rawCat is the program both sides of BenchmarkTerminalEcho drive: cat on
// a terminal in raw mode without echo, so every byte written reaches cat
// at once and what comes back is cat's own copy of it.
const rawCat = "stty raw -echo && exec cat"

// echoWait bounds one round trip, so a lost byte fails the benchmark
// instead of hanging it.
const echoWait = 10 * time.Second

// directPTY is the baseline: the same program on a pty opened in process
// with creack/pty, as a sandbox daemon's PTY endpoint would hold it.
type directPTY struct {
	cmd *osexec.Cmd
	f   *os.File
	buf []byte
}

func startDirectPTY(tb testing.TB) *directPTY {
	cmd := osexec.Command("bash", "-c", rawCat)
	f, err := pty.Start(cmd)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		f.Close()
	})
	return &directPTY{cmd: cmd, f: f, buf: make([]byte, 4096)}
}

// roundTrip writes c and reads until it comes back.
func (d *directPTY) roundTrip(tb testing.TB, c byte) {
	if _, err := d.f.Write([]byte{c}); err != nil {
		tb.Fatal(err)
	}
	_ = d.f.SetReadDeadline(time.Now().Add(echoWait))
	for {
		n, err := d.f.Read(d.buf)
		if bytes.IndexByte(d.buf[:n], c) >= 0 {
			return
		}
		if err != nil {
			tb.Fatalf("direct pty: %v before %q came back", err, c)
		}
	}
}

// servedPTY is the same program as a dshd terminal job: one byte in
// through POST /jobs/{id}/stdin, its echo out through the job's SSE stream.
type servedPTY struct {
	s     *testServer
	id    string
	input []byte // the request body, its one byte patched in
	at    int    // where the byte sits in input
	sse   *sseClient
	body  io.Closer
	chunk []byte
}

func startServedPTY(tb testing.TB, s *testServer) *servedPTY {
	body, _ := json.Marshal(map[string]any{"command": rawCat, "tty": true, "background": true})
	var j job
	if err := json.Unmarshal(s.post(tb, "/exec", body), &j); err != nil {
		tb.Fatal(err)
	}
	req, err := http.NewRequest("GET", s.URL+"/jobs/"+j.ID+"/output", nil)
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.Token)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		tb.Fatalf("open SSE: %v", err)
	}
	tb.Cleanup(func() { resp.Body.Close() })
	input := []byte(`{"data":"x"}`)
	return &servedPTY{s: s, id: j.ID, input: input, at: bytes.IndexByte(input, 'x'), sse: newSSEClient(resp.Body), body: resp.Body}
}

// roundTrip writes c through the stdin route and reads SSE events until it
// comes back.
func (p *servedPTY) roundTrip(tb testing.TB, c byte) {
	p.input[p.at] = c
	p.s.post(tb, "/jobs/"+p.id+"/stdin", p.input)
	deadline := time.Now().Add(echoWait)
	for time.Now().Before(deadline) {
		ev, err := p.sse.Next()
		if err != nil {
			tb.Fatalf("SSE: %v before %q came back", err, c)
		}
		if ev.Name != "stdout" {
			if ev.Name == "exit" {
				tb.Fatalf("the cat job ended before %q came back", c)
			}
			continue
		}
		if p.chunk, err = decodeChunk(p.chunk[:0], ev.Data); err != nil {
			tb.Fatal(err)
		}
		if bytes.IndexByte(p.chunk, c) >= 0 {
			return
		}
	}
	tb.Fatalf("%q did not come back within %s", c, echoWait)
}

// BenchmarkTerminalEcho measures the round trip of one byte written to a
// `cat` terminal job through POST /jobs/{id}/stdin and its echo read from
// the job's SSE stream, beside the same round trip on a pty held in
// process through creack/pty (the E2B-style direct baseline), interleaved
// so that both see the same machine. It reports medians, p99s and ratios.
func BenchmarkTerminalEcho(b *testing.B) {
	s := startServer(b)
	direct := startDirectPTY(b)
	served := startServedPTY(b, s)
	// Both programs are ready once a byte has come back; stty may still be
	// switching modes for the first ones, so a few go through first.
	for i := range 20 {
		c := byte('a' + i%26)
		direct.roundTrip(b, c)
		served.roundTrip(b, c)
	}
	d := make([]time.Duration, 0, b.N)
	sv := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		c := byte('a' + i%26)
		t0 := time.Now()
		direct.roundTrip(b, c)
		t1 := time.Now()
		served.roundTrip(b, c)
		d = append(d, t1.Sub(t0))
		sv = append(sv, time.Since(t1))
	}
	b.StopTimer()
	dm, sm := percentile(d, .5), percentile(sv, .5)
	d99, s99 := percentile(d, .99), percentile(sv, .99)
	b.ReportMetric(us(dm), "direct-median-µs")
	b.ReportMetric(us(sm), "served-median-µs")
	b.ReportMetric(float64(sm)/float64(dm), "median-ratio")
	b.ReportMetric(us(d99), "direct-p99-µs")
	b.ReportMetric(us(s99), "served-p99-µs")
	b.ReportMetric(float64(s99)/float64(d99), "p99-ratio")
}
