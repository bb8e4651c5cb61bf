package natstest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Procs is a NATS JetStream cluster of separate nats-server processes, so
// that a node can be killed the way a crash kills it (SIGKILL: no goodbye
// to its routes, no leadership handed over, its store left as it was).
type Procs struct {
	URLs []string // client URLs, nats://127.0.0.1:port, one per node

	bin   string
	confs []string
	mon   []string // monitoring base URLs, http://127.0.0.1:port
	mu    sync.Mutex
	cmds  []*exec.Cmd
	done  []chan struct{}
}

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// serverBinary builds nats-server (the version go.mod pins) once per test
// binary, into a directory removed at exit by the OS's temp cleaning.
func serverBinary() (string, error) {
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "natstest-bin-")
		if err != nil {
			buildErr = err
			return
		}
		bin := filepath.Join(dir, "nats-server")
		cmd := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build nats-server: %v: %s", err, out)
			return
		}
		builtBin = bin
	})
	return builtBin, buildErr
}

// StartProcs starts n nats-server processes routed to each other, each with
// its own store, and waits until JetStream has a meta leader every node
// follows. Every process is killed, and waited for, when tb ends.
func StartProcs(tb testing.TB, n int) *Procs {
	tb.Helper()
	bin, err := serverBinary()
	if err != nil {
		tb.Fatal(err)
	}
	ports := freePorts(tb, 3*n)
	var routes []string
	for i := range n {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[n+i]))
	}
	c := &Procs{bin: bin}
	tb.Cleanup(c.stopAll)
	dir := tb.TempDir()
	for i := range n {
		store := filepath.Join(dir, fmt.Sprintf("store-%d", i))
		conf := fmt.Sprintf(`server_name: nats-%d
listen: 127.0.0.1:%d
http: 127.0.0.1:%d
jetstream { store_dir: %q }
cluster {
  name: dshd-test
  listen: 127.0.0.1:%d
  routes: [%s]
}
`, i, ports[i], ports[2*n+i], store, ports[n+i], strings.Join(routes, ", "))
		p := filepath.Join(dir, fmt.Sprintf("nats-%d.conf", i))
		if err := os.WriteFile(p, []byte(conf), 0o600); err != nil {
			tb.Fatal(err)
		}
		c.confs = append(c.confs, p)
		c.URLs = append(c.URLs, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
		c.mon = append(c.mon, fmt.Sprintf("http://127.0.0.1:%d", ports[2*n+i]))
		c.cmds = append(c.cmds, nil)
		c.done = append(c.done, nil)
		c.start(tb, i)
	}
	c.WaitJetStream(tb, 60*time.Second)
	return c
}

// start runs node i from its configuration (and store) and waits until it
// answers its monitoring endpoint.
func (c *Procs) start(tb testing.TB, i int) {
	tb.Helper()
	cmd := exec.Command(c.bin, "-c", c.confs[i])
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start nats-server %d: %v", i, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	c.mu.Lock()
	c.cmds[i], c.done[i] = cmd, done
	c.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(c.mon[i] + "/healthz")
		if err == nil {
			resp.Body.Close()
			return
		}
		select {
		case <-done:
			tb.Fatalf("nats-server %d exited at start", i)
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("nats-server %d does not answer within 30s", i)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill sends node i SIGKILL and waits until the process is gone.
func (c *Procs) Kill(i int) {
	c.mu.Lock()
	cmd, done := c.cmds[i], c.done[i]
	c.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
	c.mu.Lock()
	c.cmds[i] = nil
	c.mu.Unlock()
}

// Restart starts killed node i again on its store.
func (c *Procs) Restart(tb testing.TB, i int) {
	tb.Helper()
	c.start(tb, i)
}

func (c *Procs) stopAll() {
	for i := range c.cmds {
		c.Kill(i)
	}
}

// running reports whether node i runs.
func (c *Procs) running(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cmds[i] != nil
}

// jsz is the part of a node's /jsz answer the tests read.
type jsz struct {
	Meta *struct {
		Leader string `json:"leader"`
	} `json:"meta_cluster"`
	Accounts []struct {
		Streams []struct {
			Name    string `json:"name"`
			Cluster *struct {
				Leader string `json:"leader"`
			} `json:"cluster"`
		} `json:"stream_detail"`
	} `json:"account_details"`
}

func (c *Procs) jsz(i int) (jsz, error) {
	var j jsz
	cl := http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get(c.mon[i] + "/jsz?accounts=true&streams=true")
	if err != nil {
		return j, err
	}
	defer resp.Body.Close()
	return j, json.NewDecoder(resp.Body).Decode(&j)
}

// index returns the node named name ("nats-<i>"), or -1.
func (c *Procs) index(name string) int {
	for i := range c.confs {
		if name == fmt.Sprintf("nats-%d", i) {
			return i
		}
	}
	return -1
}

// MetaLeader returns the node that leads JetStream's meta group, or -1
// when no running node names one.
func (c *Procs) MetaLeader() int {
	for i := range c.confs {
		if !c.running(i) {
			continue
		}
		if j, err := c.jsz(i); err == nil && j.Meta != nil && j.Meta.Leader != "" {
			return c.index(j.Meta.Leader)
		}
	}
	return -1
}

// StreamLeader returns the node that leads stream (a key-value bucket B is
// the stream KV_B), or -1 when no running node names one.
func (c *Procs) StreamLeader(stream string) int {
	for i := range c.confs {
		if !c.running(i) {
			continue
		}
		j, err := c.jsz(i)
		if err != nil {
			continue
		}
		for _, a := range j.Accounts {
			for _, s := range a.Streams {
				if s.Name == stream && s.Cluster != nil && s.Cluster.Leader != "" {
					return c.index(s.Cluster.Leader)
				}
			}
		}
	}
	return -1
}

// WaitJetStream waits until the running nodes agree on a meta leader
// and each answers its health check (JetStream current) within d.
func (c *Procs) WaitJetStream(tb testing.TB, d time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		ok := true
		for i := range c.confs {
			if !c.running(i) {
				continue
			}
			resp, err := http.Get(c.mon[i] + "/healthz")
			if err != nil {
				ok = false
				break
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				ok = false
				break
			}
		}
		if ok && c.MetaLeader() >= 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	tb.Fatalf("NATS JetStream processes have no meta leader every node follows after %s", d)
}
