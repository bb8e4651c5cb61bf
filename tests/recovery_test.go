package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/testenv"
)

// crash kills the server with SIGKILL, as a crash would, and waits for it.
func (s *testServer) crash(t testing.TB) {
	t.Helper()
	if err := s.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-s.done
}

// TestCrashRecovery kills the real server with 50 running jobs (one of them
// a model's foreground tool call), restarts it on the same home, and checks
// that every process of those jobs is gone within a second, each job answers
// lost, the interrupted call has its result, and the agent resumes.
func TestCrashRecovery(t *testing.T) {
	for _, mode := range []string{"cgroup", "group"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "cgroup" && os.Getuid() != 0 {
				testenv.Need(t, "cgroup mode needs root and a writable cgroup v2 subtree")
			}
			testCrashRecovery(t, mode)
		})
	}
}

func testCrashRecovery(t *testing.T, mode string) {
	const jobs = 50
	home := t.TempDir()
	config := withConfig(fmt.Sprintf("jobs:\n  graceMs: 200\n  containment: %s\n", mode))
	s := startServer(t, withHome(home), config)
	run := randomMark(t)
	t.Cleanup(func() { killPIDs(survivorsNow(run)) })
	command := func(i int) string {
		return fmt.Sprintf("export %s='%s/%d;'; sleep 300 & sleep 300", markEnv, run, i)
	}

	var a agent
	if st := s.DoJSON(t, "POST", "/agents", map[string]any{}, &a); st != 201 && st != 200 {
		t.Fatalf("create agent = %d", st)
	}
	var ids []string
	for i := range jobs - 1 {
		var j job
		if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": command(i), "background": true}, &j); st != 202 {
			t.Fatalf("exec %d = %d", i, st)
		}
		ids = append(ids, j.ID)
	}
	// The 50th job is a model's foreground tool call, cut by the crash.
	body, _ := json.Marshal(map[string]any{"callId": "call_cut", "arguments": map[string]any{"command": command(jobs - 1)}})
	req, err := http.NewRequest("POST", s.URL+"/agents/"+a.ID+"/tools/bash", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.Token)
	req.Header.Set("Content-Type", "application/json")
	callDone := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("tool call answered %d before the crash", resp.StatusCode)
		}
		callDone <- err
	}()
	for i := range jobs {
		waitMarked(t, fmt.Sprintf("%s/%d", run, i))
	}
	var listed []job
	if st := s.DoJSON(t, "GET", "/jobs?state=running", nil, &listed); st != 200 || len(listed) != jobs {
		t.Fatalf("running jobs = %d (status %d), want %d", len(listed), st, jobs)
	}
	for _, j := range listed {
		if !strings.Contains(strings.Join(ids, " "), j.ID) {
			ids = append(ids, j.ID) // the tool call's job
		}
	}

	s.crash(t)
	<-callDone
	// The crash itself stops nothing: every job's processes still run.
	if pids, sleeps := marked(run + "/"); sleeps != 2*jobs {
		t.Fatalf("after the crash %d sleeps run (%d marked processes), want %d", sleeps, len(pids), 2*jobs)
	}

	// Watch from the restart on: the moment the last process is gone.
	restart := time.Now()
	gone := make(chan time.Duration, 1)
	go func() {
		for time.Since(restart) < 30*time.Second {
			if pids, _ := marked(run + "/"); len(pids) == 0 {
				gone <- time.Since(restart)
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
		gone <- -1
	}()
	s2 := startServer(t, withHome(home), config)
	ready := time.Since(restart)
	// The server kills the leftovers before it listens; they are gone
	// moments after it is ready. (How fast is measured by
	// BenchmarkCrashRecovery50, not asserted here.)
	if left := survivors(run+"/", 5*time.Second); len(left) > 0 {
		t.Errorf("%d process(es) of the crashed run alive 5s after the restarted server was ready: %v", len(left), left)
	}
	if d := <-gone; d >= 0 {
		t.Logf("restart to no process of the crashed run left: %v (server ready after %v)", d, ready)
	}
	if !strings.Contains(s2.stderr.String(), "lost_jobs=50") {
		t.Errorf("restart did not log the 50 lost jobs; stderr:\n%s", s2.stderr)
	}

	for _, id := range ids {
		var j job
		if st := s2.DoJSON(t, "GET", "/jobs/"+id, nil, &j); st != 200 || j.State != "lost" {
			t.Errorf("job %s after restart: status %d, state %q; want 200, lost", id, st, j.State)
		}
	}

	var ag agent
	if st := s2.DoJSON(t, "POST", "/agents/"+a.ID+"/resume", nil, &ag); st != 200 {
		t.Fatalf("resume = %d", st)
	}
	resp := s2.Do(t, "GET", "/agents/"+a.ID+"/transcript", nil)
	var transcript bytes.Buffer
	_, _ = transcript.ReadFrom(resp.Body)
	resp.Body.Close()
	var interrupted, calls int
	for line := range strings.SplitSeq(transcript.String(), "\n") {
		var ev struct {
			Type string `json:"type"`
			Data struct {
				CallID      string `json:"callId"`
				IsError     bool   `json:"isError"`
				Interrupted bool   `json:"interrupted"`
			} `json:"data"`
		}
		if json.Unmarshal([]byte(line), &ev) != nil || ev.Data.CallID != "call_cut" {
			continue
		}
		switch ev.Type {
		case "tool/call":
			calls++
		case "tool/result":
			if ev.Data.Interrupted && ev.Data.IsError {
				interrupted++
			}
		}
	}
	if calls != 1 || interrupted != 1 {
		t.Errorf("transcript has %d call(s) and %d interrupted result(s) for call_cut, want 1 and 1:\n%s", calls, interrupted, transcript.String())
	}
	if r := s2.callTool(t, a.ID, "bash", map[string]any{"command": "echo resumed"}); r.IsError || strings.TrimSpace(r.Text) != "resumed" {
		t.Errorf("tool call after resume = %+v", r)
	}
}

// TestCrashRecoveryAdopted: in group mode a `setsid -f` process is adopted
// by dshd and tied to no job. After `kill -9` of dshd the restart on the
// same home stops it with the rest (it had recorded it, by pid and start
// time, in its running index).
func TestCrashRecoveryAdopted(t *testing.T) {
	home := t.TempDir()
	config := withConfig("jobs:\n  graceMs: 200\n  containment: group\n")
	s := startServer(t, withHome(home), config)
	run := randomMark(t)
	t.Cleanup(func() { killPIDs(survivorsNow(run)) })
	for i, cmd := range []string{"setsid -f sleep 300; sleep 300", "setsid -f sleep 300; echo left"} {
		var j job
		body := map[string]any{"command": fmt.Sprintf("export %s='%s/%d;'; %s", markEnv, run, i, cmd), "background": true}
		if st := s.DoJSON(t, "POST", "/exec", body, &j); st != 202 {
			t.Fatalf("exec = %d", st)
		}
	}
	waitMarked(t, run+"/0")
	// Wait for both setsid'd sleeps to be recorded (within 100 ms of their
	// adoption).
	deadline := time.Now().Add(15 * time.Second)
	for {
		b, _ := os.ReadFile(filepath.Join(home, "jobs", "running", "adopted"))
		if strings.Count(string(b), `"pid"`) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("adopted processes not recorded: %q", b)
		}
		time.Sleep(10 * time.Millisecond)
	}

	s.crash(t)
	if _, sleeps := marked(run + "/"); sleeps != 3 {
		t.Fatalf("after the crash %d sleeps run, want 3", sleeps)
	}
	startServer(t, withHome(home), config)
	if left := survivors(run+"/", 5*time.Second); len(left) > 0 {
		t.Errorf("%d process(es) of the crashed run alive 5s after the restart: %v", len(left), left)
	}
}
