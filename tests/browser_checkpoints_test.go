package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/dshd/dshd/internal/testenv"
)

// TestBrowserWorkspaceCheckpoints: an agent created with a snapshot
// workspace makes three bash tool calls that change files (and one that
// changes nothing); the agents view shows its checkpoints as a timeline of
// three entries, oldest first, with the call ids and the changed paths the
// API lists, each call's result in the transcript marked with its
// checkpoint, and a text file's diff only when asked for (markup in the file
// stays text). Asking to rewind and then keeping the view sends nothing; a
// rewind to before the second call, confirmed in the page, leaves one entry
// and the agent's next command sees the old file; Undo brings the three
// back; a call made meanwhile appears without a reload. While a background
// job of the view runs, a call's changes are listed as pending and a rewind
// is refused with the server's reason; the next call after the job makes
// one entry naming both calls. axe-core finds nothing at 1280 and 390 px,
// and the page never scrolls sideways.
func TestBrowserWorkspaceCheckpoints(t *testing.T) {
	t.Parallel()
	testenv.NeedRoot(t, "snapshot workspaces are overlayfs mounts in mount namespaces, which need CAP_SYS_ADMIN")
	chrome := chromiumPath(t)
	srv := startServer(t)
	needSnapshots(t, srv)

	repo := filepath.Join(t.TempDir(), "cp-repo")
	if err := os.Mkdir(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"notes.md": "one\n<b>two</b>\nthree\n", "old.txt": "old\n", "keep.txt": "keep\n"} {
		if err := os.WriteFile(filepath.Join(repo, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a := srv.newAgent(t, "/agents", map[string]any{"cwd": repo, "workspace": "snapshot"})
	if a.Workspace.Mode != "snapshot" {
		t.Fatalf("an agent created with a snapshot workspace has mode %q", a.Workspace.Mode)
	}
	// Three calls that change files, and between them one that does not
	// (it makes no checkpoint).
	want := []struct {
		call, command string
		changes       []string // "kind path", as the API orders them
	}{
		{"call_add", "echo hello > added.txt", []string{"added added.txt"}},
		{"call_edit", "sed -i 's|<b>two</b>|<i>TWO</i>|' notes.md", []string{"modified notes.md"}},
		{"call_move", "rm old.txt && mv keep.txt kept.txt", []string{"deleted keep.txt", "added kept.txt", "deleted old.txt"}},
	}
	for i, w := range want {
		srv.toolCall(t, a.ID, w.call, w.command)
		if i == 0 {
			srv.toolCall(t, a.ID, "call_look", "ls")
		}
	}
	var list checkpointList
	if st := srv.DoJSON(t, "GET", "/agents/"+a.ID+"/checkpoints", nil, &list); st != 200 || len(list.Checkpoints) != len(want) {
		t.Fatalf("GET checkpoints = %d, %+v; want %d checkpoints", st, list, len(want))
	}
	for i, w := range want {
		c := list.Checkpoints[i]
		if c.CallID != w.call || strings.Join(changeList(c.Changes), ", ") != strings.Join(w.changes, ", ") {
			t.Fatalf("checkpoint %d from the API: call %s, changes %v; want %s, %v", i+1, c.CallID, changeList(c.Changes), w.call, w.changes)
		}
	}

	b := newBrowser(t, chrome)
	loginURL, _ := uiLogin(t, srv)
	b.do("open the agents view", chromedp.Navigate(loginURL+"&view=agents"))
	b.do("see the agent", chromedp.WaitVisible(chromedp.CSS(testID("agent-"+a.ID))))
	b.do("select the agent", chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-agent-button=%q]`, a.ID))))
	b.waitText(testID("checkpoints-hint"), "3 checkpoints")

	// The timeline, as drawn: each entry's call, its number, its changed
	// paths (by their attributes and by the text a person reads).
	type entry struct {
		Call    string   `json:"call"`
		Text    string   `json:"text"`
		Changes []string `json:"changes"`
	}
	timeline := func() []entry {
		t.Helper()
		var got []entry
		mustUnmarshal(t, b.eval(`JSON.stringify([...document.querySelectorAll('#checkpoints-timeline > li')].map((li) => ({
			call: li.dataset.callId, text: li.textContent,
			changes: [...li.querySelectorAll('.checkpoint-changes > li')].map((c) => c.dataset.changeKind + ' ' + c.dataset.changePath),
		})))`), &got)
		return got
	}
	checkTimeline := func(n int) {
		t.Helper()
		got := timeline()
		if len(got) != n {
			t.Fatalf("the timeline has %d entries, want %d: %+v", len(got), n, got)
		}
		for i, w := range want[:n] {
			e := got[i]
			if e.Call != w.call || strings.Join(e.Changes, ", ") != strings.Join(w.changes, ", ") {
				t.Errorf("entry %d: call %s, changes %v; want %s, %v", i+1, e.Call, e.Changes, w.call, w.changes)
			}
			if !strings.Contains(e.Text, "Checkpoint "+fmt.Sprint(i+1)) || !strings.Contains(e.Text, "call "+w.call) {
				t.Errorf("entry %d reads %q, want its number and call %s", i+1, e.Text, w.call)
			}
			for _, c := range w.changes {
				kind, p, _ := strings.Cut(c, " ")
				if !strings.Contains(e.Text, kind) || !strings.Contains(e.Text, p) {
					t.Errorf("entry %d reads %q, want %q shown", i+1, e.Text, c)
				}
			}
		}
	}
	checkTimeline(3)
	// The calls' results in the transcript carry their checkpoint's number;
	// the call that changed nothing carries none.
	result := func(call string) string {
		return fmt.Sprintf(`#transcript-body tr[data-event-type="tool/result"][data-call-id=%q]`, call)
	}
	for i, w := range want {
		b.waitText(result(w.call)+" .checkpoint-mark", fmt.Sprintf("checkpoint %d", i+1))
	}
	b.waitText(result("call_look"), "call call_look")
	if got := b.eval(`String(document.querySelector('` + result("call_look") + ` .checkpoint-mark'))`); got != "null" {
		t.Errorf("the call that changed nothing is marked %s", got)
	}

	// A diff only on request, drawn as text.
	diffRequests := `String(performance.getEntriesByType('resource').filter((e) => e.name.includes('checkpoints?diff=true')).length)`
	if got := b.eval(diffRequests); got != "0" {
		t.Errorf("%s checkpoint diff requests before any was asked for", got)
	}
	b.do("ask for notes.md's diff in call_edit", chromedp.Click(chromedp.CSS(testID("checkpoint-diff-button-call_edit-notes.md"))))
	diff := testID("checkpoint-diff-call_edit-notes.md")
	b.waitText(diff, "+<i>TWO</i>")
	b.waitText(diff, "-<b>two</b>")
	if got := b.eval(`String(document.querySelectorAll('#checkpoints-timeline b, #checkpoints-timeline i').length)`); got != "0" {
		t.Errorf("the diff's markup became %s elements", got)
	}
	if got := b.eval(diffRequests); got != "1" {
		t.Errorf("%s checkpoint diff requests after one was asked for, want 1", got)
	}
	b.noSidewaysPage("the checkpoints at 1280 px")
	b.checkView("checkpoints")
	compareCheckpoints(t, b, srv, a.ID)

	// Asking to rewind, then keeping the view: nothing is sent.
	rewinds := `String(performance.getEntriesByType('resource').filter((e) => e.name.endsWith('/rewind')).length)`
	b.do("ask to rewind to after call_add", chromedp.Click(chromedp.CSS(testID("rewind-after-call_add"))))
	b.waitText(testID("checkpoint-call_add"), "Set the view back to after call call_add?")
	b.do("keep the view", chromedp.Click(chromedp.CSS(testID("rewind-cancel-call_add"))))
	b.do("the question goes away", chromedp.WaitNotPresent(chromedp.CSS(testID("rewind-confirm-call_add"))))
	if got := b.eval(rewinds); got != "0" {
		t.Errorf("%s rewind requests after the rewind was not confirmed", got)
	}

	// A rewind to before call_edit, confirmed: one entry left, the agent
	// sees the old notes.md, the transcript records it, the workspace's
	// changes are listed again, and Undo is offered.
	b.do("ask to rewind to before call_edit", chromedp.Click(chromedp.CSS(testID("rewind-before-call_edit"))))
	b.waitText(testID("checkpoint-call_edit"), "Set the view back to before call call_edit?")
	b.checkView("checkpoints-confirm")
	b.do("confirm the rewind", chromedp.Click(chromedp.CSS(testID("rewind-confirm-call_edit"))))
	b.waitText(testID("checkpoints-status"), "Rewound the view to before call call_edit: 1 checkpoint left.")
	b.waitText(testID("checkpoints-hint"), "1 checkpoint,")
	checkTimeline(1)
	// The comparison named call_move, set aside now: it goes, and the
	// pickers offer what is left.
	b.do("the comparison goes", chromedp.WaitNotVisible(chromedp.CSS(testID("checkpoints-compare-changes"))))
	if got := b.eval(`[...document.getElementById('checkpoints-to').options].map((o) => o.value).join(' ')`); got != "call_add" {
		t.Errorf("after the rewind To offers %q, want call_add", got)
	}
	b.do("Undo is offered", chromedp.WaitVisible(chromedp.CSS(testID("checkpoints-undo"))))
	b.waitText(testID("checkpoints-undo"), "Undo the last rewind")
	if got := b.eval(`document.activeElement?.dataset.testid ?? ''`); got != "checkpoints-undo" {
		t.Errorf("after the rewind the focus is on %q, want the Undo button", got)
	}
	b.waitText(`#transcript-body tr[data-event-type="workspace/rewind"]`, "set back to before call call_edit")
	b.do("the workspace lists notes.md no more", chromedp.WaitNotPresent(chromedp.CSS(`#workspace-changes tr[data-change-path="notes.md"]`)))
	if got := srv.toolCall(t, a.ID, "call_cat", "cat notes.md old.txt keep.txt added.txt"); got != "one\n<b>two</b>\nthree\nold\nkeep\nhello" {
		t.Errorf("after the rewind the agent reads %q", got)
	}
	b.screenshot("checkpoints-rewound")

	b.do("undo the rewind", chromedp.Click(chromedp.CSS(testID("checkpoints-undo"))))
	b.waitText(testID("checkpoints-status"), "Undid the last rewind")
	b.waitText(testID("checkpoints-hint"), "3 checkpoints")
	checkTimeline(3)
	b.waitText(`#transcript-body tr[data-event-type="workspace/rewind"]:last-child`, "last rewind of the workspace was undone")
	// A second undo would set the view back to the rewound one: the button says so.
	b.waitText(testID("checkpoints-undo"), "Redo the rewind")
	// The entries drawn again after the undo open their diff from what was
	// fetched before: a checkpoint never changes once made.
	b.do("ask for notes.md's diff again", chromedp.Click(chromedp.CSS(testID("checkpoint-diff-button-call_edit-notes.md"))))
	b.waitText(diff, "+<i>TWO</i>")
	if got := b.eval(diffRequests); got != "1" {
		t.Errorf("%s checkpoint diff requests after the undo, want still 1", got)
	}
	if got := srv.toolCall(t, a.ID, "call_cat2", "cat notes.md kept.txt; ls"); got != "one\n<i>TWO</i>\nthree\nkeep\nadded.txt\nkept.txt\nnotes.md" {
		t.Errorf("after the undo the agent reads %q", got)
	}

	// A call made while the page is open shows up by itself.
	srv.toolCall(t, a.ID, "call_live", "echo live > live.txt")
	b.waitText(testID("checkpoints-hint"), "4 checkpoints")
	b.waitText(testID("checkpoint-call_live"), "live.txt")
	b.waitText(result("call_live")+" .checkpoint-mark", "checkpoint 4")
	// What the undo said is gone once the list changed otherwise.
	if got := b.eval(`String(document.querySelector('[data-testid="checkpoints-status"]').hidden)`); got != "true" {
		t.Errorf("the status of the undo still shows after a new checkpoint (hidden = %s)", got)
	}
	var after checkpointList
	if st := srv.DoJSON(t, "GET", "/agents/"+a.ID+"/checkpoints", nil, &after); st != 200 || len(after.Checkpoints) != 4 || after.Checkpoints[3].CallID != "call_live" {
		out, _ := json.Marshal(after)
		t.Errorf("GET checkpoints after the live call = %d %s", st, out)
	}

	// While a background job of the view runs, a call's changes wait
	// (pending) and a rewind is refused: the page says why and keeps the
	// timeline. Once the job is gone, the next call makes one checkpoint
	// holding both calls' changes.
	var bg struct {
		JobID   string `json:"jobId"`
		IsError bool   `json:"isError"`
	}
	if st := srv.DoJSON(t, "POST", "/agents/"+a.ID+"/tools/bash", map[string]any{
		"callId": "call_bg", "arguments": map[string]any{"command": "exec sleep 120", "run_in_background": true},
	}, &bg); st != 200 || bg.JobID == "" || bg.IsError {
		t.Fatalf("background call = %d %+v", st, bg)
	}
	srv.toolCall(t, a.ID, "call_pending", "echo waits > pending.txt")
	b.waitText(testID("checkpoints-pending"), "call_pending")
	b.waitText(testID("checkpoints-pending"), "into the next checkpoint")
	b.do("ask to rewind to before call_live", chromedp.Click(chromedp.CSS(testID("rewind-before-call_live"))))
	b.do("confirm the refused rewind", chromedp.Click(chromedp.CSS(testID("rewind-confirm-call_live"))))
	b.waitText("#checkpoints-error", "workspace_busy")
	b.do("the buttons come back", chromedp.WaitVisible(chromedp.CSS(testID("rewind-before-call_live"))))
	if got := b.eval(`document.activeElement?.dataset.testid ?? ''`); got != "rewind-before-call_live" {
		t.Errorf("after the refused rewind the focus is on %q, want the button that asked", got)
	}
	if n := len(timeline()); n != 4 {
		t.Errorf("after the refused rewind the timeline has %d entries, want 4", n)
	}
	if n := b.checkConsole(regexp.MustCompile(`status of 409`)); n != 1 {
		t.Errorf("%d refused requests in the console, want the one rewind", n)
	}
	if st := srv.DoJSON(t, "DELETE", "/jobs/"+bg.JobID, nil, nil); st/100 != 2 {
		t.Fatalf("cancel the background job = %d", st)
	}
	var ended struct{ State string }
	if st := srv.DoJSON(t, "GET", "/jobs/"+bg.JobID+"?waitMs=60000", nil, &ended); st != 200 || ended.State == "running" {
		t.Fatalf("the background job after its cancel = %d %q", st, ended.State)
	}
	srv.toolCall(t, a.ID, "call_after", "echo after > after.txt")
	b.waitText(testID("checkpoints-hint"), "5 checkpoints")
	var spans checkpointList
	if st := srv.DoJSON(t, "GET", "/agents/"+a.ID+"/checkpoints", nil, &spans); st != 200 || len(spans.Checkpoints) != 5 || len(spans.Pending) != 0 {
		t.Fatalf("GET checkpoints after the job = %d %+v", st, spans)
	}
	last := spans.Checkpoints[4]
	if last.CallID != "call_after" || !slices.Contains(last.CallIDs, "call_pending") ||
		strings.Join(changeList(last.Changes), ", ") != "added after.txt, added pending.txt" {
		t.Fatalf("the checkpoint after the job: %+v", last)
	}
	e := timeline()[4]
	if e.Call != "call_after" || strings.Join(e.Changes, ", ") != "added after.txt, added pending.txt" ||
		!strings.Contains(e.Text, "calls "+strings.Join(last.CallIDs, ", ")) {
		t.Errorf("the timeline's entry after the job: %+v, want calls %v", e, last.CallIDs)
	}
	b.do("nothing pending", chromedp.WaitNotVisible(chromedp.CSS(testID("checkpoints-pending"))))
	if got := b.eval(`String(document.getElementById('checkpoints-error').hidden)`); got != "true" {
		t.Errorf("the refusal still shows once a new checkpoint is listed (hidden = %s)", got)
	}
	b.screenshot("checkpoints-span")

	b.do("phone viewport", chromedp.EmulateViewport(phoneWidth, phoneHeight))
	b.waitText(diff, "+<i>TWO</i>")
	b.noSidewaysPage("the checkpoints at 390 px")
	b.checkView("checkpoints-narrow")
	b.checkConsole()
}

// compareCheckpoints (TestBrowserWorkspaceCheckpoints, with its three
// checkpoints call_add, call_edit and call_move listed): the pickers offer
// the view before the first checkpoint and after each (To after each, the
// last picked at first); a comparison lists the paths the diff route lists
// for the pair, either way round, and the view before the first checkpoint
// is asked for by leaving from out; a file's diff comes on request, once
// for the pair, as text (markup in the file stays text).
func compareCheckpoints(t *testing.T, b *browser, srv *testServer, agent string) {
	t.Helper()
	options := func(id string) string {
		return b.eval(`[...document.getElementById('` + id + `').options].map((o) => o.value + '=' + o.textContent).join(' | ')`)
	}
	after := "call_add=After checkpoint 1 (call call_add) | call_edit=After checkpoint 2 (call call_edit) | call_move=After checkpoint 3 (call call_move)"
	if got, want := options("checkpoints-from"), "=Before checkpoint 1 | "+after; got != want {
		t.Errorf("From offers %q, want %q", got, want)
	}
	if got := options("checkpoints-to"); got != after {
		t.Errorf("To offers %q, want %q", got, after)
	}
	if got := b.eval(`document.getElementById('checkpoints-to').value`); got != "call_move" {
		t.Errorf("To starts at %q, want the last checkpoint", got)
	}
	requests := func(diff bool) string {
		return b.eval(fmt.Sprintf(`String(performance.getEntriesByType('resource').filter((e) => e.name.includes('/checkpoints/diff?') && e.name.includes('diff=true') === %t).length)`, diff))
	}
	listed := func() []string {
		var got []string
		mustUnmarshal(t, b.eval(`JSON.stringify([...document.querySelectorAll('#checkpoints-compare-changes > li')].map((c) => c.dataset.changeKind + ' ' + c.dataset.changePath))`), &got)
		return got
	}
	route := func(query string) []string {
		var out struct {
			Changes []wsChange `json:"changes"`
		}
		if st := srv.DoJSON(t, "GET", "/agents/"+agent+"/checkpoints/diff?"+query, nil, &out); st != 200 {
			t.Fatalf("GET checkpoints/diff?%s = %d", query, st)
		}
		return changeList(out.Changes)
	}
	pairs := []struct {
		from, to, query, status string
		want                    []string
	}{
		{"call_add", "call_move", "from=call_add&to=call_move", "4 paths differ from the view after checkpoint 1 (call call_add) to the view after checkpoint 3 (call call_move):",
			[]string{"deleted keep.txt", "added kept.txt", "modified notes.md", "deleted old.txt"}},
		{"call_move", "call_add", "from=call_move&to=call_add", "4 paths differ from the view after checkpoint 3 (call call_move) to the view after checkpoint 1 (call call_add):",
			[]string{"added keep.txt", "deleted kept.txt", "modified notes.md", "added old.txt"}},
		{"", "call_add", "to=call_add", "1 path differs from the view before checkpoint 1 to the view after checkpoint 1 (call call_add):",
			[]string{"added added.txt"}},
		{"call_edit", "call_edit", "from=call_edit&to=call_edit", "Nothing differs from the view after checkpoint 2 (call call_edit) to the view after checkpoint 2 (call call_edit).", nil},
	}
	for i, p := range pairs {
		b.setSelect("checkpoints-from", p.from)
		b.setSelect("checkpoints-to", p.to)
		b.do("compare "+p.query, chromedp.Click(chromedp.CSS(testID("checkpoints-compare-button"))))
		b.waitText(testID("checkpoints-compare-status"), p.status)
		api := route(p.query)
		if got := listed(); !slices.Equal(got, api) || !slices.Equal(api, p.want) {
			t.Errorf("compared %s: the page lists %v, the route %v, want %v", p.query, got, api, p.want)
		}
		if got := b.eval(`String(performance.getEntriesByType('resource').filter((e) => e.name.endsWith('/checkpoints/diff?` + p.query + `')).length)`); got != "1" {
			t.Errorf("%s requests for %s, want 1", got, p.query)
		}
		if got := requests(false); got != fmt.Sprint(i+1) {
			t.Errorf("%s comparisons sent after %d asked for", got, i+1)
		}
		if i == 1 {
			// Back from call_move to call_add: notes.md's diff, on request.
			if got := requests(true); got != "0" {
				t.Errorf("%s diffs fetched before any was asked for", got)
			}
			b.do("ask for notes.md's diff between the two", chromedp.Click(chromedp.CSS(testID("checkpoints-compare-diff-button-notes.md"))))
			diff := testID("checkpoints-compare-diff-notes.md")
			b.waitText(diff, "-<i>TWO</i>")
			b.waitText(diff, "+<b>two</b>")
			if got := b.eval(`String(document.querySelectorAll('#checkpoints-compare b, #checkpoints-compare i').length)`); got != "0" {
				t.Errorf("the compared diff's markup became %s elements", got)
			}
			b.do("hide it", chromedp.Click(chromedp.CSS(testID("checkpoints-compare-diff-button-notes.md"))))
			b.do("the diff goes", chromedp.WaitNotPresent(chromedp.CSS(diff)))
			b.do("show it again", chromedp.Click(chromedp.CSS(testID("checkpoints-compare-diff-button-notes.md"))))
			b.waitText(diff, "+<b>two</b>")
			if got := requests(true); got != "1" {
				t.Errorf("%s diffs fetched for the pair, want 1", got)
			}
			b.checkView("checkpoints-compare")
		}
	}
	// The comparison left drawn for the rewind that follows: from
	// call_move to call_add.
	b.setSelect("checkpoints-from", "call_move")
	b.setSelect("checkpoints-to", "call_add")
	b.do("compare again", chromedp.Click(chromedp.CSS(testID("checkpoints-compare-button"))))
	b.waitText(testID("checkpoints-compare-status"), "4 paths differ")
}
