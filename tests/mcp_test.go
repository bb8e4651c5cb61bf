package tests

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/testenv"

	"github.com/dshd/dshd/internal/apitest"
	"github.com/dshd/dshd/internal/proctest"
)

// mcpClient is tests/mcp/client.mjs: the official TypeScript MCP client,
// driven one JSON command per line.
type mcpClient struct {
	t     *testing.T
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Scanner
	errs  *syncBuffer
	lines chan string
}

// startMCPClient starts the client driver under node. It skips the test
// (fails in CI, see testenv) when node or the client's npm packages are missing.
func startMCPClient(t *testing.T) *mcpClient {
	t.Helper()
	missing := func(what string) {
		testenv.Need(t, "%s is missing: run make deps", what)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node")
	}
	if _, err := os.Stat("mcp/node_modules/@modelcontextprotocol/sdk/package.json"); err != nil {
		missing("the MCP client in tests/mcp/node_modules")
	}
	c := &mcpClient{t: t, errs: &syncBuffer{}, lines: make(chan string)}
	c.cmd = exec.Command(node, "client.mjs")
	c.cmd.Dir = "mcp"
	c.cmd.Stderr = c.errs
	if c.in, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	t.Cleanup(func() {
		c.in.Close()
		done := make(chan error, 1)
		go func() { done <- c.cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = c.cmd.Process.Kill()
			<-done
			t.Errorf("the MCP client did not exit within 10s; stderr:\n%s", c.errs)
		}
	})
	return c
}

// do runs one command and decodes its answer into out; it fails the test
// when the driver reports an error.
func (c *mcpClient) do(cmd map[string]any, out any) {
	c.t.Helper()
	raw := c.try(cmd)
	var failed struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(raw, &failed) == nil && failed.Error != "" {
		c.t.Fatalf("MCP client %v: %s", cmd["op"], failed.Error)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		c.t.Fatalf("MCP client answer %s: %v", raw, err)
	}
}

// try runs one command and returns its raw answer, error or not.
func (c *mcpClient) try(cmd map[string]any) []byte {
	c.t.Helper()
	b, err := json.Marshal(cmd)
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.in.Write(append(b, '\n')); err != nil {
		c.t.Fatalf("write to the MCP client: %v; stderr:\n%s", err, c.errs)
	}
	select {
	case line, ok := <-c.lines:
		if !ok {
			c.t.Fatalf("the MCP client exited; stderr:\n%s", c.errs)
		}
		return []byte(line)
	case <-time.After(60 * time.Second):
		c.t.Fatalf("no answer to %s within 60s; stderr:\n%s", b, c.errs)
	}
	return nil
}

type mcpSession struct {
	SessionID       string `json:"sessionId"`
	AgentID         string `json:"agentId"`
	ServerName      string `json:"serverName"`
	Instructions    string `json:"instructions"`
	ProtocolVersion string `json:"protocolVersion"`
}

type mcpCallAnswer struct {
	Result *struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	} `json:"result"`
	Cancelled bool   `json:"cancelled"`
	Reason    string `json:"reason"`
	Progress  []struct {
		Progress float64  `json:"progress"`
		Total    *float64 `json:"total"`
		Message  string   `json:"message"`
	} `json:"progress"`
}

// text is the result's text content.
func (a mcpCallAnswer) text() string {
	if a.Result == nil {
		return ""
	}
	var b strings.Builder
	for _, c := range a.Result.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

func (c *mcpClient) connect(s *testServer, session, query string, headers map[string]string) mcpSession {
	c.t.Helper()
	h := map[string]string{"Authorization": "Bearer " + s.Token}
	for k, v := range headers {
		h[k] = v
	}
	var out mcpSession
	c.do(map[string]any{"op": "connect", "session": session, "url": s.URL + "/mcp" + query, "headers": h}, &out)
	if out.SessionID == "" || !strings.HasPrefix(out.AgentID, "agt_") || out.ServerName != "dshd" {
		c.t.Fatalf("session %s = %+v, want a session id, an agent and server dshd", session, out)
	}
	return out
}

func (c *mcpClient) call(session, tool string, args map[string]any) mcpCallAnswer {
	c.t.Helper()
	var out mcpCallAnswer
	c.do(map[string]any{"op": "call", "session": session, "name": tool, "arguments": args}, &out)
	if out.Result == nil {
		c.t.Fatalf("%s call on %s has no result: %+v", tool, session, out)
	}
	return out
}

// TestMCP drives /mcp with the official TypeScript MCP client against the
// real binary: sessions bound to agents, the tools through the shared
// pipeline (hooks and transcript included), progress, cancellation, and
// isolation between agents.
func TestMCP(t *testing.T) {
	t.Parallel()
	home := filepath.Join(t.TempDir(), "home")
	testdata, err := filepath.Abs("testdata/hooks")
	if err != nil {
		t.Fatal(err)
	}
	apitest.WriteJSON(t, filepath.Join(home, "hooks", "claude-code.json"), map[string]any{"hooks": map[string]any{
		"SessionStart": []any{map[string]any{"hooks": []any{map[string]any{"type": "command", "command": `echo "session context from a hook"`}}}},
		"PreToolUse":   []any{map[string]any{"matcher": "Bash", "hooks": []any{map[string]any{"type": "command", "command": testdata + "/validate-bash.sh", "timeout": 10}}}},
	}})
	s := startServer(t, withHome(home))

	// No token, or a wrong one: 401 before anything MCP happens.
	initialize := map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": map[string]any{
		"protocolVersion": "2025-11-25", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "t", "version": "1"},
	}}
	for name, h := range map[string]map[string]string{
		"no token":    {"Accept": "application/json, text/event-stream"},
		"wrong token": {"Accept": "application/json, text/event-stream", "Authorization": "Bearer wrong"},
	} {
		resp := s.DoWith(t, "POST", "/mcp", initialize, h)
		resp.Body.Close()
		if resp.StatusCode != 401 || resp.Header.Get(mcpAgentHeader) != "" {
			t.Errorf("%s: POST /mcp = %d (agent %q), want 401 and no agent", name, resp.StatusCode, resp.Header.Get(mcpAgentHeader))
		}
	}
	var listed []agent
	if st := s.DoJSON(t, "GET", "/agents", nil, &listed); st != 200 || len(listed) != 0 {
		t.Fatalf("GET /agents = %d with %d agents; unauthenticated requests must create none", st, len(listed))
	}

	c := startMCPClient(t)
	a := c.connect(s, "a", "", nil)
	// What SessionStart hooks add reaches the client as the server's instructions.
	if a.Instructions != "session context from a hook" {
		t.Errorf("instructions = %q, want the SessionStart hook's context", a.Instructions)
	}
	var got agent
	if st := s.DoJSON(t, "GET", "/agents/"+a.AgentID, nil, &got); st != 200 || got.ParentID != nil || got.Depth != 0 {
		t.Fatalf("bound agent %s = %d %+v, want an existing root agent", a.AgentID, st, got)
	}

	var tools struct {
		Tools []struct {
			Name        string         `json:"name"`
			Title       string         `json:"title"`
			InputSchema map[string]any `json:"inputSchema"`
			Annotations map[string]any `json:"annotations"`
		} `json:"tools"`
	}
	c.do(map[string]any{"op": "listTools", "session": "a"}, &tools)
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
		if props, _ := tl.InputSchema["properties"].(map[string]any); tl.Name == "bash" && props["command"] == nil {
			t.Errorf("bash input schema lacks command: %v", tl.InputSchema)
		}
	}
	slices.Sort(names) // the SDK lists tools by name
	if want := []string{"apply_patch", "bash", "edit_file", "job_kill", "job_list", "job_output", "read_file", "write_file", "write_stdin"}; !slices.Equal(names, want) {
		t.Errorf("tools = %v, want %v", names, want)
	}
	// Every tool states every hint, as the client reads them (the server's
	// default policy: unrestricted, network on). Clients such as Codex ask
	// before a tool whose hints are missing; honest hints let them decide.
	wantHints := map[string][4]bool{ // readOnly, destructive, idempotent, openWorld
		"bash":        {false, true, false, true},
		"write_stdin": {false, true, false, true},
		"job_output":  {true, false, true, false},
		"job_list":    {true, false, true, false},
		"job_kill":    {false, true, true, false},
		"read_file":   {true, false, true, false},
		"write_file":  {false, true, true, false},
		"edit_file":   {false, true, false, false},
		"apply_patch": {false, true, false, false},
	}
	for _, tl := range tools.Tools {
		an := tl.Annotations
		var got [4]bool
		for i, k := range []string{"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"} {
			v, ok := an[k].(bool)
			if !ok {
				t.Errorf("%s: annotation %s = %v, want a boolean", tl.Name, k, an[k])
			}
			got[i] = v
		}
		if got != wantHints[tl.Name] || tl.Title == "" || an["title"] != tl.Title {
			t.Errorf("%s: title %q, annotations %v; want a title and hints (readOnly, destructive, idempotent, openWorld) %v",
				tl.Name, tl.Title, an, wantHints[tl.Name])
		}
	}

	// DSH_SESSION_ID is the bound agent.
	if r := c.call("a", "bash", map[string]any{"command": "echo $DSH_SESSION_ID"}); r.Result.IsError || r.text() != a.AgentID {
		t.Errorf("echo $DSH_SESSION_ID = %q (isError %v), want %s", r.text(), r.Result.IsError, a.AgentID)
	}

	// A long command reports its output as it arrives.
	var long mcpCallAnswer
	c.do(map[string]any{"op": "call", "session": "a", "name": "bash", "progress": true,
		"arguments": map[string]any{"command": "for i in 1 2 3 4 5 6; do echo tick $i; sleep 0.25; done"}}, &long)
	want := "tick 1\ntick 2\ntick 3\ntick 4\ntick 5\ntick 6"
	if long.Result == nil || long.Result.IsError || long.text() != want {
		t.Errorf("long call = %+v, want %q", long, want)
	}
	var streamed strings.Builder
	last := 0.0
	for _, p := range long.Progress {
		if p.Progress <= last {
			t.Errorf("progress %v after %v: it must grow", p.Progress, last)
		}
		last = p.Progress
		streamed.WriteString(p.Message)
	}
	if len(long.Progress) < 2 || !strings.HasPrefix(want+"\n", streamed.String()) || !strings.Contains(streamed.String(), "tick 1\n") {
		t.Errorf("progress = %+v, want at least two notifications carrying the output in order", long.Progress)
	}

	// Cancelling the request stops the job and every process in it.
	var cancelled mcpCallAnswer
	c.do(map[string]any{"op": "call", "session": "a", "name": "bash", "progress": true, "cancelOn": "ready",
		"arguments": map[string]any{"command": "sleep 300 & echo child=$!; echo leader=$$; echo ready; wait"}}, &cancelled)
	if !cancelled.Cancelled {
		t.Fatalf("call = %+v, want it cancelled by the client", cancelled)
	}
	var streamedPIDs strings.Builder
	for _, p := range cancelled.Progress {
		streamedPIDs.WriteString(p.Message)
	}
	pids := regexp.MustCompile(`(child|leader)=(\d+)`).FindAllStringSubmatch(streamedPIDs.String(), -1)
	if len(pids) != 2 {
		t.Fatalf("progress %q does not name the two processes", streamedPIDs.String())
	}
	for _, m := range pids {
		pid, _ := strconv.Atoi(m[2])
		t.Cleanup(func() { proctest.KillIfAlive(pid) })
		proctest.WaitGone(t, pid)
	}
	var jobs []job
	if st := s.DoJSON(t, "GET", "/jobs?agentId="+a.AgentID, nil, &jobs); st != 200 || len(jobs) != 3 {
		t.Fatalf("GET /jobs = %d with %d jobs, want the agent's 3", st, len(jobs))
	}
	if j := s.waitJob(t, jobs[2].ID); j.State != "cancelled" {
		t.Errorf("cancelled call's job is %q, want cancelled", j.State)
	}

	// A PreToolUse hook blocks a call: no process starts.
	marker := filepath.Join(t.TempDir(), "marker")
	victim := t.TempDir()
	blocked := c.call("a", "bash", map[string]any{"command": "touch " + marker + " && rm -rf " + victim})
	if !blocked.Result.IsError || !strings.Contains(blocked.text(), "recursive forced removal is not allowed") {
		t.Errorf("blocked call = %q (isError %v), want the hook's reason", blocked.text(), blocked.Result.IsError)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("a blocked command ran (marker: %v)", err)
	}

	// A second session gets its own agent.
	b := c.connect(s, "b", "", nil)
	if b.AgentID == a.AgentID || b.SessionID == a.SessionID {
		t.Fatalf("second session %+v shares the first's %+v", b, a)
	}
	if r := c.call("b", "bash", map[string]any{"command": "echo $DSH_SESSION_ID"}); r.text() != b.AgentID {
		t.Errorf("second session's DSH_SESSION_ID = %q, want %s", r.text(), b.AgentID)
	}

	// One agent's session cannot reach another agent's jobs.
	bg := c.call("a", "bash", map[string]any{"command": "sleep 300", "run_in_background": true})
	id := regexp.MustCompile(`job_\w+`).FindString(bg.text())
	if bg.Result.IsError || id == "" {
		t.Fatalf("background call = %q", bg.text())
	}
	for _, tool := range []string{"job_output", "job_kill"} {
		if r := c.call("b", tool, map[string]any{"jobId": id}); !r.Result.IsError || !strings.Contains(r.text(), "not found") {
			t.Errorf("%s of another agent's job = %q (isError %v), want not found", tool, r.text(), r.Result.IsError)
		}
	}
	if r := c.call("b", "job_list", nil); strings.Contains(r.text(), id) {
		t.Errorf("job_list of b shows a's job: %q", r.text())
	}
	var j job
	if st := s.DoJSON(t, "GET", "/jobs/"+id, nil, &j); st != 200 || j.State != "running" {
		t.Errorf("a's job after b's job_kill = %d %q, want running", st, j.State)
	}
	if r := c.call("a", "job_kill", map[string]any{"jobId": id}); r.Result.IsError {
		t.Errorf("a's own job_kill = %q", r.text())
	}
	if j := s.waitJob(t, id); j.State != "cancelled" {
		t.Errorf("a's job after its job_kill = %q, want cancelled", j.State)
	}

	// An interactive program over MCP: bash with tty yields its job, and
	// write_stdin drives it; another agent's session cannot write to it.
	repl := c.call("a", "bash", map[string]any{"command": "read -p 'name? ' n; echo \"hi $n\"", "tty": true, "yield_time_ms": 2000})
	replID := regexp.MustCompile(`job_\w+`).FindString(repl.text())
	if repl.Result.IsError || replID == "" || !strings.Contains(repl.text(), "name? ") || !strings.Contains(repl.text(), "[still running") {
		t.Fatalf("bash with tty over MCP = %q", repl.text())
	}
	if r := c.call("b", "write_stdin", map[string]any{"session_id": replID, "chars": "mallory\n"}); !r.Result.IsError || !strings.Contains(r.text(), "not found") {
		t.Errorf("write_stdin to another agent's job = %q (isError %v), want not found", r.text(), r.Result.IsError)
	}
	if r := c.call("a", "write_stdin", map[string]any{"session_id": replID, "chars": "ada\n", "yield_time_ms": 5000}); r.Result.IsError || !strings.Contains(r.text(), "hi ada") || strings.Contains(r.text(), "name? ") {
		t.Errorf("write_stdin over MCP = %q (isError %v), want only the new output with hi ada", r.text(), r.Result.IsError)
	}

	// A client may bind its session to an existing agent, by header or query.
	byHeader := c.connect(s, "c", "", map[string]string{mcpAgentHeader: a.AgentID})
	byQuery := c.connect(s, "d", "?agentId="+b.AgentID, nil)
	if byHeader.AgentID != a.AgentID || byQuery.AgentID != b.AgentID {
		t.Errorf("named sessions bound to %s and %s, want %s and %s", byHeader.AgentID, byQuery.AgentID, a.AgentID, b.AgentID)
	}
	if r := c.call("c", "bash", map[string]any{"command": "echo $DSH_SESSION_ID"}); r.text() != a.AgentID {
		t.Errorf("session bound by header runs as %q, want %s", r.text(), a.AgentID)
	}
	if r := c.call("d", "bash", map[string]any{"command": "echo $DSH_SESSION_ID"}); r.text() != b.AgentID {
		t.Errorf("session bound by query runs as %q, want %s", r.text(), b.AgentID)
	}
	var unknown map[string]any
	if raw := c.try(map[string]any{"op": "connect", "session": "e", "url": s.URL + "/mcp?agentId=agt_missing",
		"headers": map[string]string{"Authorization": "Bearer " + s.Token}}); json.Unmarshal(raw, &unknown) != nil || !strings.Contains(fmt.Sprint(unknown["error"]), "404") {
		t.Errorf("binding to an unknown agent = %s, want an HTTP 404", raw)
	}

	// The transcript of a records every call of its sessions, with a result.
	counts := transcriptCounts(t, s, a.AgentID)
	// a: echo, long, cancelled, blocked, background, job_kill, bash with
	// tty, write_stdin; c: echo.
	if counts["tool/call"] != 9 || counts["tool/result"] != 9 || counts["session/resume"] != 1 {
		t.Errorf("a's transcript counts = %v, want 9 calls, 9 results and 1 resume", counts)
	}
	// The cancelled request got no answer: an answer to it is what the
	// client reports ("Received a response for an unknown message ID").
	var reported struct {
		Errors []string `json:"errors"`
	}
	c.do(map[string]any{"op": "errors"}, &reported)
	if len(reported.Errors) != 0 {
		t.Errorf("the client reported %q", reported.Errors)
	}
	for _, sess := range []string{"a", "b", "c"} {
		var closed map[string]any
		c.do(map[string]any{"op": "close", "session": sess}, &closed)
	}

	// The server stops cleanly, and soon, with a session still open (d,
	// whose client holds its event stream open).
	start := time.Now()
	s.stop(t)
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("stopping with an open MCP session took %s", d)
	}
}

// mcpAgentHeader names the agent an MCP session is bound to.
const mcpAgentHeader = "Dsh-Agent-Id"

// transcriptCounts counts the agent's transcript events by type.
func transcriptCounts(t *testing.T, s *testServer, agentID string) map[string]int {
	t.Helper()
	resp := s.Do(t, "GET", "/agents/"+agentID+"/transcript", nil)
	defer resp.Body.Close()
	counts := map[string]int{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e struct{ Type string }
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("transcript line %q: %v", sc.Bytes(), err)
		}
		counts[e.Type]++
	}
	return counts
}

// TestMCPRoots: with mcp.allowedRoots configured, the root the official
// TypeScript client offers (as Claude Code offers its project directory)
// becomes the new agent's cwd; the session's instructions say where
// commands run.
func TestMCPRoots(t *testing.T) {
	t.Parallel()
	allowed := t.TempDir()
	project := filepath.Join(allowed, "project")
	if err := os.Mkdir(project, 0o755); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, withConfig("mcp:\n  allowedRoots: ["+strconv.Quote(allowed)+"]\n"))
	c := startMCPClient(t)
	var sess mcpSession
	c.do(map[string]any{"op": "connect", "session": "r", "url": s.URL + "/mcp",
		"headers": map[string]string{"Authorization": "Bearer " + s.Token}, "roots": []string{"file://" + project}}, &sess)
	if sess.SessionID == "" || sess.AgentID != "" || !strings.Contains(sess.Instructions, allowed) {
		t.Fatalf("session = %+v, want no agent before the first call and instructions naming %s", sess, allowed)
	}
	r := c.call("r", "bash", map[string]any{"command": `pwd; echo "$DSH_SESSION_ID"`})
	out := strings.Fields(r.text())
	if r.Result.IsError || len(out) != 2 || out[0] != project {
		t.Fatalf("pwd = %q, want %s and the agent id", r.text(), project)
	}
	var got struct {
		Cwd string `json:"cwd"`
	}
	if st := s.DoJSON(t, "GET", "/agents/"+out[1], nil, &got); st != 200 || got.Cwd != project {
		t.Errorf("GET /agents/%s = %d %+v, want cwd %s", out[1], st, got, project)
	}
}
