package tests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/dshd/dshd/internal/apitest"
	"github.com/dshd/dshd/internal/testenv"
)

// The browser tests drive headless Chromium against the real server and the
// embedded UI. They never sleep: every wait is a DOM condition polled in the
// page under a context deadline.

const (
	defaultChromium = "/usr/bin/chromium"
	stepTimeout     = 20 * time.Second
	testTimeout     = 3 * time.Minute
)

// TestBrowserUI walks every view against the real server, with state
// arranged over the API: declarations of every resolver kind (a webhook URL
// carrying credentials and a query the page must never show) and a plugin
// lease counting down; jobs filtered by agent and state, one cancelled from
// its button, one appearing and ending without a refresh; agents nested by
// lineage, appearing live, and a transcript that marks errors and blocked
// calls, shows hook events and links a result to its job; the configured
// hooks and their recent decisions. Every view is checked with axe-core at
// 1280 px and at 390 px (no violation of any impact), screenshotted into
// artifacts/browser, and the console must stay free of errors throughout,
// the first load included.
func TestBrowserUI(t *testing.T) {
	t.Parallel()
	chrome := chromiumPath(t)
	home := filepath.Join(t.TempDir(), "home")
	guard := filepath.Join(t.TempDir(), "guard.sh")
	if err := os.WriteFile(guard, []byte("#!/usr/bin/env bash\n"+
		"# Blocks a recursive delete, as a harness author's PreToolUse hook would.\n"+
		"input=$(cat)\n"+
		"case \"$input\" in *'rm -rf'*) echo 'destructive command refused by the guard' >&2; exit 2;; esac\n"+
		"exit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	apitest.WriteJSON(t, filepath.Join(home, "hooks", "claude-code.json"), map[string]any{"hooks": map[string]any{
		"PreToolUse":  []any{map[string]any{"matcher": "Bash", "hooks": []any{map[string]any{"type": "command", "command": guard, "timeout": 10}}}},
		"PostToolUse": []any{map[string]any{"matcher": "Bash", "hooks": []any{map[string]any{"type": "command", "command": "true"}}}},
	}})
	apitest.WriteJSON(t, filepath.Join(home, "hooks", "codex.json"), map[string]any{"hooks": map[string]any{
		"PreToolUse": []any{map[string]any{"matcher": "^Bash$", "hooks": []any{map[string]any{"type": "command", "command": "echo '{}'", "timeoutSec": 5}}}},
	}})
	srv := startServer(t, withHome(home))
	b := newBrowser(t, chrome)

	// Arrange the declarations: one contributor of each resolver kind.
	register := func(body map[string]any) {
		t.Helper()
		if status := srv.DoJSON(t, http.MethodPost, "/contributors", body, nil); status != http.StatusCreated {
			t.Fatalf("POST /contributors %v: status %d, want 201", body["name"], status)
		}
	}
	register(map[string]any{
		"name":     "test.ui",
		"keys":     []map[string]string{{"key": "DSH_UI_TEST", "description": "set by the browser test"}},
		"resolver": map[string]any{"kind": "static", "values": map[string]string{"DSH_UI_TEST": "1"}},
	})
	register(map[string]any{
		"name":     "test.ui.tmpl",
		"keys":     []map[string]string{{"key": "DSH_UI_TMPL", "description": "made from a template"}},
		"resolver": map[string]any{"kind": "template", "values": map[string]string{"DSH_UI_TMPL": "agent-{agent.id}"}},
	})
	// A webhook contributor counts its calls: the declarations view must not
	// cause any (listing declarations never runs a resolver). Its URL holds
	// credentials and a query, which the page must never show.
	var webhookCalls atomic.Int64
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		webhookCalls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"DSH_UI_HOOK":"called"}`))
	}))
	t.Cleanup(hook.Close)
	hookURL := strings.Replace(hook.URL, "http://", "http://ui-user:ui-password@", 1) + "/env?sig=ui-query-secret#ui-fragment"
	register(map[string]any{
		"name":     "test.ui.hook",
		"keys":     []map[string]string{{"key": "DSH_UI_HOOK", "description": "from a webhook"}},
		"resolver": map[string]any{"kind": "webhook", "url": hookURL, "timeoutMs": 5000},
	})
	// A plugin with a lease, owning one more contributor.
	var plugin struct{ ID string }
	if status := srv.DoJSON(t, http.MethodPost, "/plugins", map[string]any{
		"name": "ui-harness", "leaseSeconds": 600,
	}, &plugin); status != http.StatusCreated {
		t.Fatalf("POST /plugins: status %d, want 201", status)
	}
	register(map[string]any{
		"name":     "test.ui.leased",
		"plugin":   plugin.ID,
		"keys":     []map[string]string{{"key": "DSH_UI_LEASED", "description": "lives as long as its plugin"}},
		"resolver": map[string]any{"kind": "static", "values": map[string]string{"DSH_UI_LEASED": "yes"}},
	})

	// Declarations: the default view, opened with the login URL "dshd ui"
	// prints, as the README says.
	loginURL, _ := uiLogin(t, srv)
	b.do("open the UI with the login URL", chromedp.Navigate(loginURL))
	for _, key := range []string{"DSH_HOME", "DSH_SHELL", "DSH_SESSION_ID", "DSH_UI_TEST", "DSH_UI_TMPL", "DSH_UI_HOOK", "DSH_UI_LEASED"} {
		b.do("see declaration "+key, chromedp.WaitVisible(chromedp.CSS(declRow(key))))
	}
	b.waitText(declRow("DSH_UI_TEST"), "test.ui")
	b.waitText(declRow("DSH_UI_TEST"), "set by the browser test")
	b.waitText(declRow("DSH_HOME"), "built-in")
	b.waitText(declRow("DSH_UI_LEASED"), "ui-harness")
	// Resolver kind and details.
	b.waitText(declRow("DSH_HOME")+` [data-kind="builtin"]`, "built-in")
	b.waitText(declRow("DSH_UI_TEST")+` [data-kind="static"]`, "static")
	b.waitText(declRow("DSH_UI_TMPL")+` [data-kind="template"]`, "agent-{agent.id}")
	b.waitText(declRow("DSH_UI_HOOK")+` [data-kind="webhook"]`, hook.URL+"/env")
	page := b.eval(`document.documentElement.outerHTML`)
	for _, secret := range []string{"ui-user", "ui-password", "ui-query-secret", "ui-fragment"} {
		if strings.Contains(page, secret) {
			t.Errorf("the declarations page shows %q from the webhook URL", secret)
		}
	}
	if got := b.eval(`document.querySelector('` + declRow("DSH_UI_TEST") + ` [data-kind]').textContent`); strings.Contains(got, "1") {
		t.Errorf("the static resolver cell shows its value: %q", got)
	}
	// The lease counts down by itself, between fetches.
	lease := declRow("DSH_UI_LEASED") + " [data-expires]"
	b.waitText(lease, "expires in 9m")
	first := b.eval(`document.querySelector('` + lease + `').textContent`)
	b.waitChange(lease, first)
	b.waitText(fmt.Sprintf(`#plugins-body tr[data-plugin-id=%q]`, plugin.ID), "test.ui.leased")
	b.waitText(fmt.Sprintf(`#plugins-body tr[data-plugin-id=%q] [data-expires]`, plugin.ID), "expires in 9m")
	if hash := b.eval(`location.hash`); hash != "#/declarations" {
		t.Errorf("location.hash = %q after load, want %q (the login code must leave the URL)", hash, "#/declarations")
	}
	// The page holds the session's key, never the token; the session id
	// is in an HttpOnly cookie no script reads.
	if got := b.eval(`String(localStorage.getItem('dshd.sessionKey'))`); len(got) < 40 || got == srv.Token {
		t.Errorf("stored session key = %q, want a random key (not the token)", got)
	}
	if got := b.eval(`document.cookie`); got != "" {
		t.Errorf("document.cookie = %q, want the session cookie invisible to scripts", got)
	}
	if got := b.eval(`JSON.stringify([Object.entries(localStorage), Object.entries(sessionStorage), document.documentElement.outerHTML])`); strings.Contains(got, srv.Token) {
		t.Error("the page or its storage holds the token")
	}
	b.checkView("declarations")

	b.do("filter by contributor", chromedp.SendKeys(chromedp.ID("declarations-filter"), "test.UI"))
	b.do("filtered out DSH_HOME", chromedp.WaitNotPresent(chromedp.CSS(declRow("DSH_HOME"))))
	b.do("DSH_UI_LEASED matches too (contributor test.ui.leased)",
		chromedp.WaitVisible(chromedp.CSS(declRow("DSH_UI_LEASED"))))
	b.do("DSH_UI_TEST still shown", chromedp.WaitVisible(chromedp.CSS(declRow("DSH_UI_TEST"))))
	b.waitText("#declarations-caption", "4 of 7")
	b.screenshot("declarations-filtered")

	b.setInput("declarations-filter", "")
	b.do("group by contributor", chromedp.Click(chromedp.ID("declarations-group")))
	b.do("grouped rows", chromedp.WaitVisible(chromedp.CSS(
		`#declarations-table tbody[data-contributor="test.ui"] tr[data-key="DSH_UI_TEST"]`)))
	b.do("built-ins come back", chromedp.WaitVisible(chromedp.CSS(declRow("DSH_HOME"))))
	b.screenshot("declarations-grouped")
	b.do("ungroup", chromedp.Click(chromedp.ID("declarations-group")))
	b.do("refresh the declarations", chromedp.Click(chromedp.ID("declarations-refresh")))
	b.do("still listed", chromedp.WaitVisible(chromedp.CSS(declRow("DSH_UI_HOOK"))))
	if n := webhookCalls.Load(); n != 0 {
		t.Errorf("the declarations view ran the webhook resolver %d times, want 0", n)
	}

	// Jobs: a finished foreground job, a running background job, and the
	// jobs of two agents' model tool calls.
	var done, bg struct{ ID, State string }
	if status := srv.DoJSON(t, http.MethodPost, "/exec", map[string]any{
		"command": "echo out-line; echo err-line >&2; exit 3",
	}, &done); status != http.StatusOK {
		t.Fatalf("POST /exec (foreground): status %d, want 200", status)
	}
	if status := srv.DoJSON(t, http.MethodPost, "/exec", map[string]any{
		"command":    "echo started-ui-job; sleep 60",
		"background": true,
	}, &bg); status != http.StatusAccepted {
		t.Fatalf("POST /exec (background): status %d, want 202", status)
	}
	if bg.ID == "" || done.ID == "" {
		t.Fatalf("POST /exec returned no job id: %+v %+v", done, bg)
	}
	var parent, child struct{ ID, ParentID, Origin string }
	if status := srv.DoJSON(t, http.MethodPost, "/agents", map[string]any{}, &parent); status != http.StatusCreated {
		t.Fatalf("POST /agents: status %d, want 201", status)
	}
	if status := srv.DoJSON(t, http.MethodPost, "/agents/"+parent.ID+"/spawn", map[string]any{}, &child); status != http.StatusCreated {
		t.Fatalf("POST /agents/%s/spawn: status %d, want 201", parent.ID, status)
	}
	type toolResult struct {
		CallID, Text, JobID string
		IsError             bool
	}
	callTool := func(agent, callID string, args map[string]any) toolResult {
		t.Helper()
		var r toolResult
		if status := srv.DoJSON(t, http.MethodPost, "/agents/"+agent+"/tools/bash", map[string]any{
			"callId": callID, "arguments": args,
		}, &r); status != http.StatusOK {
			t.Fatalf("POST /agents/%s/tools/bash %s: status %d", agent, callID, status)
		}
		return r
	}
	if r := callTool(parent.ID, "call-ok", map[string]any{"command": "echo transcript-line"}); r.IsError {
		t.Fatalf("call-ok: isError, text %q", r.Text)
	}
	if r := callTool(parent.ID, "call-slow", map[string]any{"command": "echo slow-line; sleep 5", "timeout": 300}); !r.IsError {
		t.Fatalf("call-slow: want isError after its timeout, got text %q", r.Text)
	}
	if r := callTool(parent.ID, "call-blocked", map[string]any{"command": "rm -rf ./nothing-here"}); !r.IsError || !strings.Contains(r.Text, "destructive command refused") {
		t.Fatalf("call-blocked: isError %v, text %q; want blocked by the guard", r.IsError, r.Text)
	}
	agentBg := callTool(parent.ID, "call-bg", map[string]any{"command": "echo bg-from-agent", "run_in_background": true})
	if agentBg.JobID == "" {
		t.Fatalf("call-bg: no job id in %+v", agentBg)
	}
	callTool(child.ID, "call-child", map[string]any{"command": "echo child-line"})
	// An agent the harness confined and limited: its tool call's job shows
	// the policy, the limits and how this host enforced each one. The
	// strictest policy this host can enforce (workspace-write, network off
	// where bubblewrap works).
	var health struct {
		Details struct {
			Sandbox struct {
				Policies []string `json:"policies"`
				Networks []string `json:"networks"`
			} `json:"sandbox"`
		} `json:"details"`
	}
	if status := srv.DoJSON(t, http.MethodGet, "/healthz", nil, &health); status != http.StatusOK {
		t.Fatalf("GET /healthz: status %d", status)
	}
	policy, network := "unrestricted", "on"
	if slices.Contains(health.Details.Sandbox.Policies, "workspace-write") {
		policy = "workspace-write"
	} else {
		t.Logf("this host cannot enforce workspace-write (no usable bubblewrap): the limited job runs unrestricted")
	}
	if slices.Contains(health.Details.Sandbox.Networks, "off") {
		network = "off"
	}
	var limitedAgent struct{ ID string }
	if status := srv.DoJSON(t, http.MethodPost, "/agents", map[string]any{
		"sandbox": map[string]any{"policy": policy, "network": network},
		"limits":  map[string]any{"pids": 64, "memoryBytes": 256 << 20, "cpu": 0.5},
	}, &limitedAgent); status != http.StatusCreated {
		t.Fatalf("POST /agents with sandbox and limits: status %d, want 201", status)
	}
	limited := callTool(limitedAgent.ID, "call-limited", map[string]any{"command": "echo limited-line"})
	if limited.IsError || limited.JobID == "" {
		t.Fatalf("call-limited: %+v", limited)
	}
	var limitedRec struct {
		Limits struct {
			Enforcement map[string]string `json:"enforcement"`
		} `json:"limits"`
	}
	if status := srv.DoJSON(t, http.MethodGet, "/jobs/"+limited.JobID, nil, &limitedRec); status != http.StatusOK || len(limitedRec.Limits.Enforcement) != 3 {
		t.Fatalf("GET /jobs/%s: status %d, limits %+v; want 3 enforced limits", limited.JobID, status, limitedRec.Limits)
	}

	b.do("open the jobs view", chromedp.Click(chromedp.CSS(`[data-testid="nav-jobs"]`)))
	b.waitText(testID("job-state-"+bg.ID), "running")
	b.waitText(testID("job-state-"+done.ID), "exited")
	b.waitText(testID("job-exit-"+done.ID), "3")
	b.waitText(testID("job-state-"+agentBg.JobID), "exited")
	b.waitText(`#jobs-body tr:has(.command-cell button[title="echo slow-line; sleep 5"]) .state-cell`, "killed: timeout")

	// Filter by state, then by agent; the filters live in the route.
	b.setSelect("jobs-state", "running")
	b.do("only running jobs", chromedp.WaitNotPresent(chromedp.CSS(`tr[data-job-id="`+done.ID+`"]`)))
	b.waitText(testID("job-state-"+bg.ID), "running")
	b.waitText("#jobs-caption", "state running")
	if hash := b.eval(`location.hash`); hash != "#/jobs?state=running" {
		t.Errorf("location.hash = %q with the state filter, want #/jobs?state=running", hash)
	}
	b.setSelect("jobs-state", "")
	b.waitOption("jobs-agent", parent.ID)
	b.setSelect("jobs-agent", parent.ID)
	b.do("the parent's jobs only", chromedp.WaitNotPresent(chromedp.CSS(`tr[data-job-id="`+bg.ID+`"]`)))
	b.waitText(testID("job-state-"+agentBg.JobID), "exited")
	b.waitText("#jobs-caption", "agent "+parent.ID)
	if n := b.eval(`String(document.querySelectorAll('#jobs-body tr[data-job-id]').length)`); n != "3" {
		t.Errorf("%s jobs listed for agent %s, want its 3 tool calls that ran (the blocked one never started)", n, parent.ID)
	}
	if strings.Contains(b.eval(`document.getElementById('jobs-body').textContent`), child.ID) {
		t.Errorf("the agent filter for %s still lists a job of %s", parent.ID, child.ID)
	}
	b.screenshot("jobs-filtered")
	b.setSelect("jobs-agent", "")
	b.do("all jobs again", chromedp.WaitVisible(chromedp.CSS(`tr[data-job-id="`+done.ID+`"]`)))

	b.do("select the background job", chromedp.Click(chromedp.CSS(testID("job-select-"+bg.ID))))
	b.waitText(testID("job-output"), "started-ui-job")
	// The job's overlay snapshot includes the test's static contributor.
	b.waitText(`#job-env-body tr[data-key="DSH_UI_TEST"]`, "1")
	b.do("snapshot has DSH_HOME", chromedp.WaitVisible(chromedp.CSS(`#job-env-body tr[data-key="DSH_HOME"]`)))
	b.waitText(`#job-env-body tr[data-key="DSH_UI_HOOK"]`, "called")
	b.screenshot("jobs-running")

	b.do("cancel the background job", chromedp.Click(chromedp.CSS(testID("job-cancel-"+bg.ID))))
	b.waitText(testID("job-state-"+bg.ID), "cancelled")
	b.waitText(testID("job-output-exit"), "cancelled")
	b.do("the Cancel button goes away",
		chromedp.WaitNotPresent(chromedp.CSS(testID("job-cancel-"+bg.ID))))
	// Why dshd killed it, in the list and in the panel, with what it used.
	b.waitText(testID("job-state-"+bg.ID), "killed: cancel request")
	b.waitText(`#job-facts [data-fact="Killed by dshd"]`, "cancel request")
	b.waitText(`#job-facts [data-fact="CPU time"]`, "ms")

	// Live: a job started now shows up and ends without any click.
	var live struct{ ID string }
	if status := srv.DoJSON(t, http.MethodPost, "/exec", map[string]any{
		"command": "sleep 1.5; echo live-job", "background": true,
	}, &live); status != http.StatusAccepted {
		t.Fatalf("POST /exec (live): status %d, want 202", status)
	}
	b.waitText(testID("job-state-"+live.ID), "running")
	b.waitText(testID("job-state-"+live.ID), "exited")
	b.waitText(testID("job-exit-"+live.ID), "0")

	// Real buttons work from the keyboard: focus and press Enter.
	b.do("select the finished job with the keyboard",
		chromedp.Focus(chromedp.CSS(testID("job-select-"+done.ID))),
		chromedp.KeyEvent("\r"))
	b.waitText(testID("job-output"), "err-line")
	b.waitText(testID("job-output-exit"), "exited: 3")
	b.waitText(`#job-facts [data-fact="Killed by dshd"]`, "no")
	b.waitText(`#job-facts [data-fact="CPU time"]`, "ms")
	b.waitText(`#job-facts [data-fact="Peak memory"]`, "B")
	b.waitText(`#job-facts [data-fact="Sandbox"]`, "unrestricted, network on")
	// No limits: one line among the facts, no empty table.
	b.waitText(`#job-facts [data-fact="Limits"]`, "none")
	if got := b.eval(`String(document.getElementById('job-limits-table').offsetParent === null)`); got != "true" {
		t.Errorf("the limits table is drawn for a job without limits")
	}

	// The confined, limited job: its policy, each limit with its value and
	// how this host enforced it, as the job record says.
	b.do("select the limited job", chromedp.Click(chromedp.CSS(testID("job-select-"+limited.JobID))))
	b.waitText(testID("job-output"), "limited-line")
	b.waitText(`#job-facts [data-fact="Sandbox"]`, policy+", network "+network)
	enforcedWords := map[string]string{"cgroup": "kernel: cgroup", "cgroup_v1": "kernel: cgroup v1", "watcher": "dshd watcher", "rlimit": "RLIMIT_AS", "none": "not enforced on this host"}
	for _, l := range []struct{ key, value string }{{"pids", "64 at once"}, {"memoryBytes", "256 MiB"}, {"cpu", "0.5 of one CPU"}} {
		row := fmt.Sprintf(`#job-limits-body tr[data-limit=%q]`, l.key)
		b.waitText(row, l.value)
		how := limitedRec.Limits.Enforcement[l.key]
		if got := b.eval(`document.querySelector('` + row + `').dataset.enforcement`); got != how {
			t.Errorf("limit %s shown as enforced by %q, the job record says %q", l.key, got, how)
		}
		if enforcedWords[how] == "" {
			t.Errorf("limit %s: unknown enforcement %q in the job record", l.key, how)
		}
		b.waitText(row, enforcedWords[how])
	}
	b.waitText("#job-limits-caption", limited.JobID)
	b.checkView("jobs")

	// Agents: a root and its spawned child, nested; the parent's transcript.
	b.do("open the agents view", chromedp.Click(chromedp.CSS(`[data-testid="nav-agents"]`)))
	nested := fmt.Sprintf(`li[data-agent-id=%q] > ul > li[data-agent-id=%q]`, parent.ID, child.ID)
	b.do("child nested under parent", chromedp.WaitVisible(chromedp.CSS(nested)))
	b.waitText(nested, "spawn")
	b.waitText(fmt.Sprintf(`li[data-agent-id=%q]`, parent.ID), "root")
	// What the harness bounded each agent by, in the lineage.
	b.waitText(testID("agent-bounds-"+limitedAgent.ID), "sandbox "+policy+", network "+network)
	b.waitText(testID("agent-bounds-"+limitedAgent.ID), "limits: 64 processes, 256 MiB memory, 0.5 CPU")
	b.waitText(testID("agent-bounds-"+parent.ID), "sandbox unrestricted, network on · no limits")

	b.do("select the parent", chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-agent-button=%q]`, parent.ID))))
	b.do("transcript shown", chromedp.WaitVisible(chromedp.CSS(`#transcript-body tr[data-event-type="session"]`)))
	b.waitText("#transcript-caption", parent.ID)
	call := func(typ, id string) string {
		return fmt.Sprintf(`#transcript-body tr[data-event-type=%q][data-call-id=%q]`, typ, id)
	}
	b.waitText(call("tool/call", "call-ok"), "echo transcript-line")
	b.waitText(call("tool/result", "call-ok"), "transcript-line")
	// An error result is marked as one.
	b.waitText(call("tool/result", "call-slow")+".is-error", "error")
	b.waitText(call("tool/result", "call-slow"), "timed out")
	if got := b.eval(`document.querySelector('` + call("tool/result", "call-ok") + `').className`); strings.Contains(got, "is-error") {
		t.Errorf("the successful result is marked as an error (class %q)", got)
	}
	// A blocked call: its hook result says blocked and why; its result is marked blocked.
	b.waitText(call("hook/result", "call-blocked")+".is-blocked", "blocked")
	b.waitText(call("hook/result", "call-blocked"), "destructive command refused by the guard")
	b.waitText(call("hook/result", "call-blocked"), "exit 2")
	b.waitText(call("tool/result", "call-blocked")+".is-blocked", "blocked")
	// Hook events that decided nothing read as such.
	b.waitText(call("hook/result", "call-ok")+`[data-dialect="codex"]`, "no decision")
	// A finished hook reads as one line: its result replaces its start.
	if n := b.eval(`String(document.querySelectorAll('#transcript-body tr[data-event-type="hook/invoked"]').length)`); n != "0" {
		t.Errorf("%s hook/invoked rows shown for hooks that have finished, want them folded into their results", n)
	}
	b.waitText(call("hook/result", "call-ok")+`[data-dialect="claude-code"]`, "exit 0")
	b.checkView("agents")

	// Live: a new agent appears in the tree, and a new call in the selected
	// transcript, without a refresh.
	var late struct{ ID string }
	if status := srv.DoJSON(t, http.MethodPost, "/agents", map[string]any{}, &late); status != http.StatusCreated {
		t.Fatalf("POST /agents: status %d, want 201", status)
	}
	b.do("a new agent shows up by itself", chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`li[data-agent-id=%q]`, late.ID))))
	callTool(parent.ID, "call-live", map[string]any{"command": "echo live-transcript-line"})
	b.waitText(call("tool/result", "call-live"), "live-transcript-line")
	if got := b.eval(`document.querySelector('[data-agent-button="` + parent.ID + `"]').getAttribute('aria-pressed')`); got != "true" {
		t.Errorf("the parent is no longer selected after the live update (aria-pressed %q)", got)
	}

	// A result links to its job: following the link shows the job's output.
	b.do("follow the background call's job link",
		chromedp.Click(chromedp.CSS(call("tool/result", "call-bg")+` a[href="#/jobs?job=`+agentBg.JobID+`"]`)))
	b.waitText("#job-output-heading", agentBg.JobID)
	b.waitText(testID("job-output"), "bg-from-agent")
	b.waitText(testID("job-output-exit"), "exited")

	// Hooks: configured hooks by dialect and event, and recent decisions.
	b.do("open the hooks view", chromedp.Click(chromedp.CSS(`[data-testid="nav-hooks"]`)))
	b.waitText("#hooks-caption", "Configured hooks: 3 (claude-code, codex)")
	b.waitText(`#hooks-body tr[data-hook^="claude-code:PreToolUse"]`, guard)
	b.waitText(`#hooks-body tr[data-hook^="claude-code:PostToolUse"]`, "PostToolUse")
	b.waitText(`#hooks-body tr[data-hook^="codex:PreToolUse"]`, "^Bash$")
	decision := `#decisions-body tr[data-decision="deny"][data-call-id="call-blocked"]`
	b.waitText(decision, "blocked")
	b.waitText(decision, "destructive command refused by the guard")
	b.waitText(decision, guard)
	b.waitText(decision, parent.ID)
	b.waitText("#decisions-caption", "(1 blocked)")
	b.checkView("hooks")
	// Live: a decision made now shows up without a refresh.
	callTool(child.ID, "call-blocked-live", map[string]any{"command": "rm -rf ./again"})
	b.waitText(`#decisions-body tr[data-decision="deny"][data-call-id="call-blocked-live"]`, child.ID)
	b.waitText("#decisions-caption", "(2 blocked)")
	b.do("a decision links to its agent", chromedp.Click(chromedp.CSS(decision+` a[href="#/agents?agent=`+parent.ID+`"]`)))
	b.waitText("#transcript-caption", parent.ID)

	// Phone width: no view scrolls sideways; a job's command, state and exit
	// stay on screen.
	b.do("narrow viewport", chromedp.EmulateViewport(390, 844))
	for _, view := range []string{"declarations", "jobs", "agents", "hooks"} {
		b.do("open "+view+" narrow", chromedp.Click(chromedp.CSS(`[data-testid="nav-`+view+`"]`)))
		b.do(view+" visible", chromedp.WaitVisible(chromedp.ID("view-"+view)))
		b.waitText(fmt.Sprintf(`#view-%s h1`, view), strings.ToUpper(view[:1])+view[1:])
		switch view {
		case "agents":
			b.do("tree rendered", chromedp.WaitVisible(chromedp.CSS(nested)))
			b.do("select the parent narrow", chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-agent-button=%q]`, parent.ID))))
			b.waitText(call("tool/result", "call-blocked"), "blocked")
		case "jobs":
			b.waitText(testID("job-exit-"+done.ID), "3")
			for _, part := range []string{"command-cell", "state-cell", "exit-cell"} {
				sel := fmt.Sprintf(`tr[data-job-id=%q] .%s`, done.ID, part)
				if got := b.eval(`(() => { const r = document.querySelector('` + sel + `').getBoundingClientRect();
					return r.width > 0 && r.height > 0 && r.left >= 0 && r.right <= innerWidth ? 'on screen' : JSON.stringify(r); })()`); got != "on screen" {
					t.Errorf("jobs at 390px: %s is not on screen: %s", part, got)
				}
			}
			b.do("select a job narrow", chromedp.Click(chromedp.CSS(testID("job-select-"+done.ID))))
			b.waitText(testID("job-output-exit"), "exited: 3")
			// The detail replaces the list at this width; back to it.
			b.do("back to the list narrow", chromedp.Click(chromedp.CSS(testID("job-back"))))
			b.do("select the limited job narrow", chromedp.Click(chromedp.CSS(testID("job-select-"+limited.JobID))))
			b.waitText(`#job-limits-body tr[data-limit="memoryBytes"]`, "256 MiB")
		default:
			b.do(view+" rows rendered", chromedp.WaitVisible(chromedp.CSS(`#view-`+view+` tbody tr`)))
		}
		if over := b.eval(`String(document.documentElement.scrollWidth - document.documentElement.clientWidth)`); over != "0" {
			t.Errorf("%s view overflows a 390px viewport by %spx", view, over)
		}
		// Tables become cards: none scrolls sideways in its own box either.
		if wide := b.eval(`JSON.stringify([...document.querySelectorAll('#view-` + view + ` .table-wrap')]
			.filter((w) => w.offsetParent !== null && w.scrollWidth > w.clientWidth)
			.map((w) => w.querySelector('table').id + ': ' + (w.scrollWidth - w.clientWidth) + 'px'))`); wide != "[]" {
			t.Errorf("%s view at 390px: tables scroll sideways: %s", view, wide)
		}
		b.checkView(view + "-narrow")
	}

	// The dark palette must be as readable: every view again, dark, narrow.
	b.do("dark colour scheme", colorScheme("dark"))
	for _, view := range []string{"declarations", "jobs", "agents", "hooks"} {
		b.do("open "+view+" dark", chromedp.Click(chromedp.CSS(`[data-testid="nav-`+view+`"]`)))
		b.do(view+" rows rendered dark", chromedp.WaitVisible(chromedp.CSS(`#view-`+view+` tbody tr`)))
		if view == "agents" {
			b.do("select the parent dark", chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-agent-button=%q]`, parent.ID))))
			b.waitText(call("tool/result", "call-blocked"), "blocked")
		}
		if view == "jobs" {
			b.do("select the limited job dark", chromedp.Click(chromedp.CSS(testID("job-select-"+limited.JobID))))
			b.waitText(`#job-limits-body tr[data-limit="cpu"]`, "0.5 of one CPU")
		}
		b.checkView(view + "-narrow-dark")
	}

	b.checkConsole()
}

// colorScheme emulates the user's light or dark preference.
func colorScheme(scheme string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}},
		})
		return err
	})
}

// TestBrowserLostJob: a background job running when the server is killed
// (SIGKILL, as a crash) is shown as lost after the restart: its state, no
// exit, the state filter, its output panel; checked with axe-core at 1280 and
// 390 px.
func TestBrowserLostJob(t *testing.T) {
	t.Parallel()
	chrome := chromiumPath(t)
	home := filepath.Join(t.TempDir(), "home")
	s := startServer(t, withHome(home))
	run := randomMark(t)
	t.Cleanup(func() { killPIDs(survivorsNow(run)) })
	var lost struct{ ID string }
	if status := s.DoJSON(t, http.MethodPost, "/exec", map[string]any{
		"command": fmt.Sprintf("export %s='%s/0;'; sleep 300 & sleep 300", markEnv, run), "background": true,
	}, &lost); status != http.StatusAccepted {
		t.Fatalf("POST /exec: status %d, want 202", status)
	}
	waitMarked(t, run+"/0")
	s.crash(t)
	s2 := startServer(t, withHome(home))
	if left := survivors(run+"/", 5*time.Second); len(left) > 0 {
		t.Fatalf("processes of the lost job still run after the restart: %v", left)
	}
	var finished struct{ ID string }
	if status := s2.DoJSON(t, http.MethodPost, "/exec", map[string]any{"command": "echo after-the-restart"}, &finished); status != http.StatusOK {
		t.Fatalf("POST /exec: status %d, want 200", status)
	}
	b := newBrowser(t, chrome)

	loginURL, _ := uiLogin(t, s2)
	b.do("open the jobs view", chromedp.Navigate(loginURL+"&view=jobs"))
	b.waitText(testID("job-state-"+lost.ID), "lost")
	b.waitText(testID("job-exit-"+lost.ID), "none")
	b.waitText(testID("job-state-"+finished.ID), "exited")
	b.setSelect("jobs-state", "lost")
	b.do("only the lost job", chromedp.WaitNotPresent(chromedp.CSS(`tr[data-job-id="`+finished.ID+`"]`)))
	b.waitText("#jobs-caption", "state lost")
	b.do("select the lost job", chromedp.Click(chromedp.CSS(testID("job-select-"+lost.ID))))
	b.waitText(testID("job-output-exit"), "[lost: dshd stopped while it ran")
	b.waitText("#job-output-status", "lost")
	b.checkView("jobs-lost")
	b.do("narrow viewport", chromedp.EmulateViewport(390, 844))
	b.waitText(testID("job-state-"+lost.ID), "lost")
	b.checkView("jobs-lost-narrow")
	b.checkConsole()
}

// TestBrowserTokenPrompt checks the ways in: no session shows the prompt;
// a wrong login code in the fragment gets a 401, which leaves the code out
// of the URL and shows the prompt with an error; the right token typed into
// the form signs in (and is kept nowhere); a login URL works once (opened
// again, in the same page, it is refused); signing out ends the session,
// also after a reload.
func TestBrowserTokenPrompt(t *testing.T) {
	t.Parallel()
	chrome := chromiumPath(t)
	srv := startServer(t)
	b := newBrowser(t, chrome)

	b.do("open without a session", chromedp.Navigate(srv.URL+"/ui/"))
	b.do("prompt shown", chromedp.WaitVisible(chromedp.CSS(testID("token-form"))))
	b.do("no error yet", chromedp.WaitNotVisible(chromedp.ID("token-error")))
	b.checkView("token-prompt-empty")
	// Without a session the page asks for nothing that needs one.
	b.checkConsole()

	// The old way in, the token in the fragment, is not honoured: the
	// token leaves the address bar and the prompt stays.
	b.do("open with the token in the fragment", chromedp.Navigate(srv.URL+"/ui/#token="+srv.Token))
	b.do("prompt still shown", chromedp.WaitVisible(chromedp.CSS(testID("token-form"))))
	if hash := b.eval(`location.hash`); strings.Contains(hash, srv.Token) {
		t.Errorf("location.hash = %q still holds the token", hash)
	}
	if got := b.eval(`String(localStorage.getItem('dshd.sessionKey'))`); got != "null" {
		t.Errorf("session key = %q: the fragment's token signed in", got)
	}
	b.checkConsole()

	b.do("open with a wrong login code", chromedp.Navigate(srv.URL+"/ui/#login=not-a-code"))
	b.do("prompt shown again", chromedp.WaitVisible(chromedp.CSS(testID("token-form"))))
	b.waitText("#token-error", "401")
	if hash := b.eval(`location.hash`); strings.Contains(hash, "login") || strings.Contains(hash, "not-a-code") {
		t.Errorf("location.hash = %q, the login code must leave the URL", hash)
	}
	if got := b.eval(`String(localStorage.getItem('dshd.sessionKey'))`); got != "null" {
		t.Errorf("session key = %q after a refused sign-in, want none", got)
	}
	if got := b.eval(`document.activeElement.id`); got != "token-input" {
		t.Errorf("focus is on %q, want the token input", got)
	}
	b.checkView("token-prompt")
	b.do("narrow viewport", chromedp.EmulateViewport(390, 844))
	b.checkView("token-prompt-narrow")
	b.do("wide viewport", chromedp.EmulateViewport(1280, 800))
	// The wrong code costs exactly one rejected request, which the browser
	// logs; nothing else may reach the console.
	if n := b.checkConsole(regexp.MustCompile(`status of 401 .*/ui/session`)); n != 1 {
		t.Errorf("%d requests were rejected with 401 for the wrong code, want 1", n)
	}

	// Enter submits the form, as it would for a person at the keyboard.
	b.do("type the right token", chromedp.SendKeys(chromedp.ID("token-input"), srv.Token+"\r"))
	b.do("declarations shown", chromedp.WaitVisible(chromedp.CSS(declRow("DSH_HOME"))))
	b.do("prompt hidden", chromedp.WaitNotVisible(chromedp.CSS(testID("token-form"))))
	if got := b.eval(`JSON.stringify([Object.entries(localStorage), Object.entries(sessionStorage), document.cookie, document.getElementById('token-input').value])`); strings.Contains(got, srv.Token) {
		t.Error("the page keeps the token it was given")
	}
	b.checkConsole()

	// Sign out: the prompt comes back, and a reload does not bring the
	// session back (the server ended it).
	b.do("sign out", chromedp.Click(chromedp.ID("forget-token")))
	b.do("prompt after signing out", chromedp.WaitVisible(chromedp.CSS(testID("token-form"))))
	b.do("reload", chromedp.Reload())
	b.do("prompt after the reload", chromedp.WaitVisible(chromedp.CSS(testID("token-form"))))

	// A login URL signs in once; the same URL again is refused.
	loginURL, _ := uiLogin(t, srv)
	b.do("open the login URL", chromedp.Navigate(loginURL))
	b.do("declarations shown after the login URL", chromedp.WaitVisible(chromedp.CSS(declRow("DSH_HOME"))))
	b.do("open the same login URL again", chromedp.Navigate(loginURL))
	b.do("prompt for a spent login URL", chromedp.WaitVisible(chromedp.CSS(testID("token-form"))))
	b.waitText("#token-error", "used already or has expired")
	if n := b.checkConsole(regexp.MustCompile(`status of 401 .*/ui/session`)); n != 1 {
		t.Errorf("%d requests were rejected with 401 for the spent login URL, want 1", n)
	}
}

// browser is one headless Chromium tab bound to a test.
type browser struct {
	t         *testing.T
	ctx       context.Context
	artifacts string

	mu      sync.Mutex
	console []string // console errors and exceptions, in order
}

// chromiumPath returns the browser to run: $DSHD_CHROMIUM, else
// /usr/bin/chromium. A missing browser skips the test on a workstation and
// fails it in CI, where the test command installs Chromium.
func chromiumPath(t *testing.T) string {
	t.Helper()
	path := os.Getenv("DSHD_CHROMIUM")
	if path == "" {
		path = defaultChromium
	}
	if _, err := os.Stat(path); err != nil {
		testenv.Need(t, "chromium not found at %s (set DSHD_CHROMIUM to run the browser tests): %v", path, err)
	}
	return path
}

// newBrowser starts Chromium with an explicit, minimal flag set and a fresh
// profile, and opens one tab at 1280×800.
func newBrowser(t *testing.T, execPath string) *browser {
	t.Helper()
	profile, err := os.MkdirTemp("", "dshd-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(execPath),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		// Overlay scrollbars, as on a phone: the page lays out at the full
		// emulated width, and a full-page screenshot (which grows the viewport
		// to the page's height) sees the same layout the checks saw.
		chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(profile),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	tabCtx, cancelTab := chromedp.NewContext(allocCtx, chromedp.WithErrorf(t.Logf))
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc() // waits for the browser to exit
		// Chromium helpers may still be flushing into the profile for a
		// moment after the main process exits; a leftover temp dir is harmless.
		if err := os.RemoveAll(profile); err != nil {
			t.Logf("remove chromium profile: %v", err)
		}
	})
	// The first action starts the browser; it gets no deadline so the
	// browser lives as long as the test (see chromedp's API notes).
	if err := chromedp.Do(tabCtx, chromedp.EmulateViewport(1280, 800)); err != nil {
		t.Fatalf("start chromium %s: %v", execPath, err)
	}
	ctx, cancel := context.WithTimeout(tabCtx, testTimeout)
	t.Cleanup(cancel)

	b := &browser{t: t, ctx: ctx, artifacts: artifactsDir(t)}
	// Every console error, uncaught exception and browser log error (a
	// failed request, a CSP refusal) is recorded; tests fail on any.
	messages := chromedp.Console(tabCtx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type != chromedp.ConsoleError && !m.IsException() {
				continue
			}
			text := m.String()
			if m.URL != "" {
				text += fmt.Sprintf(" (%s:%d)", m.URL, m.Line+1)
			}
			b.mu.Lock()
			b.console = append(b.console, text)
			b.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancelTab()
		<-done
	})
	return b
}

// do runs actions under a per-step deadline; on failure it saves a screenshot
// named after the step and stops the test.
func (b *browser) do(step string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.failed(step, err)
	}
}

// waitText waits until the first element matching sel contains want.
func (b *browser) waitText(sel, want string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.PollFunction[bool](
		`(sel, want) => { const el = document.querySelector(sel); return el !== null && el.textContent.includes(want); }`,
		chromedp.WithPollingArgs(sel, want),
		chromedp.WithPollingTimeout(0)))
	if err != nil {
		got := b.eval(fmt.Sprintf(`document.querySelector(%q)?.textContent ?? "(no element)"`, sel))
		b.failed(fmt.Sprintf("wait for %q in %s (text now %q)", want, sel, got), err)
	}
}

// waitChange waits until the first element matching sel no longer has the
// text old.
func (b *browser) waitChange(sel, old string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.PollFunction[bool](
		`(sel, old) => { const el = document.querySelector(sel); return el !== null && el.textContent !== old; }`,
		chromedp.WithPollingArgs(sel, old),
		chromedp.WithPollingTimeout(0)))
	if err != nil {
		b.failed(fmt.Sprintf("wait for %s to change from %q", sel, old), err)
	}
}

// waitOption waits until the select element id offers value.
func (b *browser) waitOption(id, value string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.PollFunction[bool](
		`(id, value) => [...(document.getElementById(id)?.options ?? [])].some((o) => o.value === value)`,
		chromedp.WithPollingArgs(id, value),
		chromedp.WithPollingTimeout(0)))
	if err != nil {
		b.failed(fmt.Sprintf("wait for option %q in #%s", value, id), err)
	}
}

// setSelect chooses value in a select element as a person would, firing "change".
func (b *browser) setSelect(id, value string) {
	b.t.Helper()
	b.eval(fmt.Sprintf(`(() => { const el = document.getElementById(%q); el.value = %q; el.dispatchEvent(new Event('change', {bubbles: true})); return el.value; })()`, id, value))
}

// checkView checks the page as it is now with axe-core and saves a screenshot.
func (b *browser) checkView(name string) {
	b.t.Helper()
	b.checkAccessibility(name)
	b.screenshot(name)
}

// setInput sets a field's value the way typing would, firing "input".
func (b *browser) setInput(id, value string) {
	b.t.Helper()
	b.eval(fmt.Sprintf(`(() => { const el = document.getElementById(%q); el.value = %q; el.dispatchEvent(new Event('input', {bubbles: true})); return ''; })()`, id, value))
}

// eval evaluates a JavaScript expression that yields a string.
func (b *browser) eval(expr string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// screenshot saves a full-page PNG into the artifacts directory.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	file := filepath.Join(b.artifacts, b.t.Name()+"-"+name+".png")
	if err := os.WriteFile(file, png, 0o644); err != nil {
		b.t.Fatalf("save screenshot: %v", err)
	}
	b.t.Logf("screenshot: %s", file)
}

func (b *browser) failed(step string, err error) {
	b.t.Helper()
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("timed out after %v: %w", stepTimeout, err)
	}
	// Best effort: a picture of the page makes a browser failure readable.
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	if png, shotErr := chromedp.Run(ctx, chromedp.FullScreenshot(100)); shotErr == nil {
		file := filepath.Join(b.artifacts, b.t.Name()+"-FAILED.png")
		if os.WriteFile(file, png, 0o644) == nil {
			b.t.Logf("failure screenshot: %s", file)
		}
	}
	b.t.Fatalf("%s: %v", step, err)
}

// checkConsole fails the test for every console error, uncaught exception
// or browser log error since the last check, except those matching one of
// allowed (errors the test provoked on purpose). It reports how many were
// allowed.
func (b *browser) checkConsole(allowed ...*regexp.Regexp) int {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	messages := b.console
	b.console = nil
	n := 0
next:
	for _, e := range messages {
		for _, re := range allowed {
			if re.MatchString(e) {
				n++
				continue next
			}
		}
		b.t.Errorf("console error in the page: %s", e)
	}
	return n
}

// axeSource is axe-core's browser build, read once from the npm
// devDependency that make deps installs (tests/package.json). The test
// injects it into the page; dshd never serves it.
var axeSource = sync.OnceValues(func() (string, error) {
	src, err := os.ReadFile(filepath.Join("node_modules", "axe-core", "axe.min.js"))
	return string(src), err
})

// axeViolation is the part of an axe-core result the test reports.
type axeViolation struct {
	ID     string   `json:"id"`
	Impact string   `json:"impact"`
	Help   string   `json:"help"`
	Nodes  []string `json:"nodes"`
}

// checkAccessibility runs axe-core on the whole page as it is now and fails
// the test for any violation, whatever its impact. name says which view and
// width it was, for the report.
func (b *browser) checkAccessibility(name string) {
	b.t.Helper()
	src, err := axeSource()
	if err != nil {
		// Outside CI the functional checks go on without this one (a skip
		// here would drop every assertion after it); in CI it fails.
		if testenv.InCI() {
			b.t.Fatalf("axe-core is not installed (run make deps): %v", err)
		}
		b.t.Logf("%s: accessibility not checked, axe-core is not installed (run make deps): %v", name, err)
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	loaded, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`typeof window.axe === 'object'`))
	if err != nil {
		b.t.Fatalf("axe %s: %v", name, err)
	}
	if !loaded {
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[any](src+"\n;0")); err != nil {
			b.t.Fatalf("inject axe-core: %v", err)
		}
	}
	out, err := chromedp.Run(ctx, chromedp.Evaluate[string](`axe.run(document, { resultTypes: ['violations'] }).then((r) =>
		JSON.stringify(r.violations.map((v) => ({
			id: v.id, impact: v.impact, help: v.help,
			nodes: v.nodes.map((n) => n.target.join(' ') + ' — ' + (n.failureSummary || '').replace(/\s+/g, ' ')),
		}))))`, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("axe %s: %v", name, err)
	}
	var violations []axeViolation
	if err := json.Unmarshal([]byte(out), &violations); err != nil {
		b.t.Fatalf("axe %s: decode %q: %v", name, out, err)
	}
	for _, v := range violations {
		b.t.Errorf("axe on %s: %s (%s): %s\n\t%s", name, v.ID, v.Impact, v.Help, strings.Join(v.Nodes, "\n\t"))
	}
}

// artifactsDir is $DSHD_ARTIFACTS, else artifacts/browser at the repository
// root (ignored by git). The test's screenshots of an earlier run are
// removed, so every picture there comes from this run.
func artifactsDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("DSHD_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("..", "artifacts", "browser")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("artifacts dir: %v", err)
	}
	old, err := filepath.Glob(filepath.Join(dir, t.Name()+"-*.png"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			t.Fatalf("remove an old screenshot: %v", err)
		}
	}
	return dir
}

func declRow(key string) string {
	return fmt.Sprintf(`#declarations-table tr[data-key=%q]`, key)
}

func testID(id string) string {
	return fmt.Sprintf(`[data-testid=%q]`, id)
}

// TestBrowserTerminal: a terminal job (tty) in the jobs view is drawn by
// xterm.js with the program's colours; keys go nowhere until the person
// presses "Type into the terminal", then what they type reaches the job and
// its echo comes back; Shift+Escape stops typing; when the program exits
// the terminal says so and takes no more keys. Checked with axe-core at
// 1280 and 390 px, with no console error.
func TestBrowserTerminal(t *testing.T) {
	t.Parallel()
	chrome := chromiumPath(t)
	srv := startServer(t)
	var term struct {
		ID       string `json:"id"`
		Terminal *struct {
			Cols, Rows int
		} `json:"terminal"`
	}
	if status := srv.DoJSON(t, http.MethodPost, "/exec", map[string]any{
		"command":    `printf '\033[32mgreen-ready\033[0m plain\n'; exec bash --norc --noprofile -i`,
		"background": true, "tty": true, "cols": 80, "rows": 12,
	}, &term); status != http.StatusAccepted || term.Terminal == nil {
		t.Fatalf("POST /exec (tty): status %d, job %+v; want 202 with a terminal", status, term)
	}
	t.Cleanup(func() { srv.Do(t, http.MethodDelete, "/jobs/"+term.ID, nil).Body.Close() })
	jobInput := func() (writes int, bytes int) {
		t.Helper()
		var j struct {
			Input *struct{ Writes, Bytes int } `json:"input"`
		}
		if status := srv.DoJSON(t, http.MethodGet, "/jobs/"+term.ID, nil, &j); status != http.StatusOK || j.Input == nil {
			t.Fatalf("GET /jobs/%s: status %d, input %+v", term.ID, status, j.Input)
		}
		return j.Input.Writes, j.Input.Bytes
	}

	b := newBrowser(t, chrome)
	loginURL, _ := uiLogin(t, srv)
	b.do("open the UI", chromedp.Navigate(loginURL))
	b.do("open the jobs view", chromedp.Click(chromedp.CSS(`[data-testid="nav-jobs"]`)))
	b.do("select the terminal job", chromedp.Click(chromedp.CSS(testID("job-select-"+term.ID))))
	rows := testID("job-terminal") + " .xterm-rows"
	b.waitText(rows, "green-ready")
	b.waitText(rows, "bash-") // the shell's prompt
	// Colours: the program's green is drawn green, the rest in the default.
	colours := b.eval(`(() => {
		const spans = [...document.querySelectorAll('[data-testid="job-terminal"] .xterm-rows span')];
		const colour = (text) => { const s = spans.find((el) => el.textContent.includes(text)); return s ? getComputedStyle(s).color : 'missing'; };
		return JSON.stringify([colour('green-ready'), colour('plain')]); })()`)
	var pair [2]string
	if err := json.Unmarshal([]byte(colours), &pair); err != nil || pair[0] == "missing" || pair[0] == pair[1] || !greenish(pair[0]) {
		t.Errorf("colours of the green text and the plain text = %s; want the first green and different from the second", colours)
	}
	if hidden := b.eval(`String(document.getElementById('job-output').hidden)`); hidden != "true" {
		t.Errorf("the plain output box is shown beside the terminal (hidden = %s)", hidden)
	}
	b.waitText(testID("job-terminal-state"), "Read-only")
	if got := b.eval(`document.querySelector('[data-testid="job-terminal-type"]').getAttribute('aria-pressed')`); got != "false" {
		t.Errorf("the type button is pressed (%q) before anyone chose to type", got)
	}

	// Read-only: keys typed into the terminal go nowhere.
	b.do("keys while read-only",
		chromedp.Focus(chromedp.CSS(testID("job-terminal")+" textarea")),
		typeKeys("echo nope\r"))
	time.Sleep(500 * time.Millisecond)
	if w, n := jobInput(); w != 0 || n != 0 {
		t.Errorf("read-only terminal sent %d writes (%d bytes) to the job, want none", w, n)
	}
	b.checkView("terminal")

	// Typing: chosen with the button; the shell echoes and runs it.
	b.do("choose to type", chromedp.Click(chromedp.CSS(testID("job-terminal-type"))))
	b.waitText(testID("job-terminal-type"), "Stop typing")
	b.waitText(testID("job-terminal-state"), "Typing into job")
	if focused := b.eval(`String(document.activeElement?.closest('[data-testid="job-terminal"]') !== null)`); focused != "true" {
		t.Errorf("the keyboard focus is not in the terminal after choosing to type")
	}
	b.do("type a command", typeKeys("echo typed-$((6*7))\r"))
	b.waitText(rows, "echo typed-$((6*7))") // the shell's echo of the keys
	b.waitText(rows, "typed-42")            // and what the command printed
	if strings.Contains(b.eval(`document.querySelector('`+rows+`').textContent`), "nope") {
		t.Errorf("keys typed while read-only reached the terminal")
	}
	if w, _ := jobInput(); w == 0 {
		t.Errorf("the job recorded no input after typing")
	}
	b.checkView("terminal-typing")

	// Shift+Escape leaves typing from the keyboard.
	b.do("stop typing from the keyboard", chromedp.KeyEvent(kb.Escape, chromedp.KeyModifiers(chromedp.ModifierShift)))
	b.waitText(testID("job-terminal-type"), "Type into the terminal")
	b.waitText(testID("job-terminal-state"), "Read-only")

	// Narrow: the page does not scroll sideways; the terminal box may.
	b.do("narrow viewport", chromedp.EmulateViewport(390, 844))
	b.waitText(rows, "typed-42")
	if over := b.eval(`String(document.documentElement.scrollWidth - document.documentElement.clientWidth)`); over != "0" {
		t.Errorf("the terminal view overflows a 390px viewport by %spx", over)
	}
	b.checkView("terminal-narrow")

	// The program ends: the terminal says so and takes no more keys.
	b.do("type again", chromedp.Click(chromedp.CSS(testID("job-terminal-type"))))
	b.waitText(testID("job-terminal-type"), "Stop typing")
	b.do("exit the shell", typeKeys("exit 3\r"))
	b.waitText(rows, "[exited: 3]")
	b.waitText(testID("job-terminal-state"), "ended")
	if got := b.eval(`document.querySelector('[data-testid="job-terminal-type"]').getAttribute('aria-disabled')`); got != "true" {
		t.Errorf("the type button is usable after the job ended (aria-disabled %q)", got)
	}
	b.checkView("terminal-ended-narrow")
	b.checkConsole()
}

// greenish reports whether a CSS rgb() colour is mostly green.
func greenish(css string) bool {
	var r, g, b int
	if _, err := fmt.Sscanf(css, "rgb(%d, %d, %d)", &r, &g, &b); err != nil {
		return false
	}
	return g > 120 && g > r+40 && g > b+40
}

// typeKeys types keys into the focused element as a keyboard does: each
// key's keydown carries its text, so the page's keydown handler can take
// the key and cancel what follows (chromedp.KeyEvent sends the text as a
// separate char event, which a page cannot cancel: xterm.js would get every
// key twice).
func typeKeys(keys string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		for _, r := range keys {
			var down, up *input.DispatchKeyEventParams
			text := ""
			for _, ev := range kb.Encode(r) {
				switch ev.Type {
				case kb.KeyDown:
					down = ev
				case kb.KeyUp:
					up = ev
				case kb.KeyChar:
					text = ev.Text
				}
			}
			for _, ev := range []*input.DispatchKeyEventParams{down, up} {
				if ev == nil {
					continue
				}
				p := *ev
				if p.Type == kb.KeyDown {
					p.Text, p.UnmodifiedText = text, text
				}
				if _, err := cdp.Call(ctx, t, input.DispatchKeyEvent, p); err != nil {
					return err
				}
			}
		}
		return nil
	})
}
