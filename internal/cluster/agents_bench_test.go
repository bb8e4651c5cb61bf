package cluster_test

import (
	"context"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/agents"
	"github.com/dshd/dshd/internal/cluster"
	"github.com/dshd/dshd/internal/cluster/natstest"
	"github.com/dshd/dshd/internal/cluster/status"
	idsource "github.com/dshd/dshd/internal/ids"
)

// BenchmarkTranscriptAppend measures what an agent transcript append costs
// in cluster mode beside a lone dshd in the same run: one agents.Store on
// files with the single-node default (SyncCommit: the event is fsynced,
// group commit, before Append returns) and one on the journal of replica
// r0 connected to a three-node natstest cluster (the event is stored in
// the R3 stream DSHD_AGENTS, acknowledged once a quorum has it). The
// two stores take turns each round, so machine noise hits both alike. Each
// append's latency is recorded; it reports median and p99 in µs for both
// and the journal's ratio to the files at each.
//
// Writers: 1writer appends to one agent, one event at a time; 8agents has
// 8 writers append at once, each to its own agent.
//
// natstest keeps each server's JetStream store in a temporary directory on
// the same disk as the file store, with nats-server's default sync
// interval (the file store is fsynced every 2 minutes, not per message):
// a journal append is durable by replication to a quorum of the three
// servers' page caches, not by an fsync, as with a default nats-server
// deployment. The three servers run in this process on loopback, so the
// figure holds no network latency between hosts.
func BenchmarkTranscriptAppend(b *testing.B) {
	ctx := context.Background()
	nc := natstest.Start(b, 3)
	node, err := cluster.Connect(ctx, cluster.Config{URLs: []string{nc.URLs[0]}, ReplicaID: "r0"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(node.Close)
	j, err := node.Journal(ctx)
	if err != nil {
		b.Fatal(err)
	}
	files := openBenchStore(b, agents.Options{Dir: b.TempDir(), DefaultCwd: "/", Sync: agents.SyncCommit})
	src, prefix := idsource.NewSource(nil), status.AgentIDPrefix("r0")
	shared := openBenchStore(b, agents.Options{
		Journal:    j,
		Home:       "r0",
		DefaultCwd: "/",
		NewID:      func() string { return src.New(prefix) },
	})
	// A bash tool result as the tool route records it.
	data := map[string]any{"callId": "call_1", "isError": false, "text": "hello from the benchmark\n", "exitCode": 0}
	for _, bc := range []struct {
		name    string
		writers int
	}{
		{"1writer", 1},
		{"8agents", 8},
	} {
		b.Run(bc.name, func(b *testing.B) {
			fileIDs := createBenchAgents(b, files, bc.writers)
			sharedIDs := createBenchAgents(b, shared, bc.writers)
			var fileLat, sharedLat []time.Duration
			rounds := 0
			for b.Loop() {
				fileLat = appendTimed(b, files, fileIDs, data, fileLat)
				sharedLat = appendTimed(b, shared, sharedIDs, data, sharedLat)
				rounds++
			}
			// Every append is in its transcript once, on both stores.
			for _, s := range []struct {
				st  *agents.Store
				ids []string
			}{{files, fileIDs}, {shared, sharedIDs}} {
				for _, id := range s.ids {
					evs, err := s.st.Events(ctx, id)
					if err != nil {
						b.Fatal(err)
					}
					if len(evs) != rounds {
						b.Fatalf("agent %s has %d events after %d rounds", id, len(evs), rounds)
					}
				}
			}
			f50, f99 := percentiles(fileLat)
			s50, s99 := percentiles(sharedLat)
			b.ReportMetric(micros(f50), "file-p50-µs")
			b.ReportMetric(micros(f99), "file-p99-µs")
			b.ReportMetric(micros(s50), "nats-p50-µs")
			b.ReportMetric(micros(s99), "nats-p99-µs")
			b.ReportMetric(float64(s50)/float64(max(f50, 1)), "x-file-p50")
			b.ReportMetric(float64(s99)/float64(max(f99, 1)), "x-file-p99")
			b.ReportMetric(0, "ns/op") // a round holds both stores; the figures above say it
		})
	}
}

func openBenchStore(b *testing.B, opts agents.Options) *agents.Store {
	b.Helper()
	s, err := agents.Open(context.Background(), opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

func createBenchAgents(b *testing.B, s *agents.Store, n int) []string {
	b.Helper()
	out := make([]string, n)
	for i := range out {
		a, err := s.Create(context.Background(), "", agents.Bounds{})
		if err != nil {
			b.Fatal(err)
		}
		out[i] = a.ID
	}
	return out
}

// appendTimed appends one tool result to each agent of agentIDs (at once when
// there are several) and adds each append's latency to lat.
func appendTimed(b *testing.B, s *agents.Store, agentIDs []string, data any, lat []time.Duration) []time.Duration {
	if len(agentIDs) == 1 {
		start := time.Now()
		if _, err := s.Append(context.Background(), agentIDs[0], agents.EventToolResult, data); err != nil {
			b.Fatal(err)
		}
		return append(lat, time.Since(start))
	}
	took := make([]time.Duration, len(agentIDs))
	var wg sync.WaitGroup
	for i, id := range agentIDs {
		wg.Go(func() {
			start := time.Now()
			if _, err := s.Append(context.Background(), id, agents.EventToolResult, data); err != nil {
				b.Error(err)
			}
			took[i] = time.Since(start)
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	return append(lat, took...)
}

// percentiles returns the median and the 99th percentile (nearest rank)
// of d.
func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	rank := func(p float64) time.Duration {
		i := int(math.Ceil(float64(len(s))*p)) - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	return rank(0.50), rank(0.99)
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// BenchmarkAgentStoreOpen500 measures what a replica's start and a
// transcript read cost in cluster mode beside a lone dshd in the same run:
// 500 agents of 5 events each (whose home the opening store is, so it
// reads every transcript to answer interrupted calls), then one agent with
// 500 events more, in a store on files and one on the journal. Each
// iteration opens both stores again, reads the long transcript from both
// and lists the agents; it reports milliseconds for each and the
// journal's ratio.
func BenchmarkAgentStoreOpen500(b *testing.B) {
	ctx := context.Background()
	nc := natstest.Start(b, 3)
	node, err := cluster.Connect(ctx, cluster.Config{URLs: []string{nc.URLs[0]}, ReplicaID: "r0"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(node.Close)
	j, err := node.Journal(ctx)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	src, prefix := idsource.NewSource(nil), status.AgentIDPrefix("r0")
	fileOpts := agents.Options{Dir: dir, DefaultCwd: "/", Sync: agents.SyncNone}
	sharedOpts := agents.Options{Journal: j, Home: "r0", DefaultCwd: "/", NewID: func() string { return src.New(prefix) }}
	data := map[string]any{"callId": "call_1", "isError": false, "text": "hello from the benchmark\n", "exitCode": 0}
	var longIDs [2]string
	for k, opts := range []agents.Options{fileOpts, sharedOpts} {
		s := openBenchStore(b, opts)
		ids := createBenchAgents(b, s, 500)
		for _, id := range ids {
			for range 5 {
				if _, err := s.Append(ctx, id, agents.EventToolResult, data); err != nil {
					b.Fatal(err)
				}
			}
		}
		longIDs[k] = ids[0]
		for range 500 {
			if _, err := s.Append(ctx, ids[0], agents.EventToolResult, data); err != nil {
				b.Fatal(err)
			}
		}
	}
	var open, read, lists [2]time.Duration
	var size [2]int
	for b.Loop() {
		for k, opts := range []agents.Options{fileOpts, sharedOpts} {
			start := time.Now()
			s := openBenchStore(b, opts)
			open[k] += time.Since(start)
			start = time.Now()
			t, err := s.Transcript(ctx, longIDs[k])
			read[k] += time.Since(start)
			if err != nil {
				b.Fatal(err)
			}
			size[k] = len(t)
			start = time.Now()
			list, err := s.List(ctx)
			lists[k] += time.Since(start)
			if err != nil || len(list) != 500 {
				b.Fatalf("store %d lists %d agents (%v), want 500", k, len(list), err)
			}
			_ = s.Close()
		}
	}
	if size[0] == 0 || size[1] == 0 {
		b.Fatal("empty transcript")
	}
	n := float64(b.N)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / n }
	b.ReportMetric(ms(open[0]), "file-open-ms")
	b.ReportMetric(ms(open[1]), "nats-open-ms")
	b.ReportMetric(float64(open[1])/float64(max(open[0], 1)), "x-file-open")
	b.ReportMetric(ms(read[0]), "file-read505-ms")
	b.ReportMetric(ms(read[1]), "nats-read505-ms")
	b.ReportMetric(float64(read[1])/float64(max(read[0], 1)), "x-file-read")
	b.ReportMetric(ms(lists[0]), "file-list500-ms")
	b.ReportMetric(ms(lists[1]), "nats-list500-ms")
	b.ReportMetric(float64(lists[1])/float64(max(lists[0], 1)), "x-file-list")
	b.ReportMetric(0, "ns/op") // an iteration holds both stores; the figures above say it
}
