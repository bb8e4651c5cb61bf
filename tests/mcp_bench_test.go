package tests

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// authTransport adds the bearer token and the agent to bind to every request.
type authTransport struct {
	token, agentID string
	base           http.RoundTripper
}

func (a authTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+a.token)
	r.Header.Set("Dsh-Agent-Id", a.agentID)
	return a.base.RoundTrip(r)
}

// BenchmarkMCPBash interleaves a direct `bash -c true` spawn (the physical
// floor), a foreground POST /exec of `true` (no agent), a bash tool call of
// `true` through POST /agents/{id}/tools/bash (with its transcript commit)
// and the same call over MCP (the official Go client, one session bound to
// the same agent), and reports the medians and p99s, the MCP call's ratio to
// the tool call, and each path's median ratio to direct spawn.
func BenchmarkMCPBash(b *testing.B) {
	s := startServer(b)
	var a struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(s.post(b, "/agents", []byte(`{}`)), &a); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	client := sdk.NewClient(&sdk.Implementation{Name: "bench", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &sdk.StreamableClientTransport{
		Endpoint:             s.URL + "/mcp",
		HTTPClient:           &http.Client{Transport: authTransport{token: s.Token, agentID: a.ID, base: benchClient.Transport}},
		DisableStandaloneSSE: true,
	}, &sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close()

	httpCall := []byte(`{"arguments":{"command":"true"}}`)
	mcpCall := func() {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "true"}})
		if err != nil || res.IsError {
			b.Fatalf("MCP bash true = %+v, %v", res, err)
		}
	}
	for range 50 { // warm up every path
		spawnDirect(b)
		s.post(b, "/exec", execTrue)
		s.post(b, "/agents/"+a.ID+"/tools/bash", httpCall)
		mcpCall()
	}
	direct := make([]time.Duration, 0, b.N)
	exec := make([]time.Duration, 0, b.N)
	viaHTTP := make([]time.Duration, 0, b.N)
	viaMCP := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		spawnDirect(b)
		t1 := time.Now()
		s.post(b, "/exec", execTrue)
		t2 := time.Now()
		s.post(b, "/agents/"+a.ID+"/tools/bash", httpCall)
		t3 := time.Now()
		mcpCall()
		direct = append(direct, t1.Sub(t0))
		exec = append(exec, t2.Sub(t1))
		viaHTTP = append(viaHTTP, t3.Sub(t2))
		viaMCP = append(viaMCP, time.Since(t3))
	}
	b.StopTimer()
	dm, em := percentile(direct, .5), percentile(exec, .5)
	hm, mm := percentile(viaHTTP, .5), percentile(viaMCP, .5)
	h99, m99 := percentile(viaHTTP, .99), percentile(viaMCP, .99)
	b.ReportMetric(us(hm), "tools-http-median-µs")
	b.ReportMetric(us(mm), "mcp-median-µs")
	b.ReportMetric(float64(mm)/float64(hm), "median-ratio")
	b.ReportMetric(us(h99), "tools-http-p99-µs")
	b.ReportMetric(us(m99), "mcp-p99-µs")
	b.ReportMetric(float64(m99)/float64(h99), "p99-ratio")
	b.ReportMetric(us(dm), "direct-median-µs")
	b.ReportMetric(us(em), "exec-median-µs")
	b.ReportMetric(float64(em)/float64(dm), "exec-direct-ratio")
	b.ReportMetric(float64(hm)/float64(dm), "tools-direct-ratio")
	b.ReportMetric(float64(mm)/float64(dm), "mcp-direct-ratio")
	reportLoad(b)
}
