package netallow

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/benchkit"
)

// benchServer serves loopback connections with serve until the benchmark
// ends, and returns its port.
func benchServer(b *testing.B, serve func(net.Conn)) int {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c)
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// benchProxy starts a session allowing bench.test, pinned to loopback.
func benchProxy(b *testing.B) string {
	b.Helper()
	p, err := New(Config{Hosts: map[string][]netip.Addr{"bench.test": {netip.MustParseAddr("127.0.0.1")}}})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	l, err := Parse([]string{"bench.test"})
	if err != nil {
		b.Fatal(err)
	}
	s := p.Serve(ln, l)
	b.Cleanup(s.Close)
	return ln.Addr().String()
}

// benchRelay starts the floor of any relay: a loopback listener that
// dials port for each connection and copies both ways with io.Copy
// (splice(2) between TCP connections), with nothing of the proxy's (no
// request to read, no decision, no tracking). It returns its address.
func benchRelay(b *testing.B, port int) string {
	b.Helper()
	target := fmt.Sprintf("127.0.0.1:%d", port)
	p := benchServer(b, func(c net.Conn) {
		up, err := net.Dial("tcp", target)
		if err != nil {
			return
		}
		defer up.Close()
		relay(c, bufio.NewReader(c), up)
	})
	return fmt.Sprintf("127.0.0.1:%d", p)
}

// tunnel opens a CONNECT tunnel to bench.test:port through the proxy at
// addr.
func tunnel(addr string, port int) (net.Conn, *bufio.Reader, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(c, "CONNECT bench.test:%d HTTP/1.1\r\nHost: bench.test:%d\r\n\r\n", port, port)
	br := bufio.NewReader(c)
	for first := true; ; first = false {
		line, err := br.ReadString('\n')
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		if first && !strings.Contains(line, " 200 ") {
			c.Close()
			return nil, nil, fmt.Errorf("CONNECT: %q", line)
		}
		if line == "\r\n" {
			return c, br, nil
		}
	}
}

// BenchmarkProxyConnect measures connection setup: a TCP connect and one
// byte echoed, directly and through a CONNECT tunnel of the proxy
// (resolving, checking, dialling, answering), in the same run on loopback.
// It reports both and the proxy's added latency per connection.
func BenchmarkProxyConnect(b *testing.B) {
	port := benchServer(b, func(c net.Conn) { io.Copy(c, c) })
	addr := benchProxy(b)
	one := make([]byte, 1)
	roundTrip := func(c net.Conn, r io.Reader) {
		if _, err := c.Write(one); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(r, one); err != nil {
			b.Fatal(err)
		}
	}
	plain := benchRelay(b, port)
	var direct, relayed, proxied time.Duration
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			b.Fatal(err)
		}
		roundTrip(c, c)
		direct += time.Since(t0)
		c.Close()

		t0 = time.Now()
		c, err = net.Dial("tcp", plain)
		if err != nil {
			b.Fatal(err)
		}
		roundTrip(c, c)
		relayed += time.Since(t0)
		c.Close()

		t0 = time.Now()
		c, br, err := tunnel(addr, port)
		if err != nil {
			b.Fatal(err)
		}
		roundTrip(c, br)
		proxied += time.Since(t0)
		c.Close()
	}
	n := float64(b.N)
	b.ReportMetric(float64(direct.Microseconds())/n, "direct-µs/conn")
	b.ReportMetric(float64(proxied.Microseconds())/n, "proxy-µs/conn")
	b.ReportMetric(float64((proxied-direct).Microseconds())/n, "added-µs/conn")
	b.ReportMetric(float64(relayed.Microseconds())/n, "plain-relay-µs/conn")
	b.ReportMetric(float64((proxied-relayed).Microseconds())/n, "added-over-relay-µs/conn")
	reportLoad(b)
}

// reportLoad prints the load average beside a benchmark's figures.
func reportLoad(b *testing.B) {
	b.ReportMetric(benchkit.Load1(), "load1")
	b.Logf("load average %s", benchkit.LoadAvg())
}

// BenchmarkProxyThroughput measures bulk transfer: 32 MiB written to a
// sink that answers when it has them all, directly and through a tunnel,
// in the same run. It reports both rates and their ratio (proxy/direct).
func BenchmarkProxyThroughput(b *testing.B) {
	const size = 32 << 20
	port := benchServer(b, func(c net.Conn) {
		if n, _ := io.CopyN(io.Discard, c, size); n == size {
			c.Write([]byte{1})
		}
	})
	addr := benchProxy(b)
	buf := make([]byte, 256<<10)
	send := func(c net.Conn, r io.Reader) {
		for sent := 0; sent < size; sent += len(buf) {
			if _, err := c.Write(buf); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := io.ReadFull(r, buf[:1]); err != nil {
			b.Fatal(err)
		}
	}
	plain := benchRelay(b, port)
	var direct, relayed, proxied time.Duration
	b.SetBytes(2 * size)
	b.ResetTimer()
	for b.Loop() {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		send(c, c)
		direct += time.Since(t0)
		c.Close()

		c, err = net.Dial("tcp", plain)
		if err != nil {
			b.Fatal(err)
		}
		t0 = time.Now()
		send(c, c)
		relayed += time.Since(t0)
		c.Close()

		c, br, err := tunnel(addr, port)
		if err != nil {
			b.Fatal(err)
		}
		t0 = time.Now()
		send(c, br)
		proxied += time.Since(t0)
		c.Close()
	}
	mbps := func(d time.Duration) float64 { return float64(b.N) * size / d.Seconds() / 1e6 }
	b.ReportMetric(mbps(direct), "direct-MB/s")
	b.ReportMetric(mbps(proxied), "proxy-MB/s")
	b.ReportMetric(direct.Seconds()/proxied.Seconds(), "proxy/direct")
	b.ReportMetric(mbps(relayed), "plain-relay-MB/s")
	b.ReportMetric(direct.Seconds()/relayed.Seconds(), "plain-relay/direct")
	b.ReportMetric(relayed.Seconds()/proxied.Seconds(), "proxy/plain-relay")
	reportLoad(b)
}
