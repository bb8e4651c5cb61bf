package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/apitest"
)

// interactiveJob is the part of a terminal job these tests read.
type interactiveJob struct {
	job
	Terminal *struct {
		Cols, Rows int
		Term       string
	} `json:"terminal"`
	Input *struct {
		Open   bool    `json:"open"`
		Bytes  int64   `json:"bytes"`
		Writes int64   `json:"writes"`
		Closed bool    `json:"closed"`
		Text   *string `json:"text"`
	} `json:"input"`
}

// startInteractive starts a background job with the given extra fields.
func (s *testServer) startInteractive(t *testing.T, body map[string]any) interactiveJob {
	t.Helper()
	body["background"] = true
	var j interactiveJob
	if st := s.DoJSON(t, "POST", "/exec", body, &j); st != 202 {
		t.Fatalf("POST /exec %v = %d", body, st)
	}
	return j
}

// waitStdout polls a job's raw stdout until it contains want, after byte
// offset from, and returns the whole stdout.
func (s *testServer) waitStdout(t *testing.T, id string, from int, want string) []byte {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		out := s.rawOutput(t, id)
		if len(out) >= from && bytes.Contains(out[from:], []byte(want)) {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s: stdout never showed %q after byte %d; got %q", id, want, from, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// control posts to one of a job's control routes and returns the job.
func (s *testServer) control(t *testing.T, id, route string, body map[string]any) interactiveJob {
	t.Helper()
	var j interactiveJob
	if st := s.DoJSON(t, "POST", "/jobs/"+id+"/"+route, body, &j); st != 200 {
		t.Fatalf("POST /jobs/%s/%s %v = %d", id, route, body, st)
	}
	return j
}

// TestInteractiveTerminalJob is the harness's side of interactive jobs,
// on a real server with real bash: a `read -p` prompt answered through
// the stdin route, a resize that `tput cols` sees, and SIGINT caught by a
// trap. The SSE stream carries the terminal's bytes exactly as the raw
// route does. It runs unconfined and again in a workspace-write sandbox
// with the network off.
func TestInteractiveTerminalJob(t *testing.T) {
	t.Parallel()
	t.Run("unrestricted", func(t *testing.T) { testInteractiveTerminalJob(t, startServer(t)) })
	t.Run("sandboxed", func(t *testing.T) {
		s := startServer(t, withConfig("sandbox:\n  policy: workspace-write\n  network: \"off\"\n"))
		needSandbox(t, s)
		testInteractiveTerminalJob(t, s)
	})
}

func testInteractiveTerminalJob(t *testing.T, s *testServer) {
	j := s.startInteractive(t, map[string]any{
		"tty": true, "cols": 100, "rows": 30,
		"command": `trap 'echo TRAPPED; exit 5' INT
read -p 'Continue? [y/N] ' answer
echo "answer=$answer"
tput cols
read -r _
tput cols
echo ready
while :; do sleep 0.05; done`,
	})
	if j.Terminal == nil || j.Terminal.Cols != 100 || j.Terminal.Rows != 30 || j.Terminal.Term != "xterm-256color" {
		t.Fatalf("terminal = %+v", j.Terminal)
	}
	// Follow the job over SSE from the start, to compare at the end.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp := s.openEvents(t, ctx, j.ID, "")
	defer resp.Body.Close()
	streamed := make(chan *decodedStream, 1)
	go func() {
		d, _ := readStream(t, resp.Body, [2]int64{}, -1)
		streamed <- d
	}()

	s.waitStdout(t, j.ID, 0, "Continue? [y/N] ")
	got := s.control(t, j.ID, "stdin", map[string]any{"data": "y\r"})
	if got.Input == nil || got.Input.Bytes != 2 || got.Input.Writes != 1 || !got.Input.Open || got.Input.Text != nil {
		t.Errorf("input after one write = %+v; want 2 bytes, 1 write, open, no text (not configured)", got.Input)
	}
	out := s.waitStdout(t, j.ID, 0, "answer=y\r\n100\r\n")

	got = s.control(t, j.ID, "resize", map[string]any{"cols": 132, "rows": 43})
	if got.Terminal == nil || got.Terminal.Cols != 132 || got.Terminal.Rows != 43 {
		t.Errorf("terminal after resize = %+v", got.Terminal)
	}
	s.control(t, j.ID, "stdin", map[string]any{"base64": "DQ=="}) // "\r" as bytes
	s.waitStdout(t, j.ID, len(out), "132\r\nready\r\n")

	got = s.control(t, j.ID, "signal", map[string]any{"signal": "SIGINT"})
	final := s.waitJob(t, j.ID)
	if final.ExitCode == nil || *final.ExitCode != 5 {
		t.Fatalf("after SIGINT: exit %v signal %v, want the trap's exit 5; stdout %q", final.ExitCode, final.Signal, final.Stdout.Text)
	}
	raw := s.rawOutput(t, j.ID)
	if !bytes.HasSuffix(raw, []byte("TRAPPED\r\n")) {
		t.Errorf("stdout does not end with the trap's line: %q", raw)
	}
	if final.Stderr.TotalBytes != 0 {
		t.Errorf("stderr has %d bytes; a terminal job has one stream", final.Stderr.TotalBytes)
	}
	select {
	case d := <-streamed:
		if d == nil || d.exit == nil {
			t.Fatal("the SSE stream ended without an exit event")
		}
		if !bytes.Equal(d.out.Bytes(), raw) || d.err.Len() != 0 {
			t.Errorf("SSE carried %q (stderr %q), raw route %q", d.out.Bytes(), d.err.Bytes(), raw)
		}
	case <-ctx.Done():
		t.Fatal("SSE stream did not end")
	}

	// The job has ended: every control route says so, and changes nothing.
	for route, body := range map[string]map[string]any{
		"stdin":  {"data": "late"},
		"resize": {"cols": 80, "rows": 24},
		"signal": {"signal": "SIGINT"},
	} {
		var p problem
		if st := s.DoJSON(t, "POST", "/jobs/"+j.ID+"/"+route, body, &p); st != 409 || p.Code != "job_not_running" {
			t.Errorf("%s after the end = %d %q, want 409 job_not_running", route, st, p.Code)
		}
	}
	var after interactiveJob
	s.DoJSON(t, "GET", "/jobs/"+j.ID, nil, &after)
	if after.Input == nil || after.Input.Bytes != 3 || after.Input.Writes != 2 || after.Input.Open {
		t.Errorf("input record at the end = %+v; want 3 bytes in 2 writes, not open", after.Input)
	}
}

// TestInteractivePipeStdin: a job without a terminal gets a held-open
// stdin with openStdin; what is written reaches it, closing gives it
// end-of-file, and with jobs.recordInput the bytes are kept on the job.
func TestInteractivePipeStdin(t *testing.T) {
	t.Parallel()
	s := startServer(t, withConfig("jobs:\n  recordInput: true\n"))
	j := s.startInteractive(t, map[string]any{"command": `while read -r l; do echo "got $l"; done; echo eof`, "openStdin": true, "stdin": "first\n"})
	s.waitStdout(t, j.ID, 0, "got first\n")
	// With Prefer: return=minimal the write answers 204 and no body.
	resp := s.DoWith(t, "POST", "/jobs/"+j.ID+"/stdin", map[string]any{"data": "second\n"},
		map[string]string{"Authorization": "Bearer " + s.Token, "Prefer": "return=minimal"})
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 204 || len(body) != 0 || resp.Header.Get("Preference-Applied") != "return=minimal" {
		t.Fatalf("minimal write = %d %q (%v), Preference-Applied %q; want 204, no body, return=minimal",
			resp.StatusCode, body, err, resp.Header.Get("Preference-Applied"))
	}
	got := s.control(t, j.ID, "stdin", map[string]any{"data": "third\n", "close": true})
	if got.Input == nil || !got.Input.Closed || got.Input.Text == nil || *got.Input.Text != "second\nthird\n" {
		t.Errorf("input = %+v; want closed, with the recorded text", got.Input)
	}
	final := s.waitJob(t, j.ID)
	if want := "got first\ngot second\ngot third\neof\n"; final.Stdout.Text != want {
		t.Errorf("stdout %q, want %q", final.Stdout.Text, want)
	}

	// A job started without openStdin or tty has no input to write to.
	plain := s.startInteractive(t, map[string]any{"command": "sleep 10"})
	defer s.cancelJob(t, plain.ID)
	var p problem
	if st := s.DoJSON(t, "POST", "/jobs/"+plain.ID+"/stdin", map[string]any{"data": "x"}, &p); st != 409 || p.Code != "input_not_open" {
		t.Errorf("write to a plain job = %d %q, want 409 input_not_open", st, p.Code)
	}
	if st := s.DoJSON(t, "POST", "/jobs/"+plain.ID+"/resize", map[string]any{"cols": 80, "rows": 24}, &p); st != 409 || p.Code != "not_a_terminal" {
		t.Errorf("resize a plain job = %d %q, want 409 not_a_terminal", st, p.Code)
	}
	if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": "true", "cols": 80}, &p); st != 400 || p.Code != "invalid_input" {
		t.Errorf("cols without tty = %d %q, want 400 invalid_input", st, p.Code)
	}
	if !strings.Contains(p.Detail, "tty") {
		t.Errorf("detail %q does not name tty", p.Detail)
	}
}

// TestModelDrivesPythonREPL is the model's side: a scripted model starts
// `python3 -i` through bash with tty, defines a variable in one
// write_stdin call, reads it back in the next (which returns only what is
// new), and exits; the transcript shows every step. Another agent cannot
// write to the job, and a PreToolUse hook matching write_stdin sees (and
// here blocks) what the model types.
func TestModelDrivesPythonREPL(t *testing.T) {
	t.Parallel()
	home := filepath.Join(t.TempDir(), "home")
	hookLog := filepath.Join(t.TempDir(), "hook.jsonl")
	apitest.WriteJSON(t, filepath.Join(home, "hooks", "codex.json"), map[string]any{"hooks": map[string]any{
		"PreToolUse": []any{map[string]any{"matcher": "^write_stdin$", "hooks": []any{
			map[string]any{"type": "command", "command": `tee -a ` + hookLog + ` | grep -q forbidden && { echo 'no typing forbidden things' >&2; exit 2; }; exit 0`},
		}}},
	}})
	s := startServer(t, withHome(home))
	var a, other agent
	s.DoJSON(t, "POST", "/agents", map[string]any{}, &a)
	s.DoJSON(t, "POST", "/agents", map[string]any{}, &other)

	start := s.callTool(t, a.ID, "bash", map[string]any{"command": "python3 -q -i", "tty": true, "yield_time_ms": 3000})
	if start.IsError || start.JobID == "" || !strings.Contains(start.Text, ">>> ") || !strings.Contains(start.Text, "[still running: job "+start.JobID+"]") {
		t.Fatalf("bash with tty = %+v; want the prompt and the running job's id", start)
	}
	id := start.JobID

	def := s.callTool(t, a.ID, "write_stdin", map[string]any{"session_id": id, "chars": "x = 6 * 7\n", "yield_time_ms": 1000})
	if def.IsError || !strings.Contains(def.Text, "x = 6 * 7") || strings.Contains(def.Text, "42") {
		t.Errorf("define x: %+v", def)
	}
	read := s.callTool(t, a.ID, "write_stdin", map[string]any{"session_id": id, "chars": "print(x)\n", "yield_time_ms": 1000})
	if read.IsError || !strings.Contains(read.Text, "42") || strings.Contains(read.Text, "x = 6 * 7") {
		t.Errorf("read x back: %+v; want 42 and only the new output", read)
	}

	// Another agent's call cannot reach the job; the hook blocks a write.
	if r := s.callTool(t, other.ID, "write_stdin", map[string]any{"session_id": id, "chars": "x = 0\n"}); !r.IsError || !strings.Contains(r.Text, "not found") {
		t.Errorf("another agent's write_stdin = %+v, want not found", r)
	}
	if r := s.callTool(t, a.ID, "write_stdin", map[string]any{"session_id": id, "chars": "forbidden = 1\n"}); !r.IsError || !strings.Contains(r.Text, "no typing forbidden things") {
		t.Errorf("blocked write_stdin = %+v, want the hook's reason", r)
	}
	check := s.callTool(t, a.ID, "write_stdin", map[string]any{"session_id": id, "chars": "print(x, 'forb' + 'idden' in dir())\n", "yield_time_ms": 1000})
	if !strings.Contains(check.Text, "42 False") {
		t.Errorf("after the refused writes: %+v; want x still 42 and nothing defined", check)
	}

	long := s.callTool(t, a.ID, "write_stdin", map[string]any{"session_id": id, "chars": "print('a' * 5000 + 'END')\n", "yield_time_ms": 1000, "max_output_tokens": 100})
	if !strings.Contains(long.Text, "bytes elided]") || !strings.Contains(long.Text, "aEND") || !strings.Contains(long.Text, "[stdout truncated: bytes ") || !strings.Contains(long.Text, `read them with job_output {"jobId":"`+id+`","offset":`) || len(long.Text) > 1000 {
		t.Errorf("5,000 characters with max_output_tokens 100 = %d bytes: %q", len(long.Text), long.Text)
	}

	exit := s.callTool(t, a.ID, "write_stdin", map[string]any{"session_id": id, "chars": "exit()\n", "yield_time_ms": 10000})
	if exit.IsError || strings.Contains(exit.Text, "[still running") || exit.ExitCode == nil || *exit.ExitCode != 0 {
		t.Errorf("exit: %+v; want the job ended with exit 0", exit)
	}
	if r := s.callTool(t, a.ID, "write_stdin", map[string]any{"session_id": id, "chars": "1\n"}); !r.IsError || !strings.Contains(r.Text, "has ended") {
		t.Errorf("write after the end = %+v", r)
	}

	// The transcript shows each step: the calls as the model sent them and
	// what it was answered.
	var steps []string
	for _, ev := range s.transcriptEvents(t, a.ID) {
		data, _ := ev["data"].(map[string]any)
		switch ev["type"] {
		case "tool/call":
			args, _ := json.Marshal(data["arguments"])
			steps = append(steps, fmt.Sprintf("call %s %s", data["name"], args))
		case "tool/result":
			steps = append(steps, fmt.Sprintf("result %v", data["text"]))
		}
	}
	joined := strings.Join(steps, "\n")
	for _, want := range []string{`call bash {"command":"python3 -q -i"`, `"chars":"x = 6 * 7\n"`, `"chars":"print(x)\n"`, "result ", "42", `"chars":"exit()\n"`, "has ended"} {
		if !strings.Contains(joined, want) {
			t.Errorf("transcript lacks %q:\n%s", want, joined)
		}
	}
	if n := strings.Count(joined, "call write_stdin"); n != 7 {
		t.Errorf("transcript has %d write_stdin calls, want 7:\n%s", n, joined)
	}
	hooked, _ := os.ReadFile(hookLog)
	if !strings.Contains(string(hooked), `"tool_name":"write_stdin"`) || !strings.Contains(string(hooked), `"session_id"`) {
		t.Errorf("the hook saw %s", hooked)
	}
}
