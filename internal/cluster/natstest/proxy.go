package natstest

import (
	"net"
	"strings"
	"sync"
	"testing"
)

// Proxy relays TCP connections from its own loopback port to one NATS
// server. Cut plays a network partition between the clients that connect
// through it and the cluster: it drops every connection and refuses new
// ones until Heal. Stall and Drop play silent ones: connections stay open
// (new ones are accepted) but no byte gets through, held until Heal
// (Stall) or lost (Drop), and no side is told.
type Proxy struct {
	URL string // nats://127.0.0.1:port, for clients

	target string
	ln     net.Listener
	wg     sync.WaitGroup

	mu    sync.Mutex
	moved *sync.Cond // signalled when mode changes
	cut   bool
	mode  linkMode
	conns map[net.Conn]struct{}
}

// linkMode is what a relayed byte meets.
type linkMode int

const (
	linkOpen    linkMode = iota
	linkStalled          // held until Heal
	linkDropped          // lost
)

// NewProxy relays to the server at url (a client URL of Cluster.URLs) until
// tb ends.
func NewProxy(tb testing.TB, url string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &Proxy{
		URL:    "nats://" + ln.Addr().String(),
		target: strings.TrimPrefix(url, "nats://"),
		ln:     ln,
		conns:  map[net.Conn]struct{}{},
	}
	p.moved = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(p.close)
	return p
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

// pipe copies from src to dst as the link's mode lets it; when either
// side ends, both are closed.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && p.pass() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break // either side closed, for any reason
		}
	}
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
	dst.Close()
	src.Close()
}

// pass waits while the link is stalled and reports whether bytes get
// through (false: dropped).
func (p *Proxy) pass() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.mode == linkStalled {
		p.moved.Wait()
	}
	return p.mode == linkOpen
}

// Stall holds every byte, both ways, until Heal; connections stay open.
func (p *Proxy) Stall() { p.setMode(linkStalled) }

// Drop loses every byte, both ways, until Heal; connections stay open.
func (p *Proxy) Drop() { p.setMode(linkDropped) }

func (p *Proxy) setMode(m linkMode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = m
	p.moved.Broadcast()
}

// Cut drops every relayed connection and refuses new ones until Heal.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

// Heal lets connections and bytes through again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	p.mode = linkOpen
	p.moved.Broadcast()
}

func (p *Proxy) close() {
	p.ln.Close()
	p.Cut()
	p.setMode(linkOpen)
	p.wg.Wait()
}
