// Package natstest starts real NATS JetStream clusters in the test process:
// three nats-server nodes on 127.0.0.1 with random ports and temporary store
// directories, routed to each other, every one shut down at test end. Only
// tests import it, so the server stays out of the dshd binary.
package natstest

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Cluster is a running NATS JetStream cluster.
type Cluster struct {
	Servers []*server.Server
	URLs    []string // client URLs, nats://127.0.0.1:port, one per server
}

// freePorts reserves n loopback ports and releases them for the servers
// to bind. Routes must name every peer before any server starts, so the
// ports are chosen up front.
func freePorts(tb testing.TB, n int) []int {
	tb.Helper()
	var lns []net.Listener
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports
}

// Options change how Start configures the servers.
type Options struct {
	// NoAdvertise: servers do not tell clients the other servers'
	// addresses, so a client reaches only the URLs it was given (a Proxy
	// in front of one server then stands for the client's whole network).
	NoAdvertise bool
}

// Start starts a cluster of n JetStream servers and waits until it has a
// JetStream meta leader that every server follows. Every server is shut
// down, and waited for, when tb ends.
func Start(tb testing.TB, n int) *Cluster {
	tb.Helper()
	return StartWith(tb, n, Options{})
}

// StartWith is Start with options.
func StartWith(tb testing.TB, n int, o Options) *Cluster {
	tb.Helper()
	ports := freePorts(tb, 2*n)
	var routes []string
	for i := range n {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[n+i]))
	}
	c := &Cluster{}
	tb.Cleanup(c.Shutdown)
	for i := range n {
		opts := &server.Options{
			ServerName: fmt.Sprintf("nats-%d", i),
			Host:       "127.0.0.1",
			Port:       ports[i],
			JetStream:  true,
			StoreDir:   tb.TempDir(),
			Cluster: server.ClusterOpts{
				Name:        "dshd-test",
				Host:        "127.0.0.1",
				Port:        ports[n+i],
				NoAdvertise: o.NoAdvertise,
			},
			Routes: server.RoutesFromStr(strings.Join(routes, ",")),
			NoLog:  true,
			NoSigs: true,
		}
		s, err := server.NewServer(opts)
		if err != nil {
			tb.Fatalf("nats server %d: %v", i, err)
		}
		s.Start()
		c.Servers = append(c.Servers, s)
		c.URLs = append(c.URLs, s.ClientURL())
	}
	for i, s := range c.Servers {
		if !s.ReadyForConnections(30 * time.Second) {
			tb.Fatalf("nats server %d not ready within 30s", i)
		}
	}
	c.WaitJetStream(tb, 60*time.Second)
	return c
}

// WaitJetStream waits until a meta leader is elected among the running
// servers and every running server is current with it.
func (c *Cluster) WaitJetStream(tb testing.TB, d time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		leader, current := false, true
		for _, s := range c.Servers {
			if !s.Running() {
				continue
			}
			leader = leader || s.JetStreamIsLeader()
			current = current && s.JetStreamIsCurrent()
		}
		if leader && current {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	tb.Fatalf("NATS JetStream cluster has no meta leader after %s", d)
}

// Kill shuts server i down (as a lost node) and waits until it is gone.
func (c *Cluster) Kill(i int) {
	c.Servers[i].Shutdown()
	c.Servers[i].WaitForShutdown()
}

// Shutdown stops every server and waits for each.
func (c *Cluster) Shutdown() {
	for _, s := range c.Servers {
		s.Shutdown()
	}
	for _, s := range c.Servers {
		s.WaitForShutdown()
	}
}
