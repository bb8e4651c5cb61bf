package tests

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
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
		return fmt.Sprintf(`{"command":"true","cwd":%s,"sandbox":{"policy":%q,"network":%q}}`, cwd, policy, network)
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
	times := make([][]time.Duration, len(policies))
	b.ResetTimer()
	for range b.N {
		for i, p := range policies {
			t0 := time.Now()
			p.srv.post(b, "/exec", []byte(p.body))
			times[i] = append(times[i], time.Since(t0))
		}
	}
	b.StopTimer()
	base := percentile(times[0], .5)
	for i, p := range policies {
		m := percentile(times[i], .5)
		b.ReportMetric(us(m), fmt.Sprintf("%s-median-µs", p.name))
		if i > 0 {
			b.ReportMetric(float64(m)/float64(base), fmt.Sprintf("%s-ratio", p.name))
		}
	}
}
