package hooks

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dshd/dshd/internal/exec"

	"github.com/dshd/dshd/internal/golden"
)

// fakeRunner records process specs and answers with fn (exit 0, no output
// when nil).
type fakeRunner struct {
	mu    sync.Mutex
	calls []exec.ProcessSpec
	fn    func(exec.ProcessSpec) (exec.ProcessResult, error)
}

func (f *fakeRunner) RunProcess(ctx context.Context, p exec.ProcessSpec) (exec.ProcessResult, error) {
	f.mu.Lock()
	f.calls = append(f.calls, p)
	f.mu.Unlock()
	if f.fn != nil {
		return f.fn(p)
	}
	return exec.ProcessResult{ExitCode: intp(0)}, nil
}

func intp(n int) *int { return &n }

func TestPayloads(t *testing.T) {
	toolInput := map[string]any{"command": "make test && echo <done>", "timeout": 120000}
	toolResp := map[string]any{"stdout": "ok\n", "stderr": "", "interrupted": false, "isImage": false}
	inputs := map[EventName]Input{
		SessionStart: {Event: SessionStart, SessionID: "agt_1", Cwd: "/work", Source: "resume"},
		PreToolUse: {Event: PreToolUse, SessionID: "agt_1", Cwd: "/work", ToolName: "Bash",
			ToolUseID: "call_1", ToolInput: toolInput},
		PostToolUse: {Event: PostToolUse, SessionID: "agt_1", Cwd: "/work", ToolName: "Bash",
			ToolUseID: "call_1", ToolInput: toolInput, ToolResponse: toolResp},
	}
	// want lists each payload's fields; values not listed must be absent.
	want := map[Dialect]map[EventName]map[string]any{
		DialectClaudeCode: {
			SessionStart: {"session_id": "agt_1", "transcript_path": "", "cwd": "/work", "permission_mode": "default",
				"hook_event_name": "SessionStart", "source": "resume"},
			PreToolUse: {"session_id": "agt_1", "transcript_path": "", "cwd": "/work", "permission_mode": "default",
				"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": toolInput, "tool_use_id": "call_1"},
			PostToolUse: {"session_id": "agt_1", "transcript_path": "", "cwd": "/work", "permission_mode": "default",
				"hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_input": toolInput,
				"tool_response": toolResp, "tool_use_id": "call_1"},
		},
		DialectCodex: {
			SessionStart: {"session_id": "agt_1", "transcript_path": nil, "cwd": "/work",
				"hook_event_name": "SessionStart", "model": "", "permission_mode": "default", "source": "resume"},
			PreToolUse: {"session_id": "agt_1", "turn_id": "call_1", "transcript_path": nil, "cwd": "/work",
				"hook_event_name": "PreToolUse", "model": "", "permission_mode": "default",
				"tool_name": "Bash", "tool_input": toolInput, "tool_use_id": "call_1"},
			PostToolUse: {"session_id": "agt_1", "turn_id": "call_1", "transcript_path": nil, "cwd": "/work",
				"hook_event_name": "PostToolUse", "model": "", "permission_mode": "default",
				"tool_name": "Bash", "tool_input": toolInput, "tool_response": toolResp, "tool_use_id": "call_1"},
		},
	}
	for _, d := range Dialects() {
		for _, ev := range Events() {
			t.Run(string(d)+"/"+string(ev), func(t *testing.T) {
				got, err := payload(d, inputs[ev], func() string { t.Fatal("turn id generated"); return "" })
				if err != nil {
					t.Fatal(err)
				}
				golden.Compare(t, filepath.Join("testdata", "payload", string(d)+"-"+string(ev)+".golden"), got)

				endsNL := strings.HasSuffix(string(got), "\n")
				if wantNL := d == DialectClaudeCode; endsNL != wantNL {
					t.Errorf("payload ends with newline = %v, want %v", endsNL, wantNL)
				}
				if strings.Count(string(got), "\n") > 1 {
					t.Errorf("payload spans several lines: %q", got)
				}
				var m map[string]any
				if err := json.Unmarshal(got, &m); err != nil {
					t.Fatal(err)
				}
				// Round-trip want through JSON so numbers compare as float64.
				wb, _ := json.Marshal(want[d][ev])
				var wm map[string]any
				_ = json.Unmarshal(wb, &wm)
				if diff := cmp.Diff(wm, m); diff != "" {
					t.Errorf("payload fields (-want +got):\n%s", diff)
				}
			})
		}
	}

	t.Run("defaults", func(t *testing.T) {
		got, err := payload(DialectCodex, Input{Event: PreToolUse, ToolName: "Bash"}, func() string { return "turn_x" })
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		_ = json.Unmarshal(got, &m)
		if m["turn_id"] != "turn_x" || m["tool_use_id"] != "" || !cmp.Equal(m["tool_input"], map[string]any{}) {
			t.Errorf("codex payload without ids = %s", got)
		}
		got, _ = payload(DialectClaudeCode, Input{Event: SessionStart}, nil)
		_ = json.Unmarshal(got, &m)
		if m["source"] != "startup" {
			t.Errorf("SessionStart without source = %s, want source startup", got)
		}
		got, _ = payload(DialectCodex, Input{Event: PreToolUse, ToolUseID: "call_9", TurnID: "turn_7"}, nil)
		_ = json.Unmarshal(got, &m)
		if m["turn_id"] != "turn_7" {
			t.Errorf("explicit TurnID not used: %s", got)
		}
	})
}

func TestInterpret(t *testing.T) {
	h := Handler{Name: "claude-code:PreToolUse[0].hooks[0]", Dialect: DialectClaudeCode, Event: PreToolUse, Timeout: 2 * time.Second}
	sessionH := h
	sessionH.Event = SessionStart
	tests := []struct {
		name         string
		h            Handler
		res          exec.ProcessResult
		runErr       error
		wantDecision Decision
		wantReason   string
		wantError    string // substring; "" means no error
		wantContext  string
	}{
		{name: "exit 0 no output", res: exec.ProcessResult{ExitCode: intp(0)}},
		{name: "exit 0 plain text ignored", res: exec.ProcessResult{ExitCode: intp(0), Stdout: []byte("looks fine\n")}},
		{name: "exit 2 blocks with stderr", res: exec.ProcessResult{ExitCode: intp(2), Stderr: []byte("  no rm -rf\n")},
			wantDecision: DecisionDeny, wantReason: "no rm -rf"},
		{name: "exit 2 without stderr still blocks", res: exec.ProcessResult{ExitCode: intp(2)},
			wantDecision: DecisionDeny, wantReason: "exited with status 2 without a reason"},
		{name: "exit 2 ignores stdout json", res: exec.ProcessResult{ExitCode: intp(2), Stdout: []byte(`{"decision":"approve"}`), Stderr: []byte("nope")},
			wantDecision: DecisionDeny, wantReason: "nope"},
		{name: "exit 1 does not block", res: exec.ProcessResult{ExitCode: intp(1), Stderr: []byte("oops")},
			wantError: "exited with status 1"},
		{name: "exit 1 ignores deny json", res: exec.ProcessResult{ExitCode: intp(1), Stdout: []byte(`{"decision":"block"}`)},
			wantError: "exited with status 1"},
		{name: "signal", res: exec.ProcessResult{Signal: "SIGKILL"}, wantError: "killed by signal SIGKILL"},
		{name: "timeout", res: exec.ProcessResult{TimedOut: true, Signal: "SIGTERM"}, wantError: "timed out after 2s"},
		{name: "no status", res: exec.ProcessResult{}, wantError: "without a status"},
		{name: "did not run", runErr: errors.New("bash: not found"), wantError: "did not run: bash: not found"},
		{name: "permissionDecision deny",
			res:          exec.ProcessResult{ExitCode: intp(0), Stdout: []byte(`{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"not today"}}`)},
			wantDecision: DecisionDeny, wantReason: "not today"},
		{name: "permissionDecision allow",
			res:          exec.ProcessResult{ExitCode: intp(0), Stdout: []byte(`{"hookSpecificOutput":{"permissionDecision":"allow","permissionDecisionReason":"fine"}}`)},
			wantDecision: DecisionAllow, wantReason: "fine"},
		{name: "permissionDecision ask",
			res:          exec.ProcessResult{ExitCode: intp(0), Stdout: []byte(`{"hookSpecificOutput":{"permissionDecision":"ask","permissionDecisionReason":"sure?"}}`)},
			wantDecision: DecisionAsk, wantReason: "sure?"},
		{name: "permissionDecision reason falls back to reason",
			res:          exec.ProcessResult{ExitCode: intp(0), Stdout: []byte(`{"reason":"top","hookSpecificOutput":{"permissionDecision":"deny"}}`)},
			wantDecision: DecisionDeny, wantReason: "top"},
		{name: "decision block",
			res:          exec.ProcessResult{ExitCode: intp(0), Stdout: []byte("\n {\"decision\":\"block\",\"reason\":\"blocked by policy\"}\n")},
			wantDecision: DecisionDeny, wantReason: "blocked by policy"},
		{name: "legacy approve",
			res:          exec.ProcessResult{ExitCode: intp(0), Stdout: []byte(`{"decision":"approve","reason":"ok"}`)},
			wantDecision: DecisionAllow, wantReason: "ok"},
		{name: "strongest of both forms wins",
			res:          exec.ProcessResult{ExitCode: intp(0), Stdout: []byte(`{"decision":"block","reason":"b","hookSpecificOutput":{"permissionDecision":"allow","permissionDecisionReason":"a"}}`)},
			wantDecision: DecisionDeny, wantReason: "b"},
		{name: "continue false blocks",
			res:          exec.ProcessResult{ExitCode: intp(0), Stdout: []byte(`{"continue":false,"stopReason":"halt"}`)},
			wantDecision: DecisionDeny, wantReason: "halt"},
		{name: "continue true is nothing", res: exec.ProcessResult{ExitCode: intp(0), Stdout: []byte(`{"continue":true,"suppressOutput":true}`)}},
		{name: "malformed json recorded",
			res:       exec.ProcessResult{ExitCode: intp(0), Stdout: []byte(`{"decision":"block"`)},
			wantError: "not valid hook output"},
		{name: "wrongly typed json recorded",
			res:       exec.ProcessResult{ExitCode: intp(0), Stdout: []byte(`{"decision":true}`)},
			wantError: "not valid hook output"},
		{name: "unknown decision recorded",
			res:       exec.ProcessResult{ExitCode: intp(0), Stdout: []byte(`{"decision":"maybe","hookSpecificOutput":{"permissionDecision":"perhaps"}}`)},
			wantError: `unknown permissionDecision "perhaps"; unknown decision "maybe"`},
		{name: "additional context",
			res:         exec.ProcessResult{ExitCode: intp(0), Stdout: []byte(`{"hookSpecificOutput":{"additionalContext":"repo is dirty"}}`)},
			wantContext: "repo is dirty"},
		{name: "session start plain stdout is context", h: sessionH,
			res:         exec.ProcessResult{ExitCode: intp(0), Stdout: []byte("branch main\n")},
			wantContext: "branch main"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hh := h
			if tt.h.Name != "" {
				hh = tt.h
			}
			got := interpret(hh, tt.res, tt.runErr)
			if got.Decision != tt.wantDecision {
				t.Errorf("decision = %q, want %q", got.Decision, tt.wantDecision)
			}
			if !strings.Contains(got.Reason, tt.wantReason) || (tt.wantReason == "" && got.Reason != "") {
				t.Errorf("reason = %q, want %q", got.Reason, tt.wantReason)
			}
			if (tt.wantError == "") != (got.Error == "") || !strings.Contains(got.Error, tt.wantError) {
				t.Errorf("error = %q, want %q", got.Error, tt.wantError)
			}
			if got.AdditionalContext != tt.wantContext {
				t.Errorf("context = %q, want %q", got.AdditionalContext, tt.wantContext)
			}
			if got.Handler != hh.Name || got.Dialect != hh.Dialect {
				t.Errorf("result names %s/%s, want %s/%s", got.Handler, got.Dialect, hh.Name, hh.Dialect)
			}
		})
	}
}

func TestMerge(t *testing.T) {
	r := func(d Decision, reason string) Result { return Result{Handler: "h", Decision: d, Reason: reason} }
	tests := []struct {
		name        string
		event       EventName
		results     []Result
		wantBlocked bool
		wantDec     Decision
		wantReason  string
	}{
		{"nothing", PreToolUse, nil, false, DecisionNone, ""},
		{"only silent", PreToolUse, []Result{r("", ""), r("", "")}, false, DecisionNone, ""},
		{"allow", PreToolUse, []Result{r(DecisionAllow, "ok")}, false, DecisionAllow, "ok"},
		{"deny over allow", PreToolUse, []Result{r(DecisionAllow, "ok"), r(DecisionDeny, "no")}, true, DecisionDeny, "no"},
		{"deny over ask", PreToolUse, []Result{r(DecisionDeny, "no"), r(DecisionAsk, "sure?")}, true, DecisionDeny, "no"},
		{"ask over allow fails closed", PreToolUse, []Result{r(DecisionAllow, "ok"), r(DecisionAsk, "sure?")}, true, DecisionAsk,
			"a hook asked for confirmation, but dshd has no one to ask, so the call is blocked: sure?"},
		{"several denies join reasons", PreToolUse, []Result{r(DecisionDeny, "one"), r(DecisionAllow, "x"), r(DecisionDeny, "two")}, true, DecisionDeny, "one\ntwo"},
		{"deny without reason", PreToolUse, []Result{r(DecisionDeny, "")}, true, DecisionDeny, "hook h decided deny without a reason"},
		{"post tool use deny blocks", PostToolUse, []Result{r(DecisionDeny, "bad output")}, true, DecisionDeny, "bad output"},
		{"session start never blocks", SessionStart, []Result{r(DecisionDeny, "no")}, false, DecisionDeny, "no"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := Outcome{Results: tt.results}
			merge(&out, tt.event)
			if out.Blocked != tt.wantBlocked || out.Decision != tt.wantDec || out.Reason != tt.wantReason {
				t.Errorf("merge = blocked %v, %q, %q; want %v, %q, %q",
					out.Blocked, out.Decision, out.Reason, tt.wantBlocked, tt.wantDec, tt.wantReason)
			}
		})
	}
}

func TestRunnerWithFake(t *testing.T) {
	cfg := mustLoad(t, map[Dialect]string{
		DialectClaudeCode: `{"hooks":{
		  "PreToolUse":[{"matcher":"Bash","hooks":[{"type":"command","command":"cc-pre","timeout":3}]},
		                {"matcher":"Write","hooks":[{"type":"command","command":"cc-write"}]}],
		  "SessionStart":[{"matcher":"resume","hooks":[{"type":"command","command":"cc-resume"}]}]}}`,
		DialectCodex: `{"hooks":{"PreToolUse":[{"hooks":[{"type":"command","command":"cx-pre","timeoutSec":4}]}]}}`,
	})
	ctx := context.Background()
	fake := &fakeRunner{fn: func(p exec.ProcessSpec) (exec.ProcessResult, error) {
		if p.Command == "cx-pre" {
			return exec.ProcessResult{ExitCode: intp(2), Stderr: []byte("codex says no")}, nil
		}
		return exec.ProcessResult{ExitCode: intp(0), Stdout: []byte(`{"hookSpecificOutput":{"permissionDecision":"allow"}}`)}, nil
	}}
	r := NewRunner(cfg, fake, nil)
	in := Input{Event: PreToolUse, SessionID: "agt_1", Cwd: "/work", ToolName: "Bash", ToolUseID: "call_1",
		ToolInput: map[string]string{"command": "ls"}}

	names := []string{}
	for _, h := range r.Matching(in) {
		names = append(names, h.Name)
	}
	if diff := cmp.Diff([]string{"claude-code:PreToolUse[0].hooks[0]", "codex:PreToolUse[0].hooks[0]"}, names); diff != "" {
		t.Errorf("Matching (-want +got):\n%s", diff)
	}

	out, err := r.Run(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if !out.Blocked || out.Decision != DecisionDeny || out.Reason != "codex says no" || len(out.Results) != 2 {
		t.Errorf("outcome = %+v", out)
	}
	if len(fake.calls) != 2 {
		t.Fatalf("ran %d processes, want 2", len(fake.calls))
	}
	// The hooks run at once, so they may start in either order.
	sort.Slice(fake.calls, func(i, j int) bool { return fake.calls[i].Command < fake.calls[j].Command })
	cc, cx := fake.calls[0], fake.calls[1]
	if cc.Command != "cc-pre" || cc.Cwd != "/work" || cc.Timeout != 3*time.Second ||
		!cmp.Equal(cc.ExtraEnv, map[string]string{"CLAUDE_PROJECT_DIR": "/work"}) || !strings.HasSuffix(string(cc.Stdin), "}\n") {
		t.Errorf("claude-code process = %+v", cc)
	}
	if cx.Command != "cx-pre" || cx.Cwd != "/work" || cx.Timeout != 4*time.Second || cx.ExtraEnv != nil ||
		!strings.HasSuffix(string(cx.Stdin), "}") || !strings.Contains(string(cx.Stdin), `"turn_id":"call_1"`) {
		t.Errorf("codex process = %+v", cx)
	}

	// SessionStart matchers match the source.
	fake.calls = nil
	if out, err := r.Run(ctx, Input{Event: SessionStart, SessionID: "agt_1", Cwd: "/work", Source: "startup"}); err != nil || len(out.Results) != 0 {
		t.Errorf("SessionStart startup = %+v, %v; want no hooks", out, err)
	}
	if out, err := r.Run(ctx, Input{Event: SessionStart, SessionID: "agt_1", Cwd: "/work", Source: "resume"}); err != nil || len(out.Results) != 1 || out.Blocked {
		t.Errorf("SessionStart resume = %+v, %v; want one non-blocking hook", out, err)
	}

	if _, err := r.Run(ctx, Input{Event: "Stop"}); !errors.Is(err, ErrUnknownEvent) {
		t.Errorf("Run(Stop) err = %v, want ErrUnknownEvent", err)
	}
	if out, err := NewRunner(nil, fake, nil).Run(ctx, in); err != nil || out.Blocked || len(out.Results) != 0 {
		t.Errorf("Run without config = %+v, %v", out, err)
	}

	// A failing runner is recorded and does not block.
	failing := NewRunner(cfg, &fakeRunner{fn: func(exec.ProcessSpec) (exec.ProcessResult, error) {
		return exec.ProcessResult{}, errors.New("executor closed")
	}}, nil)
	out, err = failing.Run(ctx, in)
	if err != nil || out.Blocked || len(out.Results) != 2 || !strings.Contains(out.Results[0].Error, "executor closed") {
		t.Errorf("failing runner outcome = %+v, %v", out, err)
	}

	// Without a process runner handlers are recorded as not run.
	out, err = NewRunner(cfg, nil, nil).Run(ctx, in)
	if err != nil || out.Blocked || len(out.Results) != 2 || !strings.Contains(out.Results[0].Error, "no process runner") {
		t.Errorf("nil runner outcome = %+v, %v", out, err)
	}

	// A cancelled context stops the run and is returned.
	cctx, cancel := context.WithCancel(ctx)
	cancelling := NewRunner(cfg, &fakeRunner{fn: func(exec.ProcessSpec) (exec.ProcessResult, error) {
		cancel()
		return exec.ProcessResult{}, context.Canceled
	}}, nil)
	if _, err := cancelling.Run(cctx, in); !errors.Is(err, context.Canceled) {
		t.Errorf("Run with cancelled ctx err = %v, want context.Canceled", err)
	}
}

func TestShort(t *testing.T) {
	long := strings.Repeat("é", maxStderr) // 2 bytes each
	got := short([]byte(long))
	if len(got) > maxStderr || !strings.HasPrefix(long, got) {
		t.Errorf("short cut badly: len %d", len(got))
	}
	if got := short([]byte("ok\xff")); got != "ok\uFFFD" {
		t.Errorf("short(invalid) = %q", got)
	}
}

// TestMatcherAliases: a tool's matcher aliases select Codex handlers as its
// name does (Codex's apply_patch answers to Write and Edit), never Claude
// Code's, and the payload still names the tool itself.
func TestMatcherAliases(t *testing.T) {
	cfg := mustLoad(t, map[Dialect]string{
		DialectClaudeCode: `{"hooks":{"PreToolUse":[{"matcher":"Edit|Write","hooks":[{"type":"command","command":"cc-edit"}]},
		  {"matcher":"Bash","hooks":[{"type":"command","command":"cc-bash"}]}]}}`,
		DialectCodex: `{"hooks":{"PreToolUse":[{"matcher":"^apply_patch$","hooks":[{"type":"command","command":"cx-patch"}]},
		  {"matcher":"Write","hooks":[{"type":"command","command":"cx-write"}]}]}}`,
	})
	fake := &fakeRunner{}
	r := NewRunner(cfg, fake, nil)
	patch := Input{Event: PreToolUse, SessionID: "agt_1", ToolName: "apply_patch", MatcherAliases: []string{"Write", "Edit"},
		ToolUseID: "call_1", ToolInput: map[string]string{"command": "*** Begin Patch\n*** End Patch\n"}}
	edit := Input{Event: PreToolUse, SessionID: "agt_1", ToolName: "Edit", ToolUseID: "call_2", ToolInput: map[string]string{"file_path": "a"}}
	for _, tt := range []struct {
		in   Input
		want []string
	}{
		{patch, []string{"codex:PreToolUse[0].hooks[0]", "codex:PreToolUse[1].hooks[0]"}},
		{edit, []string{"claude-code:PreToolUse[0].hooks[0]"}},
	} {
		var names []string
		for _, h := range r.Matching(tt.in) {
			names = append(names, h.Name)
		}
		if diff := cmp.Diff(tt.want, names); diff != "" {
			t.Errorf("Matching(%s) (-want +got):\n%s", tt.in.ToolName, diff)
		}
	}
	if _, err := r.Run(context.Background(), patch); err != nil {
		t.Fatal(err)
	}
	if len(fake.calls) != 2 {
		t.Fatalf("ran %d processes, want 2", len(fake.calls))
	}
	for _, c := range fake.calls {
		var p map[string]any
		if err := json.Unmarshal(c.Stdin, &p); err != nil {
			t.Fatal(err)
		}
		if p["tool_name"] != "apply_patch" {
			t.Errorf("%s got tool_name %v, want apply_patch (an alias is never sent)", c.Command, p["tool_name"])
		}
	}
}
