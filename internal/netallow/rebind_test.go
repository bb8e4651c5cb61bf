package netallow

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// rebindingResolver models DNS rebinding: the first answer for a name is
// first, every later one is then, as an attacker's name server with a zero
// TTL answers.
type rebindingResolver struct {
	first, then netip.Addr
	mu          sync.Mutex
	calls       map[string]int
}

func (r *rebindingResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls[host]++
	if r.calls[host] == 1 {
		return []netip.Addr{r.first}, nil
	}
	return []netip.Addr{r.then}, nil
}

func (r *rebindingResolver) count(host string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[host]
}

// serveText answers every HTTP request on ln with text, and counts them.
func serveText(t *testing.T, ln net.Listener, text string) *atomic.Int32 {
	t.Helper()
	var n atomic.Int32
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { n.Add(1); fmt.Fprint(w, text) })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return &n
}

// TestProxyRebinding: a name whose answer changes between the check and
// the connection (DNS rebinding) is connected to at the address that was
// checked, never at a later answer, for plain HTTP and CONNECT alike. The
// name first answers 127.0.0.1, which the allowlist names at the port, then
// 127.0.0.2 on the same port, a loopback address it does not name: a
// service of the host's that no name may reach. The baseline resolves the
// name as a check and then again to connect, and reaches that service.
func TestProxyRebinding(t *testing.T) {
	t.Parallel()
	checked, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := checked.Addr().(*net.TCPAddr).Port
	hidden, err := net.Listen("tcp", fmt.Sprintf("127.0.0.2:%d", port))
	if err != nil {
		checked.Close()
		t.Skipf("no second loopback address at port %d here: %v", port, err)
	}
	serveText(t, checked, "the checked address")
	hiddenHits := serveText(t, hidden, "the host's own service")
	res := &rebindingResolver{first: netip.MustParseAddr("127.0.0.1"), then: netip.MustParseAddr("127.0.0.2"), calls: map[string]int{}}
	l := mustParse(t, "*.rebind.test", fmt.Sprintf("127.0.0.1:%d", port))

	// Baseline: resolving again to connect reaches what the check refused.
	get := func(c *http.Client, u string) string {
		t.Helper()
		resp, err := c.Get(u)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	base := "baseline.rebind.test"
	as, _ := res.LookupNetIP(context.Background(), "ip", base)
	if len(as) != 1 || Restricted(as[0]) != "" && !l.NamesAddr(as[0], port) {
		t.Fatalf("baseline: the first answer %v does not pass the check", as)
	}
	direct := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		again, err := res.LookupNetIP(ctx, "ip", base)
		if err != nil {
			return nil, err
		}
		var d net.Dialer
		return d.DialContext(ctx, network, netip.AddrPortFrom(again[0], uint16(port)).String())
	}}}
	if got := get(direct, fmt.Sprintf("http://%s:%d/", base, port)); got != "the host's own service" {
		t.Fatalf("baseline: resolving again to connect got %q, want the host's own service", got)
	}

	_, addr := testProxy(t, nil, nil, res, l)
	proxyURL, _ := url.Parse("http://" + addr)
	proxied := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}}
	plain := "plain.rebind.test"
	if got := get(proxied, fmt.Sprintf("http://%s:%d/", plain, port)); got != "the checked address" {
		t.Errorf("plain HTTP to %s got %q, want the checked address", plain, got)
	}
	if n := res.count(plain); n != 1 {
		t.Errorf("%s resolved %d times for one request, want once", plain, n)
	}
	// The next request is checked anew, against the answer it connects to.
	if got, want := get(proxied, fmt.Sprintf("http://%s:%d/", plain, port)), "resolves to 127.0.0.2, a loopback address the allowlist does not name"; !strings.Contains(got, want) {
		t.Errorf("plain HTTP to %s once it rebound got %q, want a refusal saying %q", plain, got, want)
	}

	tunnel := "tunnel.rebind.test"
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n", tunnel, port, tunnel, port)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT %s: %v, %v", tunnel, resp, err)
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n\r\n", tunnel, port)
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if got := strings.TrimSpace(string(b)); got != "the checked address" {
		t.Errorf("CONNECT to %s reached %q, want the checked address", tunnel, got)
	}
	if n := res.count(tunnel); n != 1 {
		t.Errorf("%s resolved %d times for one tunnel, want once", tunnel, n)
	}
	if n := hiddenHits.Load(); n != 1 {
		t.Errorf("the host's own service answered %d requests, want the baseline's one", n)
	}
}
