package tests

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"

	"github.com/dshd/dshd/internal/bareexec"
)

// leanConn is the leanest honest HTTP/1.1 client of one fixed request on
// one kept-alive connection: the request's bytes are built once, written
// with one write, and the answer is read on the caller's goroutine by its
// status line and Content-Length alone.
//
// The loopback benchmarks' client shares the machine's cores with the
// server and bash, so its CPU is part of what they measure. net/http's
// client hands each request and answer between the caller's goroutine and
// two of its own per connection and parses every header into a map; on two
// cores that is a visible share of a `true` request. A server's own cost is
// read with this client; what a Go harness on net/http sees is reported
// beside it.
type leanConn struct {
	conn net.Conn
	r    *bufio.Reader
	req  []byte
	body []byte
	what string // for failures: "POST <url>"
}

// dialLean connects to the server at base (an http:// URL) for POSTs of
// body to path, with the bearer token if there is one. The connection is
// closed at cleanup.
func dialLean(tb testing.TB, base, path, token string, body []byte) *leanConn {
	tb.Helper()
	u, err := url.Parse(base)
	if err != nil || u.Scheme != "http" {
		tb.Fatalf("lean client: %q is not an http URL (%v)", base, err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	var req bytes.Buffer
	fmt.Fprintf(&req, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", path, u.Host, len(body))
	if token != "" {
		fmt.Fprintf(&req, "Authorization: Bearer %s\r\n", token)
	}
	req.WriteString("\r\n")
	req.Write(body)
	return &leanConn{conn: conn, r: bufio.NewReaderSize(conn, 4096), req: req.Bytes(), what: "POST " + base + path}
}

// do sends the request and reads the whole answer. It fails tb unless the
// status is 200 and the answer is framed by a Content-Length (chunked
// answers are not read: none of the servers measured sends one for these
// requests, and a change that made one would show here).
func (c *leanConn) do(tb testing.TB) {
	if _, err := c.conn.Write(c.req); err != nil {
		tb.Fatalf("%s: %v", c.what, err)
	}
	line, err := c.r.ReadSlice('\n')
	if err != nil || len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		tb.Fatalf("%s: status line %q: %v", c.what, line, err)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		tb.Fatalf("%s: status line %q", c.what, line)
	}
	n := -1
	for {
		line, err = c.r.ReadSlice('\n')
		if err != nil {
			tb.Fatalf("%s: headers: %v", c.what, err)
		}
		if len(line) <= 2 { // the blank line
			break
		}
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		switch {
		case bytes.EqualFold(k, []byte("Content-Length")):
			if n, err = strconv.Atoi(string(bytes.TrimSpace(v))); err != nil || n < 0 {
				tb.Fatalf("%s: Content-Length %q", c.what, v)
			}
		case bytes.EqualFold(k, []byte("Transfer-Encoding")):
			tb.Fatalf("%s: answer sent with Transfer-Encoding %q; the lean client reads Content-Length only", c.what, bytes.TrimSpace(v))
		}
	}
	if n < 0 {
		tb.Fatalf("%s: answer without Content-Length", c.what)
	}
	if cap(c.body) < n {
		c.body = make([]byte, n)
	}
	body := c.body[:n]
	if _, err := io.ReadFull(c.r, body); err != nil {
		tb.Fatalf("%s: body: %v", c.what, err)
	}
	if status != 200 {
		tb.Fatalf("%s = %d: %s", c.what, status, body)
	}
}

// TestLeanClient checks the lean client against a real dshd and the bare
// server: it reads answer after answer on one connection, and fails on an
// error status (a refused token) rather than reading it as success.
func TestLeanClient(t *testing.T) {
	s := startServer(t)
	bare := httptest.NewServer(bareexec.Handler()) // the bare server's binary is built for benchmarks only
	defer bare.Close()
	for _, c := range []*leanConn{
		dialLean(t, s.URL, "/exec", s.Token, execTrue),
		dialLean(t, bare.URL, "/exec", "", execTrue),
	} {
		for range 3 {
			c.do(t)
		}
	}
	bad := dialLean(t, s.URL, "/exec", "not-the-token", execTrue)
	ft := &fatalRecorder{TB: t}
	func() {
		defer func() { _ = recover() }()
		bad.do(ft)
	}()
	if !ft.failed {
		t.Fatal("a 401 answer was read as success")
	}
}

// fatalRecorder records a Fatalf instead of ending the test, so that a
// test can check that a helper fails.
type fatalRecorder struct {
	testing.TB
	failed bool
}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.failed = true
	panic(fmt.Sprintf(format, args...))
}

func (f *fatalRecorder) Fatal(args ...any) {
	f.failed = true
	panic(fmt.Sprint(args...))
}
