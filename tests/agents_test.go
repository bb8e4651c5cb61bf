package tests

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/dshd/dshd/internal/testenv"
)

type agent struct {
	ID       string  `json:"id"`
	ParentID *string `json:"parentId"`
	RootID   string  `json:"rootId"`
	Origin   string  `json:"origin"`
	Depth    int     `json:"depth"`
}

type toolResult struct {
	CallID   string `json:"callId"`
	IsError  bool   `json:"isError"`
	Text     string `json:"text"`
	JobID    string `json:"jobId"`
	ExitCode *int   `json:"exitCode"`
}

// callTool runs one model tool call and fails the test unless it answers 200.
func (s *testServer) callTool(t *testing.T, agentID, name string, args map[string]any) toolResult {
	t.Helper()
	var r toolResult
	if st := s.DoJSON(t, "POST", "/agents/"+agentID+"/tools/"+name, map[string]any{"arguments": args}, &r); st != 200 {
		t.Fatalf("tool %s for %s = %d", name, agentID, st)
	}
	return r
}

// scriptedModel is the test's model: it picks the bash tool from the
// OpenAI-format definitions and asks it to print the managed facts.
func scriptedModel(t *testing.T, s *testServer) string {
	t.Helper()
	var defs []struct {
		Type     string `json:"type"`
		Function struct {
			Name       string         `json:"name"`
			Parameters map[string]any `json:"parameters"`
		} `json:"function"`
	}
	if st := s.DoJSON(t, "GET", "/tools?format=openai", nil, &defs); st != 200 {
		t.Fatalf("GET /tools = %d", st)
	}
	for _, d := range defs {
		if d.Type == "function" && d.Function.Name == "bash" {
			return `printf 'home=%s\nshell=%s\nsession=%s\nstale=%s\n' "$DSH_HOME" "$DSH_SHELL" "$DSH_SESSION_ID" "${DSH_STALE-unset}"`
		}
	}
	t.Fatalf("no bash function among the tools: %+v", defs)
	return ""
}

// facts runs the model's command as agentID and parses what it printed.
func facts(t *testing.T, s *testServer, agentID, command string) map[string]string {
	t.Helper()
	r := s.callTool(t, agentID, "bash", map[string]any{"command": command, "description": "print the managed facts"})
	if r.IsError {
		t.Fatalf("bash tool failed: %s", r.Text)
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(r.Text), "\n") {
		k, v, _ := strings.Cut(line, "=")
		out[k] = v
	}
	return out
}

// TestAgentFullLoop drives the real binary through a scripted model's first
// turn, a restart, a resume, a fork and a spawn: every call sees the current
// managed facts, never the stale ones of the server's environment.
func TestAgentFullLoop(t *testing.T) {
	t.Parallel()
	home := filepath.Join(t.TempDir(), "home")
	s := startServer(t, withAmbientHome(home), withEnv("DSH_STALE=stale"))

	var root agent
	if st := s.DoJSON(t, "POST", "/agents", map[string]any{}, &root); st != 201 {
		t.Fatalf("create agent = %d", st)
	}
	// The header is on disk before any call.
	f, err := os.Open(filepath.Join(home, "sessions", root.ID+".jsonl"))
	if err != nil {
		t.Fatalf("header not on disk: %v", err)
	}
	sc := bufio.NewScanner(f)
	sc.Scan()
	f.Close()
	var header struct {
		Type, ID, Origin string
		Version          int
	}
	if err := json.Unmarshal(sc.Bytes(), &header); err != nil || header.Type != "session" || header.ID != root.ID || header.Version != 1 || header.Origin != "root" {
		t.Fatalf("header %s (%v), want a version 1 session header of %s", sc.Bytes(), err, root.ID)
	}

	command := scriptedModel(t, s)
	want := func(id string) map[string]string {
		return map[string]string{"home": home, "shell": "1", "session": id, "stale": "unset"}
	}
	check := func(name string, got, want map[string]string) {
		t.Helper()
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %s = %q, want %q", name, k, got[k], v)
			}
		}
	}
	check("first turn", facts(t, s, root.ID, command), want(root.ID))

	// Restart on the same home; the agent is found and resumed with its id.
	s.stop(t)
	s = startServer(t, withAmbientHome(home), withEnv("DSH_STALE=stale-again"))
	var resumed agent
	if st := s.DoJSON(t, "POST", "/agents/"+root.ID+"/resume", nil, &resumed); st != 200 || resumed.ID != root.ID {
		t.Fatalf("resume = %d %+v, want 200 and the same id", st, resumed)
	}
	check("after resume", facts(t, s, root.ID, command), want(root.ID))

	var fork, child agent
	if st := s.DoJSON(t, "POST", "/agents/"+root.ID+"/fork", map[string]any{}, &fork); st != 201 || fork.ID == root.ID || deref(fork.ParentID) != root.ID || fork.Origin != "fork" {
		t.Fatalf("fork = %d %+v", st, fork)
	}
	if st := s.DoJSON(t, "POST", "/agents/"+root.ID+"/spawn", map[string]any{}, &child); st != 201 || child.ID == root.ID || deref(child.ParentID) != root.ID || child.Depth != root.Depth+1 {
		t.Fatalf("spawn = %d %+v", st, child)
	}
	check("fork", facts(t, s, fork.ID, command), want(fork.ID))
	check("spawn", facts(t, s, child.ID, command), want(child.ID))

	// The transcript records the calls and never a managed value.
	resp := s.Do(t, "GET", "/agents/"+root.ID+"/transcript", nil)
	var transcript strings.Builder
	sc = bufio.NewScanner(resp.Body)
	for sc.Scan() {
		transcript.WriteString(sc.Text() + "\n")
	}
	resp.Body.Close()
	for _, want := range []string{`"type":"tool/call"`, `"type":"tool/result"`, `"type":"session/resume"`} {
		if !strings.Contains(transcript.String(), want) {
			t.Errorf("transcript lacks %s", want)
		}
	}
	// The command's own output is the model's to see; the managed snapshot
	// the job received is not written.
	for _, leak := range []string{"managedEnv", `"DSH_SHELL":"1"`, "DSH_SHELL=1", `"DSH_HOME":`} {
		if strings.Contains(transcript.String(), leak) {
			t.Errorf("transcript holds managed values (%s):\n%s", leak, transcript.String())
		}
	}
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// TestParentAndChildConcurrent: dozens of overlapping foreground and
// background calls by a parent and its child each see only their own id.
func TestParentAndChildConcurrent(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	var parent, child agent
	s.DoJSON(t, "POST", "/agents", map[string]any{}, &parent)
	if st := s.DoJSON(t, "POST", "/agents/"+parent.ID+"/spawn", map[string]any{}, &child); st != 201 {
		t.Fatalf("spawn = %d", st)
	}
	var wg sync.WaitGroup
	for i := range 32 {
		id := []string{parent.ID, child.ID}[i%2]
		background := i%4 >= 2
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := s.callTool(t, id, "bash", map[string]any{"command": `sleep 0.1; printf %s "$DSH_SESSION_ID"`, "run_in_background": background})
			if r.IsError {
				t.Errorf("call failed: %s", r.Text)
				return
			}
			text := r.Text
			if background {
				j := s.waitJob(t, r.JobID)
				text = j.Stdout.Text
				if deref(j.AgentID) != id {
					t.Errorf("background job %s belongs to %q, want %s", j.ID, deref(j.AgentID), id)
				}
			}
			if text != id {
				t.Errorf("agent %s saw DSH_SESSION_ID %q", id, text)
			}
		}()
	}
	wg.Wait()
}

// TestModelEnvAndStdinIgnored: a model's env and stdin never reach the
// child, in the foreground or the background, and are recorded as ignored.
func TestModelEnvAndStdinIgnored(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	var a agent
	s.DoJSON(t, "POST", "/agents", map[string]any{}, &a)
	for _, background := range []bool{false, true} {
		r := s.callTool(t, a.ID, "bash", map[string]any{
			"command":           `printf 'foo=%s;' "${FOO-unset}"; printf 'session=%s;' "${DSH_SESSION_ID}"; cat; echo end`,
			"env":               map[string]string{"FOO": "from-model", "DSH_SESSION_ID": "forged"},
			"stdin":             "from-model-stdin",
			"colour":            "blue",
			"run_in_background": background,
		})
		text := r.Text
		if background {
			text = s.waitJob(t, r.JobID).Stdout.Text
		}
		if want := "foo=unset;session=" + a.ID + ";end"; strings.TrimSpace(text) != want {
			t.Errorf("background=%v: child printed %q, want %q", background, text, want)
		}
	}
	resp := s.Do(t, "GET", "/agents/"+a.ID+"/transcript", nil)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	calls := 0
	for sc.Scan() {
		var e struct {
			Type string
			Data struct {
				Ignored []string `json:"ignored"`
			}
		}
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.Type == "tool/call" {
			calls++
			if got := strings.Join(e.Data.Ignored, ","); got != "colour,env,stdin" {
				t.Errorf("tool/call ignored = %q, want colour,env,stdin", got)
			}
		}
	}
	if calls != 2 {
		t.Errorf("transcript has %d tool/call events, want 2", calls)
	}
}

// TestPythonHarnessExample runs examples/python against the real server.
func TestPythonHarnessExample(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("python3"); err != nil {
		testenv.Need(t, "python3 is not installed (make deps installs it)")
	}
	s := startServer(t)
	cmd := exec.Command("python3", "../examples/python/harness.py")
	cmd.Env = append(cleanEnv(), "DSHD_URL="+s.URL, "DSHD_TOKEN="+s.Token)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("harness: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var summary struct {
		AgentID string       `json:"agentId"`
		Results []toolResult `json:"results"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &summary); err != nil {
		t.Fatalf("summary line %q: %v", lines[len(lines)-1], err)
	}
	// The scripted model's first call has a timeout of "30s": an error
	// result it reads and corrects, not the end of the run.
	if len(summary.Results) != 2 || summary.AgentID == "" ||
		!summary.Results[0].IsError || !strings.Contains(summary.Results[0].Text, "timeout must be a non-negative integer") ||
		summary.Results[1].IsError || strings.TrimSpace(summary.Results[1].Text) != summary.AgentID {
		t.Errorf("summary = %+v, want an error result about the timeout, then the agent's own id", summary)
	}
}
