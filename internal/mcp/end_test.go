package mcp

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/agents"
	"github.com/dshd/dshd/internal/exec"
	"github.com/dshd/dshd/internal/proctest"
	"github.com/dshd/dshd/internal/run"
)

// runningJob waits for the one running job of the world's calls.
func (w *world) runningJob(t *testing.T) exec.Snapshot {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if js := w.jobs.Jobs("", exec.StateRunning); len(js) == 1 {
			return js[0]
		}
		if time.Now().After(deadline) {
			t.Fatal("no running job within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitResult waits for the agent's last transcript event to be a
// tool/result and returns its data.
func (w *world) waitResult(t *testing.T, agentID string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		events, err := w.agents.Events(context.Background(), agentID)
		if err != nil {
			t.Fatal(err)
		}
		if last := events[len(events)-1]; last.Type == agents.EventToolResult {
			var data map[string]any
			if err := json.Unmarshal(last.Data, &data); err != nil {
				t.Fatal(err)
			}
			return data
		}
		if time.Now().After(deadline) {
			t.Fatalf("no tool/result within 10s; last event %s", events[len(events)-1].Type)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stoppedJob waits for the job to end and checks that it was cancelled
// and that its processes are gone.
func (w *world) stoppedJob(t *testing.T, j exec.Snapshot, pids ...int) {
	t.Helper()
	job, err := w.jobs.Job(j.ID)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if snap, err := job.Wait(ctx); err != nil || snap.State != exec.StateCancelled {
		t.Fatalf("job = %s, %v, want cancelled", snap.State, err)
	}
	for _, pid := range append(pids, j.PID) {
		proctest.WaitGone(t, pid)
	}
}

// TestDeleteEndsCalls: DELETE /mcp while a call runs is answered without
// waiting for the command: the call's job is stopped through the kill
// path, every process gone, the call's stream ends without an answer, and
// the transcript records the result with why it stopped. The session's
// later requests are 404.
func TestDeleteEndsCalls(t *testing.T) {
	w := newWorld(t, Options{})
	session := w.open(t)
	pidFile := filepath.Join(t.TempDir(), "child")
	const length = 30 * time.Second // the command's own length
	r := startCall(t, w.url, session, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"bash","arguments":{"command":"sleep 30 & echo $! > `+pidFile+`; wait"}}}`)
	j := w.runningJob(t)
	child := proctest.ReadPID(t, pidFile)
	t.Cleanup(func() { proctest.KillIfAlive(child) })

	resp, _ := send(t, raw("DELETE", w.url, session, "", ""))
	answered := time.Since(j.StartedAt)
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE = %d, want 204", resp.StatusCode)
	}
	if answered >= length {
		t.Errorf("DELETE answered %s after the command started, not before its own end (%s)", answered, length)
	}
	for {
		line, ok := r.next()
		if !ok {
			break
		}
		if strings.HasPrefix(line, "data: ") {
			t.Errorf("the ended session's call answered: %s", line)
		}
	}
	w.stoppedJob(t, j, child)
	agentID := j.AgentID
	if data := w.waitResult(t, agentID); data["stopped"] != run.StopSessionEnded || !strings.Contains(data["text"].(string), "killed by signal") {
		t.Errorf("tool/result = %v, want the stopped job's, stopped %s", data, run.StopSessionEnded)
	}
	if resp, ans := post(t, w.url, session, `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`); resp.StatusCode != 404 || len(ans) != 1 || ans[0].Error == nil {
		t.Errorf("tools/list after DELETE = %d %+v, want 404", resp.StatusCode, ans)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.h.Wait(ctx); err != nil {
		t.Error(err)
	}
}

// TestCancelledGetsNoAnswer: a request the client cancels gets no answer
// (its stream ends without one), whatever its id; its job is stopped and
// the transcript records the result, stopped as cancelled.
func TestCancelledGetsNoAnswer(t *testing.T) {
	w := newWorld(t, Options{})
	session := w.open(t)
	for _, id := range []string{"2", `"two"`, "9007199254740993"} {
		t.Run(id, func(t *testing.T) {
			r := startCall(t, w.url, session, `{"jsonrpc":"2.0","id":`+id+`,"method":"tools/call","params":{"name":"bash","arguments":{"command":"sleep 30"}}}`)
			j := w.runningJob(t)
			if resp, _ := post(t, w.url, session, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":`+id+`,"reason":"test"}}`); resp.StatusCode != 202 {
				t.Fatalf("notifications/cancelled = %d", resp.StatusCode)
			}
			for {
				line, ok := r.next()
				if !ok {
					break
				}
				if strings.HasPrefix(line, "data: ") {
					t.Errorf("the cancelled request was answered: %s", line)
				}
			}
			w.stoppedJob(t, j)
			if data := w.waitResult(t, j.AgentID); data["stopped"] != run.StopCancelled || !strings.Contains(data["text"].(string), "killed by signal") {
				t.Errorf("tool/result = %v, want the stopped job's, stopped %s", data, run.StopCancelled)
			}
		})
	}
	// The session goes on.
	if resp, ans := post(t, w.url, session, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"bash","arguments":{"command":"echo after"}}}`); resp.StatusCode != 200 || len(ans) != 1 || !strings.Contains(string(ans[0].Result), "after") {
		t.Errorf("a call after the cancelled ones = %d %+v", resp.StatusCode, ans)
	}
}

// TestDisconnectIsNotCancel: a client that drops its connection during a
// call without cancelling it does not stop the call (MCP: disconnection is
// not cancellation): the command runs to its end and the transcript records
// its result, not stopped; the server logs that the client left.
func TestDisconnectIsNotCancel(t *testing.T) {
	logs := &logBuffer{}
	w := newWorld(t, Options{Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	session := w.open(t)
	release := filepath.Join(t.TempDir(), "release")
	ctx, drop := context.WithCancel(context.Background())
	req := raw("POST", w.url, session, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"bash","arguments":{"command":"`+waitFile(release)+`"}}}`, "application/json")
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	j := w.runningJob(t)
	drop() // the connection closes, with no cancellation sent
	resp.Body.Close()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "MCP client left during a tool call") {
		if time.Now().After(deadline) {
			t.Fatalf("the server did not notice the client leave within 10s; logs:\n%s", logs)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if snap := mustJob(t, w, j.ID).Snapshot(); snap.State != exec.StateRunning {
		t.Fatalf("job = %s once the client left, want running", snap.State)
	}
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if snap, err := mustJob(t, w, j.ID).Wait(wctx); err != nil || snap.State != exec.StateExited || *snap.ExitCode != 0 {
		t.Fatalf("job = %+v, %v; want exited 0", snap, err)
	}
	if data := w.waitResult(t, j.AgentID); data["text"] != "done" || data["stopped"] != nil {
		t.Errorf("tool/result = %v, want done, not stopped", data)
	}
}

func mustJob(t *testing.T, w *world, id string) *exec.Job {
	t.Helper()
	j, err := w.jobs.Job(id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}
