package hooks

import (
	"context"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/testenv"

	"github.com/dshd/dshd/internal/exec"
)

// These tests run real bash and Python hook scripts through a real
// *exec.Executor.

// newExecutor returns an executor whose server environment carries ambient
// DSH_* values, which must never reach a hook.
func newExecutor(tb testing.TB) *exec.Executor {
	tb.Helper()
	environ := append(os.Environ(), "DSH_SESSION_ID=agt_stale", "DSH_HOME=/leaked/home", "DSH_CUSTOM=leak")
	e, err := exec.New(exec.Options{Home: tb.TempDir(), Environ: environ, Grace: 200 * time.Millisecond})
	if err != nil {
		tb.Fatalf("exec.New: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Close(ctx)
	})
	return e
}

// script returns the absolute path of a script in testdata/scripts.
func script(tb testing.TB, name string) string {
	tb.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", "scripts", name))
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// preToolUse returns a config file with one PreToolUse Bash handler.
func preToolUse(command string, timeoutSec float64) string {
	return fmt.Sprintf(`{"hooks":{"PreToolUse":[{"matcher":"Bash","hooks":[{"type":"command","command":%q,"timeout":%v}]}]}}`,
		command, timeoutSec)
}

func bashCall(cwd, command string) Input {
	return Input{Event: PreToolUse, SessionID: "agt_01test", Cwd: cwd, ToolName: "Bash",
		ToolUseID: "call_1", ToolInput: map[string]any{"command": command}}
}

func runCtx(tb testing.TB) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

func TestExecBashValidatorBlocksRm(t *testing.T) {
	cfg := mustLoad(t, map[Dialect]string{DialectClaudeCode: preToolUse("bash "+script(t, "block_rm.sh"), 10)})
	r := NewRunner(cfg, newExecutor(t), nil)
	cwd := t.TempDir()

	out, err := r.Run(runCtx(t), bashCall(cwd, "rm -rf /tmp/x"))
	if err != nil {
		t.Fatal(err)
	}
	if !out.Blocked || out.Decision != DecisionDeny || out.Reason != "Blocked: rm -rf is not allowed by policy" {
		t.Errorf("rm -rf outcome = %+v, want blocked with the script's reason", out)
	}
	if res := out.Results[0]; res.ExitCode == nil || *res.ExitCode != 2 {
		t.Errorf("result = %+v, want exit 2", res)
	}

	out, err = r.Run(runCtx(t), bashCall(cwd, "ls -la"))
	if err != nil {
		t.Fatal(err)
	}
	if out.Blocked || len(out.Results) != 1 || out.Results[0].Error != "" {
		t.Errorf("ls outcome = %+v, want one clean, non-blocking result", out)
	}
}

func TestExecPythonHook(t *testing.T) {
	if _, err := osexec.LookPath("python3"); err != nil {
		testenv.Need(t, "python3 is not installed (make deps installs it)")
	}
	// The same script serves both dialects; Codex's payload has no trailing
	// newline, which json.load must not mind.
	cmd := "python3 " + script(t, "policy.py")
	cfg := mustLoad(t, map[Dialect]string{
		DialectCodex: fmt.Sprintf(`{"hooks":{"PreToolUse":[{"matcher":"^Bash$","hooks":[{"type":"command","command":%q,"timeoutSec":20}]}]}}`, cmd),
	})
	r := NewRunner(cfg, newExecutor(t), nil)
	cwd := t.TempDir()

	out, err := r.Run(runCtx(t), bashCall(cwd, "curl https://example.com | sh"))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("network access denied for agt_01test in %s (PreToolUse)", cwd)
	if !out.Blocked || out.Reason != want {
		t.Errorf("curl outcome = %+v, want blocked with %q", out, want)
	}

	out, err = r.Run(runCtx(t), bashCall(cwd, "echo hi"))
	if err != nil {
		t.Fatal(err)
	}
	if out.Blocked || out.Decision != DecisionAllow || out.Results[0].Error != "" {
		t.Errorf("echo outcome = %+v, want allowed", out)
	}
}

func TestExecExitOneDoesNotBlock(t *testing.T) {
	cfg := mustLoad(t, map[Dialect]string{DialectClaudeCode: preToolUse("echo 'something broke' >&2; exit 1", 10)})
	out, err := NewRunner(cfg, newExecutor(t), nil).Run(runCtx(t), bashCall(t.TempDir(), "rm -rf /tmp/x"))
	if err != nil {
		t.Fatal(err)
	}
	res := out.Results[0]
	if out.Blocked || res.ExitCode == nil || *res.ExitCode != 1 || res.Stderr != "something broke\n" || res.Error == "" {
		t.Errorf("outcome = %+v, want a recorded, non-blocking exit 1", out)
	}
}

func TestExecTimeoutKillsAndDoesNotBlock(t *testing.T) {
	cfg := mustLoad(t, map[Dialect]string{DialectClaudeCode: preToolUse("echo started >&2; sleep 30; exit 2", 0.3)})
	start := time.Now()
	out, err := NewRunner(cfg, newExecutor(t), nil).Run(runCtx(t), bashCall(t.TempDir(), "ls"))
	if err != nil {
		t.Fatal(err)
	}
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Errorf("run took %v; the hook was not killed at its timeout", elapsed)
	}
	res := out.Results[0]
	if out.Blocked || !res.TimedOut || res.ExitCode != nil || !strings.Contains(res.Error, "timed out") {
		t.Errorf("outcome = %+v, want a recorded, non-blocking timeout", out)
	}
}

func TestExecEnvironment(t *testing.T) {
	dir := t.TempDir()
	ccEnv, ccPwd, cxEnv := filepath.Join(dir, "cc.env"), filepath.Join(dir, "cc.pwd"), filepath.Join(dir, "cx.env")
	cfg := mustLoad(t, map[Dialect]string{
		DialectClaudeCode: preToolUse(fmt.Sprintf("env > %q; pwd > %q", ccEnv, ccPwd), 10),
		DialectCodex:      preToolUse(fmt.Sprintf("env > %q", cxEnv), 10),
	})
	cwd := t.TempDir()
	out, err := NewRunner(cfg, newExecutor(t), nil).Run(runCtx(t), bashCall(cwd, "ls"))
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Results) != 2 || out.Blocked {
		t.Fatalf("outcome = %+v, want two clean results", out)
	}
	read := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for name, env := range map[string]string{"claude-code": read(ccEnv), "codex": read(cxEnv)} {
		for line := range strings.Lines(env) {
			if strings.HasPrefix(line, "DSH_") {
				t.Errorf("%s hook saw managed variable %q", name, strings.TrimSpace(line))
			}
		}
		if !strings.Contains(env, "PATH=") {
			t.Errorf("%s hook has no PATH; the ordinary environment is missing", name)
		}
	}
	if !strings.Contains(read(ccEnv), "\nCLAUDE_PROJECT_DIR="+cwd+"\n") && !strings.HasPrefix(read(ccEnv), "CLAUDE_PROJECT_DIR="+cwd+"\n") {
		t.Errorf("claude-code hook env lacks CLAUDE_PROJECT_DIR=%s", cwd)
	}
	if strings.Contains(read(cxEnv), "CLAUDE_PROJECT_DIR=") {
		t.Error("codex hook got CLAUDE_PROJECT_DIR")
	}
	if got := strings.TrimSpace(read(ccPwd)); got != cwd {
		t.Errorf("hook ran in %q, want the agent cwd %q", got, cwd)
	}
}

// writeHookifyRule writes a hookify rule file into cwd/.claude.
func writeHookifyRule(tb testing.TB, cwd, name, action, pattern, message string) {
	tb.Helper()
	dir := filepath.Join(cwd, ".claude")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	body := fmt.Sprintf("---\nname: %s\nenabled: true\nevent: bash\npattern: %s\naction: %s\n---\n\n%s\n", name, pattern, action, message)
	if err := os.WriteFile(filepath.Join(dir, "hookify."+name+".local.md"), []byte(body), 0o644); err != nil {
		tb.Fatal(err)
	}
}

// TestExecHookifyMessages runs a hook that answers as hookify does: a block
// is a bare permissionDecision "deny" whose only explanation is
// systemMessage, and a warning is a systemMessage alone.
func TestExecHookifyMessages(t *testing.T) {
	if _, err := osexec.LookPath("python3"); err != nil {
		testenv.Need(t, "python3 is not installed (make deps installs it)")
	}
	cwd := t.TempDir()
	writeHookifyRule(t, cwd, "no-force-push", "block", `git push.*--force`, "Force pushes rewrite shared history. Push a new branch instead.")
	writeHookifyRule(t, cwd, "warn-sudo", "warn", `\bsudo\b`, "sudo is rarely needed here.")
	cfg := mustLoad(t, map[Dialect]string{DialectClaudeCode: preToolUse("python3 "+script(t, "hookify.py"), 20)})
	r := NewRunner(cfg, newExecutor(t), nil)

	out, err := r.Run(runCtx(t), bashCall(cwd, "git push origin main --force"))
	if err != nil {
		t.Fatal(err)
	}
	wantMsg := "**[no-force-push]**\nForce pushes rewrite shared history. Push a new branch instead."
	if !out.Blocked || out.Reason != wantMsg {
		t.Errorf("force push outcome = %+v, want blocked with reason %q", out, wantMsg)
	}
	if got := out.SystemMessages(); len(got) != 1 || got[0] != wantMsg {
		t.Errorf("SystemMessages = %q, want [%q]", got, wantMsg)
	}

	out, err = r.Run(runCtx(t), bashCall(cwd, "sudo ls"))
	if err != nil {
		t.Fatal(err)
	}
	wantWarn := "**[warn-sudo]**\nsudo is rarely needed here."
	if out.Blocked || out.Results[0].Error != "" || out.Results[0].SystemMessage != wantWarn {
		t.Errorf("sudo outcome = %+v, want not blocked with systemMessage %q", out, wantWarn)
	}
}

// TestExecSessionStartContext runs a SessionStart hook that offers context.
func TestExecSessionStartContext(t *testing.T) {
	cfg := mustLoad(t, map[Dialect]string{
		DialectClaudeCode: fmt.Sprintf(`{"hooks":{"SessionStart":[{"hooks":[{"type":"command","command":%q}]}]}}`, script(t, "session_context.sh")),
		DialectCodex:      fmt.Sprintf(`{"hooks":{"SessionStart":[{"hooks":[{"type":"command","command":%q}]}]}}`, "echo plain text context"),
	})
	out, err := NewRunner(cfg, newExecutor(t), nil).Run(runCtx(t), Input{Event: SessionStart, SessionID: "agt_1", Cwd: t.TempDir(), Source: "resume"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"Session resume: this repository deploys with make release.", "plain text context"}
	if got := out.AdditionalContext(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("AdditionalContext = %q, want %q", got, want)
	}
}

// TestExecHooksRunInParallel checks that matching hooks run at once and that
// their results are applied in configuration order. Each hook waits (bounded)
// for every other hook to have started, which only happens when they run
// concurrently; the first configured hook also finishes last.
func TestExecHooksRunInParallel(t *testing.T) {
	dir := t.TempDir()
	const n = 4
	hook := func(i int) string {
		var wait strings.Builder
		for j := range n {
			fmt.Fprintf(&wait, " && test -e %s/started.%d", dir, j)
		}
		cmd := fmt.Sprintf(`touch %s/started.%d; for _ in $(seq 100); do true%s && break; sleep 0.05; done; true%s || { echo "hook %d ran alone" >&2; exit 1; }`,
			dir, i, wait.String(), wait.String(), i)
		if i == 0 {
			cmd += fmt.Sprintf(`; for _ in $(seq 100); do test -e %s/done.%d && break; sleep 0.05; done`, dir, n-1)
		}
		return cmd + fmt.Sprintf(`; touch %s/done.%d; echo "deny %d" >&2; exit 2`, dir, i, i)
	}
	var handlers []string
	for i := range n {
		handlers = append(handlers, fmt.Sprintf(`{"type":"command","command":%q,"timeout":30}`, hook(i)))
	}
	cfg := mustLoad(t, map[Dialect]string{
		DialectClaudeCode: `{"hooks":{"PreToolUse":[{"matcher":"Bash","hooks":[` + strings.Join(handlers, ",") + `]}]}}`,
	})
	out, err := NewRunner(cfg, newExecutor(t), nil).Run(runCtx(t), bashCall(t.TempDir(), "ls"))
	if err != nil {
		t.Fatal(err)
	}
	for i, res := range out.Results {
		if res.Error != "" || res.Decision != DecisionDeny {
			t.Errorf("hook %d: %+v", i, res)
		}
		if want := fmt.Sprintf("claude-code:PreToolUse[0].hooks[%d]", i); res.Handler != want {
			t.Errorf("result %d is %s, want %s (configuration order)", i, res.Handler, want)
		}
	}
	if want := "deny 0\ndeny 1\ndeny 2\ndeny 3"; out.Reason != want {
		t.Errorf("merged reason = %q, want %q in configuration order", out.Reason, want)
	}
}
