package tests

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	osexec "os/exec"
	"path/filepath"
	"testing"
	"time"
)

// The file routes' speed, each beside its baseline measured in the same
// run (issue 43's budget: uploads and downloads at ≥ 50% of cat through a
// pipe). They print figures; they assert nothing about time.

// pattern is size bytes of a repeated 1 MiB block, made as it is read.
func pattern(size int64) io.Reader {
	block := bytes.Repeat([]byte("dshd files bench\n"), (1<<20)/17+1)[:1<<20]
	return io.LimitReader(repeatReader{block}, size)
}

type repeatReader struct{ b []byte }

func (r repeatReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		n += copy(p[n:], r.b)
	}
	return n, nil
}

// fileRoute sends body (nil: none) to a file route and drains the answer
// into io.Discard, returning the bytes read.
func (s *testServer) fileRoute(tb testing.TB, method, path string, body io.Reader, size int64) int64 {
	req, err := http.NewRequest(method, s.URL+path, body)
	if err != nil {
		tb.Fatal(err)
	}
	if body != nil {
		req.ContentLength = size
	}
	req.Header.Set("Authorization", "Bearer "+s.Token)
	resp, err := benchClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil || resp.StatusCode != 200 {
		tb.Fatalf("%s %s = %d %v", method, path, resp.StatusCode, err)
	}
	return n
}

// catPipe runs cmd with stdin (nil: none) and drains its stdout.
func catPipe(tb testing.TB, stdin io.Reader, name string, args ...string) int64 {
	c := osexec.Command(name, args...)
	c.Stdin = stdin
	out, err := c.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := c.Start(); err != nil {
		tb.Fatal(err)
	}
	n, err := io.Copy(io.Discard, out)
	if err != nil {
		tb.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		tb.Fatalf("%s %v: %v", name, args, err)
	}
	return n
}

// BenchmarkFiles1GiB: PUT of 1 GiB beside `cat > file` fed through a pipe,
// GET of it beside `cat file` read through a pipe, into a directory on
// disk. Budget: each ≥ 50% of its baseline.
func BenchmarkFiles1GiB(b *testing.B) {
	const size = 1 << 30
	dir := filesDir(b, "bench")
	s := startServer(b)
	a := s.newAgentTB(b, dir)
	var catIn, catOut, put, get time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		catPipe(b, pattern(size), "sh", "-c", "cat > "+filepath.Join(dir, "cat.bin"))
		catIn += time.Since(t0)

		t0 = time.Now()
		s.fileRoute(b, "PUT", "/agents/"+a+"/files/put.bin", pattern(size), size)
		put += time.Since(t0)

		t0 = time.Now()
		if n := catPipe(b, nil, "cat", filepath.Join(dir, "cat.bin")); n != size {
			b.Fatalf("cat read %d bytes", n)
		}
		catOut += time.Since(t0)

		t0 = time.Now()
		if n := s.fileRoute(b, "GET", "/agents/"+a+"/files/put.bin", nil, 0); n != size {
			b.Fatalf("GET read %d bytes", n)
		}
		get += time.Since(t0)
	}
	b.StopTimer()
	mib := float64(size*b.N) / (1 << 20)
	b.ReportMetric(mib/catIn.Seconds(), "cat-in-MiB/s")
	b.ReportMetric(mib/put.Seconds(), "put-MiB/s")
	b.ReportMetric(catIn.Seconds()/put.Seconds(), "put-ratio")
	b.ReportMetric(mib/catOut.Seconds(), "cat-out-MiB/s")
	b.ReportMetric(mib/get.Seconds(), "get-MiB/s")
	b.ReportMetric(catOut.Seconds()/get.Seconds(), "get-ratio")
}

// BenchmarkFilesTar10000: a tar of 10,000 files PUT into a fresh directory
// beside `tar -xf -` fed the same stream through a pipe, and the tree's GET
// as tar beside `tar -cf - .` read through a pipe.
func BenchmarkFilesTar10000(b *testing.B) {
	src := filesDir(b, "bench-src")
	makeFileTree(b, src, 10000)
	in := tarTree(b, src)
	dir := filesDir(b, "bench-tar")
	s := startServer(b)
	a := s.newAgentTB(b, dir)
	var tarIn, tarOut, put, get time.Duration
	b.ResetTimer()
	for i := range b.N {
		d := filepath.Join(dir, fmt.Sprintf("tar%d", i))
		if err := os.MkdirAll(d, 0o755); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		catPipe(b, bytes.NewReader(in), "tar", "-xf", "-", "-C", d)
		tarIn += time.Since(t0)

		t0 = time.Now()
		s.fileRoute(b, "PUT", fmt.Sprintf("/agents/%s/archive/put%d?parents=true", a, i), bytes.NewReader(in), int64(len(in)))
		put += time.Since(t0)

		t0 = time.Now()
		catPipe(b, nil, "tar", "-cf", "-", "-C", d, ".")
		tarOut += time.Since(t0)

		t0 = time.Now()
		s.fileRoute(b, "GET", fmt.Sprintf("/agents/%s/archive/put%d", a, i), nil, 0)
		get += time.Since(t0)
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(tarIn.Seconds()*1000/n, "tar-x-ms")
	b.ReportMetric(put.Seconds()*1000/n, "put-ms")
	b.ReportMetric(tarIn.Seconds()/put.Seconds(), "put-ratio")
	b.ReportMetric(tarOut.Seconds()*1000/n, "tar-c-ms")
	b.ReportMetric(get.Seconds()*1000/n, "get-ms")
	b.ReportMetric(tarOut.Seconds()/get.Seconds(), "get-ratio")
}

// newAgentTB creates an agent on cwd with the server's default policy.
func (s *testServer) newAgentTB(tb testing.TB, cwd string) string {
	tb.Helper()
	var a struct{ ID string }
	if st := s.DoJSON(tb, "POST", "/agents", map[string]any{"cwd": cwd}, &a); st != 201 {
		tb.Fatalf("POST /agents = %d", st)
	}
	return a.ID
}
