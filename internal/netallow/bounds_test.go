package netallow

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"
)

// boundsProxy starts a session serving list web.test under cfg.
func boundsProxy(t *testing.T, cfg Config) (*Session, string) {
	t.Helper()
	cfg.Hosts = map[string][]netip.Addr{"web.test": loopback()}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := p.Serve(ln, mustParse(t, "web.test"))
	t.Cleanup(s.Close)
	return s, ln.Addr().String()
}

// readAnswer reads the proxy's answer on c: its status and body.
func readAnswer(t *testing.T, c net.Conn) (int, string) {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the proxy's answer: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestProxyHeadBound: a client that sends "CONNECT " and then 64 MiB with
// no newline is answered 431 once it passes MaxHeadBytes and its
// connection closed, so its writes fail long before the 64 MiB; the proxy
// allocates a small multiple of the bound, not the flood (without the
// bound it buffered the whole line: 64 MiB and more). Not parallel: it
// reads the process's allocation counter.
func TestProxyHeadBound(t *testing.T) {
	s, addr := boundsProxy(t, Config{})
	const flood = 64 << 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sent := make(chan int64, 1)
	go func() {
		n, _ := io.Copy(c, io.MultiReader(strings.NewReader("CONNECT "), io.LimitReader(repeatReader('a'), flood)))
		sent <- n
	}()
	code, body := readAnswer(t, c)
	n := <-sent
	runtime.ReadMemStats(&after)
	if code != http.StatusRequestHeaderFieldsTooLarge || !strings.Contains(body, fmt.Sprintf("exceed %d bytes", MaxHeadBytes)) {
		t.Errorf("answer %d %q, want 431 naming the bound", code, body)
	}
	if n >= flood {
		t.Errorf("the client sent all %d bytes: the proxy read on past its bound", n)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("flood of %d MiB: the client got %d KiB out before the proxy closed; allocated %d KiB (bound %d KiB)", flood>>20, n>>10, alloc>>10, MaxHeadBytes>>10)
	if alloc > 4<<20 {
		t.Errorf("allocated %d KiB while refusing one oversized head, want under 4 MiB", alloc>>10)
	}
	if rec := s.Record(); len(rec.Refused) != 1 || rec.Refused[0].Reason == "" {
		t.Errorf("record %+v, want the refusal", rec)
	}
	if got := counterValue(s.p.refusals.WithLabelValues(ReasonBadRequest)); got != 1 {
		t.Errorf("bad_request counter = %v, want 1", got)
	}
}

type repeatReader byte

func (r repeatReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}

// TestProxyHeadUnderBound: a head just under the bound (a long header)
// is served as any other: the bound applies to the head alone, and the
// bytes after it (a tunnel's first bytes) still pass.
func TestProxyHeadUnderBound(t *testing.T) {
	t.Parallel()
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		c, err := echo.Accept()
		if err == nil {
			io.Copy(c, c)
			c.Close()
		}
	}()
	port := echo.Addr().(*net.TCPAddr).Port
	_, addr := boundsProxy(t, Config{})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	head := fmt.Sprintf("CONNECT web.test:%d HTTP/1.1\r\nHost: web.test:%d\r\nX-Pad: ", port, port)
	pad := MaxHeadBytes - len(head) - len("\r\n\r\n")
	payload := bytes.Repeat([]byte("p"), 256<<10)
	go func() {
		fmt.Fprintf(c, "%s%s\r\n\r\n", head, strings.Repeat("x", pad))
		c.Write(payload)
	}()
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil || !strings.Contains(line, " 200 ") {
		t.Fatalf("CONNECT with a %d-byte head: %q %v", MaxHeadBytes, line, err)
	}
	if blank, _ := br.ReadString('\n'); blank != "\r\n" {
		t.Fatalf("CONNECT answer: %q", blank)
	}
	got := make([]byte, len(payload))
	if _, err := io.ReadFull(br, got); err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("tunnel echoed %d bytes, %v; want the %d sent", len(got), err, len(payload))
	}
}

// TestProxyHeadTimeout: a client that sends part of a head and stops is
// answered 408 when the head's time is up, and closed.
func TestProxyHeadTimeout(t *testing.T) {
	t.Parallel()
	s, addr := boundsProxy(t, Config{HeadTimeout: 50 * time.Millisecond})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "CONNECT web.test:443 HTTP/1.1\r\nHost: web.te")
	code, body := readAnswer(t, c)
	if code != http.StatusRequestTimeout || !strings.Contains(body, "no complete request line and headers within 50ms") {
		t.Errorf("answer %d %q, want 408", code, body)
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("the connection is still open")
	}
	if rec := s.Record(); len(rec.Refused) != 1 {
		t.Errorf("record %+v, want the refusal", rec)
	}
}

// TestProxyConnBound: a session serves at most MaxConns clients at once;
// one more is answered 503 saying so, recorded, counted, and closed; a
// client that ends frees its place for the next.
func TestProxyConnBound(t *testing.T) {
	t.Parallel()
	const max = 3
	s, addr := boundsProxy(t, Config{MaxConns: max})
	held := make([]net.Conn, max)
	for i := range held {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// Half a head: the proxy holds the connection, waiting for the rest.
		fmt.Fprint(c, "CONNECT not-listed.test:443 HTTP/1.1\r\n")
		held[i] = c
	}
	extra := func() (int, string) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return readAnswer(t, c)
	}
	code, body := extra()
	if want := fmt.Sprintf("too many connections open at once (at most %d per job)", max); code != http.StatusServiceUnavailable || !strings.Contains(body, want) {
		t.Errorf("connection %d: %d %q, want 503 saying %q", max+1, code, body, want)
	}
	if got := counterValue(s.p.refusals.WithLabelValues(ReasonTooMany)); got != 1 {
		t.Errorf("too_many_connections counter = %v, want 1", got)
	}
	// One held client ends its head: it is answered (403, not listed) and
	// closed, which frees its place before the client sees the close.
	fmt.Fprint(held[0], "\r\n")
	if code, _ := readAnswer(t, held[0]); code != http.StatusForbidden {
		t.Errorf("the held client's answer = %d, want 403", code)
	}
	if _, err := held[0].Read(make([]byte, 1)); err == nil {
		t.Fatal("the answered client is still open")
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "CONNECT not-listed.test:80 HTTP/1.1\r\n\r\n")
	if code, body := readAnswer(t, c); code != http.StatusForbidden {
		t.Errorf("after a place was freed: %d %q, want the ordinary 403", code, body)
	}
	refused := map[string]int{}
	for _, hc := range s.Record().Refused {
		refused[hc.Host] = hc.Count
	}
	if refused["(too many connections)"] != 1 || refused["not-listed.test:443"] != 1 || refused["not-listed.test:80"] != 1 {
		t.Errorf("refused %v", refused)
	}
}
