package netallow

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Port is where a confined command finds its proxy: 127.0.0.1:Port inside
// its own network namespace.
const Port = 3128

// Env is what a command under the allowlist gets in its environment, for
// the clients that honour proxy variables (curl, git, pip, npm, Go's,
// Python's). NO_PROXY keeps its own loopback direct.
func Env() []string {
	u := "http://127.0.0.1:" + strconv.Itoa(Port)
	np := "localhost,127.0.0.1,::1"
	return []string{
		"HTTP_PROXY=" + u, "HTTPS_PROXY=" + u, "http_proxy=" + u, "https_proxy=" + u,
		"ALL_PROXY=" + u, "all_proxy=" + u, "NO_PROXY=" + np, "no_proxy=" + np,
	}
}

// Resolver resolves host names; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Config configures a Proxy.
type Config struct {
	// Hosts pins names to addresses, chosen by the operator: a pinned name
	// is not resolved, and its addresses count as named explicitly (they
	// may be loopback or private). The name must still be allowed.
	Hosts map[string][]netip.Addr
	// Resolver resolves every other name; nil means net.DefaultResolver.
	Resolver Resolver
	// DialTimeout bounds resolving and connecting; 0 means 10 s.
	DialTimeout time.Duration
	// HeadTimeout bounds the time a client takes to send a request's line
	// and headers; 0 means DefaultHeadTimeout. One that has not is
	// answered 408 and closed.
	HeadTimeout time.Duration
	// MaxConns bounds the client connections one Session serves at once;
	// 0 means DefaultMaxConns. A connection beyond it is answered 503 and
	// closed.
	MaxConns int
	// Registerer, if set, registers the proxy's counters.
	Registerer prometheus.Registerer
	// Log logs each refusal at debug level; nil means slog.Default().
	Log *slog.Logger
}

// Proxy decides and relays the connections of every Session.
type Proxy struct {
	cfg       Config
	hosts     map[string][]netip.Addr
	decisions *prometheus.CounterVec
	refusals  *prometheus.CounterVec
}

// The reasons a connection is refused, as /metrics labels them.
const (
	ReasonNotListed  = "not_listed"
	ReasonRawAddress = "raw_address"
	ReasonRestricted = "restricted_address"
	ReasonResolve    = "resolve_failed"
	ReasonUnreached  = "unreachable"
	ReasonBadRequest = "bad_request"
	ReasonTooMany    = "too_many_connections"
)

// New returns a proxy; it fails only when its counters cannot be
// registered.
func New(cfg Config) (*Proxy, error) {
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	if cfg.HeadTimeout <= 0 {
		cfg.HeadTimeout = DefaultHeadTimeout
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	p := &Proxy{cfg: cfg, hosts: map[string][]netip.Addr{}}
	for h, as := range cfg.Hosts {
		p.hosts[strings.ToLower(strings.TrimSuffix(h, "."))] = as
	}
	p.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "dshd_network_proxy_connections_total",
		Help: "Connections (CONNECT tunnels and plain-HTTP requests) of confined commands under a network allowlist, by decision: reached or refused.",
	}, []string{"decision"})
	p.refusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "dshd_network_proxy_refused_total",
		Help: "Connections the allowlist proxy refused, by reason.",
	}, []string{"reason"})
	for _, d := range []string{"reached", "refused"} {
		p.decisions.WithLabelValues(d)
	}
	for _, r := range []string{ReasonNotListed, ReasonRawAddress, ReasonRestricted, ReasonResolve, ReasonUnreached, ReasonBadRequest, ReasonTooMany} {
		p.refusals.WithLabelValues(r)
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{p.decisions, p.refusals} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return p, nil
}

// HostCount is one host:port a job's commands asked for and how often.
type HostCount struct {
	Host  string
	Count int
	// Reason is why the first refusal was refused; "" for reached hosts.
	Reason string
}

// Record is what one job's commands reached and were refused.
type Record struct {
	Reached, Refused []HostCount
}

// Empty reports whether nothing was asked for.
func (r Record) Empty() bool { return len(r.Reached) == 0 && len(r.Refused) == 0 }

// What one job's commands can make dshd hold is bounded: each
// connection's request head, the time to send it, and the connections
// open at once. Past the head, a tunnel is relayed socket to socket and a
// forwarded request streams, so a connection holds little more than its
// head while it lasts.
const (
	// MaxHeadBytes bounds a request's line and headers together (and an
	// upstream answer's status line and headers): a request that has not
	// ended its head within them is answered 431 and closed.
	MaxHeadBytes = 64 << 10
	// DefaultMaxConns is Config.MaxConns's default.
	DefaultMaxConns = 64
	// DefaultHeadTimeout is Config.HeadTimeout's default.
	DefaultHeadTimeout = 30 * time.Second
)

// maxHosts bounds the distinct hosts a Session records of each kind; the
// rest are counted under otherHosts.
const (
	maxHosts   = 200
	otherHosts = "(other hosts)"
)

// Session is one job's view of the proxy: its allowlist, its listener, and
// what it reached and was refused.
type Session struct {
	p    *Proxy
	list List
	ln   net.Listener
	wg   sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	conns   map[net.Conn]struct{} // clients and upstreams, to close
	clients int                   // client connections open
	reached map[string]*HostCount
	refused map[string]*HostCount
}

// Serve serves the connections ln accepts under l until Close.
func (p *Proxy) Serve(ln net.Listener, l List) *Session {
	s := &Session{p: p, list: l, ln: ln, conns: map[net.Conn]struct{}{},
		reached: map[string]*HostCount{}, refused: map[string]*HostCount{}}
	s.wg.Add(1)
	go s.accept()
	return s
}

func (s *Session) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		switch s.admit(c) {
		case admitClosed:
			c.Close()
			continue
		case admitFull:
			// Answered without reading: the answer is small and the
			// socket's send buffer empty, so the write does not wait
			// (the deadline guards it all the same).
			c.SetWriteDeadline(time.Now().Add(time.Second))
			s.refuse(c, "(too many connections)", &refusal{reason: ReasonTooMany, status: http.StatusServiceUnavailable,
				msg: fmt.Sprintf("too many connections open at once (at most %d per job)", s.p.cfg.MaxConns)})
			c.Close()
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.untrackClient(c)
			s.handle(c)
		}()
	}
}

type admission int

const (
	admitted admission = iota
	admitClosed
	admitFull
)

// admit tracks the client connection c unless the session is closed or
// serves its most clients already.
func (s *Session) admit(c net.Conn) admission {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return admitClosed
	case s.clients >= s.p.cfg.MaxConns:
		return admitFull
	}
	s.clients++
	s.conns[c] = struct{}{}
	return admitted
}

func (s *Session) untrackClient(c net.Conn) {
	s.mu.Lock()
	s.clients--
	s.mu.Unlock()
	s.track(c, false)
}

// track adds (or removes and closes) c from the open connections; false
// when the session is closed. Each client has at most one upstream, so
// the upstreams are bounded with the clients.
func (s *Session) track(c net.Conn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !add {
		delete(s.conns, c)
		c.Close()
		return true
	}
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

// Close stops the session: the listener and every connection close. It
// waits for the handlers; the record stays readable.
func (s *Session) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.ln.Close()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// Record returns what the session's commands reached and were refused,
// each sorted by host.
func (s *Session) Record() Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	list := func(m map[string]*HostCount) []HostCount {
		out := make([]HostCount, 0, len(m))
		for _, hc := range m {
			out = append(out, *hc)
		}
		slices.SortFunc(out, func(a, b HostCount) int { return strings.Compare(a.Host, b.Host) })
		return out
	}
	return Record{Reached: list(s.reached), Refused: list(s.refused)}
}

func (s *Session) note(m map[string]*HostCount, host, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	hc := m[host]
	if hc == nil {
		if len(m) >= maxHosts {
			host, reason = otherHosts, ""
			hc = m[host]
		}
		if hc == nil {
			hc = &HostCount{Host: host, Reason: reason}
			m[host] = hc
		}
	}
	hc.Count++
}

// refusal is a connection the proxy refuses.
type refusal struct {
	reason string // a Reason* constant
	msg    string // one line, for the client and the record
	status int
}

func (r *refusal) Error() string { return r.msg }

func (s *Session) refuse(c net.Conn, target string, r *refusal) {
	s.p.decisions.WithLabelValues("refused").Inc()
	s.p.refusals.WithLabelValues(r.reason).Inc()
	if target == "" {
		target = "(unparsable request)"
	}
	s.note(s.refused, target, r.msg)
	s.p.cfg.Log.Debug("network allowlist refused", "target", target, "reason", r.msg)
	body := "dshd network allowlist: " + target + ": " + r.msg + "\n"
	status := r.status
	if status == 0 {
		status = http.StatusForbidden
	}
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		status, http.StatusText(status), len(body), body)
}

// headLimit is a reader that ends after n bytes until lift: the bufio
// reader over it then holds at most a head's worth (net/http's server
// bounds its requests' heads the same way).
type headLimit struct {
	r io.Reader
	n int64 // bytes left; < 0: no limit
}

func (h *headLimit) Read(p []byte) (int, error) {
	if h.n < 0 {
		return h.r.Read(p)
	}
	if h.n == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > h.n {
		p = p[:h.n]
	}
	n, err := h.r.Read(p)
	h.n -= int64(n)
	return n, err
}

func (h *headLimit) exhausted() bool { return h.n == 0 }
func (h *headLimit) lift()           { h.n = -1 }

func (s *Session) handle(c net.Conn) {
	lim := &headLimit{r: c, n: MaxHeadBytes}
	br := bufio.NewReader(lim)
	c.SetReadDeadline(time.Now().Add(s.p.cfg.HeadTimeout))
	req, err := http.ReadRequest(br)
	if err != nil {
		var ne net.Error
		switch {
		case lim.exhausted():
			s.refuse(c, "", &refusal{reason: ReasonBadRequest, status: http.StatusRequestHeaderFieldsTooLarge,
				msg: fmt.Sprintf("the request's line and headers exceed %d bytes", MaxHeadBytes)})
		case errors.As(err, &ne) && ne.Timeout():
			s.refuse(c, "", &refusal{reason: ReasonBadRequest, status: http.StatusRequestTimeout,
				msg: fmt.Sprintf("no complete request line and headers within %s", s.p.cfg.HeadTimeout)})
		case !errors.Is(err, io.EOF):
			s.refuse(c, "", &refusal{reason: ReasonBadRequest, msg: "not an HTTP proxy request", status: http.StatusBadRequest})
		}
		return
	}
	c.SetReadDeadline(time.Time{})
	lim.lift()
	if req.Method == http.MethodConnect {
		host, port, err := splitHostPort(req.RequestURI, 443)
		if err != nil || host == "" {
			s.refuse(c, req.RequestURI, &refusal{reason: ReasonBadRequest, msg: "CONNECT needs host:port", status: http.StatusBadRequest})
			return
		}
		up, ok := s.open(c, host, port)
		if !ok {
			return
		}
		defer s.track(up, false)
		if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			return
		}
		relay(c, br, up)
		return
	}
	if req.URL.Scheme != "http" || req.URL.Host == "" {
		s.refuse(c, req.Host, &refusal{reason: ReasonBadRequest, msg: "a proxy request needs CONNECT or an absolute http:// URL", status: http.StatusBadRequest})
		return
	}
	host, port, err := splitHostPort(req.URL.Host, 80)
	if err != nil || host == "" {
		s.refuse(c, req.URL.Host, &refusal{reason: ReasonBadRequest, msg: "bad host", status: http.StatusBadRequest})
		return
	}
	up, ok := s.open(c, host, port)
	if !ok {
		return
	}
	defer s.track(up, false)
	// One request per connection: the next one may name another host.
	// The Host header is the host decided on: a request may not name an
	// allowed host and ask its server for another (http.ReadRequest
	// already ignores the header of an absolute URL; kept explicit).
	req.Host = req.URL.Host
	req.Header.Del("Proxy-Connection")
	req.Header.Del("Proxy-Authorization")
	req.Close = true
	if err := req.Write(up); err != nil {
		return
	}
	ulim := &headLimit{r: up, n: MaxHeadBytes}
	resp, err := http.ReadResponse(bufio.NewReader(ulim), req)
	if err != nil {
		return
	}
	ulim.lift()
	defer resp.Body.Close()
	resp.Close = true
	resp.Write(c)
}

// open decides on host:port for the client c and connects to it: a
// refusal is answered on c, and a connection opened is tracked (the
// caller untracks it) and recorded as reached. ok is false when there is
// nothing to relay.
func (s *Session) open(c net.Conn, host string, port int) (up net.Conn, ok bool) {
	target := targetOf(host, port)
	up, rf := s.dial(host, port)
	if rf != nil {
		s.refuse(c, target, rf)
		return nil, false
	}
	if !s.track(up, true) {
		up.Close()
		return nil, false
	}
	s.reach(target)
	return up, true
}

func (s *Session) reach(target string) {
	s.p.decisions.WithLabelValues("reached").Inc()
	s.note(s.reached, target, "")
}

// targetOf renders host and port as the record names them.
func targetOf(host string, port int) string {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// dial decides whether host:port may be reached and, if so, connects to an
// address it checked (never one resolved again after the check).
func (s *Session) dial(host string, port int) (net.Conn, *refusal) {
	ctx, cancel := context.WithTimeout(context.Background(), s.p.cfg.DialTimeout)
	defer cancel()
	if a, err := netip.ParseAddr(host); err == nil {
		if !s.list.NamesAddr(a, port) {
			return nil, &refusal{reason: ReasonRawAddress, msg: "a raw address is reached only when the allowlist names it"}
		}
		return s.connect(ctx, []netip.Addr{a}, port)
	}
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	if !validName(name) {
		return nil, &refusal{reason: ReasonBadRequest, msg: "not a host name", status: http.StatusBadRequest}
	}
	if !s.list.AllowsName(name, port) {
		return nil, &refusal{reason: ReasonNotListed, msg: "not on the network allowlist"}
	}
	if pinned, ok := s.p.hosts[name]; ok {
		return s.connect(ctx, pinned, port)
	}
	addrs, err := s.p.cfg.Resolver.LookupNetIP(ctx, "ip", name)
	if err != nil || len(addrs) == 0 {
		return nil, &refusal{reason: ReasonResolve, msg: "cannot resolve the name", status: http.StatusBadGateway}
	}
	// One restricted address refuses the name: a name that mixes public
	// and private answers is how a rebinding attack looks.
	for _, a := range addrs {
		if why := Restricted(a); why != "" && !s.list.NamesAddr(a, port) {
			return nil, &refusal{reason: ReasonRestricted, msg: fmt.Sprintf("resolves to %s, %s the allowlist does not name", a.Unmap(), why)}
		}
	}
	return s.connect(ctx, addrs, port)
}

// connect dials the first of addrs that answers.
func (s *Session) connect(ctx context.Context, addrs []netip.Addr, port int) (net.Conn, *refusal) {
	var d net.Dialer
	var last error
	for _, a := range addrs {
		c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(a.Unmap(), uint16(port)).String())
		if err == nil {
			return c, nil
		}
		last = err
	}
	msg := "cannot connect"
	var oe *net.OpError
	if errors.As(last, &oe) && oe.Err != nil {
		msg += ": " + oe.Err.Error()
	}
	return nil, &refusal{reason: ReasonUnreached, msg: msg, status: http.StatusBadGateway}
}

// relay copies between the client c (whose reader br may hold bytes read
// ahead) and up until both directions end.
func relay(c net.Conn, br *bufio.Reader, up net.Conn) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		// What the reader holds first, then socket to socket (splice(2)
		// between TCP connections).
		if n := br.Buffered(); n > 0 {
			b, _ := br.Peek(n)
			if _, err := up.Write(b); err != nil {
				closeWrite(up)
				return
			}
			br.Discard(n)
		}
		io.Copy(up, c)
		closeWrite(up)
	}()
	io.Copy(c, up)
	closeWrite(c)
	<-done
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}
