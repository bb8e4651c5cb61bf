package agents

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncRecorder replaces a store's fsync to record how much of each file
// was on disk when it was fsynced.
type syncRecorder struct {
	mu     sync.Mutex
	sizes  map[string]int64 // largest size synced, by file name
	count  int
	delay  time.Duration
	failOn int // fail the n-th sync (1-based); 0 never
}

func (r *syncRecorder) sync(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	time.Sleep(r.delay)
	r.mu.Lock()
	r.count++
	n := r.count
	if r.failOn != 0 && n == r.failOn {
		r.mu.Unlock()
		return errors.New("disk on fire")
	}
	if fi.Size() > r.sizes[f.Name()] {
		r.sizes[f.Name()] = fi.Size()
	}
	r.mu.Unlock()
	return f.Sync()
}

func (r *syncRecorder) synced(name string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sizes[name]
}

// TestAppendIsDurableOnReturn: under SyncCommit, an event is fsynced
// before Append returns, so an acknowledged tool result survives a power
// loss; under SyncNone it is not.
func TestAppendIsDurableOnReturn(t *testing.T) {
	for _, tc := range []struct {
		policy  SyncPolicy
		durable bool
	}{{"", true}, {SyncCommit, true}, {SyncNone, false}} {
		t.Run(string(tc.policy), func(t *testing.T) {
			s := mustOpen(t, Options{DefaultCwd: "/", Sync: tc.policy})
			a := mustCreate(t, s, "")
			rec := &syncRecorder{sizes: map[string]int64{}}
			s.syncFile = rec.sync
			for i := 0; i < 3; i++ {
				mustAppend(t, s, a.ID, EventToolResult, map[string]any{"i": i})
				fi, err := os.Stat(s.Path(a.ID))
				if err != nil {
					t.Fatal(err)
				}
				if got := rec.synced(s.Path(a.ID)) >= fi.Size(); got != tc.durable {
					t.Errorf("after append %d: fsynced %d of %d bytes; durable = %v, want %v", i, rec.synced(s.Path(a.ID)), fi.Size(), got, tc.durable)
				}
			}
			if _, err := s.Resume(context.Background(), a.ID); err != nil {
				t.Fatal(err)
			}
			fi, _ := os.Stat(s.Path(a.ID))
			if got := rec.synced(s.Path(a.ID)) >= fi.Size(); got != tc.durable {
				t.Errorf("after resume: durable = %v, want %v", got, tc.durable)
			}
		})
	}
}

// TestCommitLater: an append marked CommitLater is written (a reader and a
// process crash see it) but not fsynced on its own; the next append made
// without the mark fsyncs once, and both lines are durable when it returns.
func TestCommitLater(t *testing.T) {
	s := mustOpen(t, Options{DefaultCwd: "/"})
	a := mustCreate(t, s, "")
	rec := &syncRecorder{sizes: map[string]int64{}}
	s.syncFile = rec.sync
	ctx := context.Background()
	size := func() int64 {
		fi, err := os.Stat(s.Path(a.ID))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	before := size()
	if _, err := s.Append(CommitLater(ctx), a.ID, EventToolCall, map[string]any{"callId": "c1"}); err != nil {
		t.Fatal(err)
	}
	if size() <= before {
		t.Fatalf("the deferred line is not written: %d bytes, %d before", size(), before)
	}
	if rec.count != 0 || rec.synced(s.Path(a.ID)) >= size() {
		t.Fatalf("a deferred append fsynced (%d fsyncs, %d of %d bytes)", rec.count, rec.synced(s.Path(a.ID)), size())
	}
	tr, err := s.Transcript(ctx, a.ID)
	if err != nil || !strings.Contains(string(tr), `"c1"`) {
		t.Fatalf("transcript lacks the deferred line (%v): %s", err, tr)
	}
	mustAppend(t, s, a.ID, EventToolResult, map[string]any{"callId": "c1"})
	if rec.count != 1 || rec.synced(s.Path(a.ID)) < size() {
		t.Fatalf("after the result: %d fsyncs, %d of %d bytes durable; want 1, all", rec.count, rec.synced(s.Path(a.ID)), size())
	}
}

// TestGroupCommit: concurrent appends to one agent share fsyncs (fewer
// fsyncs than appends) and each returns only once its line is durable.
func TestGroupCommit(t *testing.T) {
	s := mustOpen(t, Options{DefaultCwd: "/"})
	a := mustCreate(t, s, "")
	rec := &syncRecorder{sizes: map[string]int64{}, delay: 20 * time.Millisecond}
	s.syncFile = rec.sync
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Append(context.Background(), a.ID, EventToolResult, map[string]any{"i": i}); err != nil {
				errs <- err
				return
			}
			// Our line is in the file below the size the store holds now;
			// everything up to the size at our return must be durable.
			s.mu.RLock()
			e := s.agents[a.ID]
			s.mu.RUnlock()
			e.mu.Lock()
			durable := e.durable
			e.mu.Unlock()
			if rec.synced(s.Path(a.ID)) < durable {
				errs <- errors.New("the store counts bytes as durable that no fsync covered")
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	fi, err := os.Stat(s.Path(a.ID))
	if err != nil {
		t.Fatal(err)
	}
	if got := rec.synced(s.Path(a.ID)); got != fi.Size() {
		t.Errorf("fsynced %d of %d bytes after every append returned", got, fi.Size())
	}
	if rec.count >= n {
		t.Errorf("%d appends took %d fsyncs: concurrent appends did not share them", n, rec.count)
	}
	if got := len(seqs(t, s, a.ID)); got != n {
		t.Errorf("transcript has %d events, want %d", got, n)
	}
}

// TestFailedFsyncFailsAppend: an event whose fsync failed is not
// acknowledged, and the next append makes it durable.
func TestFailedFsyncFailsAppend(t *testing.T) {
	s := mustOpen(t, Options{DefaultCwd: "/"})
	a := mustCreate(t, s, "")
	rec := &syncRecorder{sizes: map[string]int64{}, failOn: 1}
	s.syncFile = rec.sync
	if _, err := s.Append(context.Background(), a.ID, EventToolResult, nil); err == nil {
		t.Fatal("Append with a failing fsync succeeded")
	}
	mustAppend(t, s, a.ID, EventToolResult, nil)
	fi, _ := os.Stat(s.Path(a.ID))
	if got := rec.synced(s.Path(a.ID)); got != fi.Size() {
		t.Errorf("fsynced %d of %d bytes", got, fi.Size())
	}
}

// TestAgentsFsyncConcurrently: the fsyncs of different agents run at once
// (no lock of the store is held across one), and many agents appending at
// once, a tool call's two lines at a time, keep every event, each agent's
// seqs contiguous and each writer's events in its order, every byte
// counted durable covered by an fsync.
func TestAgentsFsyncConcurrently(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, Options{DefaultCwd: "/"})
	const agents, writers, each = 8, 4, 25
	ids := make([]string, agents)
	for i := range ids {
		ids[i] = mustCreate(t, s, "").ID
	}
	// The first fsync of each agent waits until every agent's first
	// fsync has begun: were the fsyncs of different agents serialised,
	// the first would wait alone.
	var (
		mu      sync.Mutex
		entered = map[string]bool{}
		all     = make(chan struct{})
	)
	rec := &syncRecorder{sizes: map[string]int64{}}
	s.syncFile = func(f *os.File) error {
		mu.Lock()
		first := !entered[f.Name()]
		entered[f.Name()] = true
		if len(entered) == agents && first {
			close(all)
		}
		n := len(entered)
		mu.Unlock()
		if first {
			select {
			case <-all:
			case <-time.After(time.Minute):
				return fmt.Errorf("only %d of %d agents' fsyncs ran at once", n, agents)
			}
		}
		return rec.sync(f)
	}
	var wg sync.WaitGroup
	for _, id := range ids {
		for w := range writers {
			wg.Go(func() {
				for i := range each {
					// A tool call: its call line left to the fsync of its
					// result line, as the tool route writes them.
					if _, err := s.Append(CommitLater(ctx), id, EventToolCall, map[string]any{"w": w, "i": i}); err != nil {
						t.Error(err)
						return
					}
					if _, err := s.Append(ctx, id, EventToolResult, map[string]any{"w": w, "i": i}); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	for _, id := range ids {
		lines := checkJSONL(t, s.Path(id))
		if len(lines) != writers*each*2+1 {
			t.Fatalf("%s has %d lines, want %d", id, len(lines), writers*each*2+1)
		}
		next := make([]map[string]int, writers) // writer → type → next i
		for w := range next {
			next[w] = map[string]int{}
		}
		for n, m := range lines[1:] {
			if seq := m["seq"].(float64); int(seq) != n+1 {
				t.Fatalf("%s line %d has seq %v, want %d", id, n+2, seq, n+1)
			}
			d := m["data"].(map[string]any)
			w, i, typ := int(d["w"].(float64)), int(d["i"].(float64)), m["type"].(string)
			if i != next[w][typ] {
				t.Fatalf("%s line %d: writer %d's %s %d, want %d (out of order or lost)", id, n+2, w, typ, i, next[w][typ])
			}
			next[w][typ]++
		}
		fi, err := os.Stat(s.Path(id))
		if err != nil {
			t.Fatal(err)
		}
		if got := rec.synced(s.Path(id)); got != fi.Size() {
			t.Errorf("%s: fsynced %d of %d bytes after every append returned", id, got, fi.Size())
		}
	}
}
