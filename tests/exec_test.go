package tests

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/proctest"
)

// job is the part of the job resource these tests read.
type job struct {
	ID         string            `json:"id"`
	State      string            `json:"state"`
	AgentID    *string           `json:"agentId"`
	Background bool              `json:"background"`
	Cwd        string            `json:"cwd"`
	PID        int               `json:"pid"`
	ExitCode   *int              `json:"exitCode"`
	Signal     *string           `json:"signal"`
	ManagedEnv map[string]string `json:"managedEnv"`
	Stdout     output            `json:"stdout"`
	Stderr     output            `json:"stderr"`
}

type output struct {
	Text       string `json:"text"`
	TotalBytes int64  `json:"totalBytes"`
	Truncated  bool   `json:"truncated"`
}

// childEnv parses `env -0` output.
func childEnv(t *testing.T, text string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, kv := range strings.Split(strings.TrimRight(text, "\x00"), "\x00") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			t.Fatalf("env -0 entry %q has no '='", kv)
		}
		env[k] = v
	}
	return env
}

// waitJob long-polls a job until it leaves running.
func (s *testServer) waitJob(t *testing.T, id string) job {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var j job
		if st := s.DoJSON(t, "GET", "/jobs/"+id+"?waitMs=5000", nil, &j); st != 200 {
			t.Fatalf("GET /jobs/%s = %d", id, st)
		}
		if j.State != "running" {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s still running after 60s", id)
		}
	}
}

// rawOutput reads a job's whole stdout through the raw output route.
func (s *testServer) rawOutput(t *testing.T, id string) []byte {
	t.Helper()
	resp := s.Do(t, "GET", "/jobs/"+id+"/output?stream=stdout&offset=0", nil)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("raw output: %d %v", resp.StatusCode, err)
	}
	return b
}

// TestChildEnvironment proves docs/design.md#invariants, invariants 1–4, on
// what the child really saw, in the foreground and the background, with and
// without an agent.
func TestChildEnvironment(t *testing.T) {
	t.Parallel()
	s := startServer(t, withEnv(
		"DSH_STALE=stale", "DSH_SESSION_ID=ambient-session", "DSH_HOME=/ambient/home",
		"MY_API_KEY=k", "DB_PASSWORD=p", "GITHUB_TOKEN=t", "PLAIN_VAR=plain",
	))
	var agent struct{ ID string }
	if st := s.DoJSON(t, "POST", "/agents", map[string]any{}, &agent); st != 201 {
		t.Fatalf("create agent = %d", st)
	}
	for _, tc := range []struct {
		name       string
		agentID    string
		background bool
	}{
		{"foreground", "", false},
		{"background", "", true},
		{"foreground agent", agent.ID, false},
		{"background agent", agent.ID, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := map[string]any{"command": "env -0", "env": map[string]string{"EXPLICIT": "yes"}, "background": tc.background}
			if tc.agentID != "" {
				req["agentId"] = tc.agentID
			}
			var j job
			st := s.DoJSON(t, "POST", "/exec", req, &j)
			if want := map[bool]int{false: 200, true: 202}[tc.background]; st != want {
				t.Fatalf("status = %d, want %d", st, want)
			}
			j = s.waitJob(t, j.ID)
			env := childEnv(t, string(s.rawOutput(t, j.ID)))

			checks := map[string]string{
				"DSH_HOME": s.Home, "DSH_SHELL": "1", "EXPLICIT": "yes", "PLAIN_VAR": "plain",
				"NO_COLOR": "1", "TERM": "dumb", "PAGER": "cat", "GIT_PAGER": "cat", "GIT_TERMINAL_PROMPT": "0",
			}
			if tc.agentID != "" {
				checks["DSH_SESSION_ID"] = tc.agentID
			}
			for k, want := range checks {
				if env[k] != want {
					t.Errorf("child %s = %q, want %q", k, env[k], want)
				}
			}
			if _, ok := env["DSH_SESSION_ID"]; ok && tc.agentID == "" {
				t.Errorf("child has DSH_SESSION_ID=%q without an agent", env["DSH_SESSION_ID"])
			}
			for _, k := range []string{"DSH_STALE", "MY_API_KEY", "DB_PASSWORD", "GITHUB_TOKEN", "DSH_SESSION_JSONL"} {
				if v, ok := env[k]; ok {
					t.Errorf("child has %s=%q; it must be absent", k, v)
				}
			}
			for k, v := range env {
				if strings.Contains(v, s.Token) {
					t.Errorf("child variable %s holds the server token", k)
				}
				if strings.HasPrefix(k, "DSH_") && j.ManagedEnv[k] != v {
					t.Errorf("child %s=%q is not the job's managed snapshot (%q)", k, v, j.ManagedEnv[k])
				}
			}
		})
	}
	t.Run("explicit DSH_ env rejected", func(t *testing.T) {
		resp := s.Do(t, "POST", "/exec", map[string]any{"command": "true", "env": map[string]string{"DSH_SESSION_ID": "forged"}})
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Errorf("status = %d, want 400", resp.StatusCode)
		}
	})
}

// TestOverlappingExecutionsGetOwnOverlays runs many overlapping commands
// against a template contributor naming the job: each sees its own job id.
func TestOverlappingExecutionsGetOwnOverlays(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	if st := s.DoJSON(t, "POST", "/contributors", map[string]any{
		"name": "test.job", "keys": []map[string]string{{"key": "DSH_JOB", "description": "this job's id"}},
		"resolver": map[string]any{"kind": "template", "values": map[string]string{"DSH_JOB": "{job.id}"}},
	}, nil); st != 201 {
		t.Fatalf("register = %d", st)
	}
	var wg sync.WaitGroup
	for i := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var j job
			if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": "sleep 0.2; printf %s \"$DSH_JOB\"", "background": i%2 == 0}, &j); st != 200 && st != 202 {
				t.Errorf("exec = %d", st)
				return
			}
			j = s.waitJob(t, j.ID)
			if j.Stdout.Text != j.ID || j.ManagedEnv["DSH_JOB"] != j.ID {
				t.Errorf("job %s saw DSH_JOB=%q (snapshot %q)", j.ID, j.Stdout.Text, j.ManagedEnv["DSH_JOB"])
			}
		}()
	}
	wg.Wait()
}

func TestLargeOutput(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	// 3 MiB of numbered lines: far past the 64 KiB in-memory capture.
	var j job
	if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": "seq 1 400000", "background": true}, &j); st != 202 {
		t.Fatalf("exec = %d", st)
	}
	j = s.waitJob(t, j.ID)
	var want bytes.Buffer
	for i := 1; i <= 400000; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	if !j.Stdout.Truncated || j.Stdout.TotalBytes != int64(want.Len()) {
		t.Errorf("stdout truncated=%v totalBytes=%d, want true and %d", j.Stdout.Truncated, j.Stdout.TotalBytes, want.Len())
	}
	if !strings.HasPrefix(j.Stdout.Text, "1\n2\n3\n") || !strings.HasSuffix(j.Stdout.Text, "399999\n400000\n") || !strings.Contains(j.Stdout.Text, "elided") {
		t.Errorf("text keeps no head, tail and elision marker: %q…%q", j.Stdout.Text[:20], j.Stdout.Text[len(j.Stdout.Text)-20:])
	}
	if got := s.rawOutput(t, j.ID); sha256.Sum256(got) != sha256.Sum256(want.Bytes()) {
		t.Errorf("raw output differs from what was written (%d bytes, want %d)", len(got), want.Len())
	}
	resp := s.Do(t, "GET", "/jobs/"+j.ID+"/output?stream=stdout&offset=2000000", nil)
	tail, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Equal(tail, want.Bytes()[2000000:]) {
		t.Errorf("raw output from an offset differs from the stream's tail")
	}
}

// sseEvent is one server-sent event.
type sseEvent struct{ id, name, data string }

// readEvents reads events until n are read or the stream ends.
func readEvents(t *testing.T, body io.Reader, n int) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.name != "" {
				out = append(out, cur)
				if len(out) == n {
					return out
				}
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "id: "):
			cur.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			cur.name = line[7:]
		case strings.HasPrefix(line, "data: "):
			cur.data = line[6:]
		}
	}
	return out
}

// TestSSEResume reads part of a live job's event stream, disconnects, and
// resumes from the last event id: the two parts join with no loss and no
// repeat, and the stream ends with an exit event.
func TestSSEResume(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	var j job
	cmd := "for i in $(seq 1 40); do echo out $i; echo err $i >&2; sleep 0.02; done"
	if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": cmd, "background": true}, &j); st != 202 {
		t.Fatalf("exec = %d", st)
	}
	get := func(lastID string) *http.Response {
		h := map[string]string{"Authorization": "Bearer " + s.Token, "Accept": "text/event-stream"}
		if lastID != "" {
			h["Last-Event-ID"] = lastID
		}
		return s.DoWith(t, "GET", "/jobs/"+j.ID+"/output", nil, h)
	}
	resp := get("")
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type = %q", ct)
	}
	first := readEvents(t, resp.Body, 5)
	resp.Body.Close()
	if len(first) != 5 {
		t.Fatalf("read %d events before disconnecting, want 5", len(first))
	}
	resp = get(first[len(first)-1].id)
	rest := readEvents(t, resp.Body, -1)
	resp.Body.Close()

	var stdout, stderr strings.Builder
	events := append(first, rest...)
	for _, e := range events[:len(events)-1] {
		var chunk string
		if _, err := fmt.Sscanf(e.data, "%q", &chunk); err != nil {
			t.Fatalf("event data %q is not a JSON string: %v", e.data, err)
		}
		switch e.name {
		case "stdout":
			stdout.WriteString(chunk)
		case "stderr":
			stderr.WriteString(chunk)
		default:
			t.Fatalf("unexpected event %q before the end", e.name)
		}
	}
	if last := events[len(events)-1]; last.name != "exit" || !strings.Contains(last.data, `"state":"exited"`) {
		t.Errorf("last event = %+v, want exit with the job", last)
	}
	var wantOut, wantErr strings.Builder
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&wantOut, "out %d\n", i)
		fmt.Fprintf(&wantErr, "err %d\n", i)
	}
	if stdout.String() != wantOut.String() || stderr.String() != wantErr.String() {
		t.Errorf("resumed streams differ:\nstdout %q\nstderr %q", stdout.String(), stderr.String())
	}
}

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	marker := filepath.Join(t.TempDir(), "runs")
	body := map[string]any{"command": "echo run >> " + marker}
	var ids []string
	for range 3 {
		resp := s.DoWith(t, "POST", "/exec", body, map[string]string{
			"Authorization": "Bearer " + s.Token, "Content-Type": "application/json", "Idempotency-Key": "retry-1",
		})
		var j job
		decode(t, resp, &j)
		ids = append(ids, j.ID)
	}
	if ids[0] != ids[1] || ids[1] != ids[2] {
		t.Errorf("retries returned jobs %v, want one job", ids)
	}
	if b, _ := os.ReadFile(marker); string(b) != "run\n" {
		t.Errorf("command ran %d times, want once", strings.Count(string(b), "run"))
	}
}

func TestYield(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	var j job
	if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": "sleep 1; echo finished", "yieldMs": 50}, &j); st != 200 {
		t.Fatalf("exec = %d", st)
	}
	if j.State != "running" || j.Background {
		t.Fatalf("yielded job state=%q background=%v, want a running foreground job", j.State, j.Background)
	}
	j = s.waitJob(t, j.ID)
	if j.State != "exited" || j.Stdout.Text != "finished\n" {
		t.Errorf("after yield the job ended %q with %q, want exited with its output", j.State, j.Stdout.Text)
	}
}

func TestCancelKillsGrandchildren(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	var j job
	cmd := "bash -c 'sleep 300 & echo $! > " + pidFile + "; wait'"
	if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": cmd, "background": true}, &j); st != 202 {
		t.Fatalf("exec = %d", st)
	}
	pid := proctest.ReadPID(t, pidFile)
	resp := s.Do(t, "DELETE", "/jobs/"+j.ID, nil)
	resp.Body.Close()
	if resp.StatusCode != 200 && resp.StatusCode != 202 {
		t.Fatalf("cancel = %d", resp.StatusCode)
	}
	if j = s.waitJob(t, j.ID); j.State != "cancelled" {
		t.Errorf("state = %q, want cancelled", j.State)
	}
	proctest.WaitGone(t, pid)
}

// TestNoProcessLeftBehind starts foreground, background and escaped
// processes, stops the server, and checks every one of them is gone.
func TestNoProcessLeftBehind(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	dir := t.TempDir()
	var pids []int
	for i, c := range []struct {
		cmd        string
		background bool
	}{
		{"sleep 300 & echo $! > %s; wait", true},
		{"(sleep 300 & echo $! > %s); echo escaped", false},
		{"sleep 300 & echo $! > %s; sleep 300", true},
	} {
		pidFile := filepath.Join(dir, strconv.Itoa(i))
		var j job
		st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": fmt.Sprintf(c.cmd, pidFile), "background": c.background}, &j)
		if st != 200 && st != 202 {
			t.Fatalf("exec = %d", st)
		}
		if !c.background && j.State != "exited" {
			t.Errorf("job with an escaped descendant is %q, want exited: the descendant must not hold it open", j.State)
		}
		pids = append(pids, proctest.ReadPID(t, pidFile))
	}
	s.stop(t)
	for _, pid := range pids {
		proctest.WaitGone(t, pid)
	}
}

func TestStdinDefaultsToDevNull(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	var j job
	if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": "cat; echo done", "timeoutMs": 10000}, &j); st != 200 {
		t.Fatalf("exec = %d", st)
	}
	if j.State != "exited" || j.Stdout.Text != "done\n" {
		t.Errorf("cat without stdin: state %q output %q, want exited and done", j.State, j.Stdout.Text)
	}
	if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": "cat", "stdin": "given\n"}, &j); st != 200 || j.Stdout.Text != "given\n" {
		t.Errorf("cat with stdin: %d %q", st, j.Stdout.Text)
	}
}

func decode(t *testing.T, resp *http.Response, out any) {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode >= 300 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}
