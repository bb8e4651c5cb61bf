package agents

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkAppend measures what group commit costs: each round, writers
// append one tool/result event each at once, to their own agents or all to
// one agent; a SyncCommit store and a SyncNone store (the baseline, no
// fsync) on the same disk take turns, so machine noise hits both alike. It
// reports microseconds per round for both, their ratio, and fsyncs per
// round (fewer than writers when appends share them).
func BenchmarkAppend(b *testing.B) {
	for _, bc := range []struct {
		name      string
		writers   int
		sameAgent bool
	}{
		{"1writer", 1, false},
		{"8agents", 8, false},
		{"8writers_1agent", 8, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			commit, commitIDs, fsyncs := benchStore(b, SyncCommit, bc.writers, bc.sameAgent)
			none, noneIDs, _ := benchStore(b, SyncNone, bc.writers, bc.sameAgent)
			data := map[string]any{"callId": "call_1", "isError": false, "text": "hello from the benchmark\n", "exitCode": 0}
			var tc, tn time.Duration
			for b.Loop() {
				tc += appendRound(b, commit, commitIDs, data)
				tn += appendRound(b, none, noneIDs, data)
			}
			n := float64(b.N)
			b.ReportMetric(float64(tc.Microseconds())/n, "fsync-µs/round")
			b.ReportMetric(float64(tn.Microseconds())/n, "nofsync-µs/round")
			b.ReportMetric(float64(tc)/float64(max(tn, 1)), "x-nofsync")
			b.ReportMetric(float64(fsyncs.Load())/n, "fsyncs/round")
			b.ReportMetric(0, "ns/op") // a round holds both stores; the figures above say it
		})
	}
}

// benchStore opens a store with the policy and writers agents (one when
// sameAgent), returning the agent id of each writer and an fsync counter.
func benchStore(b *testing.B, policy SyncPolicy, writers int, sameAgent bool) (*Store, []string, *atomic.Int64) {
	b.Helper()
	s := mustOpen(b, Options{DefaultCwd: "/", Sync: policy})
	var n atomic.Int64
	ids := make([]string, writers)
	for i := range ids {
		if i == 0 || !sameAgent {
			ids[i] = mustCreate(b, s, "").ID
		} else {
			ids[i] = ids[0]
		}
	}
	s.syncFile = func(f *os.File) error {
		n.Add(1)
		return f.Sync()
	}
	return s, ids, &n
}

// appendRound appends one event per id at once and returns the wall time.
func appendRound(b *testing.B, s *Store, ids []string, data any) time.Duration {
	start := time.Now()
	if len(ids) == 1 {
		if _, err := s.Append(context.Background(), ids[0], EventToolResult, data); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Append(context.Background(), id, EventToolResult, data); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}
