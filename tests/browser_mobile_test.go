package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// The phone-width browser tests: what a person sees on a 390 px wide
// screen. Each checks axe-core at 390 px and at 1280 px.

const (
	phoneWidth  = 390
	phoneHeight = 844
)

// TestBrowserNarrowJob: at 390 px, a terminal job's 80-column screen is
// readable in full (its box scrolls sideways, or it fits, and the page
// itself never does); selecting a job at the bottom of a long list brings
// its detail to the first screen, with a way back to the list; a job
// without limits shows no empty limits table.
func TestBrowserNarrowJob(t *testing.T) {
	t.Parallel()
	chrome := chromiumPath(t)
	srv := startServer(t)

	// An 80-column line, its two ends marked.
	line := "BEGIN" + strings.Repeat(".", 80-len("BEGIN")-len("THEEND")) + "THEEND"
	var term struct {
		ID       string
		Terminal *struct{ Cols, Rows int }
	}
	if status := srv.DoJSON(t, http.MethodPost, "/exec", map[string]any{
		"command":    fmt.Sprintf("printf '%%s\\n' '%s'; exec sleep 60", line),
		"background": true, "tty": true, "cols": 80, "rows": 12,
	}, &term); status != http.StatusAccepted || term.Terminal == nil || term.Terminal.Cols != 80 {
		t.Fatalf("POST /exec (tty): status %d, job %+v; want 202 with an 80-column terminal", status, term)
	}
	t.Cleanup(func() { srv.Do(t, http.MethodDelete, "/jobs/"+term.ID, nil).Body.Close() })
	// Newer jobs above it, so it is at the bottom of the list.
	var plain struct{ ID string }
	for i := range 8 {
		if status := srv.DoJSON(t, http.MethodPost, "/exec", map[string]any{
			"command": fmt.Sprintf("echo plain-%d", i),
		}, &plain); status != http.StatusOK {
			t.Fatalf("POST /exec: status %d, want 200", status)
		}
	}

	b := newBrowser(t, chrome)
	b.do("phone viewport", chromedp.EmulateViewport(phoneWidth, phoneHeight))
	loginURL, _ := uiLogin(t, srv)
	b.do("open the jobs view", chromedp.Navigate(loginURL+"&view=jobs"))
	b.waitText(testID("job-state-"+term.ID), "running")
	b.waitText(testID("job-state-"+plain.ID), "exited")
	t.Logf("the terminal job's row is at %s px on the page", b.eval(`String(Math.round(document.querySelector('[data-testid="job-select-`+term.ID+`"]').getBoundingClientRect().top + scrollY))`))

	b.do("select the terminal job", chromedp.Click(chromedp.CSS(testID("job-select-"+term.ID))))
	rows := testID("job-terminal") + " .xterm-rows"
	b.waitText(rows, "THEEND")

	// The detail is on the first screen, and in view now.
	for _, sel := range []string{"#job-output-heading", testID("job-terminal")} {
		got := b.eval(`(() => { const r = document.querySelector('` + sel + `').getBoundingClientRect();
			return JSON.stringify({page: Math.round(r.top + scrollY), view: Math.round(r.top)}); })()`)
		var pos struct{ Page, View int }
		mustUnmarshal(t, got, &pos)
		t.Logf("after selecting the job, %s is at %d px on the page", sel, pos.Page)
		if pos.Page < 0 || pos.Page >= phoneHeight || pos.View < 0 || pos.View >= phoneHeight {
			t.Errorf("after selecting the job, %s is at %d px on the page (%d px in the viewport); want it on the first screen (< %d px)", sel, pos.Page, pos.View, phoneHeight)
		}
	}
	if hash := b.eval(`location.hash`); hash != "#/jobs?job="+term.ID {
		t.Errorf("location.hash = %q after selecting, want the job in the route (the phone's back goes to the list)", hash)
	}

	// The whole 80-column screen can be read: each end of the line is in
	// the terminal's visible box at some horizontal scroll of that box,
	// the box is within the viewport, and the page never scrolls sideways.
	b.noSidewaysPage("the terminal job")
	ends := b.eval(`(() => {
		const box = document.querySelector('[data-testid="job-terminal"]');
		const row = [...box.querySelectorAll('.xterm-rows > div')].find((d) => d.textContent.includes('THEEND'));
		const rect = (word) => {
			const walker = document.createTreeWalker(row, NodeFilter.SHOW_TEXT);
			for (let n = walker.nextNode(); n; n = walker.nextNode()) {
				const i = n.data.indexOf(word);
				if (i < 0) continue;
				const range = document.createRange();
				range.setStart(n, i);
				range.setEnd(n, i + word.length);
				return range.getBoundingClientRect();
			}
			return null;
		};
		const inside = (r) => {
			const b = box.getBoundingClientRect();
			return r !== null && r.width > 0 && r.left >= b.left + box.clientLeft - 0.5 && r.right <= b.left + box.clientLeft + box.clientWidth + 0.5;
		};
		box.scrollLeft = 0;
		const begin = inside(rect('BEGIN'));
		box.scrollLeft = box.scrollWidth;
		const end = rect('THEEND');
		const endInside = inside(end);
		box.scrollLeft = 0;
		const b = box.getBoundingClientRect();
		return JSON.stringify({begin, end: endInside, cell: end ? end.width / 6 : 0,
			boxLeft: b.left, boxRight: b.right, scrollWidth: box.scrollWidth, clientWidth: box.clientWidth,
			overflowX: getComputedStyle(box).overflowX});
	})()`)
	var geom struct {
		Begin, End               bool
		Cell, BoxLeft, BoxRight  float64
		ScrollWidth, ClientWidth int
		OverflowX                string
	}
	mustUnmarshal(t, ends, &geom)
	if !geom.Begin || !geom.End {
		t.Errorf("the 80-column line cannot be read in full at %d px: start visible %v, end visible at the furthest scroll %v (%s)", phoneWidth, geom.Begin, geom.End, ends)
	}
	if geom.BoxLeft < 0 || geom.BoxRight > phoneWidth {
		t.Errorf("the terminal's box spans %.0f..%.0f px, outside the %d px viewport", geom.BoxLeft, geom.BoxRight, phoneWidth)
	}
	// Fitting 80 columns by shrinking the font until it is unreadable does not count.
	if geom.Cell < 6 {
		t.Errorf("a terminal character is %.1f px wide at %d px, want at least 6 (readable)", geom.Cell, phoneWidth)
	}
	// Phones hide scrollbars: a line says the box scrolls.
	b.do("the terminal says it scrolls sideways", chromedp.WaitVisible(chromedp.CSS(testID("job-terminal-wide"))))
	t.Logf("terminal at %d px: box %d px wide, content %d px, overflow-x %s, character %.1f px", phoneWidth, geom.ClientWidth, geom.ScrollWidth, geom.OverflowX, geom.Cell)
	b.checkView("narrow-terminal-job")

	// The way back: the list again, the keyboard focus on the job it left.
	b.do("back to the list", chromedp.Click(chromedp.CSS(testID("job-back"))))
	b.do("the list is shown", chromedp.WaitVisible(chromedp.CSS(testID("job-select-"+plain.ID))))
	b.do("the detail is closed", chromedp.WaitNotVisible(chromedp.ID("job-output-panel")))
	if got := b.eval(`document.activeElement?.dataset?.testid ?? ''`); got != "job-select-"+term.ID {
		t.Errorf("focus after going back is on %q, want the job's own row (job-select-%s)", got, term.ID)
	}
	if hash := b.eval(`location.hash`); hash != "#/jobs" {
		t.Errorf("location.hash = %q after going back, want #/jobs", hash)
	}
	b.noSidewaysPage("the job list")

	// The browser's back goes back to the list too.
	b.do("select the plain job", chromedp.Click(chromedp.CSS(testID("job-select-"+plain.ID))))
	b.waitText(testID("job-output-exit"), "exited: 0")
	b.do("the browser's back", chromedp.NavigateBack())
	b.do("the list after the browser's back", chromedp.WaitVisible(chromedp.CSS(testID("job-select-"+term.ID))))
	b.do("no detail after the browser's back", chromedp.WaitNotVisible(chromedp.ID("job-output-panel")))
	b.do("forward to the job again", chromedp.NavigateForward())
	b.waitText(testID("job-output-exit"), "exited: 0")

	// A job with no limits: one line says so, no empty table.
	b.waitText(`#job-facts [data-fact="Limits"]`, "none")
	if got := b.eval(`String(document.body.innerText.includes('No limits.'))`); got != "false" {
		t.Errorf("the page shows a \"No limits.\" table for a job without limits")
	}
	if got := b.eval(`String(document.getElementById('job-limits-table').offsetParent !== null)`); got != "false" {
		t.Errorf("the limits table is drawn for a job without limits")
	}
	b.noSidewaysPage("a plain job")
	b.checkView("narrow-plain-job")

	// At desktop width the list stays beside the detail's way in.
	b.do("desktop viewport", chromedp.EmulateViewport(1280, 800))
	b.do("select the terminal job wide", chromedp.Click(chromedp.CSS(testID("job-select-"+term.ID))))
	// xterm.js draws only while its element is in view.
	b.do("scroll to the terminal", chromedp.ScrollIntoView(chromedp.CSS(testID("job-terminal"))))
	b.waitText(rows, "THEEND")
	b.do("no sideways note when the terminal fits", chromedp.WaitNotVisible(chromedp.CSS(testID("job-terminal-wide"))))
	b.do("the list stays at desktop width", chromedp.WaitVisible(chromedp.CSS(testID("job-select-"+plain.ID))))
	b.checkView("wide-terminal-job")
	b.checkConsole()
}

// TestBrowserAgentLineage: every agent shows a short label beside its id
// (its directory's base name and creation time); each depth label is the
// depth the API gives, and the tree's nesting agrees with it: a spawned
// child one level in, a fork (which keeps its parent's depth) at its
// parent's level, marked as a fork of it. At 390 and 1280 px.
func TestBrowserAgentLineage(t *testing.T) {
	t.Parallel()
	chrome := chromiumPath(t)
	srv := startServer(t)
	repo := filepath.Join(t.TempDir(), "label-repo")
	if err := os.Mkdir(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	type agent struct {
		ID, ParentID, Origin, Cwd, CreatedAt string
		Depth                                int
	}
	var root, child, fork, childFork agent
	if status := srv.DoJSON(t, http.MethodPost, "/agents", map[string]any{"cwd": repo}, &root); status != http.StatusCreated {
		t.Fatalf("POST /agents: status %d, want 201", status)
	}
	if status := srv.DoJSON(t, http.MethodPost, "/agents/"+root.ID+"/spawn", map[string]any{}, &child); status != http.StatusCreated {
		t.Fatalf("spawn: status %d, want 201", status)
	}
	if status := srv.DoJSON(t, http.MethodPost, "/agents/"+root.ID+"/fork", map[string]any{}, &fork); status != http.StatusCreated {
		t.Fatalf("fork: status %d, want 201", status)
	}
	if status := srv.DoJSON(t, http.MethodPost, "/agents/"+child.ID+"/fork", map[string]any{}, &childFork); status != http.StatusCreated {
		t.Fatalf("fork of the child: status %d, want 201", status)
	}
	var listed []agent
	if status := srv.DoJSON(t, http.MethodGet, "/agents", nil, &listed); status != http.StatusOK || len(listed) != 4 {
		t.Fatalf("GET /agents: status %d, %d agents; want 200 with 4", status, len(listed))
	}
	// A job of the root's, for its label in the jobs view.
	var call struct{ JobID string }
	if status := srv.DoJSON(t, http.MethodPost, "/agents/"+root.ID+"/tools/bash", map[string]any{
		"callId": "call-1", "arguments": map[string]any{"command": "echo labelled"},
	}, &call); status != http.StatusOK || call.JobID == "" {
		t.Fatalf("tool call: status %d, job %q", status, call.JobID)
	}

	b := newBrowser(t, chrome)
	loginURL, _ := uiLogin(t, srv)
	b.do("open the agents view", chromedp.Navigate(loginURL+"&view=agents"))
	for _, a := range listed {
		b.do("see agent "+a.ID, chromedp.WaitVisible(chromedp.CSS(testID("agent-"+a.ID))))
	}
	timeOfDay := regexp.MustCompile(`\b\d{2}:\d{2}\b`)
	check := func(width int) {
		t.Helper()
		for _, a := range listed {
			if a.Cwd != repo {
				t.Errorf("agent %s (%s) has cwd %q, want its root's %q", a.ID, a.Origin, a.Cwd, repo)
			}
			label := b.eval(`document.querySelector('[data-testid="agent-label-` + a.ID + `"]')?.textContent ?? '(none)'`)
			if !strings.Contains(label, "label-repo") || !timeOfDay.MatchString(label) {
				t.Errorf("%d px: agent %s is labelled %q, want its directory's base name and creation time", width, a.ID, label)
			}
			// The label sits beside the id, in the same button.
			if got := b.eval(`document.querySelector('[data-agent-button="` + a.ID + `"]')?.textContent ?? ''`); !strings.Contains(got, a.ID) || !strings.Contains(got, "label-repo") {
				t.Errorf("%d px: agent %s's button reads %q, want its id and its label", width, a.ID, got)
			}
			if got, want := b.eval(`document.querySelector('[data-testid="agent-depth-`+a.ID+`"]')?.textContent ?? '(none)'`), fmt.Sprintf("depth %d", a.Depth); got != want {
				t.Errorf("%d px: agent %s (%s) is labelled %q, the API says %q", width, a.ID, a.Origin, got, want)
			}
			nesting := b.eval(`String(((el) => { let n = 0; for (let p = el.parentElement; p; p = p.parentElement) if (p.matches('ul.tree-group')) n++; return n; })(document.querySelector('li[data-agent-id="` + a.ID + `"]')))`)
			if nesting != fmt.Sprint(a.Depth) {
				t.Errorf("%d px: agent %s (%s, depth %d) is drawn %s levels in", width, a.ID, a.Origin, a.Depth, nesting)
			}
		}
		for _, f := range []agent{fork, childFork} {
			b.waitText(testID("agent-"+f.ID), "fork of "+f.ParentID)
		}
		b.noSidewaysPage(fmt.Sprintf("the agents view at %d px", width))
	}
	if root.Depth != 0 || child.Depth != 1 || fork.Depth != root.Depth || childFork.Depth != child.Depth {
		t.Errorf("depths from the API: root %d, spawned child %d, fork of the root %d, fork of the child %d; the UI's test assumes forks keep their parent's depth",
			root.Depth, child.Depth, fork.Depth, childFork.Depth)
	}
	check(1280)
	b.do("select the root", chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-agent-button=%q]`, root.ID))))
	b.waitText("#transcript-caption", root.ID+" (label-repo · ")
	b.checkView("agents-lineage")

	// The jobs view names the agent the same way: in its filter and its rows.
	b.do("open the jobs view", chromedp.Click(chromedp.CSS(`[data-testid="nav-jobs"]`)))
	b.waitText(testID("job-state-"+call.JobID), "exited")
	b.waitText(fmt.Sprintf(`tr[data-job-id=%q] .agent-cell`, call.JobID), "label-repo")
	b.do("select the root's job", chromedp.Click(chromedp.CSS(testID("job-select-"+call.JobID))))
	b.waitText(`#job-facts [data-fact="Agent"]`, root.ID+" (label-repo · ")
	b.waitOption("jobs-agent", root.ID)
	if got := b.eval(`[...document.getElementById('jobs-agent').options].find((o) => o.value === '` + root.ID + `')?.textContent ?? ''`); !strings.Contains(got, root.ID) || !strings.Contains(got, "label-repo") {
		t.Errorf("the agent filter offers %q for %s, want its label and id", got, root.ID)
	}

	b.do("phone viewport", chromedp.EmulateViewport(phoneWidth, phoneHeight))
	b.do("agents at phone width", chromedp.Click(chromedp.CSS(`[data-testid="nav-agents"]`)))
	b.do("the tree at phone width", chromedp.WaitVisible(chromedp.CSS(testID("agent-"+childFork.ID))))
	check(phoneWidth)
	b.checkView("agents-lineage-narrow")
	b.checkConsole()
}

// noSidewaysPage fails the test when the document is wider than the viewport.
func (b *browser) noSidewaysPage(what string) {
	b.t.Helper()
	if over := b.eval(`String(document.documentElement.scrollWidth - document.documentElement.clientWidth)`); over != "0" {
		b.t.Errorf("%s: the page scrolls sideways by %s px", what, over)
	}
}

func mustUnmarshal(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
}
