package tests

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/proctest"
)

// rawMCP is an MCP session driven with plain HTTP requests, so a test
// sees every byte of every answer and when its headers arrive.
type rawMCP struct {
	t       *testing.T
	s       *testServer
	session string
	agentID string
}

// mcpRequest is a POST to /mcp with the session's headers.
func (m *rawMCP) request(body string) *http.Request {
	req, err := http.NewRequest("POST", m.s.URL+"/mcp", strings.NewReader(body))
	if err != nil {
		m.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+m.s.Token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if m.session != "" {
		req.Header.Set("Mcp-Session-Id", m.session)
		req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	}
	return req
}

// openRawMCP initializes a session.
func openRawMCP(t *testing.T, s *testServer) *rawMCP {
	t.Helper()
	m := &rawMCP{t: t, s: s}
	resp, err := http.DefaultClient.Do(m.request(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	m.session, m.agentID = resp.Header.Get("Mcp-Session-Id"), resp.Header.Get(mcpAgentHeader)
	if resp.StatusCode != 200 || m.session == "" || m.agentID == "" {
		t.Fatalf("initialize = %d, session %q, agent %q", resp.StatusCode, m.session, m.agentID)
	}
	if st := m.notify(`{"jsonrpc":"2.0","method":"notifications/initialized"}`); st != 202 {
		t.Fatalf("notifications/initialized = %d", st)
	}
	return m
}

// notify posts a notification and returns the answer's status.
func (m *rawMCP) notify(body string) int {
	m.t.Helper()
	resp, err := http.DefaultClient.Do(m.request(body))
	if err != nil {
		m.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// bashBody is a tools/call request of bash with command.
func bashBody(id int, command string) string {
	args, _ := json.Marshal(map[string]any{"command": command})
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call",
		"params": map[string]any{"name": "bash", "arguments": json.RawMessage(args)}})
	return string(b)
}

// sseLines reads an answer's lines as they arrive, on a channel closed at
// the end of the stream.
func sseLines(resp *http.Response) <-chan string {
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return lines
}

// firstJob waits for the session's agent to have a job whose process is
// spawned (or that has ended), and returns it.
func (m *rawMCP) firstJob() job {
	m.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var jobs []job
		if st := m.s.DoJSON(m.t, "GET", "/jobs?agentId="+m.agentID, nil, &jobs); st != 200 {
			m.t.Fatalf("GET /jobs = %d", st)
		}
		// A job is listed from its reservation, a moment before its
		// process is spawned and has a pid.
		if len(jobs) > 0 && (jobs[0].PID != 0 || jobs[0].State != "running") {
			return jobs[0]
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("the call started no process within 30s (jobs %+v)", jobs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMCPSilentCommand: a command that prints nothing for longer than the
// 60 s real clients (Claude Code, Gemini CLI) wait for response headers
// keeps its result. A client that asks for no progress and gives up on
// headers after 60 s gets them while the command runs, keep-alive comments
// while it is silent, and its result at the end.
func TestMCPSilentCommand(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	m := openRawMCP(t, s)
	client := &http.Client{Transport: &http.Transport{ResponseHeaderTimeout: 60 * time.Second}}
	const command = "sleep 75; echo done"
	resp, err := client.Do(m.request(bashBody(2, command)))
	if err != nil {
		t.Fatalf("tools/call of %q: %v", command, err)
	}
	defer resp.Body.Close()
	// The headers came before the command ended.
	if j := m.firstJob(); j.State != "running" {
		t.Fatalf("the call's job is %s once the headers came, want running", j.State)
	}
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("tools/call = %d %s, want 200 text/event-stream", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	keepAlives := 0
	var result string
	for line := range sseLines(resp) {
		switch {
		case strings.HasPrefix(line, ": keep-alive"):
			keepAlives++
		case strings.HasPrefix(line, "data: "):
			result = line
		}
	}
	var msg struct {
		ID     int `json:"id"`
		Result struct {
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
			IsError bool `json:"isError"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(result, "data: ")), &msg); err != nil ||
		msg.ID != 2 || msg.Result.IsError || len(msg.Result.Content) != 1 || msg.Result.Content[0].Text != "done" {
		t.Fatalf("last message %q, want the call's result: done", result)
	}
	// 75 s of silence at one comment every 15 s.
	if keepAlives == 0 {
		t.Error("no keep-alive comment while the command was silent")
	}
	t.Logf("%d keep-alive comments", keepAlives)
}

// TestMCPDeleteEndsCalls: DELETE /mcp while a call runs `sleep 30` is
// answered long before the command would have ended, the call's job is
// cancelled through the kill path with nothing left running, and the
// transcript records its result and why it stopped.
func TestMCPDeleteEndsCalls(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	m := openRawMCP(t, s)
	const length = 30 * time.Second // the command's own length
	resp, err := http.DefaultClient.Do(m.request(bashBody(2, "sleep 30")))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := sseLines(resp)
	j := m.firstJob()
	if j.State != "running" || j.PID == 0 {
		t.Fatalf("the call's job = %+v, want running", j)
	}
	t.Cleanup(func() { proctest.KillIfAlive(j.PID) })
	var started struct {
		StartedAt time.Time `json:"startedAt"`
	}
	s.DoJSON(t, "GET", "/jobs/"+j.ID, nil, &started)

	del, err := http.NewRequest("DELETE", s.URL+"/mcp", nil)
	if err != nil {
		t.Fatal(err)
	}
	del.Header.Set("Authorization", "Bearer "+s.Token)
	del.Header.Set("Mcp-Session-Id", m.session)
	dresp, err := http.DefaultClient.Do(del)
	if err != nil {
		t.Fatal(err)
	}
	dresp.Body.Close()
	answered := time.Since(started.StartedAt)
	if dresp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE /mcp = %d, want 204", dresp.StatusCode)
	}
	if answered >= length {
		t.Errorf("DELETE answered %s after the command started, not before its own end (%s)", answered, length)
	}
	t.Logf("DELETE answered %s after the command started", answered)
	for line := range lines {
		if strings.HasPrefix(line, "data: ") {
			t.Errorf("the ended session's call answered: %s", line)
		}
	}
	if got := s.waitJob(t, j.ID); got.State != "cancelled" {
		t.Errorf("the call's job is %s, want cancelled", got.State)
	}
	proctest.WaitGone(t, j.PID)
	if res, data := m.result(); res.Stopped != "session_ended" || !strings.Contains(res.Text, "killed by signal") {
		t.Errorf("tool/result = %s, want the stopped job's, stopped session_ended", data)
	}
}

// mcpToolResult is the data of a tool/result event.
type mcpToolResult struct {
	Text    string `json:"text"`
	Stopped string `json:"stopped"`
}

// result waits for the agent's one tool/result and returns it.
func (m *rawMCP) result() (mcpToolResult, json.RawMessage) {
	m.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if results := m.s.transcript(m.t, m.agentID, "tool/result"); len(results) > 0 {
			if len(results) != 1 {
				m.t.Fatalf("%d tool/result events, want the call's", len(results))
			}
			var res mcpToolResult
			if err := json.Unmarshal(results[0].Data, &res); err != nil {
				m.t.Fatal(err)
			}
			return res, results[0].Data
		}
		if time.Now().After(deadline) {
			m.t.Fatal("no tool/result within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMCPCancelledGetsNoResponse: a request the client cancels gets no
// JSON-RPC response, as MCP says; its job is stopped, nothing is left
// running, and the transcript records the result, stopped as cancelled.
func TestMCPCancelledGetsNoResponse(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	m := openRawMCP(t, s)
	resp, err := http.DefaultClient.Do(m.request(bashBody(2, "sleep 30")))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := sseLines(resp)
	j := m.firstJob()
	t.Cleanup(func() { proctest.KillIfAlive(j.PID) })
	if st := m.notify(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"the user pressed Esc"}}`); st != 202 {
		t.Fatalf("notifications/cancelled = %d", st)
	}
	for line := range lines {
		if strings.HasPrefix(line, "data: ") {
			t.Errorf("the cancelled request was answered: %s", line)
		}
	}
	if got := s.waitJob(t, j.ID); got.State != "cancelled" {
		t.Errorf("the call's job is %s, want cancelled", got.State)
	}
	proctest.WaitGone(t, j.PID)
	if res, data := m.result(); res.Stopped != "cancelled" || !strings.Contains(res.Text, "killed by signal") {
		t.Errorf("tool/result = %s, want the stopped job's, stopped cancelled", data)
	}
}
