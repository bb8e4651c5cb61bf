package sandbox

import (
	"bufio"
	"os"
	osexec "os/exec"
	"testing"
	"time"
)

// TestNetNamespacesMadeAhead: with the network off, every command under
// namespaces is in a network namespace of its own, never the host's nor
// another command's, with loopback up and nothing else, whether the
// namespace was made ahead (most, once the pool is warm) or on the spot.
func TestNetNamespacesMadeAhead(t *testing.T) {
	l, h := namespacesHost(t)
	host, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	netNamespaces.mu.Lock()
	takenBefore := netNamespaces.taken
	netNamespaces.mu.Unlock()
	seen := map[string]bool{host: true}
	// The interfaces (/proc/net/dev: a header of two lines, then one line
	// each), and a connection to a closed port of 127.0.0.1, which a
	// loopback that is down would find unreachable instead. Each command
	// then waits for its input to close, so that all namespaces exist at
	// once and their numbers cannot have been reused.
	script := `readlink /proc/self/ns/net; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; (exec 3<>/dev/tcp/127.0.0.1/1) 2>&1 | grep -o 'refused\|unreachable' | head -n 1; echo end; cat >/dev/null`
	type running struct {
		cmd *osexec.Cmd
		in  *os.File
	}
	var cmds []running
	defer func() {
		for _, c := range cmds {
			c.in.Close()
			_ = c.cmd.Wait()
		}
	}()
	for i := range 12 {
		sr, sw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd := &osexec.Cmd{Dir: l.ws, Stdin: sr}
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout = pw
		if _, err := h.Start(Policy{FS: WorkspaceWrite, Network: NetworkOff}, l.ws, []string{l.ws}, "/bin/bash", []string{"bash", "-c", script}, startWith(cmd)); err != nil {
			t.Fatal(err)
		}
		pw.Close()
		sr.Close()
		cmds = append(cmds, running{cmd, sw})
		var lines []string
		sc := bufio.NewScanner(pr)
		for sc.Scan() && sc.Text() != "end" {
			lines = append(lines, sc.Text())
		}
		pr.Close()
		if len(lines) != 3 || lines[1] != "lo" || lines[2] != "refused" {
			t.Fatalf("command %d saw %q; want its namespace, lo alone, and a refused connection", i, lines)
		}
		if seen[lines[0]] {
			t.Fatalf("command %d is in %s, the host's or another running command's", i, lines[0])
		}
		seen[lines[0]] = true
		time.Sleep(5 * time.Millisecond) // the pool refills between commands
	}
	netNamespaces.mu.Lock()
	taken := netNamespaces.taken - takenBefore
	netNamespaces.mu.Unlock()
	if taken < 6 {
		t.Errorf("%d of 12 commands joined a namespace made ahead", taken)
	}
}
