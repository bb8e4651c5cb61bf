package netallow

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func TestParseEntry(t *testing.T) {
	t.Parallel()
	good := map[string]string{
		"api.example.com":     "api.example.com",
		"API.Example.COM.":    "api.example.com",
		"*.example.org":       "*.example.org",
		"*.example.org:443":   "*.example.org:443",
		"host:8080":           "host:8080",
		"10.0.0.5":            "10.0.0.5",
		"10.0.0.5:80":         "10.0.0.5:80",
		"[fd00::1]":           "[fd00::1]",
		"fd00::1":             "[fd00::1]",
		"[fd00::1]:443":       "[fd00::1]:443",
		"::ffff:10.0.0.5":     "10.0.0.5",
		"registry_x.internal": "registry_x.internal",
	}
	for in, want := range good {
		e, err := ParseEntry(in)
		if err != nil {
			t.Errorf("ParseEntry(%q): %v", in, err)
			continue
		}
		if e.String() != want {
			t.Errorf("ParseEntry(%q) = %q, want %q", in, e, want)
		}
	}
	for _, in := range []string{"", "*", "*.com", "a..b", "-a.com", "a.com:0", "a.com:65536", "a.com:+80", "a.com:080",
		"http://a.com", "a.com/x", "[fd00::1", "[10.0.0.1]", "fe80::1%eth0", "127.1", "a b", "*.*.example.org", "a.com:"} {
		if _, err := ParseEntry(in); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseEntry(%q) = %v, want ErrInvalid", in, err)
		}
	}
}

func mustParse(t *testing.T, s ...string) List {
	t.Helper()
	l, err := Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestMatch(t *testing.T) {
	t.Parallel()
	l := mustParse(t, "api.example.com", "*.example.org:443", "10.0.0.5:80", "[fd00::1]")
	for _, c := range []struct {
		host string
		port int
		want bool
	}{
		{"api.example.com", 443, true},
		{"API.example.com.", 80, true},
		{"x.api.example.com", 443, false},
		{"example.com", 443, false},
		{"a.example.org", 443, true},
		{"a.b.example.org", 443, true},
		{"a.example.org", 80, false},
		{"example.org", 443, false},
		{"evilexample.org", 443, false},
		{"example.org.evil.com", 443, false},
		{"10.0.0.5", 80, false}, // an address is never matched as a name
	} {
		if got := l.AllowsName(c.host, c.port); got != c.want {
			t.Errorf("AllowsName(%s, %d) = %v, want %v", c.host, c.port, got, c.want)
		}
	}
	for _, c := range []struct {
		addr string
		port int
		want bool
	}{
		{"10.0.0.5", 80, true}, {"10.0.0.5", 443, false}, {"::ffff:10.0.0.5", 80, true},
		{"10.0.0.6", 80, false}, {"fd00::1", 22, true}, {"fd00::2", 22, false},
	} {
		if got := l.NamesAddr(netip.MustParseAddr(c.addr), c.port); got != c.want {
			t.Errorf("NamesAddr(%s, %d) = %v, want %v", c.addr, c.port, got, c.want)
		}
	}
}

func TestWithin(t *testing.T) {
	t.Parallel()
	outer := mustParse(t, "api.example.com", "*.example.org:443", "10.0.0.5")
	for _, c := range []struct {
		inner []string
		want  bool
	}{
		{nil, true},
		{[]string{"api.example.com"}, true},
		{[]string{"api.example.com:443"}, true},
		{[]string{"a.example.org:443", "*.b.example.org:443"}, true},
		{[]string{"10.0.0.5:22"}, true},
		{[]string{"a.example.org"}, false},     // any port, outer has 443 only
		{[]string{"*.example.org:443"}, true},  // the same entry
		{[]string{"example.org:443"}, false},   // the apex is not below it
		{[]string{"*.example.com"}, false},     // wider than one name
		{[]string{"*.evil.net:443"}, false},    // another domain's wildcard, same port
		{[]string{"x.api.example.com"}, false}, // a name is not a domain
		{[]string{"10.0.0.6"}, false},          // another address
		{[]string{"api.example.com", "x.com"}, false},
	} {
		if got := mustParse(t, c.inner...).Within(outer); got != c.want {
			t.Errorf("%v within %v = %v, want %v", c.inner, outer.Entries(), got, c.want)
		}
	}
}

func TestParseCanonical(t *testing.T) {
	t.Parallel()
	l := mustParse(t, "b.com", "A.com", "b.com.", "a.com")
	if diff := cmp.Diff([]string{"a.com", "b.com"}, l.Entries()); diff != "" {
		t.Error(diff)
	}
	if _, err := Parse(make([]string, MaxEntries+1)); !errors.Is(err, ErrInvalid) {
		t.Errorf("too many entries: %v", err)
	}
}

func TestRestricted(t *testing.T) {
	t.Parallel()
	for a, bad := range map[string]bool{
		"127.0.0.1": true, "127.8.9.10": true, "::1": true, "0.0.0.0": true, "::": true,
		"169.254.169.254": true, "fe80::1": true, "fd00:ec2::254": true,
		"10.1.2.3": true, "172.16.0.1": true, "172.31.255.255": true, "192.168.1.1": true,
		"100.64.0.1": true, "100.127.255.255": true, "fc00::1": true, "fdff::1": true,
		"::ffff:127.0.0.1": true, "::ffff:169.254.169.254": true, "64:ff9b::a9fe:a9fe": true, "2002:a00:1::": true,
		"224.0.0.1": true, "255.255.255.255": true,
		"93.184.216.34": false, "8.8.8.8": false, "172.32.0.1": false, "100.128.0.1": false,
		"2606:4700::1111": false, "64:ff9b::808:808": false,
	} {
		if got := Restricted(netip.MustParseAddr(a)) != ""; got != bad {
			t.Errorf("Restricted(%s) = %q, want restricted %v", a, Restricted(netip.MustParseAddr(a)), bad)
		}
	}
}

// mapResolver stands for the normal resolution path: whatever it answers is
// judged by the address rules (unlike Config.Hosts, the operator's pins).
type mapResolver map[string][]netip.Addr

func (m mapResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if as, ok := m[host]; ok {
		return as, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// testProxy starts a proxy session on loopback with list l, backend names
// pinned by the operator to loopback listeners, and returns a client
// through it.
func testProxy(t *testing.T, reg prometheus.Registerer, hosts map[string][]netip.Addr, res Resolver, l List) (*Session, string) {
	t.Helper()
	p, err := New(Config{Hosts: hosts, Resolver: res, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := p.Serve(ln, l)
	t.Cleanup(s.Close)
	return s, ln.Addr().String()
}

func loopback() []netip.Addr { return []netip.Addr{netip.MustParseAddr("127.0.0.1")} }

func TestProxy(t *testing.T) {
	t.Parallel()
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s %s", r.Host, r.URL.Path)
	}))
	defer web.Close()
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "secret hello")
	}))
	defer tlsSrv.Close()
	webPort := web.Listener.Addr().(*net.TCPAddr).Port
	tlsPort := tlsSrv.Listener.Addr().(*net.TCPAddr).Port

	reg := prometheus.NewRegistry()
	hosts := map[string][]netip.Addr{"web.test": loopback(), "secure.test": loopback(), "notlisted.test": loopback()}
	res := mapResolver{
		"metadata.test": {netip.MustParseAddr("169.254.169.254")},
		"lan.test":      {netip.MustParseAddr("10.0.0.7")},
		"mixed.test":    {netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("127.0.0.1")},
		"local.test":    loopback(),
	}
	l := mustParse(t, "web.test", "secure.test", "metadata.test", "lan.test", "mixed.test", "local.test", "missing.test")
	s, addr := testProxy(t, reg, hosts, res, l)
	proxyURL, _ := url.Parse("http://" + addr)

	pool := x509.NewCertPool()
	pool.AddCert(tlsSrv.Certificate())
	client := &http.Client{Transport: &http.Transport{
		Proxy:           http.ProxyURL(proxyURL),
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "example.com"},
	}}
	get := func(u string) (int, string) {
		t.Helper()
		resp, err := client.Get(u)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	// Plain HTTP by name, twice.
	for range 2 {
		if code, body := get(fmt.Sprintf("http://web.test:%d/x", webPort)); code != 200 || body != fmt.Sprintf("hello web.test:%d /x", webPort) {
			t.Fatalf("http: %d %q", code, body)
		}
	}
	// TLS through CONNECT, verified end to end (the proxy sees no plain text).
	if code, body := get(fmt.Sprintf("https://secure.test:%d/", tlsPort)); code != 200 || body != "secret hello" {
		t.Fatalf("https: %d %q", code, body)
	}
	// Refusals: the reason reaches the client, one line.
	for _, c := range []struct{ url, want string }{
		{fmt.Sprintf("http://notlisted.test:%d/", webPort), "not on the network allowlist"},
		{fmt.Sprintf("http://127.0.0.1:%d/", webPort), "a raw address is reached only when the allowlist names it"},
		{"http://metadata.test/latest/meta-data/", "resolves to 169.254.169.254, a link-local address (cloud metadata) the allowlist does not name"},
		{"http://lan.test/", "resolves to 10.0.0.7, a private address"},
		{"http://mixed.test/", "resolves to 127.0.0.1, a loopback address"},
		{fmt.Sprintf("http://local.test:%d/", webPort), "resolves to 127.0.0.1, a loopback address"},
		{"http://missing.test/", "cannot resolve the name"},
	} {
		code, body := get(c.url)
		if code != http.StatusForbidden && code != http.StatusBadGateway || !strings.Contains(body, c.want) || strings.Count(body, "\n") != 1 {
			t.Errorf("%s: %d %q, want a refusal saying %q", c.url, code, body, c.want)
		}
	}
	// CONNECT to a host not listed: refused before any byte reaches it.
	_, err := client.Get(fmt.Sprintf("https://notlisted.test:%d/", tlsPort))
	if err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Errorf("https to a host not listed: %v", err)
	}

	rec := s.Record()
	wantReached := []HostCount{{Host: fmt.Sprintf("secure.test:%d", tlsPort), Count: 1}, {Host: fmt.Sprintf("web.test:%d", webPort), Count: 2}}
	if diff := cmp.Diff(wantReached, rec.Reached); diff != "" {
		t.Errorf("reached (-want +got):\n%s", diff)
	}
	refused := map[string]int{}
	for _, hc := range rec.Refused {
		refused[hc.Host] = hc.Count
		if hc.Reason == "" {
			t.Errorf("refused %s without a reason", hc.Host)
		}
	}
	wantRefused := map[string]int{
		fmt.Sprintf("notlisted.test:%d", webPort): 1, fmt.Sprintf("notlisted.test:%d", tlsPort): 1,
		fmt.Sprintf("127.0.0.1:%d", webPort): 1, "metadata.test:80": 1, "lan.test:80": 1, "mixed.test:80": 1,
		fmt.Sprintf("local.test:%d", webPort): 1, "missing.test:80": 1,
	}
	if diff := cmp.Diff(wantRefused, refused); diff != "" {
		t.Errorf("refused (-want +got):\n%s", diff)
	}
	if got := counterValue(s.p.decisions.WithLabelValues("reached")); got != 3 {
		t.Errorf("reached counter = %v, want 3", got)
	}
	if got := counterValue(s.p.decisions.WithLabelValues("refused")); got != 8 {
		t.Errorf("refused counter = %v, want 8", got)
	}
	if got := counterValue(s.p.refusals.WithLabelValues(ReasonRestricted)); got != 4 {
		t.Errorf("restricted counter = %v, want 4", got)
	}
}

// TestProxyExplicitAddress: an address the allowlist names is reached,
// raw or through a name that resolves to it, even a loopback one.
func TestProxyExplicitAddress(t *testing.T) {
	t.Parallel()
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer web.Close()
	port := web.Listener.Addr().(*net.TCPAddr).Port
	l := mustParse(t, "127.0.0.1:"+fmt.Sprint(port), "local.test")
	s, addr := testProxy(t, nil, nil, mapResolver{"local.test": loopback()}, l)
	proxyURL, _ := url.Parse("http://" + addr)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}}
	for _, u := range []string{fmt.Sprintf("http://127.0.0.1:%d/", port), fmt.Sprintf("http://local.test:%d/", port)} {
		resp, err := client.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s: %d", u, resp.StatusCode)
		}
	}
	if n := len(s.Record().Reached); n != 2 {
		t.Errorf("reached %d hosts, want 2: %+v", n, s.Record())
	}
}

// TestProxyOneRequestPerConnection: a second request on a connection that
// asked for an allowed host cannot reach another host.
func TestProxyOneRequestPerConnection(t *testing.T) {
	t.Parallel()
	hits := 0
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits++; fmt.Fprint(w, "ok") }))
	defer web.Close()
	port := web.Listener.Addr().(*net.TCPAddr).Port
	_, addr := testProxy(t, nil, map[string][]netip.Addr{"web.test": loopback(), "other.test": loopback()}, nil, mustParse(t, "web.test"))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET http://web.test:%d/ HTTP/1.1\r\nHost: web.test\r\n\r\nGET http://other.test:%d/ HTTP/1.1\r\nHost: other.test\r\n\r\n", port, port)
	all, _ := io.ReadAll(bufio.NewReader(c))
	if strings.Count(string(all), "HTTP/1.1 200") != 1 || hits != 1 {
		t.Errorf("answers %q, %d hits: want one 200 and the connection closed", all, hits)
	}
}

// TestProxyHostHeader: a plain-HTTP request reaches the allowed host with
// that host in its Host header, whatever header the client sent.
func TestProxyHostHeader(t *testing.T) {
	t.Parallel()
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, r.Host) }))
	defer web.Close()
	port := web.Listener.Addr().(*net.TCPAddr).Port
	_, addr := testProxy(t, nil, map[string][]netip.Addr{"web.test": loopback()}, nil, mustParse(t, "web.test"))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET http://web.test:%d/ HTTP/1.1\r\nHost: evil.test\r\n\r\n", port)
	all, _ := io.ReadAll(c)
	if want := fmt.Sprintf("\r\n\r\nweb.test:%d", port); !strings.HasSuffix(string(all), want) {
		t.Errorf("answer %q, want the server to have seen Host web.test:%d", all, port)
	}
}

// TestSessionClose: closing a session ends its open tunnels.
func TestSessionClose(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			io.Copy(io.Discard, c)
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	s, addr := testProxy(t, nil, map[string][]netip.Addr{"web.test": loopback()}, nil, mustParse(t, "web.test"))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT web.test:%d HTTP/1.1\r\nHost: web.test:%d\r\n\r\n", port, port)
	br := bufio.NewReader(c)
	line, _ := br.ReadString('\n')
	if !strings.Contains(line, "200") {
		t.Fatalf("CONNECT: %q", line)
	}
	if blank, _ := br.ReadString('\n'); blank != "\r\n" {
		t.Fatalf("CONNECT answer: %q", blank)
	}
	s.Close()
	if _, err := br.ReadByte(); err == nil {
		t.Error("the tunnel is still open after Close")
	}
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}
