package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	osexec "os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	contract "github.com/dshd/dshd/api"
	"github.com/dshd/dshd/internal/agents"
	"github.com/dshd/dshd/internal/benchkit"
	"github.com/dshd/dshd/internal/exec"
	"github.com/dshd/dshd/internal/hooks"
	"github.com/dshd/dshd/internal/mcp"
	"github.com/dshd/dshd/internal/run"
	"github.com/dshd/dshd/internal/sandbox"
	"github.com/dshd/dshd/internal/shellenv"
	"github.com/dshd/dshd/internal/skills"
	"github.com/dshd/dshd/internal/stages"
)

// mcpHeaders adds the bearer token and the agent to bind to every MCP
// request.
type mcpHeaders struct {
	token, agentID string
	base           http.RoundTripper
}

func (m mcpHeaders) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+m.token)
	r.Header.Set(mcp.AgentHeader, m.agentID)
	return m.base.RoundTrip(r)
}

// toolPaths are the ways of running `true` that BenchmarkToolStages and
// BenchmarkToolStagesAllocs compare, each a call on one server in process (the
// real handler, pipeline, executor, agent store with its fsyncs, hook
// runner with no hooks, and MCP endpoint on loopback HTTP), and a direct
// spawn.
type toolPaths struct {
	direct, viaExec, viaHTTP, viaMCP, viaRaw func()
}

func newToolPaths(b *testing.B) toolPaths {
	ctx := context.Background()
	home := b.TempDir()
	reg, err := shellenv.New(shellenv.Options{Home: home, StatePath: filepath.Join(home, "contributors.json")})
	if err != nil {
		b.Fatal(err)
	}
	host := sandbox.NewHost(ctx, sandbox.Config{})
	jobs, err := exec.New(exec.Options{Home: home, Environ: os.Environ(), Containment: exec.ContainmentAuto, Sandbox: host})
	if err != nil {
		b.Fatal(err)
	}
	store, err := agents.Open(ctx, agents.Options{Dir: filepath.Join(home, "sessions"), DefaultCwd: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	hookCfg, err := hooks.Load(home)
	if err != nil {
		b.Fatal(err)
	}
	svc := run.New(run.Options{Env: reg, Jobs: jobs, Agents: store, Home: home, SandboxHost: host,
		Hooks: hooks.NewRunner(hookCfg, jobs, discardLogger())})
	mcpH := mcp.New(mcp.Options{Pipeline: svc, Jobs: jobs})
	h, err := NewServer(Deps{
		Logger: discardLogger(), Token: testToken, Spec: contract.OpenAPI,
		Env: reg, Jobs: jobs, Pipeline: svc, Agents: store, Hooks: hookCfg, Skills: skills.New(home), MCP: mcpH,
		MaxBodyBytes: 1 << 20,
	})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(h)
	client := srv.Client()
	b.Cleanup(func() {
		srv.Close()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = mcpH.Wait(cctx)
		_ = jobs.Close(cctx)
		_ = store.Close()
	})
	post := func(path string, body []byte) []byte {
		req, _ := http.NewRequest("POST", srv.URL+path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 300 {
			b.Fatalf("POST %s = %d: %s", path, resp.StatusCode, out)
		}
		return out
	}
	var agent struct{ ID string }
	if err := json.Unmarshal(post("/agents", []byte(`{}`)), &agent); err != nil {
		b.Fatal(err)
	}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx, &sdk.StreamableClientTransport{
		Endpoint:             srv.URL + "/mcp",
		HTTPClient:           &http.Client{Transport: mcpHeaders{token: testToken, agentID: agent.ID, base: client.Transport}},
		DisableStandaloneSSE: true,
	}, &sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cs.Close() })
	toolCall := []byte(`{"arguments":{"command":"true"}}`)
	viaHTTP := func() {
		if out := post("/agents/"+agent.ID+"/tools/bash", toolCall); !bytes.Contains(out, []byte(`"isError":false`)) {
			b.Fatalf("tool call: %s", out)
		}
	}
	viaMCP := func() {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "true"}})
		if err != nil || res.IsError {
			b.Fatalf("MCP bash true = %+v, %v", res, err)
		}
	}
	direct := func() {
		if err := osexec.Command("bash", "-c", "true").Run(); err != nil {
			b.Fatal(err)
		}
	}
	viaExec := func() {
		if out := post("/exec", []byte(`{"command":"true"}`)); !bytes.Contains(out, []byte(`"exitCode":0`)) {
			b.Fatalf("POST /exec: %s", out)
		}
	}
	// The same call as the client's bytes, by hand on the Go client's
	// session: what the server's MCP framing costs without the SDK client's.
	rawCall := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bash","arguments":{"command":"true"}}}`)
	viaRaw := func() {
		req, _ := http.NewRequest("POST", srv.URL+"/mcp", bytes.NewReader(rawCall))
		req.Header.Set("Authorization", "Bearer "+testToken)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", cs.ID())
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !bytes.Contains(out, []byte(`"result":{"content"`)) || bytes.Contains(out, []byte(`"isError":true`)) {
			b.Fatalf("raw MCP bash true = %d: %s", resp.StatusCode, out)
		}
	}
	return toolPaths{direct: direct, viaExec: viaExec, viaHTTP: viaHTTP, viaMCP: viaMCP, viaRaw: viaRaw}
}

// BenchmarkToolStages breaks a model's bash call of `true` down by stage
// (package stages), as BenchmarkExecStages does for POST /exec (which runs
// in the same loop, for comparison): the real
// handler, pipeline, executor, agent store (events fsynced, the default),
// hook runner (no hooks configured, the default) and MCP endpoint in
// process on loopback HTTP. Interleaved in each round: a direct `bash -c
// true` spawn, POST /exec of `true`, the call through POST /agents/{id}/tools/bash and the same
// call over MCP (the official Go client, one session bound to the same
// agent), and the same MCP call posted by hand on that session with the
// plain HTTP client ("mcp-raw": the server's framing without the SDK
// client's). It prints each path's stages (each stage's median over the
// calls, a stage met several times in a call, as the transcript's commits
// are, counted by its sum in the call) and what is left: for the tool route the HTTP
// transport and the client, for MCP that and the MCP framing (JSON-RPC
// decoding and encoding, the session, the SDK).
func BenchmarkToolStages(b *testing.B) {
	p := newToolPaths(b)
	direct, viaExec, viaHTTP, viaMCP, viaRaw := p.direct, p.viaExec, p.viaHTTP, p.viaMCP, p.viaRaw
	for range 20 {
		direct()
		viaExec()
		viaHTTP()
		viaMCP()
		viaRaw()
	}

	// Stages are gathered per path and per call (calls run one at a
	// time): a stage met several times in one call (the transcript's
	// commits, the hooks of two events) counts as their sum.
	var mu sync.Mutex
	var per [4][stages.N][]time.Duration
	var call [stages.N]time.Duration
	var met [stages.N]int
	stages.SetHook(func(s stages.Stage, d time.Duration) {
		mu.Lock()
		call[s] += d
		met[s]++
		mu.Unlock()
	})
	defer stages.SetHook(nil)
	var most [4][stages.N]int // the most times a stage was met in one call
	on := func(p int, op func()) func() {
		return func() {
			op()
			mu.Lock()
			for s := range stages.N {
				if met[s] > 0 {
					per[p][s] = append(per[p][s], call[s])
					most[p][s] = max(most[p][s], met[s])
				}
				call[s], met[s] = 0, 0
			}
			mu.Unlock()
		}
	}
	b.ResetTimer()
	times := benchkit.Interleave(b.N, direct, on(0, viaHTTP), on(1, viaMCP), on(2, viaExec), on(3, viaRaw))
	b.StopTimer()
	stages.SetHook(nil)
	mu.Lock()
	defer mu.Unlock()
	floor := benchkit.Median(times[0])
	for p, name := range []string{"tools-http", "mcp", "exec", "mcp-raw"} {
		whole := benchkit.Median(times[p+1])
		var sum time.Duration
		var line strings.Builder
		for s := range stages.N {
			d := per[p][s]
			if len(d) == 0 || stages.Stage(s) == stages.Index { // index overlaps the wait
				continue
			}
			m := benchkit.Median(d)
			sum += m
			b.ReportMetric(benchkit.Us(m), fmt.Sprintf("%s-%s-µs", name, stages.Stage(s)))
			fmt.Fprintf(&line, " %s=%.0f", stages.Stage(s), benchkit.Us(m))
			if most[p][s] > 1 {
				fmt.Fprintf(&line, "(%d×)", most[p][s])
			}
		}
		b.ReportMetric(benchkit.Us(whole), name+"-µs")
		b.ReportMetric(benchkit.Ratio(whole, floor), name+"-direct-ratio")
		b.ReportMetric(benchkit.Us(whole-sum), name+"-rest-µs")
		rest := "HTTP transport both ways, the client"
		if p == 2 {
			rest += ", the resume"
		}
		switch p {
		case 1:
			rest += ", MCP framing"
		case 3:
			rest = "HTTP transport both ways, MCP framing; a plain HTTP client"
		}
		b.Logf("%s: medians in µs per call:%s; stages %.0f, rest %.0f (%s); whole call %.0f (%.2f× direct %.0f)",
			name, line.String(), benchkit.Us(sum), benchkit.Us(whole-sum), rest, benchkit.Us(whole), benchkit.Ratio(whole, floor), benchkit.Us(floor))
	}
	b.ReportMetric(benchkit.Us(floor), "direct-µs")
	b.ReportMetric(benchkit.Load1(), "load1")
	b.ReportMetric(0, "ns/op")
	b.Logf("load average %s", benchkit.LoadAvg())
}

// BenchmarkToolStagesAllocs counts what the process allocates per call on each
// path of BenchmarkToolStages (server and client in one process; the
// tool route, POST /exec and the hand-posted MCP call share the plain HTTP
// client, so their difference is the server's), and the garbage
// collections per 1,000 calls: figures that the machine's load does not
// move, unlike the times. Each path runs its calls in a row, after a
// warm-up. Its name matches make bench's ToolStages pattern, which runs it.
func BenchmarkToolStagesAllocs(b *testing.B) {
	p := newToolPaths(b)
	for _, path := range []struct {
		name string
		op   func()
	}{{"exec", p.viaExec}, {"tools-http", p.viaHTTP}, {"mcp-raw", p.viaRaw}, {"mcp", p.viaMCP}} {
		for range 20 {
			path.op()
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range b.N {
			path.op()
		}
		runtime.ReadMemStats(&after)
		n := float64(b.N)
		bytes, objects := float64(after.TotalAlloc-before.TotalAlloc)/n, float64(after.Mallocs-before.Mallocs)/n
		gcs := float64(after.NumGC-before.NumGC) * 1000 / n
		b.ReportMetric(bytes, path.name+"-B/call")
		b.ReportMetric(objects, path.name+"-allocs/call")
		b.ReportMetric(gcs, path.name+"-gcs/1000calls")
		b.Logf("%s: %.0f bytes and %.0f allocations per call, %.1f garbage collections per 1,000 calls", path.name, bytes, objects, gcs)
	}
	b.ReportMetric(0, "ns/op")
}
