package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/dshd/dshd/internal/agents"
	"github.com/dshd/dshd/internal/cluster"
	"github.com/dshd/dshd/internal/cluster/natstest"
	"github.com/dshd/dshd/internal/cluster/status"
	idsrc "github.com/dshd/dshd/internal/ids"
)

// openAgents opens replica id's agent store on the journal of its own
// connection to url, as cmd/dshd does in cluster mode.
func openAgents(t *testing.T, id, url string) (*agents.Store, agents.Journal) {
	t.Helper()
	s, j, _ := openAgentsWithMetrics(t, id, url)
	return s, j
}

// openAgentsWithMetrics is openAgents, also returning the store's metrics.
func openAgentsWithMetrics(t *testing.T, id, url string) (*agents.Store, agents.Journal, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	ctx := context.Background()
	node, err := cluster.Connect(ctx, cluster.Config{URLs: []string{url}, ReplicaID: id})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Close)
	j, err := node.Journal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	src, prefix := idsrc.NewSource(nil), status.AgentIDPrefix(id)
	s, err := agents.Open(ctx, agents.Options{
		Journal:    j,
		Home:       id,
		NewID:      func() string { return src.New(prefix) },
		DefaultCwd: "/",
		Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, j, reg
}

// transcript reads agent id's transcript from s and checks it: a header,
// then events whose seqs count 1, 2, … without a gap.
func transcript(t *testing.T, s *agents.Store, id string) ([]byte, []agents.Event) {
	t.Helper()
	data, err := s.Transcript(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := s.Events(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(data), "\n"); got != len(evs)+1 {
		t.Fatalf("transcript has %d lines for %d events: some line is not an event", got, len(evs))
	}
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d", i+1, ev.Seq)
		}
	}
	return data, evs
}

// TestJournalWritersDoNotInterleave: two replicas append to one agent at
// once, each through its own NATS server. Every event is stored once, in
// one gap-free sequence, and both replicas read the same bytes.
func TestJournalWritersDoNotInterleave(t *testing.T) {
	nc := natstest.Start(t, 3)
	a, _, regA := openAgentsWithMetrics(t, "r0", nc.URLs[0])
	b, _, regB := openAgentsWithMetrics(t, "r1", nc.URLs[1])
	ctx := context.Background()
	ag, err := a.Create(ctx, "/", agents.Bounds{})
	if err != nil {
		t.Fatal(err)
	}
	const perWriter = 40
	var wg sync.WaitGroup
	for w, s := range []*agents.Store{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWriter {
				if _, err := s.Append(ctx, ag.ID, "test/note", map[string]any{"writer": w, "i": i}); err != nil {
					t.Errorf("writer %d, event %d: %v", w, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	fromA, evs := transcript(t, a, ag.ID)
	fromB, _ := transcript(t, b, ag.ID)
	if !bytes.Equal(fromA, fromB) {
		t.Fatal("the two replicas read different transcripts")
	}
	if len(evs) != 2*perWriter {
		t.Fatalf("%d events, want %d", len(evs), 2*perWriter)
	}
	next := [2]int{}
	for _, ev := range evs {
		var d struct{ Writer, I int }
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			t.Fatal(err)
		}
		if d.I != next[d.Writer] {
			t.Fatalf("writer %d: event %d where %d was next (lost or duplicated)", d.Writer, d.I, next[d.Writer])
		}
		next[d.Writer]++
	}
	// The writers raced: some appends found the other's line first and
	// went again (else this test proved nothing about racing writers).
	if n := conflicts(t, regA) + conflicts(t, regB); n == 0 {
		t.Fatal("no append met a conflict: the writers did not race")
	} else {
		t.Logf("%.0f appends met the other writer's line and went again", n)
	}
	var h map[string]any
	if err := json.Unmarshal(fromA[:bytes.IndexByte(fromA, '\n')], &h); err != nil || h["home"] != "r0" || h["rootId"] != ag.ID {
		t.Fatalf("header %v (%v): want home r0 and rootId %s", h, err, ag.ID)
	}
}

// conflicts reads dshd_transcript_append_conflicts_total from reg.
func conflicts(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "dshd_transcript_append_conflicts_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("no dshd_transcript_append_conflicts_total")
	return 0
}

// TestJournalAgentsFromAnyReplica: an agent created on one replica is
// found, listed, forked and spawned from on another, with its lineage.
func TestJournalAgentsFromAnyReplica(t *testing.T) {
	nc := natstest.Start(t, 3)
	a, _ := openAgents(t, "r0", nc.URLs[0])
	b, j := openAgents(t, "r1", nc.URLs[2])
	ctx := context.Background()
	root, err := a.Create(ctx, "/", agents.Bounds{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := a.Append(ctx, root.ID, "test/note", map[string]int{"i": i}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := b.Get(ctx, root.ID)
	if err != nil || got.ID != root.ID || got.RootID != root.ID || got.Origin != agents.OriginRoot || !got.CreatedAt.Equal(root.CreatedAt) {
		t.Fatalf("get on the other replica: %+v, %v; want %+v", got, err, root)
	}
	two := int64(2)
	fork, err := b.Fork(ctx, root.ID, &two, agents.Bounds{})
	if err != nil {
		t.Fatal(err)
	}
	four := int64(4)
	if _, err := b.Fork(ctx, root.ID, &four, agents.Bounds{}); !errors.Is(err, agents.ErrInvalidBoundary) {
		t.Fatalf("fork past the end: %v, want ErrInvalidBoundary", err)
	}
	child, err := b.Spawn(ctx, fork.ID, agents.Bounds{})
	if err != nil {
		t.Fatal(err)
	}
	if fork.ParentID != root.ID || fork.RootID != root.ID || child.ParentID != fork.ID || child.RootID != root.ID || child.Depth != 1 {
		t.Fatalf("lineage: fork %+v, child %+v", fork, child)
	}
	_, evs := transcript(t, a, fork.ID)
	if len(evs) != 2 {
		t.Fatalf("fork at seq 2 has %d events", len(evs))
	}
	if ev, err := a.Append(ctx, fork.ID, "test/note", nil); err != nil || ev.Seq != 3 {
		t.Fatalf("the fork's next event: %+v, %v; want seq 3", ev, err)
	}
	list, err := a.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, x := range list {
		listed = append(listed, x.ID)
	}
	// Sorted by id: r0's agent, then r1's in the order they were made.
	if want := []string{root.ID, fork.ID, child.ID}; strings.Join(listed, " ") != strings.Join(want, " ") {
		t.Fatalf("listed %v, want %v", listed, want)
	}
	if _, err := b.Get(ctx, "agt_r0_nosuchagent"); !errors.Is(err, agents.ErrNotFound) {
		t.Fatalf("unknown agent: %v", err)
	}
	if _, err := j.Create(ctx, root.ID, [][]byte{[]byte(`{"type":"session"}`)}); !errors.Is(err, agents.ErrConflict) {
		t.Fatalf("a second agent under an existing id: %v, want ErrConflict", err)
	}
	if after, _ := transcript(t, b, root.ID); strings.Count(string(after), "\n") != 4 {
		t.Fatalf("the refused create changed the transcript:\n%s", after)
	}
}

// TestJournalRestartClosesInterruptedCalls: a replica that stopped during
// a tool call answers the call as interrupted when it opens again; another
// replica opening meanwhile leaves that agent alone.
func TestJournalRestartClosesInterruptedCalls(t *testing.T) {
	nc := natstest.Start(t, 3)
	a, _ := openAgents(t, "r0", nc.URLs[0])
	ctx := context.Background()
	ag, err := a.Create(ctx, "/", agents.Bounds{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Append(ctx, ag.ID, agents.EventToolCall, map[string]string{"callId": "call_1", "name": "bash"}); err != nil {
		t.Fatal(err)
	}
	other, _ := openAgents(t, "r1", nc.URLs[1])
	if _, evs := transcript(t, other, ag.ID); len(evs) != 1 {
		t.Fatalf("another replica's open changed r0's agent: %d events", len(evs))
	}
	again, _ := openAgents(t, "r0", nc.URLs[2])
	_, evs := transcript(t, again, ag.ID)
	if len(evs) != 2 || evs[1].Type != agents.EventToolResult || !strings.Contains(string(evs[1].Data), `"interrupted":true`) {
		t.Fatalf("after r0 opened again: %+v", evs)
	}
}

// TestJournalUnavailable: with no NATS server left, reads and writes fail
// with status.ErrAgentStoreUnavailable (HTTP 503 cluster_unavailable)
// within the caller's deadline.
func TestJournalUnavailable(t *testing.T) {
	nc := natstest.Start(t, 3)
	a, _ := openAgents(t, "r0", nc.URLs[0])
	ag, err := a.Create(context.Background(), "/", agents.Bounds{})
	if err != nil {
		t.Fatal(err)
	}
	nc.Shutdown()
	for name, call := range map[string]func(context.Context) error{
		"append": func(ctx context.Context) error {
			_, err := a.Append(ctx, ag.ID, "test/note", nil)
			return err
		},
		"transcript": func(ctx context.Context) error { _, err := a.Transcript(ctx, ag.ID); return err },
		"list":       func(ctx context.Context) error { _, err := a.List(ctx); return err },
		"create": func(ctx context.Context) error {
			_, err := a.Create(ctx, "/", agents.Bounds{})
			return err
		},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		start := time.Now()
		err := call(ctx)
		cancel()
		if !errors.Is(err, status.ErrAgentStoreUnavailable) {
			t.Errorf("%s with NATS down: %v, want ErrAgentStoreUnavailable", name, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s took %s past its 1 s deadline", name, d)
		}
	}
}

// TestJournalReadFromLeader: when no server answers the batched reads (the
// stream stops allowing direct gets), transcripts are read from the
// stream's leader, the same bytes, and agents are listed from it.
func TestJournalReadFromLeader(t *testing.T) {
	nc := natstest.Start(t, 3)
	a, _ := openAgents(t, "r0", nc.URLs[0])
	ctx := context.Background()
	ag, err := a.Create(ctx, "/", agents.Bounds{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 300 { // more than one batch
		if _, err := a.Append(ctx, ag.ID, "test/note", map[string]int{"i": i}); err != nil {
			t.Fatal(err)
		}
	}
	batched, evs := transcript(t, a, ag.ID)
	if len(evs) != 300 {
		t.Fatalf("%d events, want 300", len(evs))
	}
	conn, err := nats.Connect(nc.URLs[1])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	js, err := jetstream.New(conn)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, cluster.AgentsStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.AllowDirect = false
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	// Batched reads fail now (nothing serves them), so the read below
	// takes the leader's path.
	directGetFails := func() bool {
		msgs, err := jetstreamext.GetBatch(ctx, js, cluster.AgentsStream, 1)
		if err != nil {
			return true
		}
		for _, err := range msgs {
			return err != nil
		}
		return true
	}
	for deadline := time.Now().Add(10 * time.Second); !directGetFails(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("direct gets still answered 10 s after the stream stopped allowing them")
		}
	}
	fromLeader, _ := transcript(t, a, ag.ID)
	if !bytes.Equal(fromLeader, batched) {
		t.Fatal("the transcript read from the leader differs from the batched read")
	}
	if list, err := a.List(ctx); err != nil || len(list) != 1 || list[0].ID != ag.ID {
		t.Fatalf("agents listed from the leader: %v, %v", list, err)
	}
}

// lossyJournal is a real journal whose next append goes wrong once: with
// store set the line is stored and its answer lost, without it the line is
// not stored; the caller hears an error either way.
type lossyJournal struct {
	agents.Journal
	fail, store atomic.Bool
}

func (l *lossyJournal) Append(ctx context.Context, id string, line []byte, after uint64) (uint64, error) {
	if !l.fail.CompareAndSwap(true, false) {
		return l.Journal.Append(ctx, id, line, after)
	}
	if l.store.Load() {
		if _, err := l.Journal.Append(ctx, id, line, after); err != nil {
			return 0, err
		}
	}
	return 0, fmt.Errorf("append to %s: the answer was lost: %w", id, status.ErrAgentStoreUnavailable)
}

// TestJournalLostAnswer: a tool call whose recording was reported failed
// did not run; when the journal stored it all the same, the next append
// first records that it did not run, so the call is never left without a
// result. One that was not stored leaves nothing behind.
func TestJournalLostAnswer(t *testing.T) {
	nc := natstest.Start(t, 3)
	_, j := openAgents(t, "r0", nc.URLs[0])
	lossy := &lossyJournal{Journal: j}
	src, prefix := idsrc.NewSource(nil), status.AgentIDPrefix("r0")
	s, err := agents.Open(context.Background(), agents.Options{Journal: lossy, Home: "r0", DefaultCwd: "/", NewID: func() string { return src.New(prefix) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ag, err := s.Create(ctx, "/", agents.Bounds{})
	if err != nil {
		t.Fatal(err)
	}
	call := func(id string) error {
		_, err := s.Append(ctx, ag.ID, agents.EventToolCall, map[string]string{"callId": id, "name": "bash"})
		return err
	}
	lossy.fail.Store(true)
	lossy.store.Store(true)
	if err := call("call_stored"); !errors.Is(err, status.ErrAgentStoreUnavailable) {
		t.Fatalf("the call whose answer was lost: %v", err)
	}
	lossy.fail.Store(true)
	lossy.store.Store(false)
	if err := call("call_lost"); !errors.Is(err, status.ErrAgentStoreUnavailable) {
		t.Fatalf("the call that was not stored: %v", err)
	}
	if err := call("call_next"); err != nil {
		t.Fatal(err)
	}
	_, evs := transcript(t, s, ag.ID)
	var got []string
	for _, ev := range evs {
		var d struct {
			CallID string `json:"callId"`
			NotRun bool   `json:"notRun"`
		}
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s %s %t", ev.Type, d.CallID, d.NotRun))
	}
	want := []string{"tool/call call_stored false", "tool/result call_stored true", "tool/call call_next false"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Fatalf("transcript events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
