package tests

import (
	"encoding/json"
	"fmt"
	osexec "os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/benchkit"
)

// BenchmarkExecSandbox measures foreground POST /exec of `true` under each
// sandbox policy, interleaved with the unrestricted baseline in the same
// run. Budget: workspace-write with the network off within 1.5× of
// unrestricted at the median. The policies run on a server with the
// default mechanism (namespaces where dshd may create them); the last row
// is workspace-write with the network off on a second server forced to
// bubblewrap, the fallback, for comparison. The -noseccomp rows are the
// same workspace-write with the network off on servers with the seccomp
// filter turned off (sandbox.seccomp: false): the filter's cost is the
// difference.
func BenchmarkExecSandbox(b *testing.B) {
	s := startServer(b)
	bw := startServer(b, withConfig("sandbox:\n  mechanism: bubblewrap\n"))
	s0 := startServer(b, withConfig("sandbox:\n  seccomp: false\n"))
	bw0 := startServer(b, withConfig("sandbox:\n  mechanism: bubblewrap\n  seccomp: false\n"))
	for _, srv := range []*testServer{s, bw, s0, bw0} {
		var h healthSandbox
		if st := srv.DoJSON(b, "GET", "/healthz", nil, &h); st != 200 || h.Details.Sandbox == nil || len(h.Details.Sandbox.Networks) < 2 {
			b.Skip("this host cannot enforce sandbox policies (needs bubblewrap, or root for namespaces)")
		}
		if srv == s {
			b.Logf("default mechanism: %s", h.Details.Sandbox.Mechanism)
		} else if (srv == bw || srv == bw0) && !strings.HasPrefix(h.Details.Sandbox.Mechanism, "bubblewrap") {
			b.Fatalf("forced bubblewrap, got %q", h.Details.Sandbox.Mechanism)
		}
	}
	// Every job runs in a directory of its own: by default it would run
	// where `go test` does, this package with its node_modules (some 1,500
	// directories), and workspace-write's search of the writable root for
	// .git entries (a stat of every directory per command,
	// internal/sandbox/gitscan.go) would be measured instead of the
	// sandbox. That search's cost is BenchmarkGitDirs's.
	cwd, err := json.Marshal(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	body := func(policy, network string) string {
		return fmt.Sprintf(`{"command":"cat /proc/1/cmdline","cwd":%s,"sandbox":{"policy":%q,"network":%q}}`, cwd, policy, network)
	}
	policies := []struct {
		name string
		srv  *testServer
		body string
	}{
		{"unrestricted", s, body("unrestricted", "on")},
		{"unrestricted-off", s, body("unrestricted", "off")},
		{"workspace-write-on", s, body("workspace-write", "on")},
		{"workspace-write-off", s, body("workspace-write", "off")},
		{"read-only-off", s, body("read-only", "off")},
		{"bubblewrap-workspace-write-off", bw, body("workspace-write", "off")},
		{"workspace-write-off-noseccomp", s0, body("workspace-write", "off")},
		{"bubblewrap-workspace-write-off-noseccomp", bw0, body("workspace-write", "off")},
	}
	for range 20 { // warm up every path
		for _, p := range policies {
			p.srv.post(b, "/exec", []byte(p.body))
		}
	}
	// The kernel's floor, spawned directly from the test with nothing of
	// dshd's: bash in a fresh mount and network namespace (the flags of
	// workspace-write with the network off; dshd takes the network
	// namespace from those it made ahead, so the mount namespace alone is
	// printed too), and bubblewrap run directly with the bind set dshd
	// gives it (read from a job's own bubblewrap, without the seccomp
	// filter: compare it with the -noseccomp row).
	bwrapArgv := capturedBwrap(b, bw0, cwd)
	floors := []struct {
		name string
		op   func()
	}{
		{"direct", func() { spawnDirect(b) }},
		{"kernel-newns-newnet", func() { spawnCloned(b, syscall.CLONE_NEWNS|syscall.CLONE_NEWNET) }},
		{"kernel-newns", func() { spawnCloned(b, syscall.CLONE_NEWNS) }},
		{"bwrap-direct", func() {
			if out, err := osexec.Command(bwrapArgv[0], bwrapArgv[1:]...).CombinedOutput(); err != nil {
				b.Fatalf("%q: %v: %s", bwrapArgv, err, out)
			}
		}},
	}
	var ops []func()
	for _, p := range policies {
		ops = append(ops, func() { p.srv.post(b, "/exec", []byte(p.body)) })
	}
	for _, f := range floors {
		ops = append(ops, f.op)
	}
	b.ResetTimer()
	times := benchkit.Interleave(b.N, ops...)
	b.StopTimer()
	med := func(i int) time.Duration { return percentile(times[i], .5) }
	base := med(0)
	for i, p := range policies {
		m := med(i)
		b.ReportMetric(us(m), fmt.Sprintf("%s-median-µs", p.name))
		if i > 0 {
			b.ReportMetric(float64(m)/float64(base), fmt.Sprintf("%s-ratio", p.name))
		}
	}
	floor := map[string]time.Duration{}
	for i, f := range floors {
		floor[f.name] = med(len(policies) + i)
		b.ReportMetric(us(floor[f.name]), fmt.Sprintf("%s-median-µs", f.name))
	}
	policy := map[string]time.Duration{}
	for i, p := range policies {
		policy[p.name] = med(i)
	}
	// What each mechanism adds to an unrestricted command, beside what the
	// kernel's namespaces (or bubblewrap alone) add to a direct spawn.
	added := func(name string, d time.Duration) { b.ReportMetric(us(d), name+"-added-µs") }
	added("workspace-write-off", policy["workspace-write-off"]-base)
	added("workspace-write-off-noseccomp", policy["workspace-write-off-noseccomp"]-base)
	added("kernel-newns-newnet", floor["kernel-newns-newnet"]-floor["direct"])
	added("kernel-newns", floor["kernel-newns"]-floor["direct"])
	added("bubblewrap-workspace-write-off-noseccomp", policy["bubblewrap-workspace-write-off-noseccomp"]-base)
	added("bwrap-direct", floor["bwrap-direct"]-floor["direct"])
	b.ReportMetric(benchkit.Ratio(floor["bwrap-direct"], floor["direct"]), "bwrap-direct-ratio")
	b.ReportMetric(benchkit.Ratio(floor["kernel-newns-newnet"], floor["direct"]), "kernel-newns-newnet-ratio")
	reportLoad(b)
}

// spawnCloned runs `bash -c true` cloned into new namespaces (flags).
func spawnCloned(tb testing.TB, flags uintptr) {
	c := osexec.Command("bash", "-c", "true")
	c.SysProcAttr = &syscall.SysProcAttr{Cloneflags: flags}
	if err := c.Run(); err != nil {
		tb.Fatal(err)
	}
}

// capturedBwrap returns the command line srv (bubblewrap, no seccomp
// filter) gives a workspace-write command with the network off in cwd, read
// from the sandbox's pid 1 (bubblewrap itself), with `bash -c true` as the
// command.
func capturedBwrap(tb testing.TB, srv *testServer, cwd []byte) []string {
	body := fmt.Sprintf(`{"command":"cat /proc/1/cmdline","cwd":%s,"sandbox":{"policy":"workspace-write","network":"off"}}`, cwd)
	var j job
	if err := json.Unmarshal(srv.post(tb, "/exec", []byte(body)), &j); err != nil {
		tb.Fatal(err)
	}
	argv := strings.Split(strings.TrimSuffix(j.Stdout.Text, "\x00"), "\x00")
	end := slices.Index(argv, "--")
	if len(argv) < 2 || !strings.Contains(argv[0], "bwrap") || end < 0 || slices.Contains(argv, "--seccomp") {
		tb.Fatalf("pid 1 of a bubblewrap job is %q", argv)
	}
	return append(argv[:end+1], "bash", "-c", "true")
}
