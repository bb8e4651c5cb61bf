package run

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/agents"
	clusterstatus "github.com/dshd/dshd/internal/cluster/status"
)

// TestCallIDRunsOnce: a call retried with its call id, after it ended or
// while it runs, runs its command once and answers the same result.
func TestCallIDRunsOnce(t *testing.T) {
	w := newWorld(t)
	a := w.agent(t)
	runs := filepath.Join(t.TempDir(), "runs")
	args := json.RawMessage(fmt.Sprintf(`{"command":"sleep 0.3; echo ran >> %s; echo out"}`, runs))
	ctx := context.Background()
	var wg sync.WaitGroup
	results := make([]CallResult, 4)
	errs := make([]error, 4)
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = w.svc.Call(ctx, a.ID, "bash", "call_retry", args)
		}()
	}
	wg.Wait()
	results[3], errs[3] = w.svc.Call(ctx, a.ID, "bash", "call_retry", args)
	for i := range results {
		if errs[i] != nil || results[i].Text != "out" || results[i].JobID != results[0].JobID {
			t.Fatalf("call %d: %+v %v, want the first call's result", i, results[i], errs[i])
		}
	}
	if b, err := os.ReadFile(runs); err != nil || string(b) != "ran\n" {
		t.Fatalf("the command ran %q (%v), want once", b, err)
	}
	if n := len(w.events(t, a.ID, agents.EventToolCall)); n != 1 {
		t.Fatalf("%d tool/call events, want 1", n)
	}
	// After a restart (a new service over the same transcripts) the retry
	// answers the recorded result and runs nothing.
	restarted := New(Options{Env: w.env, Jobs: w.jobs, Agents: w.agents, Hooks: w.hooks, Home: w.home})
	if res, err := restarted.Call(ctx, a.ID, "bash", "call_retry", args); err != nil || res.Text != "out" || res.JobID != results[0].JobID {
		t.Fatalf("retry after a restart: %+v %v, want the recorded result", res, err)
	}
	if b, _ := os.ReadFile(runs); string(b) != "ran\n" {
		t.Fatalf("the retry after a restart ran the command: %q", b)
	}
	// Another call id runs.
	if _, err := w.svc.Call(ctx, a.ID, "bash", "call_other", args); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(runs); string(b) != "ran\nran\n" {
		t.Fatalf("runs after a second call id: %q", b)
	}
}

// TestGeneratedCallIDRunsOnce: a call sent without a call id gets a
// generated one, claimed like a given one: a retry with it answers the
// first result and runs nothing, also when the agent's transcript was
// read for an earlier call (so the retry cannot be found there).
func TestGeneratedCallIDRunsOnce(t *testing.T) {
	w := newWorld(t)
	a := w.agent(t)
	runs := filepath.Join(t.TempDir(), "runs")
	args := json.RawMessage(fmt.Sprintf(`{"command":"echo ran >> %s; echo out"}`, runs))
	ctx := context.Background()
	if _, err := w.svc.Call(ctx, a.ID, "bash", "call_given", args); err != nil {
		t.Fatal(err)
	}
	first, err := w.svc.Call(ctx, a.ID, "bash", "", args)
	if err != nil || !strings.HasPrefix(first.CallID, "call_") || first.CallID == "call_given" {
		t.Fatalf("call without an id: %+v %v, want a generated call id", first, err)
	}
	retry, err := w.svc.Call(ctx, a.ID, "bash", first.CallID, args)
	if err != nil || retry.JobID != first.JobID || retry.Text != "out" {
		t.Fatalf("retry with the generated id %s: %+v %v, want the first result (job %s)", first.CallID, retry, err, first.JobID)
	}
	if b, _ := os.ReadFile(runs); string(b) != "ran\nran\n" {
		t.Fatalf("the command ran %q, want twice (the given id, the generated one)", b)
	}
	ids := map[string]int{}
	for _, ev := range w.events(t, a.ID, agents.EventToolCall) {
		var d struct{ CallID string }
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			t.Fatal(err)
		}
		ids[d.CallID]++
	}
	if len(ids) != 2 || ids["call_given"] != 1 || ids[first.CallID] != 1 {
		t.Fatalf("tool/call events by call id %v, want one each", ids)
	}
}

// flakyStore refuses tool/result appends, as a cluster store that cannot
// be reached does, while down is set.
type flakyStore struct {
	*agents.Store
	down atomic.Bool
}

func (f *flakyStore) Append(ctx context.Context, id, typ string, data any) (agents.Event, error) {
	if typ == agents.EventToolResult && f.down.Load() {
		return agents.Event{}, fmt.Errorf("append to %s: %w", id, clusterstatus.ErrAgentStoreUnavailable)
	}
	return f.Store.Append(ctx, id, typ, data)
}

// TestResultWrittenWhenStoreBack: a call that ran but whose result could
// not be written answers its result (not an error, which would invite a
// second run), and the result is written to the transcript once the store
// takes it again, before the agent's next call; a retry with its call id
// runs nothing.
func TestResultWrittenWhenStoreBack(t *testing.T) {
	w := newWorld(t)
	flaky := &flakyStore{Store: w.agents}
	svc := New(Options{Env: w.env, Jobs: w.jobs, Agents: flaky, Hooks: w.hooks, Home: w.home})
	a := w.agent(t)
	runs := filepath.Join(t.TempDir(), "runs")
	args := json.RawMessage(fmt.Sprintf(`{"command":"echo ran >> %s; echo out"}`, runs))
	flaky.down.Store(true)
	res, err := svc.Call(context.Background(), a.ID, "bash", "call_unsaved", args)
	if err != nil || res.Text != "out" || res.IsError {
		t.Fatalf("call whose result could not be written: %+v %v, want its result", res, err)
	}
	if n := len(w.events(t, a.ID, agents.EventToolResult)); n != 0 {
		t.Fatalf("%d results stored while the store refused them", n)
	}
	again, err := svc.Call(context.Background(), a.ID, "bash", "call_unsaved", args)
	if err != nil || again.JobID != res.JobID {
		t.Fatalf("retry: %+v %v", again, err)
	}
	flaky.down.Store(false)
	deadline := time.Now().Add(5 * time.Second)
	for len(w.events(t, a.ID, agents.EventToolResult)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the kept result was not written 5 s after the store came back")
		}
		time.Sleep(20 * time.Millisecond)
	}
	evs := w.events(t, a.ID, agents.EventToolResult)
	if len(evs) != 1 || !strings.Contains(string(evs[0].Data), `"call_unsaved"`) || !strings.Contains(string(evs[0].Data), `"out"`) || strings.Contains(string(evs[0].Data), "interrupted") {
		t.Fatalf("results after the store came back: %+v", evs)
	}
	if b, _ := os.ReadFile(runs); string(b) != "ran\n" {
		t.Fatalf("the command ran %q, want once", b)
	}
}

// TestKeptResultSurvivesRestart: a result that ran but could not be
// written is kept on disk; when the home restarts before the store takes
// it, the transcript gets that result, not an interrupted one.
func TestKeptResultSurvivesRestart(t *testing.T) {
	w := newWorld(t)
	dir, kept := filepath.Join(t.TempDir(), "sessions"), filepath.Join(t.TempDir(), "kept")
	store, err := agents.Open(context.Background(), agents.Options{Dir: dir, DefaultCwd: t.TempDir(), KeptResults: kept})
	if err != nil {
		t.Fatal(err)
	}
	flaky := &flakyStore{Store: store}
	flaky.down.Store(true)
	svc := New(Options{Env: w.env, Jobs: w.jobs, Agents: flaky, Hooks: w.hooks, Home: w.home, KeptResults: kept})
	a, err := store.Create(context.Background(), t.TempDir(), agents.Bounds{})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := svc.Call(context.Background(), a.ID, "bash", "call_kept", json.RawMessage(`{"command":"echo kept-out"}`)); err != nil || res.Text != "kept-out" {
		t.Fatalf("call: %+v %v", res, err)
	}
	if _, err := os.Stat(agents.KeptResultPath(kept, a.ID, "call_kept")); err != nil {
		t.Fatalf("the result is not kept on disk: %v", err)
	}
	if err := store.Close(); err != nil { // the home stops before the store is back
		t.Fatal(err)
	}
	again, err := agents.Open(context.Background(), agents.Options{Dir: dir, DefaultCwd: t.TempDir(), KeptResults: kept})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	evs, err := again.Events(context.Background(), a.ID)
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1]
	if last.Type != agents.EventToolResult || !strings.Contains(string(last.Data), "kept-out") || strings.Contains(string(last.Data), "interrupted") {
		t.Fatalf("after the restart the call's result is %s %s, want the kept one", last.Type, last.Data)
	}
	if _, err := os.Stat(agents.KeptResultPath(kept, a.ID, "call_kept")); !os.IsNotExist(err) {
		t.Fatalf("the kept result is still on disk after it was written: %v", err)
	}
}

// TestLedgerBounded: a full ledger drops its oldest tenth (or what is past
// ledgerKeep), never a running call.
func TestLedgerBounded(t *testing.T) {
	var l callLedger
	l.calls = map[ledgerKey]*ledgerCall{}
	now := time.Now()
	for i := range ledgerMax {
		c := &ledgerCall{done: make(chan struct{}), at: now.Add(time.Duration(i) * time.Millisecond)}
		if i == 0 {
			c.at = time.Time{} // running
		}
		l.calls[ledgerKey{"a", fmt.Sprint(i)}] = c
	}
	if _, ran, _ := l.begin(context.Background(), "a", "new"); ran {
		t.Fatal("a new call id was found")
	}
	if n := len(l.calls); n > ledgerMax*91/100 || n < ledgerMax*89/100 {
		t.Fatalf("%d calls kept of a full ledger of %d, want about nine tenths", n, ledgerMax)
	}
	if _, ok := l.calls[ledgerKey{"a", "0"}]; !ok {
		t.Fatal("the running call was dropped")
	}
	if _, ok := l.calls[ledgerKey{"a", fmt.Sprint(ledgerMax - 1)}]; !ok {
		t.Fatal("the newest call was dropped")
	}
}
