package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/dshd/dshd/internal/testenv"
)

// TestBrowserWorkspace: the agents view marks snapshot agents in the
// lineage tree, and the selected agent's Workspace section shows its mode
// and directory; for a snapshot fork, the files its bash tool added,
// modified and deleted, with a text file's diff fetched only when asked for
// and drawn as text (markup in the file stays characters); for an agent
// that shares its directory, "shared" and no changes list; once the fork's
// workspace is dropped, "dropped" in the tree and its section. axe-core finds
// nothing at 1280 and 390 px, and the page never scrolls sideways.
func TestBrowserWorkspace(t *testing.T) {
	t.Parallel()
	testenv.NeedRoot(t, "snapshot workspaces are overlayfs mounts in mount namespaces, which need CAP_SYS_ADMIN")
	chrome := chromiumPath(t)
	srv := startServer(t)
	needSnapshots(t, srv)

	repo := filepath.Join(t.TempDir(), "ws-repo")
	other := filepath.Join(t.TempDir(), "plain-dir")
	for dir, files := range map[string]map[string]string{
		repo:  {"edit.txt": "one\n<b>two</b>\nthree\n", "gone.txt": "bye\n", "keep.txt": "kept\n"},
		other: {"x.txt": "x\n"},
	} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, body := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	root := srv.newAgent(t, "/agents", map[string]any{"cwd": repo})
	child := srv.newAgent(t, "/agents/"+root.ID+"/fork", map[string]any{"workspace": "snapshot"})
	shared := srv.newAgent(t, "/agents", map[string]any{"cwd": other})
	if child.Workspace.Mode != "snapshot" || shared.Workspace.Mode != "shared" {
		t.Fatalf("workspace modes from the API: fork %q, plain agent %q", child.Workspace.Mode, shared.Workspace.Mode)
	}
	if r := srv.callTool(t, child.ID, "bash", map[string]any{
		"command": `echo new > added.txt && printf 'one\n<i>TWO</i>\nthree\n' > edit.txt && rm gone.txt`,
	}); r.IsError {
		t.Fatalf("the fork's bash call: %s", r.Text)
	}
	if got := strings.Join(changeList(srv.changes(t, child.ID, false)), ", "); got != "added added.txt, modified edit.txt, deleted gone.txt" {
		t.Fatalf("changes from the API: %s", got)
	}

	b := newBrowser(t, chrome)
	loginURL, _ := uiLogin(t, srv)
	b.do("open the agents view", chromedp.Navigate(loginURL+"&view=agents"))
	b.do("see the fork", chromedp.WaitVisible(chromedp.CSS(testID("agent-"+child.ID))))
	b.do("see the plain agent", chromedp.WaitVisible(chromedp.CSS(testID("agent-"+shared.ID))))
	// The fork and its parent (which moved onto a layer at the fork) are
	// marked; the agent that shares its directory is not.
	b.waitText(testID("agent-workspace-"+child.ID), "snapshot")
	b.waitText(testID("agent-workspace-"+root.ID), "snapshot")
	if got := b.eval(`String(document.querySelector('[data-testid="agent-workspace-` + shared.ID + `"]'))`); got != "null" {
		t.Errorf("the shared agent is marked %s", got)
	}

	b.do("select the fork", chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-agent-button=%q]`, child.ID))))
	b.waitText(`#workspace-facts [data-fact="Mode"]`, "snapshot")
	b.waitText(`#workspace-facts [data-fact="Directory"]`, repo)
	b.waitText(`#workspace-facts [data-fact="Forked from"]`, root.ID)
	b.waitText("#workspace-changes-caption", "3 paths")
	for _, c := range []struct{ kind, path string }{
		{"added", "added.txt"}, {"modified", "edit.txt"}, {"deleted", "gone.txt"},
	} {
		sel := fmt.Sprintf(`#workspace-changes tr[data-change-path=%q]`, c.path)
		b.waitText(sel, c.path)
		row := b.eval(`(() => { const tr = document.querySelector('` + sel + `'); return tr.dataset.changeKind + '|' +
			[...tr.cells].map((td) => td.textContent.trim()).join('|'); })()`)
		if !strings.HasPrefix(row, c.kind+"|"+c.kind+"|file|"+c.path+"|") {
			t.Errorf("the row of %s reads %q, want kind %s, type file, then the path", c.path, row, c.kind)
		}
	}
	diffRequests := `String(performance.getEntriesByType('resource').filter((e) => e.name.includes('diff=true')).length)`
	if got := b.eval(diffRequests); got != "0" {
		t.Errorf("%s diff requests before any was asked for", got)
	}
	if got := b.eval(`String(document.querySelector('[data-testid="workspace-diff-edit.txt"]'))`); got != "null" {
		t.Errorf("a diff is shown before it was asked for: %s", got)
	}
	b.do("ask for edit.txt's diff", chromedp.Click(chromedp.CSS(testID("workspace-diff-button-edit.txt"))))
	diff := testID("workspace-diff-edit.txt")
	b.waitText(diff, "+<i>TWO</i>")
	b.waitText(diff, "-<b>two</b>")
	if got := b.eval(diffRequests); got != "1" {
		t.Errorf("%s diff requests after one was asked for, want 1", got)
	}
	// The file's markup is text: no element of its own made it into the page.
	if got := b.eval(`String(document.querySelectorAll('#workspace-changes b, #workspace-changes i').length)`); got != "0" {
		t.Errorf("the diff's markup became %s elements", got)
	}
	if got := b.eval(`document.querySelector('[data-testid="workspace-diff-button-edit.txt"]').getAttribute('aria-expanded')`); got != "true" {
		t.Errorf("the diff button's aria-expanded = %q once open", got)
	}
	b.noSidewaysPage("the workspace at 1280 px")
	b.checkView("workspace-snapshot")

	b.do("phone viewport", chromedp.EmulateViewport(phoneWidth, phoneHeight))
	b.waitText(diff, "+<i>TWO</i>")
	b.noSidewaysPage("the workspace at 390 px")
	b.checkView("workspace-snapshot-narrow")

	// An agent that shares its directory: "shared", and no changes list.
	b.do("select the plain agent", chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-agent-button=%q]`, shared.ID))))
	b.waitText(`#workspace-facts [data-fact="Mode"]`, "shared")
	b.waitText(`#workspace-facts [data-fact="Directory"]`, other)
	b.waitText(testID("workspace-hint"), "no changes to list")
	if got := b.eval(`document.getElementById('workspace-changes-wrap').hidden + ' ' + document.querySelectorAll('#workspace-changes-body tr').length`); got != "true 0" {
		t.Errorf("the shared agent's changes list: hidden and rows = %q, want \"true 0\"", got)
	}
	b.noSidewaysPage("a shared workspace at 390 px")
	b.checkView("workspace-shared-narrow")

	// Dropping the fork's workspace turns its mark into "dropped", and its
	// section says so, with no changes list.
	if st := srv.DoJSON(t, "DELETE", "/agents/"+child.ID+"/workspace", nil, nil); st != 204 {
		t.Fatalf("drop the fork's workspace = %d", st)
	}
	b.waitText(testID("agent-workspace-"+child.ID), "dropped")
	b.do("select the dropped fork", chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-agent-button=%q]`, child.ID))))
	b.waitText(`#workspace-facts [data-fact="State"]`, "dropped")
	b.waitText(testID("workspace-hint"), "was dropped")
	if got := b.eval(`document.getElementById('workspace-changes-wrap').hidden + ' ' + document.querySelectorAll('#workspace-changes-body tr').length`); got != "true 0" {
		t.Errorf("the dropped fork's changes list: hidden and rows = %q, want \"true 0\"", got)
	}
	b.checkConsole()
}
