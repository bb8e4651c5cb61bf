package tests

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// idemExec posts body to /exec with an Idempotency-Key and returns the
// status, the job (on 200 or 202) and the problem (otherwise).
func (s *testServer) idemExec(t *testing.T, key string, body any) (int, job, problem) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return s.idemExecRaw(t, key, b)
}

func (s *testServer) idemExecRaw(t *testing.T, key string, body []byte) (int, job, problem) {
	t.Helper()
	st, ctype, b := s.SendRaw(t, "POST", "/exec", body, map[string]string{"Idempotency-Key": key})
	var j job
	var p problem
	if st == 200 || st == 202 {
		if err := json.Unmarshal(b, &j); err != nil {
			t.Fatalf("decode job %s: %v", b, err)
		}
	} else {
		if ctype != "application/problem+json" {
			t.Fatalf("status %d with Content-Type %q: %s", st, ctype, b)
		}
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatalf("decode problem %s: %v", b, err)
		}
	}
	return st, j, p
}

// runs returns how many times a command appending "run" to marker ran.
func runs(t *testing.T, marker string) int {
	t.Helper()
	b, err := os.ReadFile(marker)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Count(string(b), "run\n")
}

// TestIdempotencyKeySurvivesRestart: a key used before a restart never runs
// its command again after it; the job is gone with the old process, so the
// answer is 410 idempotency_key_expired_job.
func TestIdempotencyKeySurvivesRestart(t *testing.T) {
	t.Parallel()
	home := filepath.Join(t.TempDir(), "home")
	marker := filepath.Join(t.TempDir(), "runs")
	body := map[string]any{"command": "echo run >> " + marker}
	s := startServer(t, withHome(home))
	if st, _, p := s.idemExec(t, "restart-1", body); st != 200 {
		t.Fatalf("first request = %d %s", st, p.Code)
	}
	s.stop(t)
	s2 := startServer(t, withHome(home))
	st, j, p := s2.idemExec(t, "restart-1", body)
	if st != http.StatusGone || p.Code != "idempotency_key_expired_job" {
		t.Errorf("after a restart the same key = %d %q (job %s), want 410 idempotency_key_expired_job", st, p.Code, j.ID)
	}
	if n := runs(t, marker); n != 1 {
		t.Errorf("command ran %d times, want once", n)
	}
	// A different request under the same key is still a reuse.
	if st, _, p := s2.idemExec(t, "restart-1", map[string]any{"command": "echo other"}); st != 422 || p.Code != "idempotency_key_reused" {
		t.Errorf("another request with the key after a restart = %d %q, want 422 idempotency_key_reused", st, p.Code)
	}
}

// TestIdempotencyKeyOfLostJob: a key whose job was still running when dshd
// was killed answers that job, recorded as lost by the next start.
func TestIdempotencyKeyOfLostJob(t *testing.T) {
	t.Parallel()
	home := filepath.Join(t.TempDir(), "home")
	marker := filepath.Join(t.TempDir(), "runs")
	body := map[string]any{"command": "echo run >> " + marker + "; sleep 300", "background": true}
	s := startServer(t, withHome(home))
	st, first, p := s.idemExec(t, "lost-1", body)
	if st != 202 {
		t.Fatalf("first request = %d %s", st, p.Code)
	}
	s.crash(t)
	s2 := startServer(t, withHome(home))
	st, again, p := s2.idemExec(t, "lost-1", body)
	if st != 202 || again.ID != first.ID || again.State != "lost" {
		t.Errorf("after a crash the same key = %d %q, job %s %q; want 202 with job %s lost", st, p.Code, again.ID, again.State, first.ID)
	}
	if n := runs(t, marker); n != 1 {
		t.Errorf("command ran %d times, want once", n)
	}
}

// TestIdempotencyKeyOutlivesRetention: once retention has dropped the job
// of a key (retainMax 3, five jobs in between), the key still never runs its
// command again.
func TestIdempotencyKeyOutlivesRetention(t *testing.T) {
	t.Parallel()
	s := startServer(t, withConfig("jobs:\n  retainMax: 3\n"))
	marker := filepath.Join(t.TempDir(), "runs")
	body := map[string]any{"command": "echo run >> " + marker}
	st, first, p := s.idemExec(t, "retained-1", body)
	if st != 200 {
		t.Fatalf("first request = %d %s", st, p.Code)
	}
	for range 5 {
		if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": "true"}, nil); st != 200 {
			t.Fatalf("other job = %d", st)
		}
	}
	if st := s.DoJSON(t, "GET", "/jobs/"+first.ID, nil, nil); st != 404 {
		t.Fatalf("GET the first job = %d, want 404 (retention dropped it)", st)
	}
	st, j, p := s.idemExec(t, "retained-1", body)
	if st != http.StatusGone || p.Code != "idempotency_key_expired_job" || !strings.Contains(p.Detail, first.ID) {
		t.Errorf("same key after retention = %d %q %q (job %s), want 410 idempotency_key_expired_job naming %s", st, p.Code, p.Detail, j.ID, first.ID)
	}
	if n := runs(t, marker); n != 1 {
		t.Errorf("command ran %d times, want once", n)
	}
}

// TestIdempotencyKeyDifferentRequest: a key reused for another request is
// 422 idempotency_key_reused, whatever field differs; a body the contract or
// validation refuses is 400 first; the first job's request still gets it.
func TestIdempotencyKeyDifferentRequest(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	marker := filepath.Join(t.TempDir(), "runs")
	cmd := "echo run >> " + marker
	st, first, p := s.idemExec(t, "diff-1", map[string]any{"command": cmd})
	if st != 200 {
		t.Fatalf("first request = %d %s", st, p.Code)
	}
	for _, tc := range []struct {
		name string
		body map[string]any
	}{
		{"another command", map[string]any{"command": "echo other >> " + marker}},
		{"background", map[string]any{"command": cmd, "background": true}},
		{"env", map[string]any{"command": cmd, "env": map[string]string{"A": "1"}}},
		{"a cwd that does not exist", map[string]any{"command": cmd, "cwd": filepath.Join(t.TempDir(), "missing")}},
		{"yieldMs", map[string]any{"command": cmd, "yieldMs": 10}},
	} {
		st, j, p := s.idemExec(t, "diff-1", tc.body)
		if st != 422 || p.Code != "idempotency_key_reused" {
			t.Errorf("%s with the key = %d %q (job %s), want 422 idempotency_key_reused", tc.name, st, p.Code, j.ID)
		}
	}
	for _, tc := range []struct{ name, body string }{
		{"contract", `{"command":1}`},
		{"managed env name", `{"command":"true","env":{"DSH_X":"1"}}`},
		{"unknown field", `{"command":"true","bogus":1}`},
	} {
		if st, _, p := s.idemExecRaw(t, "diff-1", []byte(tc.body)); st != 400 {
			t.Errorf("invalid body (%s) with the key = %d %q, want 400", tc.name, st, p.Code)
		}
	}
	// The same request, spelled differently, is the same request.
	st, again, p := s.idemExecRaw(t, "diff-1", []byte(`{ "command" : `+mustJSON(t, cmd)+` }`))
	if st != 200 || again.ID != first.ID {
		t.Errorf("the first request again = %d %q job %s, want 200 with job %s", st, p.Code, again.ID, first.ID)
	}
	if n := runs(t, marker); n != 1 {
		t.Errorf("command ran %d times, want once", n)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestIdempotencyKeyPerAgent: the same key from another agent is another
// key: agent B never gets agent A's job, its output or its session id.
func TestIdempotencyKeyPerAgent(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	var a, b struct{ ID string }
	if st := s.DoJSON(t, "POST", "/agents", map[string]any{}, &a); st != 201 {
		t.Fatalf("create agent = %d", st)
	}
	if st := s.DoJSON(t, "POST", "/agents", map[string]any{}, &b); st != 201 {
		t.Fatalf("create agent = %d", st)
	}
	cmd := "echo $DSH_SESSION_ID"
	st, ja, p := s.idemExec(t, "shared-key", map[string]any{"command": cmd, "agentId": a.ID})
	if st != 200 || ja.Stdout.Text != a.ID+"\n" {
		t.Fatalf("agent A = %d %q, stdout %q", st, p.Code, ja.Stdout.Text)
	}
	st, jb, p := s.idemExec(t, "shared-key", map[string]any{"command": cmd, "agentId": b.ID})
	if st != 200 || jb.ID == ja.ID || jb.Stdout.Text != b.ID+"\n" {
		t.Errorf("agent B with A's key = %d %q, job %s stdout %q; want its own job printing %s", st, p.Code, jb.ID, jb.Stdout.Text, b.ID)
	}
	st, jn, p := s.idemExec(t, "shared-key", map[string]any{"command": cmd})
	if st != 200 || jn.ID == ja.ID || jn.ID == jb.ID || jn.Stdout.Text != "\n" {
		t.Errorf("no agent with the key = %d %q, job %s stdout %q; want its own job", st, p.Code, jn.ID, jn.Stdout.Text)
	}
	if st, again, _ := s.idemExec(t, "shared-key", map[string]any{"command": cmd, "agentId": a.ID}); st != 200 || again.ID != ja.ID {
		t.Errorf("agent A again = %d job %s, want its job %s", st, again.ID, ja.ID)
	}
}

// TestIdempotencyKeyInFlight: while the first request with a key is still
// being started (its managed environment is being collected from a slow
// webhook), the same key answers 409 idempotency_key_in_use at once.
func TestIdempotencyKeyInFlight(t *testing.T) {
	t.Parallel()
	// The execution's webhook deadline is long enough for a loaded machine.
	s := startServer(t, withConfig("webhooks:\n  timeoutMs: 30000\n"))
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	var once sync.Once
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case entered <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-time.After(30 * time.Second):
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"DSH_IDEM_SLOW":"1"}`))
	}))
	t.Cleanup(hook.Close)
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	if st := s.DoJSON(t, "POST", "/contributors", map[string]any{
		"name":     "test.idem.slow",
		"keys":     []map[string]string{{"key": "DSH_IDEM_SLOW", "description": "slow on purpose"}},
		"resolver": map[string]any{"kind": "webhook", "url": hook.URL + "/env", "timeoutMs": 20000},
	}, nil); st != 201 {
		t.Fatalf("register contributor = %d", st)
	}
	marker := filepath.Join(t.TempDir(), "runs")
	body := map[string]any{"command": "echo run >> " + marker}
	type answer struct {
		st int
		j  job
		p  problem
	}
	firstDone := make(chan answer, 1)
	go func() {
		st, j, p := s.idemExec(t, "flight-1", body)
		firstDone <- answer{st, j, p}
	}()
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the first request never reached the webhook")
	}
	began := time.Now()
	st, j, p := s.idemExec(t, "flight-1", body)
	if st != http.StatusConflict || p.Code != "idempotency_key_in_use" {
		t.Errorf("same key in flight = %d %q (job %s), want 409 idempotency_key_in_use", st, p.Code, j.ID)
	}
	if waited := time.Since(began); waited > 5*time.Second {
		t.Errorf("the in-flight answer took %s: it waited for the first request", waited)
	}
	once.Do(func() { close(release) })
	first := <-firstDone
	if first.st != 200 {
		t.Fatalf("first request = %d %q", first.st, first.p.Code)
	}
	if st, again, p := s.idemExec(t, "flight-1", body); st != 200 || again.ID != first.j.ID {
		t.Errorf("same key after the start = %d %q job %s, want 200 with job %s", st, p.Code, again.ID, first.j.ID)
	}
	if n := runs(t, marker); n != 1 {
		t.Errorf("command ran %d times, want once", n)
	}
}

// TestGeneratedCallIDRunsOnce: a tool call sent without a callId gets a
// generated one, and a retry with it runs nothing: it answers the first
// result. The agent's first call names its own id, so its transcript has
// been read for retries before the call without one is made (the case
// that ran twice). The transcript has one tool/call per call id.
func TestGeneratedCallIDRunsOnce(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	runs := filepath.Join(t.TempDir(), "runs")
	var a agent
	if st := s.DoJSON(t, "POST", "/agents", map[string]any{}, &a); st != 201 {
		t.Fatalf("POST /agents = %d", st)
	}
	args := map[string]any{"command": "echo ran >> " + runs + "; echo out"}
	s.callToolRaw(t, a.ID, "bash", map[string]any{"callId": "call_given", "arguments": args})
	first := s.callToolRaw(t, a.ID, "bash", map[string]any{"arguments": args})
	if first.CallID == "" || first.CallID == "call_given" {
		t.Fatalf("call without a callId answered callId %q, want a generated one", first.CallID)
	}
	retry := s.callToolRaw(t, a.ID, "bash", map[string]any{"callId": first.CallID, "arguments": args})
	if retry.JobID != first.JobID || retry.Text != first.Text {
		t.Errorf("retry with the generated id: %+v, want the first result %+v", retry, first)
	}
	if b, _ := os.ReadFile(runs); string(b) != "ran\nran\n" {
		t.Errorf("the command ran %q, want twice (once per call id)", b)
	}
	resp := s.Do(t, "GET", "/agents/"+a.ID+"/transcript", nil)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	calls := map[string]int{}
	for sc.Scan() {
		var e struct {
			Type string
			Data struct {
				CallID string `json:"callId"`
			}
		}
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.Type == "tool/call" {
			calls[e.Data.CallID]++
		}
	}
	if len(calls) != 2 || calls["call_given"] != 1 || calls[first.CallID] != 1 {
		t.Errorf("tool/call events by callId %v, want one each for call_given and %s", calls, first.CallID)
	}
}
