package main

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/apitest"
)

// testServer is the server run() serves in-process (startRun), for the
// tests that check the whole HTTP surface but need no process tree of their
// own: the contract fuzz, the auth answers, the conformance of every answer
// and of the output events, and the HTTP hardening (JSON bodies, Host,
// framing, UI headers, slow clients). They lived in tests/, which starts the binary for
// each test.
type testServer struct {
	apitest.Client
	*runningServer
}

// serverOption changes how startServer starts the server.
type serverOption func(*serverConfig)

type serverConfig struct{ home, config string }

// withHome starts the server on the given home.
func withHome(dir string) serverOption { return func(c *serverConfig) { c.home = dir } }

// withConfig starts the server with the given configuration file contents.
func withConfig(yaml string) serverOption { return func(c *serverConfig) { c.config = yaml } }

// startServer starts run() in-process on a loopback port and a fresh home
// (or the one given), and stops it at cleanup.
func startServer(t *testing.T, opts ...serverOption) *testServer {
	t.Helper()
	var c serverConfig
	for _, o := range opts {
		o(&c)
	}
	if c.home == "" {
		c.home = filepath.Join(t.TempDir(), "home")
	}
	args := []string{"--home", c.home}
	if c.config != "" {
		p := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(p, []byte(c.config), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config", p)
	}
	s := startRun(t, args, nil)
	return &testServer{Client: apitest.Client{URL: s.url, Token: s.token}, runningServer: s}
}

// job is the part of a job these tests read.
type job struct {
	ID     string `json:"id"`
	State  string `json:"state"`
	Stdout output `json:"stdout"`
	Stderr output `json:"stderr"`
}

type output struct {
	Text string `json:"text"`
}

// dialServer opens a raw TCP connection to the server, closed at cleanup.
func dialServer(t *testing.T, s *testServer) net.Conn {
	t.Helper()
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// readAnswer reads one response from c, allowing at most limit for it to
// arrive, and reports whether the server then closed the connection (also
// within limit).
func readAnswer(t *testing.T, c net.Conn, limit time.Duration) (resp *http.Response, body string, closed bool) {
	t.Helper()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(limit))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer within %v: %v", limit, err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	_, err = br.ReadByte()
	return resp, string(b), errors.Is(err, io.EOF)
}

// problem is the part of a problem+json body these tests read.
type problem = apitest.Problem
