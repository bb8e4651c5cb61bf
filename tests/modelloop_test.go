package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// transcriptEvent is one event of an agent's transcript.
type transcriptEvent struct {
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

// transcript returns the agent's events of the given types, in order.
func (s *testServer) transcript(t *testing.T, agentID string, types ...string) []transcriptEvent {
	t.Helper()
	resp := s.Do(t, "GET", "/agents/"+agentID+"/transcript", nil)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET transcript of %s = %d", agentID, resp.StatusCode)
	}
	var out []transcriptEvent
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e transcriptEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("transcript line %q: %v", sc.Text(), err)
		}
		for _, typ := range types {
			if e.Type == typ {
				out = append(out, e)
			}
		}
	}
	return out
}

// callToolRaw posts one tool call body and decodes its 200 answer.
func (s *testServer) callToolRaw(t *testing.T, agentID, name string, body map[string]any) toolResult {
	t.Helper()
	var r toolResult
	if st := s.DoJSON(t, "POST", "/agents/"+agentID+"/tools/"+name, body, &r); st != 200 {
		t.Fatalf("tool %s %v for %s = %d, want 200", name, body, agentID, st)
	}
	return r
}

// TestModelMistakesAreToolResults: arguments a model got wrong reach it as
// an error result, recorded in the transcript, over HTTP and over MCP; a
// string holding the arguments (OpenAI's shape) runs the call.
func TestModelMistakesAreToolResults(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	var a agent
	if st := s.DoJSON(t, "POST", "/agents", map[string]any{}, &a); st != 201 {
		t.Fatalf("POST /agents = %d", st)
	}
	for i, tt := range []struct {
		arguments any
		want      string
	}{
		{map[string]any{"command": ""}, "command must not be empty"},
		{map[string]any{"command": "true", "timeout": "30s"}, "timeout must be a non-negative integer"},
		{"echo hi", "the string given does not hold one"},
	} {
		// A call id of its own each: a call id runs (and answers) once.
		r := s.callToolRaw(t, a.ID, "bash", map[string]any{"callId": fmt.Sprintf("bad-%d", i), "arguments": tt.arguments})
		if !r.IsError || !strings.Contains(r.Text, tt.want) || r.JobID != "" {
			t.Errorf("arguments %v = %+v, want an error result saying %q", tt.arguments, r, tt.want)
		}
	}
	if r := s.callToolRaw(t, a.ID, "bash", map[string]any{"arguments": `{"command":"echo $DSH_SESSION_ID"}`}); r.IsError || r.Text != a.ID {
		t.Errorf("string arguments = %+v, want the agent's id", r)
	}
	// The harness's own mistakes stay HTTP errors.
	var p problem
	if st := s.DoJSON(t, "POST", "/agents/agt_nope/tools/bash", map[string]any{"arguments": map[string]any{"command": "true"}}, &p); st != 404 {
		t.Errorf("unknown agent = %d, want 404", st)
	}
	if st := s.DoJSON(t, "POST", "/agents/"+a.ID+"/tools/bash", map[string]any{"arguments": []any{"ls"}}, &p); st != 400 {
		t.Errorf("arguments neither object nor string = %d, want 400", st)
	}
	evs := s.transcript(t, a.ID, "tool/call", "tool/result")
	if len(evs) != 8 {
		t.Fatalf("%d tool events, want 4 calls and 4 results", len(evs))
	}
	for i, want := range []string{`"arguments":{"command":""}`, `"isError":true`, `"timeout":"30s"`, `timeout must be`, `"arguments":"echo hi"`, `does not hold one`, `"arguments":{"command":"echo $DSH_SESSION_ID"}`, `"isError":false`} {
		if !strings.Contains(string(evs[i].Data), want) {
			t.Errorf("event %d %s %s lacks %s", i, evs[i].Type, evs[i].Data, want)
		}
	}

	c := startMCPClient(t)
	m := c.connect(s, "m", "", nil)
	for _, args := range []map[string]any{{"command": ""}, {"command": "true", "timeout": "30s"}} {
		r := c.call("m", "bash", args)
		if !r.Result.IsError || !strings.Contains(r.text(), "must") {
			t.Errorf("MCP bash %v = %+v, want an error result", args, r)
		}
	}
	if evs := s.transcript(t, m.AgentID, "tool/call", "tool/result"); len(evs) != 4 || !strings.Contains(string(evs[3].Data), "timeout must be a non-negative integer") {
		t.Errorf("MCP agent's tool events: %d, want 2 calls and their error results", len(evs))
	}
}

// TestJobOutputReachesEveryByte: of a 206,000-byte output, the bash result
// names the job_output call that reads what it left out, and job_output
// returns bytes 100,000-110,000 exactly, over HTTP and over MCP.
func TestJobOutputReachesEveryByte(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	var a agent
	if st := s.DoJSON(t, "POST", "/agents", map[string]any{}, &a); st != 201 {
		t.Fatalf("POST /agents = %d", st)
	}
	// 2,000 lines of 103 bytes.
	command := `pad=$(printf 'a%.0s' $(seq 96)); for i in $(seq 2000); do printf '%05d %s\n' $i "$pad"; done`
	marker := regexp.MustCompile(`\[stdout truncated: bytes (\d+)-\d+ of 206000 left out; read them with job_output (\{[^}]*\})`)
	check := func(over string, bash string, read func(args map[string]any) string) {
		m := marker.FindStringSubmatch(bash)
		if m == nil {
			t.Fatalf("%s: bash result has no truncation line naming a job_output call: …%s", over, bash[max(len(bash)-300, 0):])
		}
		var named map[string]any
		if err := json.Unmarshal([]byte(m[2]), &named); err != nil {
			t.Fatal(err)
		}
		jobID := named["jobId"].(string)
		all := s.rawOutput(t, jobID)
		if len(all) != 206000 {
			t.Fatalf("%s: raw output %d bytes", over, len(all))
		}
		var from int
		fmt.Sscan(m[1], &from)
		if got := read(named); !strings.HasPrefix(got, string(all[from:from+65536])) {
			t.Errorf("%s: the named call returns %.80q…, want the bytes from %d", over, got, from)
		}
		want := string(all[100000:110000]) + "\n" + `[stdout bytes 100000-109999 of 206000 bytes; next: job_output {"jobId":"` + jobID + `","offset":110000}]`
		if got := read(map[string]any{"jobId": jobID, "offset": 100000, "length": 10000}); got != want {
			t.Errorf("%s: bytes 100000-109999 = %.120q…, want them exactly, then the next call", over, got)
		}
	}

	r := s.callTool(t, a.ID, "bash", map[string]any{"command": command})
	check("HTTP", r.Text, func(args map[string]any) string {
		res := s.callTool(t, a.ID, "job_output", args)
		if res.IsError {
			t.Fatalf("job_output %v = %+v", args, res)
		}
		return res.Text
	})

	c := startMCPClient(t)
	c.connect(s, "m", "", nil)
	check("MCP", c.call("m", "bash", map[string]any{"command": command}).text(), func(args map[string]any) string {
		res := c.call("m", "job_output", args)
		if res.Result.IsError {
			t.Fatalf("MCP job_output %v = %+v", args, res)
		}
		return res.text()
	})
}

// TestYieldedCallsCap: one agent yielding 20 sleeps (cap 10 per agent, 20
// in all) gets 10 of them running and 10 error results; another agent's
// call and the harness's /exec still run.
func TestYieldedCallsCap(t *testing.T) {
	t.Parallel()
	s := startServer(t, withConfig("jobs:\n  maxRunning: 20\n  maxBackgroundPerAgent: 10\n"))
	var a, b agent
	s.DoJSON(t, "POST", "/agents", map[string]any{}, &a)
	s.DoJSON(t, "POST", "/agents", map[string]any{}, &b)
	var refused, running int
	for range 20 {
		r := s.callTool(t, a.ID, "bash", map[string]any{"command": "sleep 600", "yield_time_ms": 50, "timeout": 600000})
		switch {
		case r.IsError && strings.Contains(r.Text, "10 of your jobs already run on their own"):
			refused++
		case !r.IsError && strings.Contains(r.Text, "[still running: job "):
			running++
		default:
			t.Fatalf("yielded call = %+v", r)
		}
	}
	if running != 10 || refused != 10 {
		t.Errorf("%d yielded calls running and %d refused, want 10 and 10", running, refused)
	}
	if r := s.callTool(t, b.ID, "bash", map[string]any{"command": "echo other"}); r.IsError || r.Text != "other" {
		t.Errorf("another agent's call = %+v, want it to run", r)
	}
	var j job
	if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": "echo harness"}, &j); st != 200 || j.State != "exited" {
		t.Errorf("POST /exec = %d %+v, want it to run", st, j)
	}
	var jobs []job
	s.DoJSON(t, "GET", "/jobs?agentId="+a.ID+"&state=running", nil, &jobs)
	for _, j := range jobs {
		s.Do(t, "DELETE", "/jobs/"+j.ID, nil).Body.Close()
	}
}

// TestDroppedClientKeepsTheResult: a tool call whose HTTP client gives up
// before the command ends still records the command's real result, and the
// server logs no error for it.
func TestDroppedClientKeepsTheResult(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	var a agent
	s.DoJSON(t, "POST", "/agents", map[string]any{}, &a)
	body, _ := json.Marshal(map[string]any{"callId": "call_drop", "arguments": map[string]any{"command": "sleep 1.5; echo done"}})
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", s.URL+"/agents/"+a.ID+"/tools/bash", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.Token)
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); !errors.Is(err, context.DeadlineExceeded) {
		if err == nil {
			resp.Body.Close()
		}
		t.Fatalf("the call answered within 0.5 s (%v): the test needs the client to give up first", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	var results []transcriptEvent
	for len(results) == 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		results = s.transcript(t, a.ID, "tool/result")
	}
	if len(results) != 1 {
		t.Fatalf("no tool/result recorded within 30 s")
	}
	var got struct {
		CallID   string `json:"callId"`
		IsError  bool   `json:"isError"`
		Text     string `json:"text"`
		ExitCode *int   `json:"exitCode"`
	}
	if err := json.Unmarshal(results[0].Data, &got); err != nil {
		t.Fatal(err)
	}
	if got.CallID != "call_drop" || got.IsError || got.Text != "done" || got.ExitCode == nil || *got.ExitCode != 0 {
		t.Errorf("recorded result %s, want the command's own: done, exit 0", results[0].Data)
	}
	if logs := s.stderr.String(); strings.Contains(logs, "level=ERROR") {
		t.Errorf("the server logged an error:\n%s", logs)
	}
}
