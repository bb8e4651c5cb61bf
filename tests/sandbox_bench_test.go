package tests

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkExecSandbox measures foreground POST /exec of `true` under each
// sandbox policy, interleaved with the unrestricted baseline in the same
// run. Budget: workspace-write with the network off within 1.5× of
// unrestricted at the median.
func BenchmarkExecSandbox(b *testing.B) {
	s := startServer(b)
	var h healthSandbox
	if st := s.doJSON(b, "GET", "/healthz", nil, &h); st != 200 || h.Details.Sandbox == nil || len(h.Details.Sandbox.Networks) < 2 {
		b.Skip("this host cannot enforce sandbox policies (needs bubblewrap)")
	}
	policies := []struct{ name, body string }{
		{"unrestricted", `{"command":"true","sandbox":{"policy":"unrestricted","network":"on"}}`},
		{"unrestricted-off", `{"command":"true","sandbox":{"policy":"unrestricted","network":"off"}}`},
		{"workspace-write-on", `{"command":"true","sandbox":{"policy":"workspace-write","network":"on"}}`},
		{"workspace-write-off", `{"command":"true","sandbox":{"policy":"workspace-write","network":"off"}}`},
		{"read-only-off", `{"command":"true","sandbox":{"policy":"read-only","network":"off"}}`},
	}
	for range 20 { // warm up every path
		for _, p := range policies {
			s.post(b, "/exec", []byte(p.body))
		}
	}
	times := make([][]time.Duration, len(policies))
	b.ResetTimer()
	for range b.N {
		for i, p := range policies {
			t0 := time.Now()
			s.post(b, "/exec", []byte(p.body))
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
