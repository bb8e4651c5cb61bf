package tests

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dshd/dshd/internal/cluster"
)

// The cluster benchmarks run three real dshd replicas against an
// in-process three-node NATS cluster, and print each figure beside its
// baseline measured in the same run (a lone dshd, or the direct path).

// declares reports whether s lists key (one GET /env/declarations).
func (s *testServer) declares(tb testing.TB, key string) bool {
	return strings.Contains(string(s.get(tb, "/env/declarations")), `"key":"`+key+`"`)
}

// BenchmarkClusterRegistry: POST /contributors on one replica (the write
// latency: stored in the bucket and in that replica's snapshot), then the
// time until both other replicas list it (propagation, polled over HTTP,
// so it includes a GET per poll), beside POST /contributors on a lone dshd.
func BenchmarkClusterRegistry(b *testing.B) {
	_, rs := startCluster(b)
	alone := startServer(b)
	var writes, alones, props []time.Duration
	b.ResetTimer()
	for i := range b.N {
		key := fmt.Sprintf("DSH_BENCH_%d", i)
		body, _ := json.Marshal(staticContributor(fmt.Sprintf("bench.%d", i), key, "v"))
		t0 := time.Now()
		alone.post(b, "/contributors", body)
		t1 := time.Now()
		rs[0].post(b, "/contributors", body)
		t2 := time.Now()
		for _, s := range rs[1:] {
			for !s.declares(b, key) {
				if time.Since(t1) > 10*time.Second {
					b.Fatalf("%s not propagated in 10s", key)
				}
			}
		}
		alones = append(alones, t1.Sub(t0))
		writes = append(writes, t2.Sub(t1))
		props = append(props, time.Since(t1))
	}
	b.StopTimer()
	b.ReportMetric(us(percentile(alones, .5)), "alone-write-median-µs")
	b.ReportMetric(us(percentile(writes, .5)), "cluster-write-median-µs")
	b.ReportMetric(us(percentile(writes, .99)), "cluster-write-p99-µs")
	b.ReportMetric(us(percentile(props, .5)), "propagation-median-µs")
	b.ReportMetric(us(percentile(props, .99)), "propagation-p99-µs")
}

// BenchmarkClusterExecForwarded: foreground POST /exec of `true` for an
// agent, sent to the agent's replica (direct) and to another one (one
// forward hop), interleaved.
func BenchmarkClusterExecForwarded(b *testing.B) {
	_, rs := startCluster(b)
	var a struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(rs[0].post(b, "/agents", []byte(`{}`)), &a); err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"command":"true","agentId":"` + a.ID + `"}`)
	for range 20 {
		rs[0].post(b, "/exec", body)
		rs[1].post(b, "/exec", body)
	}
	var direct, fwd []time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		rs[0].post(b, "/exec", body)
		t1 := time.Now()
		rs[1].post(b, "/exec", body)
		direct = append(direct, t1.Sub(t0))
		fwd = append(fwd, time.Since(t1))
	}
	b.StopTimer()
	b.ReportMetric(us(percentile(direct, .5)), "direct-median-µs")
	b.ReportMetric(us(percentile(fwd, .5)), "forwarded-median-µs")
	b.ReportMetric(float64(percentile(fwd, .5))/float64(percentile(direct, .5)), "median-ratio")
	b.ReportMetric(us(percentile(direct, .99)), "direct-p99-µs")
	b.ReportMetric(us(percentile(fwd, .99)), "forwarded-p99-µs")
}

// BenchmarkClusterSSEForwarded: the SSE stream of a finished job that wrote
// 64 MiB, read whole from its replica (direct) and through another (one
// hop), interleaved; MiB/s each.
func BenchmarkClusterSSEForwarded(b *testing.B) {
	_, rs := startCluster(b)
	const size = 64 << 20
	var j struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(rs[0].post(b, "/exec", []byte(fmt.Sprintf(`{"command":"yes abcdefghijklmnopqrstuvwxyz | head -c %d","background":true}`, size))), &j); err != nil {
		b.Fatal(err)
	}
	rs[0].get(b, "/jobs/"+j.ID+"?waitMs=60000")
	read := func(s *testServer) time.Duration {
		t0 := time.Now()
		req, _ := http.NewRequest("GET", s.URL+"/jobs/"+j.ID+"/output", nil)
		req.Header.Set("Authorization", "Bearer "+s.Token)
		resp, err := benchClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || n < size {
			b.Fatalf("SSE read %d bytes: %d %v", n, resp.StatusCode, err)
		}
		return time.Since(t0)
	}
	var direct, fwd []time.Duration
	b.ResetTimer()
	for range b.N {
		direct = append(direct, read(rs[0]))
		fwd = append(fwd, read(rs[2]))
	}
	b.StopTimer()
	mibps := func(d time.Duration) float64 { return float64(size) / (1 << 20) / d.Seconds() }
	b.ReportMetric(mibps(percentile(direct, .5)), "direct-MiB/s")
	b.ReportMetric(mibps(percentile(fwd, .5)), "forwarded-MiB/s")
	b.ReportMetric(float64(percentile(direct, .5))/float64(percentile(fwd, .5)), "forwarded-share")
}

// BenchmarkClusterReady10000: the time from starting a replica to its
// startup line (the registry read and its first snapshot built), with an
// empty registry bucket and with 10,000 contributors in it, beside a lone
// dshd's start.
func BenchmarkClusterReady10000(b *testing.B) {
	nc, rs := startCluster(b)
	tokenFile := filepath.Join(b.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(rs[0].Token+"\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	startAt := func(cfg string) time.Duration {
		t0 := time.Now()
		s := startServer(b, withConfig(cfg), withArgs("--token-file", tokenFile))
		d := time.Since(t0)
		s.stop(b)
		return d
	}
	replicaCfg := func(n int) string {
		return fmt.Sprintf("cluster:\n  replicaId: extra-%d\n  urls: [%s]\n", n, strings.Join(nc.URLs, ", "))
	}
	var alone, empty, full []time.Duration
	for i := range b.N {
		t0 := time.Now()
		s := startServer(b)
		alone = append(alone, time.Since(t0))
		s.stop(b)
		empty = append(empty, startAt(replicaCfg(2*i)))
	}
	fillRegistry(b, nc.URLs[0], 10000)
	// The replicas already running follow the 10,000 records too.
	for !rs[1].declares(b, "DSH_FILL_9999") {
		time.Sleep(10 * time.Millisecond)
	}
	b.ResetTimer()
	for i := range b.N {
		full = append(full, startAt(replicaCfg(2*i+1)))
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(percentile(alone, .5)), "alone-ready-ms")
	b.ReportMetric(ms(percentile(empty, .5)), "replica-empty-ready-ms")
	b.ReportMetric(ms(percentile(full, .5)), "replica-10000-ready-ms")
}

// fillRegistry writes n durable contributors straight into the registry
// bucket (asynchronous publishes, then one wait for every acknowledgement),
// in the form dshd stores them.
func fillRegistry(tb testing.TB, url string, n int) {
	tb.Helper()
	conn, err := nats.Connect(url)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close()
	js, err := jetstream.New(conn, jetstream.WithPublishAsyncMaxPending(n+1))
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Now().UTC()
	for i := range n {
		name := fmt.Sprintf("fill.%d", i)
		key := fmt.Sprintf("DSH_FILL_%d", i)
		v, _ := json.Marshal(map[string]any{
			"name": name, "createdAt": now,
			"keys":     []map[string]string{{"key": key, "description": "A filler fact."}},
			"resolver": map[string]any{"kind": "static", "values": map[string]string{key: "v"}},
		})
		subj := "$KV." + cluster.RegistryBucket + ".c." + base64.RawURLEncoding.EncodeToString([]byte(name))
		if _, err := js.PublishAsync(subj, v); err != nil {
			tb.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		tb.Fatal("filling the registry bucket took over 2 minutes")
	}
}
