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

// BenchmarkMCPBash interleaves a bash tool call of `true` through
// POST /agents/{id}/tools/bash (the baseline) and the same call over MCP
// (the official Go client, one session bound to the same agent), and
// reports both medians and p99s and their ratio.
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
	for range 50 { // warm up both paths
		s.post(b, "/agents/"+a.ID+"/tools/bash", httpCall)
		mcpCall()
	}
	viaHTTP := make([]time.Duration, 0, b.N)
	viaMCP := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		s.post(b, "/agents/"+a.ID+"/tools/bash", httpCall)
		t1 := time.Now()
		mcpCall()
		viaHTTP = append(viaHTTP, t1.Sub(t0))
		viaMCP = append(viaMCP, time.Since(t1))
	}
	b.StopTimer()
	hm, mm := percentile(viaHTTP, .5), percentile(viaMCP, .5)
	h99, m99 := percentile(viaHTTP, .99), percentile(viaMCP, .99)
	b.ReportMetric(us(hm), "tools-http-median-µs")
	b.ReportMetric(us(mm), "mcp-median-µs")
	b.ReportMetric(float64(mm)/float64(hm), "median-ratio")
	b.ReportMetric(us(h99), "tools-http-p99-µs")
	b.ReportMetric(us(m99), "mcp-p99-µs")
	b.ReportMetric(float64(m99)/float64(h99), "p99-ratio")
}
