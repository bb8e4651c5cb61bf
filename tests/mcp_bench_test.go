package tests

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dshd/dshd/internal/benchkit"
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

// benchMCPSession opens an MCP session (the official Go client) bound to
// agentID, closed at the benchmark's end.
func benchMCPSession(tb testing.TB, ctx context.Context, s *testServer, agentID string) *sdk.ClientSession {
	tb.Helper()
	client := sdk.NewClient(&sdk.Implementation{Name: "bench", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &sdk.StreamableClientTransport{
		Endpoint:             s.URL + "/mcp",
		HTTPClient:           &http.Client{Transport: authTransport{token: s.Token, agentID: agentID, base: benchClient.Transport}},
		DisableStandaloneSSE: true,
	}, &sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cs.Close() })
	return cs
}

// mcpBashTrue calls the bash tool with `true` on cs.
func mcpBashTrue(tb testing.TB, ctx context.Context, cs *sdk.ClientSession) {
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "true"}})
	if err != nil || res.IsError {
		tb.Fatalf("MCP bash true = %+v, %v", res, err)
	}
}

// toolBashTrue is the bash tool's call of `true` through the HTTP tool route.
var toolBashTrue = []byte(`{"arguments":{"command":"true"}}`)

// benchAgent makes an agent and returns its id.
func (s *testServer) benchAgent(tb testing.TB) string {
	var a struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(s.post(tb, "/agents", []byte(`{}`)), &a); err != nil {
		tb.Fatal(err)
	}
	return a.ID
}

// BenchmarkMCPBash interleaves a direct `bash -c true` spawn (the physical
// floor), the same spawn followed by one line appended to a file and made
// durable (the floor of a call whose record survives a power loss, as a
// tool call's does: the tool route answers after its transcript's fsync),
// a foreground POST /exec of `true` (no agent), a bash tool call of `true`
// through POST /agents/{id}/tools/bash (with its transcript commit) and
// the same call over MCP (the official Go client, one session bound to the
// same agent), and reports the medians and p99s, the MCP call's ratio to
// the tool call, and each path's median ratio to direct spawn and to the
// durable floor.
func BenchmarkMCPBash(b *testing.B) {
	s := startServer(b)
	a := struct{ ID string }{s.benchAgent(b)}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cs := benchMCPSession(b, ctx, s, a.ID)
	// The floor's record goes to the file system of the server's home,
	// where its transcripts are.
	rec, err := os.OpenFile(filepath.Join(filepath.Dir(s.Home), "floor.jsonl"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer rec.Close()
	line := []byte(`{"seq":1,"type":"tool/result","callId":"call_0123456789","result":{"exitCode":0,"stdout":"","stderr":""}}` + "\n")
	durable := func() {
		spawnDirect(b)
		if _, err := rec.Write(line); err != nil {
			b.Fatal(err)
		}
		if err := rec.Sync(); err != nil {
			b.Fatal(err)
		}
	}

	httpCall := toolBashTrue
	mcpCall := func() { mcpBashTrue(b, ctx, cs) }
	for range 50 { // warm up every path
		spawnDirect(b)
		durable()
		s.post(b, "/exec", execTrue)
		s.post(b, "/agents/"+a.ID+"/tools/bash", httpCall)
		mcpCall()
	}
	direct := make([]time.Duration, 0, b.N)
	floor := make([]time.Duration, 0, b.N)
	exec := make([]time.Duration, 0, b.N)
	viaHTTP := make([]time.Duration, 0, b.N)
	viaMCP := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		spawnDirect(b)
		t1 := time.Now()
		durable()
		tf := time.Now()
		s.post(b, "/exec", execTrue)
		t2 := time.Now()
		s.post(b, "/agents/"+a.ID+"/tools/bash", httpCall)
		t3 := time.Now()
		mcpCall()
		direct = append(direct, t1.Sub(t0))
		floor = append(floor, tf.Sub(t1))
		exec = append(exec, t2.Sub(tf))
		viaHTTP = append(viaHTTP, t3.Sub(t2))
		viaMCP = append(viaMCP, time.Since(t3))
	}
	b.StopTimer()
	fm := percentile(floor, .5)
	b.ReportMetric(us(fm), "durable-direct-median-µs")
	b.ReportMetric(float64(percentile(viaHTTP, .5))/float64(fm), "tools-durable-ratio")
	b.ReportMetric(float64(percentile(viaMCP, .5))/float64(fm), "mcp-durable-ratio")
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

// BenchmarkManyAgents: 64 agents each call bash (`true`), 8 calls at a
// time, through the HTTP tool route (each call with its transcript
// commit) and over MCP (each agent its own session, 8 calls in flight),
// beside 8 goroutines spawning `bash -c true` directly. The three take
// turns in three rounds of b.N calls each (the calls going round the
// agents), and each reports its throughput over the rounds and the p99 of
// one call. Budgets: the tool route's throughput (no budget set yet for
// MCP) against direct spawn at 8.
func BenchmarkManyAgents(b *testing.B) {
	const agents, clients, rounds = 64, 8, 3
	s := startServer(b)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	ids := make([]string, agents)
	sessions := make([]*sdk.ClientSession, agents)
	for i := range agents {
		ids[i] = s.benchAgent(b)
		sessions[i] = benchMCPSession(b, ctx, s, ids[i])
	}
	direct := func(int, int) { spawnDirect(b) }
	viaHTTP := func(_, seq int) { s.post(b, "/agents/"+ids[seq%agents]+"/tools/bash", toolBashTrue) }
	viaMCP := func(_, seq int) { mcpBashTrue(b, ctx, sessions[seq%agents]) }
	paths := []func(int, int){direct, viaHTTP, viaMCP}
	for _, op := range paths { // warm up: every agent and session once
		benchkit.Concurrent(clients, agents, op)
	}
	wall := make([]time.Duration, len(paths))
	each := make([][]time.Duration, len(paths))
	cpu := make([]float64, len(paths)) // the server's CPU time
	pid := s.cmd.Process.Pid
	b.ResetTimer()
	for range rounds {
		for i, op := range paths {
			c0 := cpuSeconds(b, pid)
			w, e := benchkit.Concurrent(clients, b.N, op)
			cpu[i] += cpuSeconds(b, pid) - c0
			wall[i] += w
			each[i] = append(each[i], e...)
		}
	}
	b.StopTimer()
	calls := float64(b.N * rounds)
	for i, name := range []string{"direct", "tools-http", "mcp"} {
		b.ReportMetric(calls/wall[i].Seconds(), name+"-calls/s")
		b.ReportMetric(us(percentile(each[i], .99)), name+"-p99-µs")
		b.ReportMetric(us(percentile(each[i], .5)), name+"-median-µs")
		if i > 0 {
			b.ReportMetric(cpu[i]/calls*1e6, name+"-server-cpu-µs/call")
			b.ReportMetric(wall[0].Seconds()/wall[i].Seconds(), name+"-throughput-ratio")
		}
	}
	reportLoad(b)
}
