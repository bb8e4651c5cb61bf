package httpapi

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	contract "github.com/dshd/dshd/api"
	"github.com/dshd/dshd/internal/agents"
	"github.com/dshd/dshd/internal/bareexec"
	"github.com/dshd/dshd/internal/benchkit"
	"github.com/dshd/dshd/internal/exec"
	"github.com/dshd/dshd/internal/run"
	"github.com/dshd/dshd/internal/sandbox"
	"github.com/dshd/dshd/internal/shellenv"
	"github.com/dshd/dshd/internal/stages"
)

// BenchmarkExecStages breaks one foreground POST /exec of `true` down by
// stage (package stages), through the real handler, pipeline and executor
// on loopback HTTP, with containment auto and the default sandbox policy
// as a server has them. Each stage's median is reported beside the whole
// request's, a direct `bash -c true` spawn and the bare handler (package
// bareexec, on its own loopback server in the same process) measured in
// the same loop, so a change that adds a millisecond shows where. The wait
// stage is mostly bash's own run.
func BenchmarkExecStages(b *testing.B) {
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
	b.Cleanup(func() {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = jobs.Close(cctx)
		_ = store.Close()
	})
	svc := run.New(run.Options{Env: reg, Jobs: jobs, Agents: store, Home: home, SandboxHost: host})
	f := &failing{}
	h, err := NewServer(Deps{
		Logger: discardLogger(), Token: testToken, Spec: contract.OpenAPI,
		Env: reg, Jobs: jobs, Pipeline: svc, Agents: f, Hooks: f, Skills: skillsFailing{f}, MCP: f,
		MaxBodyBytes: 1 << 20,
	})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(h)
	b.Cleanup(srv.Close)
	client := srv.Client()
	post := func() {
		req, _ := http.NewRequest("POST", srv.URL+"/exec", bytes.NewReader([]byte(`{"command":"true"}`)))
		req.Header.Set("Authorization", "Bearer "+testToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Contains(body, []byte(`"exitCode":0`)) {
			b.Fatalf("POST /exec = %d: %s", resp.StatusCode, body)
		}
	}
	var starts []time.Duration // a direct spawn's Start: clone and exec
	direct := func() {
		cmd := osexec.Command("bash", "-c", "true")
		t0 := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		starts = append(starts, time.Since(t0))
		if err := cmd.Wait(); err != nil {
			b.Fatal(err)
		}
	}
	bareSrv := httptest.NewServer(bareexec.Handler())
	b.Cleanup(bareSrv.Close)
	bare := func() {
		resp, err := client.Post(bareSrv.URL, "application/json", bytes.NewReader([]byte(`{"command":"true"}`)))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("bare exec = %d", resp.StatusCode)
		}
	}
	for range 20 {
		post()
		direct()
		bare()
	}

	var mu sync.Mutex
	var per [stages.N][]time.Duration
	stages.SetHook(func(s stages.Stage, d time.Duration) {
		mu.Lock()
		per[s] = append(per[s], d)
		mu.Unlock()
	})
	defer stages.SetHook(nil)
	var whole, floor, bared []time.Duration
	starts = starts[:0]
	timed := func(op func(), into *[]time.Duration) {
		t0 := time.Now()
		op()
		*into = append(*into, time.Since(t0))
	}
	for b.Loop() {
		timed(direct, &floor)
		timed(bare, &bared)
		timed(post, &whole)
	}
	stages.SetHook(nil)
	median := func(d []time.Duration) time.Duration {
		if len(d) == 0 {
			return 0
		}
		s := slices.Clone(d)
		slices.Sort(s)
		return s[len(s)/2]
	}
	var sum time.Duration
	var line strings.Builder
	mu.Lock()
	defer mu.Unlock()
	for s := range stages.N {
		if len(per[s]) == 0 {
			continue // a model's tool call stage: /exec never meets it
		}
		m := median(per[s])
		if stages.Stage(s) != stages.Index { // it overlaps the wait
			sum += m
		}
		b.ReportMetric(float64(m.Nanoseconds())/1e3, stages.Stage(s).String()+"-µs")
		fmt.Fprintf(&line, " %s=%.0f", stages.Stage(s), float64(m.Nanoseconds())/1e3)
	}
	b.ReportMetric(float64(median(whole).Nanoseconds())/1e3, "exec-µs")
	b.ReportMetric(float64(median(floor).Nanoseconds())/1e3, "direct-µs")
	b.ReportMetric(float64(median(bared).Nanoseconds())/1e3, "bare-µs")
	b.ReportMetric(float64(median(starts).Nanoseconds())/1e3, "direct-spawn-µs")
	b.ReportMetric(float64(sum.Nanoseconds())/1e3, "stages-µs")
	b.ReportMetric(0, "ns/op")
	µs := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	b.Logf("load %s; medians in µs:%s; stages %.0f (index overlaps wait: not summed), rest %.0f (HTTP transport both ways, the client), whole request %.0f (%.2f×); direct: whole %.0f, its spawn (os/exec Start) %.0f; bare handler %.0f (%.2f×)",
		benchkit.LoadAvg(), line.String(), µs(sum), µs(median(whole)-sum), µs(median(whole)), float64(median(whole))/float64(median(floor)),
		µs(median(floor)), µs(median(starts)), µs(median(bared)), float64(median(bared))/float64(median(floor)))
}
