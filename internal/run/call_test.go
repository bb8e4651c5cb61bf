package run

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dshd/dshd/internal/agents"
	"github.com/dshd/dshd/internal/exec"
	"github.com/dshd/dshd/internal/hooks"
	"github.com/dshd/dshd/internal/shellenv"
	"github.com/dshd/dshd/internal/tools"
)

func intp(n int) *int { return &n }

// fakeHooks is a behaving hook runner: it records every input and answers
// with decide (no hooks when nil).
type fakeHooks struct {
	mu     sync.Mutex
	inputs []hooks.Input
	decide func(hooks.Input) hooks.Outcome
}

func (f *fakeHooks) Run(_ context.Context, in hooks.Input) (hooks.Outcome, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inputs = append(f.inputs, in)
	if f.decide == nil {
		return hooks.Outcome{}, nil
	}
	return f.decide(in), nil
}

func (f *fakeHooks) seen() []hooks.Input {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]hooks.Input(nil), f.inputs...)
}

// countingEnv counts Collect calls on a real registry.
type countingEnv struct {
	envCollector
	n atomic.Int64
}

func (c *countingEnv) Collect(ctx context.Context, x shellenv.Execution) (shellenv.Overlay, error) {
	c.n.Add(1)
	return c.envCollector.Collect(ctx, x)
}

// world is a Service over the real registry, executor and agent store.
type world struct {
	svc    *Service
	home   string
	reg    *shellenv.Registry
	env    *countingEnv
	jobs   *exec.Executor
	agents *agents.Store
	hooks  *fakeHooks
}

func newWorld(tb testing.TB) *world { return newWorldWith(tb, nil) }

// newWorldWith is newWorld with the executor options changed by adjust.
func newWorldWith(tb testing.TB, adjust func(*exec.Options)) *world {
	tb.Helper()
	ctx := context.Background()
	home := tb.TempDir()
	reg, err := shellenv.New(shellenv.Options{Home: home, StatePath: filepath.Join(home, "contributors.json")})
	if err != nil {
		tb.Fatal(err)
	}
	opts := exec.Options{
		Home:                  home,
		Environ:               append(os.Environ(), "DSH_SESSION_ID=ambient-leak", "DSH_AMBIENT=leak"),
		DefaultCwd:            tb.TempDir(),
		DefaultTimeout:        30 * time.Second,
		MaxTimeout:            time.Minute,
		Grace:                 200 * time.Millisecond,
		MaxBackgroundPerAgent: 64,
	}
	if adjust != nil {
		adjust(&opts)
	}
	jobs, err := exec.New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	store, err := agents.Open(ctx, agents.Options{Dir: filepath.Join(home, "sessions"), DefaultCwd: tb.TempDir()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := jobs.Close(ctx); err != nil {
			tb.Errorf("close executor: %v", err)
		}
		if err := store.Close(); err != nil {
			tb.Errorf("close store: %v", err)
		}
	})
	w := &world{home: home, reg: reg, env: &countingEnv{envCollector: reg}, jobs: jobs, agents: store, hooks: &fakeHooks{}}
	w.svc = New(Options{Env: w.env, Jobs: jobs, Agents: store, Hooks: w.hooks, Home: home})
	return w
}

func (w *world) agent(tb testing.TB) agents.Agent {
	tb.Helper()
	a, err := w.agents.Create(context.Background(), tb.TempDir(), agents.Bounds{})
	if err != nil {
		tb.Fatal(err)
	}
	return a
}

// call runs one tool call with arguments given as a Go value and fails the
// test on error.
func (w *world) call(tb testing.TB, agentID, name string, args any) CallResult {
	tb.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := w.svc.Call(ctx, agentID, name, "", raw)
	if err != nil {
		tb.Fatalf("Call(%s, %s): %v", name, raw, err)
	}
	return res
}

// events returns the agent's transcript events of the given types, in order.
func (w *world) events(tb testing.TB, agentID string, types ...string) []agents.Event {
	tb.Helper()
	all, err := w.agents.Events(context.Background(), agentID)
	if err != nil {
		tb.Fatal(err)
	}
	var out []agents.Event
	for _, e := range all {
		for _, t := range types {
			if e.Type == t {
				out = append(out, e)
			}
		}
	}
	return out
}

func decode[T any](tb testing.TB, raw json.RawMessage) T {
	tb.Helper()
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		tb.Fatalf("decode %s: %v", raw, err)
	}
	return v
}

func TestCallBashSeesOwnSessionID(t *testing.T) {
	w := newWorld(t)
	a := w.agent(t)

	res := w.call(t, a.ID, tools.ToolBash, map[string]any{"command": `echo "$DSH_SESSION_ID"; echo "$DSH_HOME"; echo "${DSH_AMBIENT-absent}"`})
	want := a.ID + "\n" + w.home + "\nabsent"
	if res.Text != want || res.IsError || res.ExitCode == nil || *res.ExitCode != 0 {
		t.Fatalf("result = %+v, want text %q, exit 0", res, want)
	}
	if !strings.HasPrefix(res.CallID, "call_") || res.JobID == "" {
		t.Errorf("callID %q jobID %q: want a generated call_ id and a job id", res.CallID, res.JobID)
	}
	if snap, err := w.jobs.Job(res.JobID); err != nil || snap.Snapshot().AgentID != a.ID {
		t.Errorf("job %s: err %v, want it owned by %s", res.JobID, err, a.ID)
	}
}

func TestCallIgnoresModelEnvAndStdin(t *testing.T) {
	w := newWorld(t)
	a := w.agent(t)
	args := map[string]any{
		"command": `printf '%s|%s|' "${FOO-unset}" "$DSH_SESSION_ID"; cat; echo end`,
		"env":     map[string]string{"FOO": "x", "DSH_SESSION_ID": "forged"},
		"stdin":   "y",
		"timeout": 10000,
	}
	start := time.Now()
	res := w.call(t, a.ID, tools.ToolBash, args)
	if want := "unset|" + a.ID + "|end"; res.Text != want {
		t.Errorf("text = %q, want %q", res.Text, want)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("cat took %v: stdin is not empty", d)
	}

	calls := w.events(t, a.ID, agents.EventToolCall)
	if len(calls) != 1 {
		t.Fatalf("%d tool/call events, want 1", len(calls))
	}
	got := decode[struct {
		CallID    string         `json:"callId"`
		Name      string         `json:"name"`
		Arguments map[string]any `json:"arguments"`
		Ignored   []string       `json:"ignored"`
	}](t, calls[0].Data)
	if diff := cmp.Diff([]string{"env", "stdin"}, got.Ignored); diff != "" {
		t.Errorf("ignored (-want +got):\n%s", diff)
	}
	if got.CallID != res.CallID || got.Name != tools.ToolBash || got.Arguments["stdin"] != "y" {
		t.Errorf("tool/call = %+v, want the call as sent", got)
	}
}

func TestCallTranscript(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	const secret = "fact-value-7f3a9c"
	if _, err := w.reg.Register(ctx, shellenv.Spec{
		Name:     "test-facts",
		Keys:     []shellenv.KeySpec{{Key: "DSH_TEST_FACT", Description: "a test fact"}},
		Resolver: shellenv.ResolverSpec{Kind: shellenv.KindStatic, Values: map[string]string{"DSH_TEST_FACT": secret}},
	}); err != nil {
		t.Fatal(err)
	}
	a := w.agent(t)

	res := w.call(t, a.ID, tools.ToolBash, map[string]any{"command": `[ "${DSH_TEST_FACT#fact-value-}" != "$DSH_TEST_FACT" ] && echo ok; exit 3`, "description": "check"})
	if res.Text != "ok\n[exit code: 3]" {
		t.Fatalf("text = %q", res.Text)
	}
	if snap, _ := w.jobs.Job(res.JobID); !strings.Contains(fmt.Sprint(snap.Snapshot().Managed.All()), secret) {
		t.Errorf("job snapshot lacks the managed fact: the overlay did not reach the job")
	}

	evs := w.events(t, a.ID, agents.EventToolCall, agents.EventToolResult)
	var types []string
	for _, e := range evs {
		types = append(types, e.Type)
	}
	if diff := cmp.Diff([]string{agents.EventToolCall, agents.EventToolResult}, types); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
	got := decode[map[string]any](t, evs[1].Data)
	want := map[string]any{"callId": res.CallID, "isError": false, "text": "ok\n[exit code: 3]", "jobId": res.JobID, "exitCode": 3.0, "sandbox": map[string]any{"policy": "unrestricted", "network": "on"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tool/result (-want +got):\n%s", diff)
	}

	transcript, err := w.agents.Transcript(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, leak := range []string{secret, w.home, "DSH_HOME", "DSH_SHELL", "managed"} {
		if bytes.Contains(transcript, []byte(leak)) {
			t.Errorf("transcript contains %q:\n%s", leak, transcript)
		}
	}
}

func TestCallErrors(t *testing.T) {
	w := newWorld(t)
	a := w.agent(t)
	tests := []struct {
		name    string
		agentID string
		tool    string
		args    string
		want    error
	}{
		{"unknown agent", "agt_nope", tools.ToolBash, `{"command":"true"}`, agents.ErrNotFound},
		{"unknown tool", a.ID, "python", `{"code":"1"}`, tools.ErrUnknownTool},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := w.svc.Call(context.Background(), tt.agentID, tt.tool, "c1", json.RawMessage(tt.args))
			if !errors.Is(err, tt.want) {
				t.Errorf("Call error = %v, want %v", err, tt.want)
			}
		})
	}
	if evs := w.events(t, a.ID, agents.EventToolCall, agents.EventToolResult); len(evs) != 0 {
		t.Errorf("rejected calls were recorded: %v", evs)
	}
	if n := w.env.n.Load(); n != 0 {
		t.Errorf("rejected calls collected the environment %d times", n)
	}
}

// TestCallArgumentErrorsAreResults: arguments a model got wrong are an
// error result that says what is wrong, recorded as tool/call and
// tool/result like any call, and nothing runs.
func TestCallArgumentErrorsAreResults(t *testing.T) {
	w := newWorld(t)
	a := w.agent(t)
	tests := []struct {
		name, tool, args string
		recorded         string // the tool/call event's arguments
		want             []string
	}{
		{"missing command", tools.ToolBash, `{"env":{"A":"b"}}`, `{"env":{"A":"b"}}`, []string{"command is required"}},
		{"empty command", tools.ToolBash, `{"command":""}`, `{"command":""}`, []string{"command must not be empty"}},
		{"timeout as a duration", tools.ToolBash, `{"command":"true","timeout":"30s"}`, `{"command":"true","timeout":"30s"}`, []string{"timeout must be a non-negative integer"}},
		{"arguments not an object", tools.ToolJobKill, `["job_1"]`, `"[\"job_1\"]"`, []string{"must be a JSON object"}},
		{"a string that holds no object", tools.ToolJobKill, `"job_1"`, `"job_1"`, []string{"must be a JSON object", "does not hold one"}},
		{"a string holding a bad object", tools.ToolBash, `"{\"command\":1}"`, `{"command":1}`, []string{"command must be a string"}},
		{"unknown state", tools.ToolJobList, `{"state":"zombie"}`, `{"state":"zombie"}`, []string{"state must be one of"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			callID := fmt.Sprintf("c%d", i)
			res, err := w.svc.Call(context.Background(), a.ID, tt.tool, callID, json.RawMessage(tt.args))
			if err != nil {
				t.Fatalf("Call: %v, want an error result", err)
			}
			if !res.IsError || res.CallID != callID || res.JobID != "" {
				t.Errorf("result = %+v, want an error result of %s without job", res, callID)
			}
			for _, sub := range tt.want {
				if !strings.Contains(res.Text, sub) {
					t.Errorf("text %q does not say %q", res.Text, sub)
				}
			}
			evs := w.events(t, a.ID, agents.EventToolCall, agents.EventToolResult)
			if len(evs) < 2 {
				t.Fatalf("%d events, want the call and its result", len(evs))
			}
			call := decode[callEvent](t, evs[len(evs)-2].Data)
			result := decode[resultEvent](t, evs[len(evs)-1].Data)
			if call.CallID != callID || call.Name != tt.tool || string(call.Arguments) != tt.recorded {
				t.Errorf("tool/call = %+v, want %s %s %s", call, callID, tt.tool, tt.recorded)
			}
			if result.CallID != callID || !result.IsError || result.Text != res.Text {
				t.Errorf("tool/result = %+v, want the error result %q", result, res.Text)
			}
		})
	}
	if n := w.env.n.Load(); n != 0 {
		t.Errorf("calls with bad arguments collected the environment %d times", n)
	}
	if jobs := w.jobs.Jobs(a.ID, ""); len(jobs) != 0 {
		t.Errorf("calls with bad arguments started %d jobs", len(jobs))
	}
}

// TestCallStringArguments: arguments as a JSON string holding the object
// (OpenAI's shape) run the call; the object is what is recorded.
func TestCallStringArguments(t *testing.T) {
	w := newWorld(t)
	a := w.agent(t)
	raw, _ := json.Marshal(`{"command":"echo $DSH_SESSION_ID","description":"id"}`)
	res, err := w.svc.Call(context.Background(), a.ID, tools.ToolBash, "c1", raw)
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || res.Text != a.ID {
		t.Errorf("result = %+v, want the agent id", res)
	}
	evs := w.events(t, a.ID, agents.EventToolCall)
	if got := string(decode[callEvent](t, evs[0].Data).Arguments); got != `{"command":"echo $DSH_SESSION_ID","description":"id"}` {
		t.Errorf("recorded arguments %s, want the object", got)
	}
}

func TestCallModelErrorsAreResults(t *testing.T) {
	w := newWorld(t)
	a := w.agent(t)
	tests := []struct {
		name string
		args map[string]any
		want string
	}{
		{"missing workdir", map[string]any{"command": "pwd", "workdir": "/definitely/not/here"}, "could not start the command"},
		{"timeout", map[string]any{"command": "echo tick; sleep 10", "timeout": 300}, "tick\n[timed out after 300ms]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := w.call(t, a.ID, tools.ToolBash, tt.args)
			if !res.IsError || !strings.Contains(res.Text, tt.want) {
				t.Errorf("result = %+v, want isError with %q", res, tt.want)
			}
		})
	}
	if got := len(w.events(t, a.ID, agents.EventToolResult)); got != len(tests) {
		t.Errorf("%d tool/result events, want %d", got, len(tests))
	}
}

func TestCallWorkdir(t *testing.T) {
	w := newWorld(t)
	a := w.agent(t)
	if err := os.Mkdir(filepath.Join(a.Cwd, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	tests := []struct{ workdir, want string }{
		{"", a.Cwd},
		{"sub", filepath.Join(a.Cwd, "sub")},
		{other, other},
	}
	for _, tt := range tests {
		t.Run("workdir="+tt.workdir, func(t *testing.T) {
			args := map[string]any{"command": "pwd -P"}
			if tt.workdir != "" {
				args["workdir"] = tt.workdir
			}
			want, _ := filepath.EvalSymlinks(tt.want)
			if res := w.call(t, a.ID, tools.ToolBash, args); res.Text != want {
				t.Errorf("pwd = %q, want %q", res.Text, want)
			}
		})
	}
}

func TestCallBackground(t *testing.T) {
	w := newWorld(t)
	a := w.agent(t)
	res := w.call(t, a.ID, tools.ToolBash, map[string]any{"command": `sleep 0.2; echo "bg $DSH_SESSION_ID"`, "run_in_background": true})
	if res.Text != "started background job "+res.JobID || res.IsError || res.ExitCode != nil {
		t.Fatalf("start = %+v", res)
	}
	out := w.call(t, a.ID, tools.ToolJobOutput, map[string]any{"jobId": res.JobID, "waitMs": 10000})
	if out.Text != "bg "+a.ID || out.IsError || out.ExitCode == nil || *out.ExitCode != 0 {
		t.Errorf("job_output = %+v", out)
	}
	list := w.call(t, a.ID, tools.ToolJobList, map[string]any{"state": "exited"})
	if !strings.Contains(list.Text, res.JobID+"  exited 0  background  sleep 0.2;") {
		t.Errorf("job_list = %q", list.Text)
	}
	if none := w.call(t, a.ID, tools.ToolJobList, map[string]any{"state": "running"}); none.Text != "(no jobs)" {
		t.Errorf("job_list running = %q", none.Text)
	}
}

func TestJobToolsIsolation(t *testing.T) {
	w := newWorld(t)
	owner, other := w.agent(t), w.agent(t)

	started := w.call(t, owner.ID, tools.ToolBash, map[string]any{"command": "sleep 30", "run_in_background": true})
	id := started.JobID
	notFound := fmt.Sprintf("job %s not found", id)

	for _, tool := range []string{tools.ToolJobOutput, tools.ToolJobKill} {
		res := w.call(t, other.ID, tool, map[string]any{"jobId": id})
		if !res.IsError || !strings.HasPrefix(res.Text, notFound) {
			t.Errorf("%s by another agent = %+v, want not found", tool, res)
		}
	}
	if res := w.call(t, other.ID, tools.ToolJobList, nil); res.Text != "(no jobs)" {
		t.Errorf("job_list by another agent = %q", res.Text)
	}
	if res := w.call(t, owner.ID, tools.ToolJobOutput, map[string]any{"jobId": "job_missing"}); !res.IsError {
		t.Errorf("job_output of a missing job = %+v", res)
	}
	if snap, _ := w.jobs.Job(id); snap.Snapshot().State != "running" {
		t.Fatalf("another agent's job_kill stopped the job")
	}

	if res := w.call(t, owner.ID, tools.ToolJobList, map[string]any{}); !strings.Contains(res.Text, id+"  running  background  sleep 30") {
		t.Errorf("owner job_list = %q", res.Text)
	}
	if res := w.call(t, owner.ID, tools.ToolJobKill, map[string]any{"jobId": id}); res.IsError || !strings.Contains(res.Text, id) {
		t.Errorf("owner job_kill = %+v", res)
	}
	res := w.call(t, owner.ID, tools.ToolJobOutput, map[string]any{"jobId": id, "waitMs": 10000})
	if !strings.Contains(res.Text, "[killed by signal: SIG") {
		t.Errorf("job_output after kill = %q", res.Text)
	}
	if res := w.call(t, owner.ID, tools.ToolJobKill, map[string]any{"jobId": id}); res.IsError || !strings.Contains(res.Text, "already finished") {
		t.Errorf("second job_kill = %+v", res)
	}
}

func TestCallHooks(t *testing.T) {
	exit2 := 2
	t.Run("PreToolUse block starts nothing", func(t *testing.T) {
		w := newWorld(t)
		a := w.agent(t)
		w.hooks.decide = func(in hooks.Input) hooks.Outcome {
			if in.Event != hooks.PreToolUse {
				t.Errorf("hook event %s after a block", in.Event)
			}
			return hooks.Outcome{Blocked: true, Decision: "deny", Reason: "no rm please", Results: []hooks.Result{{
				Handler: "claude-code:PreToolUse[0].hooks[0]", Dialect: "claude-code", Decision: "deny",
				Reason: "no rm please", ExitCode: &exit2, Stderr: "no rm please", Duration: 12 * time.Millisecond,
			}}}
		}
		raw := json.RawMessage(`{"command":"touch marker","description":"make a file","timeout":5000}`)
		res, err := w.svc.Call(context.Background(), a.ID, tools.ToolBash, "toolu_1", raw)
		if err != nil {
			t.Fatal(err)
		}
		if !res.IsError || res.JobID != "" || !strings.Contains(res.Text, "no rm please") || res.CallID != "toolu_1" {
			t.Errorf("result = %+v, want a blocked error result", res)
		}
		if _, err := os.Stat(filepath.Join(a.Cwd, "marker")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("blocked command ran: stat marker: %v", err)
		}
		if jobs := w.jobs.Jobs(a.ID, ""); len(jobs) != 0 {
			t.Errorf("blocked call started %d jobs", len(jobs))
		}
		seen := w.hooks.seen()
		if len(seen) != 1 {
			t.Fatalf("%d hook runs, want 1", len(seen))
		}
		wantIn := hooks.Input{
			Event: hooks.PreToolUse, SessionID: a.ID, Cwd: a.Cwd, ToolName: "Bash", ToolUseID: "toolu_1",
			ToolInput: map[string]any{"command": "touch marker", "description": "make a file", "timeout": int64(5000)},
		}
		if diff := cmp.Diff(wantIn, seen[0]); diff != "" {
			t.Errorf("hook input (-want +got):\n%s", diff)
		}

		var types []string
		for _, e := range w.events(t, a.ID, agents.EventToolCall, agents.EventHookInvoked, agents.EventHookResult, agents.EventToolResult) {
			types = append(types, e.Type)
		}
		if diff := cmp.Diff([]string{agents.EventToolCall, agents.EventHookInvoked, agents.EventHookResult, agents.EventToolResult}, types); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
		hr := decode[map[string]any](t, w.events(t, a.ID, agents.EventHookResult)[0].Data)
		want := map[string]any{
			"callId": "toolu_1", "event": "PreToolUse", "handler": "claude-code:PreToolUse[0].hooks[0]", "dialect": "claude-code",
			"decision": "deny", "reason": "no rm please", "exitCode": 2.0, "stderr": "no rm please", "durationMs": 12.0,
		}
		if diff := cmp.Diff(want, hr); diff != "" {
			t.Errorf("hook/result (-want +got):\n%s", diff)
		}
	})

	t.Run("PostToolUse sees the response and may block", func(t *testing.T) {
		w := newWorld(t)
		a := w.agent(t)
		w.hooks.decide = func(in hooks.Input) hooks.Outcome {
			if in.Event == hooks.PostToolUse {
				return hooks.Outcome{Blocked: true, Reason: "output looks secret"}
			}
			return hooks.Outcome{}
		}
		res := w.call(t, a.ID, tools.ToolBash, map[string]any{"command": "echo out; echo err >&2; exit 4"})
		if !res.IsError || res.Text != "out\n[stderr]\nerr\n[exit code: 4]\n[blocked by PostToolUse hook: output looks secret]" {
			t.Errorf("result = %+v", res)
		}
		seen := w.hooks.seen()
		if len(seen) != 2 || seen[1].Event != hooks.PostToolUse {
			t.Fatalf("hook runs = %+v", seen)
		}
		wantResp := map[string]any{"stdout": "out\n", "stderr": "err\n", "exitCode": intp(4), "interrupted": false}
		if diff := cmp.Diff(wantResp, seen[1].ToolResponse); diff != "" {
			t.Errorf("tool_response (-want +got):\n%s", diff)
		}
	})
}

func TestExec(t *testing.T) {
	w := newWorld(t)
	a := w.agent(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	wait := func(t *testing.T, j *exec.Job) exec.Snapshot {
		t.Helper()
		snap, err := j.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return snap
	}

	t.Run("agent identity, cwd, env and stdin", func(t *testing.T) {
		j, err := w.svc.Exec(ctx, ExecRequest{
			Command: `echo "$DSH_SESSION_ID|$PWD|$FOO|$(cat)"`, AgentID: a.ID,
			Env: map[string]string{"FOO": "bar"}, Stdin: []byte("in"), HasStdin: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		want := a.ID + "|" + a.Cwd + "|bar|in\n"
		if snap := wait(t, j); snap.Stdout.Text != want || snap.AgentID != a.ID {
			t.Errorf("stdout = %q agent %q, want %q", snap.Stdout.Text, snap.AgentID, want)
		}
	})

	t.Run("no agent: no session id", func(t *testing.T) {
		j, err := w.svc.Exec(ctx, ExecRequest{Command: `echo "${DSH_SESSION_ID-absent} $DSH_SHELL"`})
		if err != nil {
			t.Fatal(err)
		}
		if snap := wait(t, j); snap.Stdout.Text != "absent 1\n" {
			t.Errorf("stdout = %q", snap.Stdout.Text)
		}
	})

	t.Run("idempotency key returns the job without collecting", func(t *testing.T) {
		first, err := w.svc.Exec(ctx, ExecRequest{Command: "echo once", IdempotencyKey: "k1", Background: true})
		if err != nil {
			t.Fatal(err)
		}
		before := w.env.n.Load()
		again, err := w.svc.Exec(ctx, ExecRequest{Command: "echo once", IdempotencyKey: "k1", Background: true})
		if err != nil {
			t.Fatal(err)
		}
		if again.ID() != first.ID() || w.env.n.Load() != before {
			t.Errorf("second Exec: job %s (want %s), %d extra collects", again.ID(), first.ID(), w.env.n.Load()-before)
		}
	})

	t.Run("unknown agent", func(t *testing.T) {
		if _, err := w.svc.Exec(ctx, ExecRequest{Command: "true", AgentID: "agt_missing"}); !errors.Is(err, agents.ErrNotFound) {
			t.Errorf("error = %v, want agents.ErrNotFound", err)
		}
	})

	t.Run("empty command", func(t *testing.T) {
		if _, err := w.svc.Exec(ctx, ExecRequest{}); !errors.Is(err, tools.ErrInvalidArguments) {
			t.Errorf("error = %v, want tools.ErrInvalidArguments", err)
		}
	})
}

func TestResolutionFailureStartsNothing(t *testing.T) {
	w := newWorld(t)
	a := w.agent(t)
	hook := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		http.Error(rw, "down", http.StatusInternalServerError)
	}))
	defer hook.Close()
	if _, err := w.reg.Register(context.Background(), shellenv.Spec{
		Name:     "flaky",
		Keys:     []shellenv.KeySpec{{Key: "DSH_FLAKY", Description: "a fact from a broken webhook"}},
		Resolver: shellenv.ResolverSpec{Kind: shellenv.KindWebhook, URL: hook.URL},
	}); err != nil {
		t.Fatal(err)
	}

	if _, err := w.svc.Exec(context.Background(), ExecRequest{Command: "true", AgentID: a.ID}); !errors.Is(err, shellenv.ErrResolution) {
		t.Errorf("Exec error = %v, want shellenv.ErrResolution", err)
	}
	_, err := w.svc.Call(context.Background(), a.ID, tools.ToolBash, "c1", json.RawMessage(`{"command":"true"}`))
	var re *shellenv.ResolutionError
	if !errors.Is(err, shellenv.ErrResolution) || !errors.As(err, &re) || re.Contributor != "flaky" {
		t.Errorf("Call error = %v, want a resolution error naming flaky", err)
	}
	if jobs := w.jobs.Jobs("", ""); len(jobs) != 0 {
		t.Errorf("%d jobs started despite resolution failures", len(jobs))
	}
	// The recorded call has its (error) result.
	if res := w.events(t, a.ID, agents.EventToolResult); len(res) != 1 || !decode[resultEvent](t, res[0].Data).IsError {
		t.Errorf("tool/result events = %v, want one error result", res)
	}
}

// TestConcurrentParentAndChild runs dozens of overlapping foreground and
// background calls from a parent and its spawned child; each must only ever
// see its own id.
func TestConcurrentParentAndChild(t *testing.T) {
	w := newWorld(t)
	parent := w.agent(t)
	child, err := w.agents.Spawn(context.Background(), parent.ID, agents.Bounds{})
	if err != nil {
		t.Fatal(err)
	}
	const perAgent = 24
	var wg sync.WaitGroup
	for _, ag := range []agents.Agent{parent, child} {
		for i := range perAgent {
			wg.Go(func() {
				bg := i%2 == 1
				res, err := w.svc.Call(context.Background(), ag.ID, tools.ToolBash, "",
					json.RawMessage(fmt.Sprintf(`{"command":"sleep 0.0%d; echo \"$DSH_SESSION_ID\"","run_in_background":%v}`, i%10, bg)))
				if err != nil {
					t.Error(err)
					return
				}
				if bg {
					res, err = w.svc.Call(context.Background(), ag.ID, tools.ToolJobOutput, "",
						json.RawMessage(fmt.Sprintf(`{"jobId":%q,"waitMs":20000}`, res.JobID)))
					if err != nil {
						t.Error(err)
						return
					}
				}
				for _, other := range []agents.Agent{parent, child} {
					if other.ID != ag.ID && strings.Contains(res.Text, other.ID) {
						t.Errorf("agent %s saw the id of %s", ag.ID, other.ID)
					}
				}
				if res.Text != ag.ID || res.IsError {
					t.Errorf("agent %s (background %v, job %s) saw %q", ag.ID, bg, res.JobID, res.Text)
				}
			})
		}
	}
	wg.Wait()
	for _, ag := range []agents.Agent{parent, child} {
		if n := len(w.jobs.Jobs(ag.ID, "")); n != perAgent {
			t.Errorf("agent %s has %d jobs, want %d", ag.ID, n, perAgent)
		}
		if n := len(w.events(t, ag.ID, agents.EventToolResult)); n != perAgent*3/2 {
			t.Errorf("agent %s has %d tool/result events, want %d", ag.ID, n, perAgent*3/2)
		}
	}
}

// TestCallRealHooks runs Claude Code hook scripts through the real hooks
// bridge: PreToolUse sees the Bash input and blocks with exit 2; then a
// permissive configuration lets the call run and PostToolUse sees the
// response.
func TestCallRealHooks(t *testing.T) {
	w := newWorld(t)
	a := w.agent(t)
	out := t.TempDir()
	writeHooks := func(t *testing.T, cfg string) {
		t.Helper()
		path := hooks.File(w.home, hooks.DialectClaudeCode)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		hc, err := hooks.Load(w.home)
		if err != nil {
			t.Fatal(err)
		}
		w.svc = New(Options{Env: w.reg, Jobs: w.jobs, Agents: w.agents, Hooks: hooks.NewRunner(hc, w.jobs, nil), Home: w.home})
	}
	type payload struct {
		SessionID string         `json:"session_id"`
		Cwd       string         `json:"cwd"`
		Event     string         `json:"hook_event_name"`
		ToolName  string         `json:"tool_name"`
		ToolInput map[string]any `json:"tool_input"`
		ToolUseID string         `json:"tool_use_id"`
		Response  map[string]any `json:"tool_response"`
	}
	readPayload := func(t *testing.T, name string) payload {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		return decode[payload](t, b)
	}

	t.Run("PreToolUse exit 2 blocks", func(t *testing.T) {
		writeHooks(t, fmt.Sprintf(`{"hooks":{"PreToolUse":[{"matcher":"Bash","hooks":[{"type":"command","command":"cat > %s/pre.json; env | grep -c '^DSH_' > %s/dsh-count; echo 'rm is not allowed' >&2; exit 2"}]}]}}`, out, out))
		res, err := w.svc.Call(context.Background(), a.ID, tools.ToolBash, "toolu_pre", json.RawMessage(`{"command":"rm -rf x","description":"remove x"}`))
		if err != nil {
			t.Fatal(err)
		}
		if !res.IsError || !strings.Contains(res.Text, "rm is not allowed") || res.JobID != "" {
			t.Errorf("result = %+v, want blocked", res)
		}
		p := readPayload(t, "pre.json")
		want := payload{SessionID: a.ID, Cwd: a.Cwd, Event: "PreToolUse", ToolName: "Bash", ToolUseID: "toolu_pre",
			ToolInput: map[string]any{"command": "rm -rf x", "description": "remove x"}}
		if diff := cmp.Diff(want, p); diff != "" {
			t.Errorf("hook payload (-want +got):\n%s", diff)
		}
		if b, _ := os.ReadFile(filepath.Join(out, "dsh-count")); strings.TrimSpace(string(b)) != "0" {
			t.Errorf("hook saw %s DSH_* variables, want 0", b)
		}
		hr := w.events(t, a.ID, agents.EventHookResult)
		if len(hr) != 1 || decode[hookResultEvent](t, hr[0].Data).Decision != "deny" {
			t.Errorf("hook/result events = %v", hr)
		}
	})

	t.Run("PostToolUse sees the response", func(t *testing.T) {
		writeHooks(t, fmt.Sprintf(`{"hooks":{"PostToolUse":[{"matcher":"Bash","hooks":[{"type":"command","command":"cat > %s/post.json"}]}]}}`, out))
		res := w.call(t, a.ID, tools.ToolBash, map[string]any{"command": "echo hi; exit 1"})
		if res.IsError || res.Text != "hi\n[exit code: 1]" {
			t.Errorf("result = %+v", res)
		}
		p := readPayload(t, "post.json")
		want := map[string]any{"stdout": "hi\n", "stderr": "", "exitCode": 1.0, "interrupted": false}
		if diff := cmp.Diff(want, p.Response); diff != "" || p.Event != "PostToolUse" {
			t.Errorf("event %s tool_response (-want +got):\n%s", p.Event, diff)
		}
	})
}

// TestCallHooksRunInAgentCwd: hooks run in the agent's cwd with
// CLAUDE_PROJECT_DIR set to it, whatever workdir the model asks for, so a
// model cannot dodge a project's validator (the documented Claude Code idiom
// "$CLAUDE_PROJECT_DIR"/.claude/hooks/…) by running the command elsewhere.
// The hooks still see the requested workdir in tool_input.
func TestCallHooksRunInAgentCwd(t *testing.T) {
	w := newWorld(t)
	a := w.agent(t)
	hookDir := filepath.Join(a.Cwd, ".claude", "hooks")
	if err := os.MkdirAll(hookDir, 0o755); err != nil {
		t.Fatal(err)
	}
	guard := "#!/bin/bash\ncat > \"$CLAUDE_PROJECT_DIR/payload.json\"\necho \"guarded from $PWD\" >&2\nexit 2\n"
	if err := os.WriteFile(filepath.Join(hookDir, "guard.sh"), []byte(guard), 0o755); err != nil {
		t.Fatal(err)
	}
	path := hooks.File(w.home, hooks.DialectClaudeCode)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := `{"hooks":{"PreToolUse":[{"matcher":"Bash","hooks":[{"type":"command","command":"\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/guard.sh"}]}]}}`
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	hc, err := hooks.Load(w.home)
	if err != nil {
		t.Fatal(err)
	}
	w.svc = New(Options{Env: w.reg, Jobs: w.jobs, Agents: w.agents, Hooks: hooks.NewRunner(hc, w.jobs, nil), Home: w.home})

	other := t.TempDir()
	res := w.call(t, a.ID, tools.ToolBash, map[string]any{"command": "touch marker", "workdir": other})
	if !res.IsError || !strings.Contains(res.Text, "guarded from "+a.Cwd) || res.JobID != "" {
		t.Errorf("result = %+v, want blocked by the project's guard", res)
	}
	if _, err := os.Stat(filepath.Join(other, "marker")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("blocked command ran: stat marker: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(a.Cwd, "payload.json"))
	if err != nil {
		t.Fatal(err)
	}
	p := decode[map[string]any](t, b)
	if p["cwd"] != a.Cwd {
		t.Errorf("payload cwd = %v, want the agent's %s", p["cwd"], a.Cwd)
	}
	wantInput := map[string]any{"command": "touch marker", "workdir": other}
	if diff := cmp.Diff(wantInput, p["tool_input"]); diff != "" {
		t.Errorf("tool_input (-want +got):\n%s", diff)
	}
}

// TestCallRecordsHooksThatRanBeforeCancel: when the caller goes away while
// PreToolUse hooks run, the hooks that already ran are still recorded, the
// command does not start, and the call ends with an error result.
func TestCallRecordsHooksThatRanBeforeCancel(t *testing.T) {
	w := newWorld(t)
	a := w.agent(t)
	out := t.TempDir()
	path := hooks.File(w.home, hooks.DialectClaudeCode)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`{"hooks":{"PreToolUse":[{"matcher":"Bash","hooks":[
		{"type":"command","command":"echo ran > %s/first"},
		{"type":"command","command":"sleep 30"}]}]}}`, out)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	hc, err := hooks.Load(w.home)
	if err != nil {
		t.Fatal(err)
	}
	w.svc = New(Options{Env: w.reg, Jobs: w.jobs, Agents: w.agents, Hooks: hooks.NewRunner(hc, w.jobs, nil), Home: w.home})

	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := w.svc.Call(ctx, a.ID, tools.ToolBash, "toolu_c", json.RawMessage(`{"command":"touch marker"}`)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Call err = %v, want the deadline", err)
	}
	if _, err := os.Stat(filepath.Join(out, "first")); err != nil {
		t.Fatalf("first hook did not run: %v", err)
	}
	if _, err := os.Stat(filepath.Join(a.Cwd, "marker")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("command ran although its hooks did not finish: stat marker: %v", err)
	}
	var types []string
	for _, e := range w.events(t, a.ID, agents.EventToolCall, agents.EventHookInvoked, agents.EventHookResult, agents.EventToolResult) {
		types = append(types, e.Type)
	}
	// Both hooks started at once; each is recorded, the second as cut short.
	want := []string{agents.EventToolCall, agents.EventHookInvoked, agents.EventHookResult, agents.EventHookInvoked, agents.EventHookResult, agents.EventToolResult}
	if diff := cmp.Diff(want, types); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if hr := w.events(t, a.ID, agents.EventHookResult); len(hr) == 2 {
		first, second := decode[hookResultEvent](t, hr[0].Data), decode[hookResultEvent](t, hr[1].Data)
		if first.Handler != "claude-code:PreToolUse[0].hooks[0]" || first.CallID != "toolu_c" || first.Error != "" {
			t.Errorf("first hook/result = %+v, want the first hook, clean", first)
		}
		if second.Handler != "claude-code:PreToolUse[0].hooks[1]" || !strings.HasPrefix(second.Error, "cut short") {
			t.Errorf("second hook/result = %+v, want the second hook, cut short", second)
		}
	}
}

// TestCallWithStarted checks that a foreground bash call hands its running
// job to Started before waiting, so that a caller can follow or stop it, and
// that background calls and the job tools never call it.
func TestCallWithStarted(t *testing.T) {
	w := newWorld(t)
	a := w.agent(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The command waits for a file that only Started creates: the call can
	// end only if Started ran while the job was running.
	gate := filepath.Join(t.TempDir(), "gate")
	var seen []exec.Snapshot
	started := func(j *exec.Job) {
		seen = append(seen, j.Snapshot())
		if err := os.WriteFile(gate, nil, 0o600); err != nil {
			t.Error(err)
		}
	}
	args := json.RawMessage(fmt.Sprintf(`{"command":"while [ ! -e %s ]; do sleep 0.01; done; echo through"}`, gate))
	res, err := w.svc.CallWith(ctx, a.ID, tools.ToolBash, "c1", args, CallOptions{Started: started})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || res.Text != "through" {
		t.Errorf("result = %+v, want through", res)
	}
	if len(seen) != 1 || seen[0].ID != res.JobID || seen[0].State != exec.StateRunning || seen[0].AgentID != a.ID {
		t.Errorf("Started saw %+v, want once the running job %s of %s", seen, res.JobID, a.ID)
	}

	seen = nil
	bg, err := w.svc.CallWith(ctx, a.ID, tools.ToolBash, "c2", json.RawMessage(`{"command":"true","run_in_background":true}`), CallOptions{Started: started})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.svc.CallWith(ctx, a.ID, tools.ToolJobOutput, "c3", json.RawMessage(`{"jobId":"`+bg.JobID+`","waitMs":5000}`), CallOptions{Started: started}); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 0 {
		t.Errorf("Started called for a background call or job_output: %+v", seen)
	}
}

// TestCapRefusedBeforeResolversAndHooks checks the reservation step: a call
// over a job cap is refused before any webhook resolver or hook runs for it,
// on the harness path (ErrTooManyJobs, HTTP 429) and the model path (an
// error result), for both caps.
func TestCapRefusedBeforeResolversAndHooks(t *testing.T) {
	var webhookCalls atomic.Int64
	hook := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		webhookCalls.Add(1)
		rw.Header().Set("Content-Type", "application/json")
		fmt.Fprint(rw, `{"DSH_CAP_TEST":"resolved"}`)
	}))
	defer hook.Close()

	tests := []struct {
		name   string
		adjust func(*exec.Options)
		limit  string
	}{
		{"global", func(o *exec.Options) { o.MaxRunning = 1 }, "global"},
		{"agent", func(o *exec.Options) { o.MaxBackgroundPerAgent = 1 }, "agent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			webhookCalls.Store(0)
			w := newWorldWith(t, tt.adjust)
			ctx := context.Background()
			if _, err := w.reg.Register(ctx, shellenv.Spec{
				Name:     "cap.test",
				Keys:     []shellenv.KeySpec{{Key: "DSH_CAP_TEST", Description: "Counts resolutions."}},
				Resolver: shellenv.ResolverSpec{Kind: shellenv.KindWebhook, URL: hook.URL},
			}); err != nil {
				t.Fatal(err)
			}
			a := w.agent(t)
			// Fill the cap with one background job of the agent.
			first := w.call(t, a.ID, tools.ToolBash, map[string]any{"command": "sleep 30", "run_in_background": true})
			if first.IsError {
				t.Fatalf("first call: %s", first.Text)
			}
			webhooksBefore, hooksBefore := webhookCalls.Load(), len(w.hooks.seen())
			if webhooksBefore != 1 || hooksBefore != 2 {
				t.Fatalf("the started call ran %d webhooks and %d hooks, want 1 and 2 (Pre and Post)", webhooksBefore, hooksBefore)
			}

			_, err := w.svc.Exec(ctx, ExecRequest{Command: "true", AgentID: a.ID, Background: true})
			var tm *exec.TooManyJobsError
			if !errors.As(err, &tm) || tm.Limit != tt.limit {
				t.Fatalf("Exec over the cap = %v, want a %s TooManyJobsError", err, tt.limit)
			}
			res := w.call(t, a.ID, tools.ToolBash, map[string]any{"command": "true", "run_in_background": true})
			if !res.IsError || !strings.Contains(res.Text, "too many jobs") {
				t.Fatalf("bash over the cap = %+v, want an error result naming the cap", res)
			}
			if got := webhookCalls.Load() - webhooksBefore; got != 0 {
				t.Errorf("refused calls ran the webhook resolver %d times, want 0", got)
			}
			if got := w.hooks.seen()[hooksBefore:]; len(got) != 0 {
				t.Errorf("refused calls ran %d hooks (%v), want none", len(got), got)
			}
			if n := len(w.jobs.Jobs(a.ID, "")); n != 1 {
				t.Errorf("the agent has %d jobs, want only the first", n)
			}
		})
	}
}

// TestSessionStartContextReachesNextResult checks that what SessionStart
// hooks offered the model (on create and on resume) is carried by the
// agent's next tool result, once, in its field, its text and the
// transcript, and that a forked session gets its own.
func TestSessionStartContextReachesNextResult(t *testing.T) {
	w := newWorld(t)
	w.hooks.decide = func(in hooks.Input) hooks.Outcome {
		if in.Event != hooks.SessionStart {
			return hooks.Outcome{}
		}
		return hooks.Outcome{Results: []hooks.Result{{Handler: "h", Dialect: "claude-code", Decision: "allow",
			AdditionalContext: "context of " + in.Source}}}
	}
	ctx := context.Background()
	sess, err := w.svc.CreateAgent(ctx, t.TempDir(), agents.Bounds{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.svc.ResumeAgent(ctx, sess.ID); err != nil {
		t.Fatal(err)
	}
	first := w.call(t, sess.ID, tools.ToolBash, map[string]any{"command": "echo hi"})
	want := []string{"context of startup", "context of resume"}
	if diff := cmp.Diff(want, first.AdditionalContext); diff != "" {
		t.Errorf("first result's additionalContext (-want +got):\n%s", diff)
	}
	if wantText := "hi\n[hook context: context of startup]\n[hook context: context of resume]"; first.Text != wantText {
		t.Errorf("first result text = %q, want %q", first.Text, wantText)
	}
	second := w.call(t, sess.ID, tools.ToolJobList, map[string]any{})
	if len(second.AdditionalContext) != 0 || strings.Contains(second.Text, "[hook context:") {
		t.Errorf("second result = %+v, want the session context carried once only", second)
	}
	results := w.events(t, sess.ID, agents.EventToolResult)
	if len(results) != 2 {
		t.Fatalf("%d tool/result events, want 2", len(results))
	}
	rec := decode[resultEvent](t, results[0].Data)
	if diff := cmp.Diff(want, rec.AdditionalContext); diff != "" {
		t.Errorf("recorded tool/result additionalContext (-want +got):\n%s", diff)
	}

	fork, err := w.svc.ForkAgent(ctx, sess.ID, nil, agents.Bounds{}, "")
	if err != nil {
		t.Fatal(err)
	}
	forked := w.call(t, fork.ID, tools.ToolJobList, map[string]any{})
	if diff := cmp.Diff([]string{"context of startup"}, forked.AdditionalContext); diff != "" {
		t.Errorf("forked session's first result (-want +got):\n%s", diff)
	}

	// Context that reached the model another way (MCP instructions) is not
	// carried again.
	spawned, err := w.svc.SpawnAgent(ctx, sess.ID, agents.Bounds{}, "")
	if err != nil {
		t.Fatal(err)
	}
	w.svc.ContextDelivered(spawned.ID)
	if res := w.call(t, spawned.ID, tools.ToolJobList, map[string]any{}); len(res.AdditionalContext) != 0 {
		t.Errorf("result after ContextDelivered = %+v, want no session context", res)
	}
}

// TestHeldContextBounded checks that an agent resumed many times without a
// tool call keeps only the newest SessionStart contexts.
func TestHeldContextBounded(t *testing.T) {
	var h heldContext
	for i := range maxHeldContext + 5 {
		h.hold("a", []string{strconv.Itoa(i)})
	}
	got := h.take("a")
	if len(got) != maxHeldContext || got[0] != "5" || got[len(got)-1] != strconv.Itoa(maxHeldContext+4) {
		t.Errorf("held = %q, want the newest %d", got, maxHeldContext)
	}
	h.hold("a", []string{"new"})
	h.giveBack("a", []string{"old"})
	if got := h.take("a"); !slices.Equal(got, []string{"old", "new"}) {
		t.Errorf("after giveBack = %q, want [old new]", got)
	}
	if got := h.take("a"); got != nil {
		t.Errorf("take after take = %q, want nothing", got)
	}
}

// TestYieldedCallsCountAgainstAgentCap: foreground calls that return while
// their job runs on (yield_time_ms, tty) hold the agent's background slots,
// so one agent cannot take every slot of the server by yielding; the call
// past the cap is an error result, and another agent's call runs.
func TestYieldedCallsCountAgainstAgentCap(t *testing.T) {
	w := newWorldWith(t, func(o *exec.Options) {
		o.MaxRunning = 6
		o.MaxBackgroundPerAgent = 3
	})
	a, b := w.agent(t), w.agent(t)
	yielded := map[string]any{"command": "sleep 30", "yield_time_ms": 50, "timeout": 60000}
	var first string
	for i := range 3 {
		res := w.call(t, a.ID, tools.ToolBash, yielded)
		if res.IsError || !strings.Contains(res.Text, "[still running: job ") {
			t.Fatalf("yielded call %d = %+v, want a still-running job", i, res)
		}
		if first == "" {
			first = res.JobID
		}
	}
	for _, args := range []map[string]any{
		yielded,
		{"command": "sleep 30", "tty": true, "timeout": 60000},
		{"command": "sleep 30", "run_in_background": true},
	} {
		res := w.call(t, a.ID, tools.ToolBash, args)
		if !res.IsError || res.JobID != "" || !strings.Contains(res.Text, "3 of your jobs already run on their own") || !strings.Contains(res.Text, "job_kill") {
			t.Errorf("call %v past the agent's cap = %+v, want an error result naming the cap and the way out", args, res)
		}
	}
	if res := w.call(t, a.ID, tools.ToolBash, map[string]any{"command": "echo fg"}); res.IsError || res.Text != "fg" {
		t.Errorf("a plain foreground call of the same agent = %+v, want it to run", res)
	}
	if res := w.call(t, b.ID, tools.ToolBash, yielded); res.IsError {
		t.Errorf("another agent's yielded call = %+v, want it to run", res)
	}
	if res := w.call(t, a.ID, tools.ToolJobKill, map[string]any{"jobId": first}); res.IsError {
		t.Fatalf("job_kill = %+v", res)
	}
	j, err := w.jobs.Job(first)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := j.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if res := w.call(t, a.ID, tools.ToolBash, yielded); res.IsError {
		t.Errorf("yielded call after one ended = %+v, want it to run", res)
	}
}

// TestCallerGoneRecordsRealResult: when the caller of a foreground bash
// call goes away (its context ends), the job runs to its end and the call's
// result, returned and recorded, is the job's real one; a job_output wait
// cut short answers the output as it is then.
func TestCallerGoneRecordsRealResult(t *testing.T) {
	w := newWorld(t)
	a := w.agent(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	res, err := w.svc.Call(ctx, a.ID, tools.ToolBash, "c1", json.RawMessage(`{"command":"sleep 1; echo done"}`))
	if err != nil || res.IsError || res.Text != "done" {
		t.Fatalf("Call whose caller left = %+v, %v; want the job's own result", res, err)
	}
	evs := w.events(t, a.ID, agents.EventToolResult)
	if got := decode[resultEvent](t, evs[0].Data); got.IsError || got.Text != "done" || got.ExitCode == nil || *got.ExitCode != 0 {
		t.Errorf("recorded result %+v, want the job's own", got)
	}

	bg := w.call(t, a.ID, tools.ToolBash, map[string]any{"command": "echo early; sleep 30", "run_in_background": true})
	ctx, cancel = context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	res, err = w.svc.Call(ctx, a.ID, tools.ToolJobOutput, "c2", json.RawMessage(fmt.Sprintf(`{"jobId":%q,"waitMs":20000}`, bg.JobID)))
	if err != nil || res.IsError || !strings.Contains(res.Text, "early") || !strings.Contains(res.Text, "[still running: job ") {
		t.Errorf("job_output whose caller left = %+v, %v; want the output so far", res, err)
	}
}
