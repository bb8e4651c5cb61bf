package tests

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// The browser tests drive headless Chromium against the real server and the
// embedded UI. They never sleep: every wait is a DOM condition polled in the
// page under a context deadline.

const (
	defaultChromium = "/usr/bin/chromium"
	stepTimeout     = 20 * time.Second
	testTimeout     = 3 * time.Minute
)

// TestBrowserUI walks the three views: the declarations with a contributor
// registered by the test, a background job cancelled from its Cancel button,
// and a spawned agent nested under its parent. It saves a full-page
// screenshot of each view at 1280×800 and at phone width.
func TestBrowserUI(t *testing.T) {
	chrome := chromiumPath(t)
	srv := startServer(t)
	b := newBrowser(t, chrome)

	// Arrange the server state the views should show.
	status := srv.doJSON(t, http.MethodPost, "/contributors", map[string]any{
		"name": "test.ui",
		"keys": []map[string]string{{"key": "DSH_UI_TEST", "description": "set by the browser test"}},
		"resolver": map[string]any{
			"kind":   "static",
			"values": map[string]string{"DSH_UI_TEST": "1"},
		},
	}, nil)
	if status != http.StatusCreated {
		t.Fatalf("POST /contributors: status %d, want 201", status)
	}

	// A webhook contributor counts its calls: the declarations view must not
	// cause any (listing declarations never runs a resolver).
	var webhookCalls atomic.Int64
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		webhookCalls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"DSH_UI_HOOK":"called"}`))
	}))
	t.Cleanup(hook.Close)
	if status := srv.doJSON(t, http.MethodPost, "/contributors", map[string]any{
		"name":     "test.ui.hook",
		"keys":     []map[string]string{{"key": "DSH_UI_HOOK", "description": "from a webhook"}},
		"resolver": map[string]any{"kind": "webhook", "url": hook.URL, "timeoutMs": 5000},
	}, nil); status != http.StatusCreated {
		t.Fatalf("POST /contributors (webhook): status %d, want 201", status)
	}

	// A plugin with a lease, owning one more contributor.
	var plugin struct{ ID string }
	if status := srv.doJSON(t, http.MethodPost, "/plugins", map[string]any{
		"name": "ui-harness", "leaseSeconds": 600,
	}, &plugin); status != http.StatusCreated {
		t.Fatalf("POST /plugins: status %d, want 201", status)
	}
	if status := srv.doJSON(t, http.MethodPost, "/contributors", map[string]any{
		"name":     "test.ui.leased",
		"plugin":   plugin.ID,
		"keys":     []map[string]string{{"key": "DSH_UI_LEASED", "description": "lives as long as its plugin"}},
		"resolver": map[string]any{"kind": "static", "values": map[string]string{"DSH_UI_LEASED": "yes"}},
	}, nil); status != http.StatusCreated {
		t.Fatalf("POST /contributors under plugin %s: status %d, want 201", plugin.ID, status)
	}

	// Declarations: the default view.
	b.do("open the UI with the token", chromedp.Navigate(srv.URL+"/ui/#token="+srv.Token))
	for _, key := range []string{"DSH_HOME", "DSH_SHELL", "DSH_SESSION_ID", "DSH_UI_TEST", "DSH_UI_LEASED"} {
		b.do("see declaration "+key, chromedp.WaitVisible(chromedp.CSS(declRow(key))))
	}
	b.waitText(declRow("DSH_UI_TEST"), "test.ui")
	b.waitText(declRow("DSH_UI_TEST"), "set by the browser test")
	b.waitText(declRow("DSH_HOME"), "built-in")
	b.waitText(declRow("DSH_UI_LEASED"), "ui-harness")
	b.do("lease expiry shown", chromedp.WaitVisible(chromedp.CSS(declRow("DSH_UI_LEASED")+" time")))
	b.waitText(fmt.Sprintf(`#plugins-body tr[data-plugin-id=%q]`, plugin.ID), "test.ui.leased")
	if hash := b.eval(`location.hash`); hash != "#/declarations" {
		t.Errorf("location.hash = %q after load, want %q (the token must leave the URL)", hash, "#/declarations")
	}
	if got := b.eval(`sessionStorage.getItem('dshd.token')`); got != srv.Token {
		t.Errorf("sessionStorage token = %q, want the server token", got)
	}
	b.screenshot("declarations")

	b.do("filter by contributor", chromedp.SendKeys(chromedp.ID("declarations-filter"), "test.UI"))
	b.do("filtered out DSH_HOME", chromedp.WaitNotPresent(chromedp.CSS(declRow("DSH_HOME"))))
	b.do("DSH_UI_LEASED matches too (contributor test.ui.leased)",
		chromedp.WaitVisible(chromedp.CSS(declRow("DSH_UI_LEASED"))))
	b.do("DSH_UI_TEST still shown", chromedp.WaitVisible(chromedp.CSS(declRow("DSH_UI_TEST"))))
	b.waitText("#declarations-caption", "3 of 6")
	b.screenshot("declarations-filtered")

	b.setInput("declarations-filter", "")
	b.do("group by contributor", chromedp.Click(chromedp.ID("declarations-group")))
	b.do("grouped rows", chromedp.WaitVisible(chromedp.CSS(
		`#declarations-table tbody[data-contributor="test.ui"] tr[data-key="DSH_UI_TEST"]`)))
	b.do("built-ins come back", chromedp.WaitVisible(chromedp.CSS(declRow("DSH_HOME"))))
	b.screenshot("declarations-grouped")
	b.do("refresh the declarations", chromedp.Click(chromedp.ID("declarations-refresh")))
	b.do("still listed", chromedp.WaitVisible(chromedp.CSS(declRow("DSH_UI_HOOK"))))
	if n := webhookCalls.Load(); n != 0 {
		t.Errorf("the declarations view ran the webhook resolver %d times, want 0", n)
	}

	// Jobs: one finished foreground job and one running background job.
	var done, bg struct{ ID, State string }
	if status := srv.doJSON(t, http.MethodPost, "/exec", map[string]any{
		"command": "echo out-line; echo err-line >&2; exit 3",
	}, &done); status != http.StatusOK {
		t.Fatalf("POST /exec (foreground): status %d, want 200", status)
	}
	if status := srv.doJSON(t, http.MethodPost, "/exec", map[string]any{
		"command":    "echo started-ui-job; sleep 60",
		"background": true,
	}, &bg); status != http.StatusAccepted {
		t.Fatalf("POST /exec (background): status %d, want 202", status)
	}
	if bg.ID == "" || done.ID == "" {
		t.Fatalf("POST /exec returned no job id: %+v %+v", done, bg)
	}

	b.do("open the jobs view", chromedp.Click(chromedp.CSS(`[data-testid="nav-jobs"]`)))
	b.waitText(testID("job-state-"+bg.ID), "running")
	b.waitText(testID("job-state-"+done.ID), "exited")
	b.waitText(`tr[data-job-id="`+done.ID+`"]`, "3")

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

	// Real buttons work from the keyboard: focus and press Enter.
	b.do("select the finished job with the keyboard",
		chromedp.Focus(chromedp.CSS(testID("job-select-"+done.ID))),
		chromedp.KeyEvent("\r"))
	b.waitText(testID("job-output"), "err-line")
	b.waitText(testID("job-output-exit"), "exited: 3")
	b.screenshot("jobs")

	// Agents: a root and its spawned child, nested.
	var parent, child struct{ ID, ParentID, Origin string }
	if status := srv.doJSON(t, http.MethodPost, "/agents", map[string]any{}, &parent); status != http.StatusCreated {
		t.Fatalf("POST /agents: status %d, want 201", status)
	}
	if status := srv.doJSON(t, http.MethodPost, "/agents/"+parent.ID+"/spawn", map[string]any{}, &child); status != http.StatusCreated {
		t.Fatalf("POST /agents/%s/spawn: status %d, want 201", parent.ID, status)
	}

	// One model tool call gives the parent's transcript events to show.
	var result struct{ IsError bool }
	if status := srv.doJSON(t, http.MethodPost, "/agents/"+parent.ID+"/tools/bash", map[string]any{
		"callId":    "call-ui-1",
		"arguments": map[string]any{"command": "echo transcript-line"},
	}, &result); status != http.StatusOK || result.IsError {
		t.Fatalf("POST /agents/%s/tools/bash: status %d, isError %v", parent.ID, status, result.IsError)
	}

	b.do("open the agents view", chromedp.Click(chromedp.CSS(`[data-testid="nav-agents"]`)))
	nested := fmt.Sprintf(`li[data-agent-id=%q] > ul > li[data-agent-id=%q]`, parent.ID, child.ID)
	b.do("child nested under parent", chromedp.WaitVisible(chromedp.CSS(nested)))
	b.waitText(nested, "spawn")
	b.waitText(fmt.Sprintf(`li[data-agent-id=%q]`, parent.ID), "root")

	b.do("select the parent", chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-agent-button=%q]`, parent.ID))))
	b.do("transcript shown", chromedp.WaitVisible(chromedp.CSS(`#transcript-body tr[data-event-type="session"]`)))
	b.waitText("#transcript-caption", parent.ID)
	b.waitText(`#transcript-body tr[data-event-type="tool/call"]`, "echo transcript-line")
	b.waitText(`#transcript-body tr[data-event-type="tool/result"]`, "transcript-line")
	b.screenshot("agents")

	// Phone width: the page must not scroll sideways; wide tables scroll in
	// their own box.
	b.do("narrow viewport", chromedp.EmulateViewport(390, 844))
	for _, view := range []string{"declarations", "jobs", "agents"} {
		b.do("open "+view+" narrow", chromedp.Click(chromedp.CSS(`[data-testid="nav-`+view+`"]`)))
		b.do(view+" visible", chromedp.WaitVisible(chromedp.ID("view-"+view)))
		b.waitText(fmt.Sprintf(`#view-%s h1`, view), strings.ToUpper(view[:1])+view[1:])
		if view == "agents" {
			b.do("tree rendered", chromedp.WaitVisible(chromedp.CSS(nested)))
		} else {
			b.do(view+" rows rendered", chromedp.WaitVisible(chromedp.CSS(`#view-`+view+` tbody tr`)))
		}
		if over := b.eval(`String(document.documentElement.scrollWidth - document.documentElement.clientWidth)`); over != "0" {
			t.Errorf("%s view overflows a 390px viewport by %spx", view, over)
		}
		b.screenshot(view + "-narrow")
	}

	b.checkNoPageErrors()
}

// TestBrowserTokenPrompt checks the token paths: no token shows the prompt;
// a wrong token in the fragment gets a 401, which clears it and shows the
// prompt with an error; the right token typed into the form opens the UI.
func TestBrowserTokenPrompt(t *testing.T) {
	chrome := chromiumPath(t)
	srv := startServer(t)
	b := newBrowser(t, chrome)

	b.do("open without a token", chromedp.Navigate(srv.URL+"/ui/"))
	b.do("prompt shown", chromedp.WaitVisible(chromedp.CSS(testID("token-form"))))
	b.do("no error yet", chromedp.WaitNotVisible(chromedp.ID("token-error")))

	b.do("open with a wrong token", chromedp.Navigate(srv.URL+"/ui/#token=not-the-token"))
	b.do("prompt shown again", chromedp.WaitVisible(chromedp.CSS(testID("token-form"))))
	b.waitText("#token-error", "401")
	if hash := b.eval(`location.hash`); strings.Contains(hash, "token") {
		t.Errorf("location.hash = %q, the token must leave the URL", hash)
	}
	if got := b.eval(`String(sessionStorage.getItem('dshd.token'))`); got != "null" {
		t.Errorf("sessionStorage token = %q after a 401, want it cleared", got)
	}
	if got := b.eval(`document.activeElement.id`); got != "token-input" {
		t.Errorf("focus is on %q, want the token input", got)
	}
	b.screenshot("token-prompt")

	// Enter submits the form, as it would for a person at the keyboard.
	b.do("type the right token", chromedp.SendKeys(chromedp.ID("token-input"), srv.Token+"\r"))
	b.do("declarations shown", chromedp.WaitVisible(chromedp.CSS(declRow("DSH_HOME"))))
	b.do("prompt hidden", chromedp.WaitNotVisible(chromedp.CSS(testID("token-form"))))

	b.checkNoPageErrors()
}

// browser is one headless Chromium tab bound to a test.
type browser struct {
	t         *testing.T
	ctx       context.Context
	artifacts string

	mu         sync.Mutex
	pageErrors []string
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
		if os.Getenv("CI") != "" {
			t.Fatalf("chromium not found at %s (set DSHD_CHROMIUM): %v", path, err)
		}
		t.Skipf("chromium not found at %s (set DSHD_CHROMIUM to run the browser tests): %v", path, err)
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
	if err := chromedp.Listen(tabCtx, func(ev any) {
		if ev, ok := ev.(*runtime.EventExceptionThrown); ok {
			b.mu.Lock()
			b.pageErrors = append(b.pageErrors, exceptionText(ev.ExceptionDetails))
			b.mu.Unlock()
		}
	}); err != nil {
		t.Fatalf("listen to page events: %v", err)
	}
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

// checkNoPageErrors fails the test for any uncaught exception in the page.
func (b *browser) checkNoPageErrors() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.pageErrors {
		b.t.Errorf("uncaught exception in the page: %s", e)
	}
}

func exceptionText(d *runtime.ExceptionDetails) string {
	if d == nil {
		return "(no details)"
	}
	text := d.Text
	if d.Exception != nil && d.Exception.Description != "" {
		text += " " + d.Exception.Description
	}
	return fmt.Sprintf("%s (%s:%d:%d)", text, d.URL, d.LineNumber+1, d.ColumnNumber+1)
}

// artifactsDir is $DSHD_ARTIFACTS, else artifacts/browser at the repository
// root (ignored by git).
func artifactsDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("DSHD_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("..", "artifacts", "browser")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("artifacts dir: %v", err)
	}
	return dir
}

func declRow(key string) string {
	return fmt.Sprintf(`#declarations-table tr[data-key=%q]`, key)
}

func testID(id string) string {
	return fmt.Sprintf(`[data-testid=%q]`, id)
}
