package workspace

import (
	"context"
	"errors"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// A link planted after apply checked the target (the race a parent's job
// or leftover wins by swapping a directory for a link while apply stages)
// leads no write out of the target: the commit walks by descriptor and
// stops at the link. Baseline: the same swap makes a path-based write land
// outside.
func TestApplyLinkPlantedAfterTheCheck(t *testing.T) {
	t.Parallel()
	m, _, base := fixture(t)
	if err := m.Fork("p", base, "c"); err != nil {
		t.Fatal(err)
	}
	put(t, view(t, m, "c"), "dir/planted.txt", "from the child\n")
	out := t.TempDir()
	put(t, out, "dir/a", "a\n")
	put(t, out, "dir/b", "b\n")
	outside := t.TempDir()

	a, unhold, err := m.hold("c", true)
	if err != nil {
		t.Fatal(err)
	}
	defer unhold()
	target, err := openTree(out, out)
	if err != nil {
		t.Fatal(err)
	}
	defer target.close()
	upper, lower, done, err := m.openLayers(a)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	cs, err := changes(upper, lower)
	if err != nil {
		t.Fatal(err)
	}
	todo, err := plan(cs, upper, lower, target)
	if err != nil || len(todo) != 1 {
		t.Fatalf("plan: %v %v", todo, err)
	}
	// The swap, after the check.
	if err := os.RemoveAll(filepath.Join(out, "dir")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(out, "dir")); err != nil {
		t.Fatal(err)
	}
	// Baseline: a write by path goes through the link.
	if err := os.WriteFile(filepath.Join(out, "dir", "baseline"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(outside, "baseline")); err != nil {
		t.Fatalf("baseline: a write by path did not leave the target: %v", err)
	}
	os.Remove(filepath.Join(outside, "baseline"))

	err = m.apply(&journal{ID: newID(), Agent: "c", Dir: out}, todo, upper, target)
	if !errors.Is(err, errNotDir) {
		t.Errorf("apply through a planted link: %v", err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("apply wrote through a planted link: %v", ents)
	}
}

// A link in the child's layer is applied as a link: its target's contents
// (here a file outside every workspace, standing for the token) are never
// read into the parent's view. Baseline: reading the link's path reads
// them.
func TestApplyCopiesLinksAsLinks(t *testing.T) {
	t.Parallel()
	m, _, base := fixture(t)
	if err := m.Fork("p", base, "c"); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(t.TempDir(), "server.token")
	if err := os.WriteFile(secret, []byte("SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	cv := view(t, m, "c")
	if err := os.Symlink(secret, filepath.Join(cv, "tok")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(cv, "tok")); err != nil || string(b) != "SECRET" {
		t.Fatalf("baseline: the link does not read the secret: %q %v", b, err)
	}
	if _, err := m.Apply("c", ""); err != nil {
		t.Fatal(err)
	}
	pv := view(t, m, "p")
	fi, err := os.Lstat(filepath.Join(pv, "tok"))
	if err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link was not applied as a link: %v %v", fi, err)
	}
	if l, _ := os.Readlink(filepath.Join(pv, "tok")); l != secret {
		t.Errorf("link target %q", l)
	}
}

// Apply holds its writers still: refused while the child or the parent
// runs a job, or has processes a job left (the busy count), and a job of
// either waits for an apply in progress.
func TestApplyNeedsItsWritersStill(t *testing.T) {
	t.Parallel()
	m, _, base := fixture(t)
	if err := m.Fork("p", base, "c"); err != nil {
		t.Fatal(err)
	}
	put(t, view(t, m, "c"), "x.txt", "x\n")
	m.releaseWait = 0
	for _, who := range []string{"c", "p"} {
		l, err := m.Acquire(who)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Apply("c", ""); !errors.Is(err, ErrBusy) {
			t.Errorf("apply while %s runs a job: %v", who, err)
		}
		l.Release()
	}
	var asked []string
	m.SetBusy(func(ids []string) int { asked = append(asked, ids...); return 1 })
	if _, err := m.Apply("c", ""); !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "left running") {
		t.Errorf("apply while processes are left: %v", err)
	}
	if strings.Join(asked, ",") != "c,p" {
		t.Errorf("busy asked about %v, want the child and the parent", asked)
	}
	// Nothing left running: the apply goes through.
	m.SetBusy(func([]string) int { return 0 })
	if read(t, view(t, m, "p"), "x.txt") == "x\n" {
		t.Error("a refused apply wrote")
	}
	if _, err := m.Apply("c", ""); err != nil {
		t.Fatal(err)
	}
	if read(t, view(t, m, "p"), "x.txt") != "x\n" {
		t.Error("apply")
	}
}

// Applying the same child twice is a no-op the second time, a deletion
// included.
func TestApplyTwiceWithADeletion(t *testing.T) {
	t.Parallel()
	m, _, base := fixture(t)
	if err := m.Fork("p", base, "c"); err != nil {
		t.Fatal(err)
	}
	cv := view(t, m, "c")
	os.Remove(filepath.Join(cv, "gone.txt"))
	os.RemoveAll(filepath.Join(cv, "dir"))
	put(t, cv, "f.txt", "changed\n")
	for i := range 2 {
		if _, err := m.Apply("c", ""); err != nil {
			t.Fatalf("apply %d: %v", i+1, err)
		}
	}
	pv := view(t, m, "p")
	if _, err := os.Lstat(filepath.Join(pv, "gone.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("gone.txt: %v", err)
	}
	if read(t, pv, "f.txt") != "changed\n" {
		t.Error("f.txt")
	}
}

// No directory overlapping the dshd home is ever a target, however it is
// named (a subdirectory, a link to it).
func TestApplyNeverIntoTheHome(t *testing.T) {
	t.Parallel()
	m, home, base := fixture(t)
	m.SetHome(home)
	if err := m.Fork("p", base, "c"); err != nil {
		t.Fatal(err)
	}
	put(t, view(t, m, "c"), "x.txt", "x\n")
	sessions := filepath.Join(home, "sessions")
	if err := os.Mkdir(sessions, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "innocent")
	if err := os.Symlink(sessions, link); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{home, sessions, filepath.Join(home, "workspaces", "layers"), link} {
		if _, err := m.Apply("c", dir); !errors.Is(err, ErrInvalid) {
			t.Errorf("apply into %s: %v", dir, err)
		}
	}
	if _, err := os.Stat(filepath.Join(sessions, "x.txt")); err == nil {
		t.Error("apply wrote into the home")
	}
}

// An apply cut after its journal was committed is completed by the next
// start; one cut while staging is rolled back: the target is either fully
// applied or untouched, and no staging directory is left in it.
func TestApplyJournalRecovery(t *testing.T) {
	t.Parallel()
	for _, state := range []string{journalStaging, journalCommit} {
		t.Run(state, func(t *testing.T) {
			t.Parallel()
			m, home, base := fixture(t)
			if err := m.Fork("p", base, "c"); err != nil {
				t.Fatal(err)
			}
			cv := view(t, m, "c")
			put(t, cv, "f.txt", "child\n")
			put(t, cv, "new/deep/file", "n\n")
			os.Remove(filepath.Join(cv, "gone.txt"))
			out := t.TempDir()
			for _, f := range []string{"f.txt", "keep.txt", "gone.txt", "dir/a", "dir/b"} {
				put(t, out, f, read(t, base, f))
			}
			// Everything apply does up to its commit, then "the crash".
			a, unhold, _ := m.hold("c", true)
			target, _ := openTree(out, out)
			upper, lower, done, _ := m.openLayers(a)
			cs, _ := changes(upper, lower)
			todo, err := plan(cs, upper, lower, target)
			if err != nil {
				t.Fatal(err)
			}
			j := &journal{ID: newID(), Agent: "c", Dir: out, State: journalStaging}
			if err := m.saveJournal(j); err != nil {
				t.Fatal(err)
			}
			if err := stageAll(j, todo, upper, target); err != nil {
				t.Fatal(err)
			}
			if state == journalCommit {
				j.State = journalCommit
				if err := m.saveJournal(j); err != nil {
					t.Fatal(err)
				}
				// Part of the moves made, as if cut in the middle.
				if err := moveInPlace(mustOpen(t, target, j.stage()), 0, target, j.Moves[0]); err != nil {
					t.Fatal(err)
				}
			}
			done()
			target.close()
			unhold()
			m.Close()

			open(t, home) // the next start
			want := map[string]string{"f.txt": "one\ntwo\nthree\n", "gone.txt": "bye\n", "new/deep/file": "<missing>"}
			if state == journalCommit {
				want = map[string]string{"f.txt": "child\n", "gone.txt": "<missing>", "new/deep/file": "n\n"}
			}
			for f, w := range want {
				got := read(t, out, f)
				if strings.HasPrefix(got, "<open") {
					got = "<missing>"
				}
				if got != w {
					t.Errorf("%s after recovery: %q, want %q", f, got, w)
				}
			}
			ents, _ := os.ReadDir(out)
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), ".dshd-apply-") {
					t.Errorf("staging left in the target: %s", e.Name())
				}
			}
			if js, _ := os.ReadDir(filepath.Join(home, "workspaces", "applies")); len(js) != 0 {
				t.Errorf("journals left: %v", js)
			}
		})
	}
}

func mustOpen(t *testing.T, tr *tree, rel string) int {
	t.Helper()
	fd, err := tr.openDir(rel)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeFD(fd) })
	return fd
}

// A listing of one agent's changes holds neither the Manager's lock nor
// any other agent: while it holds its agent, other agents' jobs start, and
// so do the agent's own (a listing only reads); a writer of an agent (an
// apply, a fork, a drop) makes only that agent's job starts wait.
func TestNoJobStartWaitsOnAnotherAgent(t *testing.T) {
	t.Parallel()
	m, _, base := fixture(t)
	for _, c := range []string{"a", "b"} {
		if err := m.Fork("p", base, c); err != nil {
			t.Fatal(err)
		}
	}
	_, unhold, err := m.hold("a", false) // a listing of a's changes, in progress
	if err != nil {
		t.Fatal(err)
	}
	for _, who := range []string{"b", "a", "p", "plain"} {
		l, err := m.Acquire(who) // would hang here if it waited
		if err != nil {
			t.Fatalf("acquire %s: %v", who, err)
		}
		l.Release()
	}
	unhold()
	_, unhold, err = m.hold("a", true) // an apply out of a, in progress
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Acquire("b")
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	unheld := make(chan struct{})
	got := make(chan bool)
	go func() {
		l, err := m.Acquire("a")
		if err == nil {
			l.Release()
		}
		select {
		case <-unheld:
			got <- true
		default:
			got <- false
		}
	}()
	// Parked waiting for the writer (or already through, which fails).
	for {
		m.mu.Lock()
		w := m.waits
		m.mu.Unlock()
		if w == 1 {
			break
		}
		select {
		case ok := <-got:
			t.Fatalf("a's job started while a writer held a (after the writer: %v)", ok)
		default:
		}
		runtime.Gosched()
	}
	close(unheld)
	unhold()
	if !<-got {
		t.Error("a's job started while a writer held a")
	}
}

// A layer that grows past workspaces.maxBytes stops growing: the watcher
// names its agent to be stopped, refuses every job of a snapshot agent
// (agents without a view still run) and lets them run again once a drop
// frees the room.
func TestBudgetStopsTheWriters(t *testing.T) {
	t.Parallel()
	m, _, base := fixture(t)
	if err := m.Fork("p", base, "c"); err != nil {
		t.Fatal(err)
	}
	m.SetMaxBytes(64 << 10)
	put(t, view(t, m, "c"), "big", strings.Repeat("x", 128<<10))
	stopped := make(chan []string, 64)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go m.WatchBudget(ctx, func(ids []string) { stopped <- ids })
	if ids := <-stopped; !slices.Equal(ids, []string{"c"}) {
		t.Errorf("stopped %v, want the writer c", ids)
	}
	if max, over := m.Budget(); max != 64<<10 || !over {
		t.Errorf("budget = %d %v", max, over)
	}
	for _, who := range []string{"c", "p"} {
		if _, err := m.Acquire(who); !errors.Is(err, ErrOverBudget) {
			t.Errorf("a job of %s over budget: %v", who, err)
		}
	}
	l, err := m.Acquire("plain")
	if err != nil {
		t.Fatalf("an agent without a view over budget: %v", err)
	}
	l.Release()
	if err := m.Drop("c"); err != nil {
		t.Fatal(err)
	}
	for {
		if _, over := m.Budget(); !over {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	l, err = m.Acquire("p")
	if err != nil {
		t.Fatalf("after the drop: %v", err)
	}
	l.Release()
}

// A directory of the child's layer swapped for a link after the listing
// (the child's own leftover racing the apply) is not read through: the
// copy opens every path beneath the layer without following links.
// Baseline: reading the same path by name reads the file behind the link.
func TestApplyLayerLinkPlantedAfterTheListing(t *testing.T) {
	t.Parallel()
	m, _, base := fixture(t)
	if err := m.Fork("p", base, "c"); err != nil {
		t.Fatal(err)
	}
	put(t, view(t, m, "c"), "new/planted.txt", "from the child\n")
	outside := t.TempDir()
	put(t, outside, "planted.txt", "SECRET\n")
	out := t.TempDir()

	a, unhold, err := m.hold("c", true)
	if err != nil {
		t.Fatal(err)
	}
	defer unhold()
	target, _ := openTree(out, out)
	defer target.close()
	upper, lower, done, err := m.openLayers(a)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	cs, _ := changes(upper, lower)
	todo, err := plan(cs, upper, lower, target)
	if err != nil {
		t.Fatal(err)
	}
	layerDir := filepath.Join(m.upperDir(a.Upper), "new")
	if err := os.RemoveAll(layerDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, layerDir); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(layerDir, "planted.txt")); string(b) != "SECRET\n" {
		t.Fatalf("baseline: reading by name does not follow the link: %q", b)
	}
	err = m.apply(&journal{ID: newID(), Agent: "c", Dir: out}, todo, upper, target)
	if err == nil {
		t.Error("apply read through a link planted in the layer")
	}
	if b, err := os.ReadFile(filepath.Join(out, "new", "planted.txt")); err == nil {
		t.Errorf("the target got %q", b)
	}
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Errorf("a failed apply left %v in the target", ents)
	}
}

// The home is refused when the named directory holds it, and when a link
// on the way (not only at the end) leads into it.
func TestApplyNeverIntoTheHomeThroughALinkOnTheWay(t *testing.T) {
	t.Parallel()
	m, home, base := fixture(t)
	m.SetHome(home)
	if err := m.Fork("p", base, "c"); err != nil {
		t.Fatal(err)
	}
	put(t, view(t, m, "c"), "x.txt", "x\n")
	if err := os.MkdirAll(filepath.Join(home, "sessions"), 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "up")
	if err := os.Symlink(filepath.Dir(home), link); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{filepath.Dir(home), filepath.Join(link, filepath.Base(home), "sessions")} {
		if _, err := m.Apply("c", dir); !errors.Is(err, ErrInvalid) {
			t.Errorf("apply into %s: %v", dir, err)
		}
	}
	if _, err := os.Stat(filepath.Join(home, "sessions", "x.txt")); err == nil {
		t.Error("apply wrote into the home")
	}
}

// A commit that fails part way (a process dshd does not account for swaps
// a directory for a link after the staging) is rolled back: what was
// moved into place is taken out and what it replaced put back, deletions
// are undone, and no staging or journal is left: the target is as it was.
func TestApplyCommitFailureRollsBack(t *testing.T) {
	t.Parallel()
	m, _, base := fixture(t)
	if err := m.Fork("p", base, "c"); err != nil {
		t.Fatal(err)
	}
	cv := view(t, m, "c")
	put(t, cv, "f.txt", "child\n")
	os.Remove(filepath.Join(cv, "keep.txt"))
	put(t, cv, "zdir/new.txt", "new\n")
	out := t.TempDir()
	for _, f := range []string{"f.txt", "keep.txt", "gone.txt", "dir/a", "dir/b"} {
		put(t, out, f, read(t, base, f))
	}
	if err := os.Mkdir(filepath.Join(out, "zdir"), 0o755); err != nil {
		t.Fatal(err)
	}
	before := state(t, out)
	a, unhold, _ := m.hold("c", true)
	defer unhold()
	target, _ := openTree(out, out)
	defer target.close()
	v, err := m.openSince("c", a)
	if err != nil {
		t.Fatal(err)
	}
	defer v.close()
	cs, _ := v.changes()
	todo, err := plan(cs, v.now, v.then, target)
	if err != nil {
		t.Fatal(err)
	}
	j := &journal{ID: newID(), Agent: "c", Dir: out, State: journalStaging}
	if err := m.saveJournal(j); err != nil {
		t.Fatal(err)
	}
	if err := stageAll(j, todo, v.now, target); err != nil {
		t.Fatal(err)
	}
	// f.txt moves first; zdir becomes a link before its file's turn.
	os.Remove(filepath.Join(out, "zdir"))
	if err := os.Symlink(t.TempDir(), filepath.Join(out, "zdir")); err != nil {
		t.Fatal(err)
	}
	err = commit(j, target)
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("a commit through a planted link: %v", err)
	}
	after := state(t, out)
	delete(after, "zdir")
	delete(before, "zdir")
	if !maps.Equal(after, before) {
		t.Errorf("not rolled back:\n got %v\nwant %v", after, before)
	}
	if ents, _ := os.ReadDir(out); slices.ContainsFunc(ents, func(e os.DirEntry) bool { return strings.HasPrefix(e.Name(), ".dshd-apply-") }) {
		t.Error("the staging outlived a rolled back apply")
	}
}

// TestApplyNeverAboveAWorkspace: an apply may not write into a directory
// that holds another agent's workspace base below it (its layers stand on
// that tree: a write there changes what the agent's view shows under it),
// as it may not write into the base itself.
func TestApplyNeverAboveAWorkspace(t *testing.T) {
	t.Parallel()
	m, _, _ := fixture(t)
	base := filepath.Join(t.TempDir(), "tree") // its parent holds nothing of the home
	put(t, base, "f.txt", "f\n")
	if err := m.Fork("p", base, "c"); err != nil {
		t.Fatal(err)
	}
	put(t, view(t, m, "c"), "above.txt", "x\n")
	// Another tree's base, and the directory above it: the applying
	// agent stands on neither.
	other := filepath.Join(t.TempDir(), "other")
	put(t, other, "g.txt", "g\n")
	if err := m.Fork("q", other, "d"); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{base, filepath.Dir(base), filepath.Join(base, "sub"), other, filepath.Dir(other)} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Apply("c", dir); !errors.Is(err, ErrBusy) {
			t.Errorf("apply into %s (the base %s, above it or below it): %v, want ErrBusy", dir, base, err)
		}
		if _, err := os.Lstat(filepath.Join(dir, "above.txt")); err == nil {
			t.Errorf("the refused apply wrote into %s", dir)
		}
	}
}

// TestTreeOpenRefusesLinks: what apply copies is opened by descriptor with
// no link followed, at the end of the name or on the way, so a file the
// listing saw as regular and a process swapped for a link before the open
// is not read through it (the baseline: by name, both links lead to the
// file outside).
func TestTreeOpenRefusesLinks(t *testing.T) {
	t.Parallel()
	dir, outside := t.TempDir(), t.TempDir()
	put(t, outside, "secret", "SECRET\n")
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "file")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "sub")); err != nil {
		t.Fatal(err)
	}
	tr, err := openTree(dir, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.close()
	for _, rel := range []string{"file", "sub/secret"} {
		if b, err := os.ReadFile(filepath.Join(dir, rel)); err != nil || string(b) != "SECRET\n" {
			t.Fatalf("baseline: reading %s by name = %q, %v", rel, b, err)
		}
		if f, err := tr.open(rel); err == nil {
			b, _ := io.ReadAll(f)
			f.Close()
			t.Errorf("tree.open(%q) followed a link: read %q", rel, b)
		}
	}
}

// TestApplyNeverIntoTheHomeNamedByALink: the home given through a link is
// protected as what the link resolves to, too (an apply's target is judged
// by where its descriptor really is).
func TestApplyNeverIntoTheHomeNamedByALink(t *testing.T) {
	t.Parallel()
	m, home, base := fixture(t)
	link := filepath.Join(t.TempDir(), "home")
	if err := os.Symlink(home, link); err != nil {
		t.Fatal(err)
	}
	m.SetHome(link)
	if err := m.Fork("p", base, "c"); err != nil {
		t.Fatal(err)
	}
	put(t, view(t, m, "c"), "x.txt", "x\n")
	sessions := filepath.Join(home, "sessions")
	if err := os.Mkdir(sessions, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Apply("c", sessions); !errors.Is(err, ErrInvalid) {
		t.Errorf("apply into %s, the home named by the link %s: %v, want ErrInvalid", sessions, link, err)
	}
	if _, err := os.Stat(filepath.Join(sessions, "x.txt")); err == nil {
		t.Error("apply wrote into the home")
	}
}

// TestApplyDeleteFailureRollsBack: a commit that fails among its deletions
// (a directory swapped for a link after the staging) puts back what it had
// already deleted, and takes out what it had moved into place.
func TestApplyDeleteFailureRollsBack(t *testing.T) {
	t.Parallel()
	m, _, base := fixture(t)
	put(t, base, "aa/y", "y\n")
	put(t, base, "zz/x", "x\n")
	if err := m.Fork("p", base, "c"); err != nil {
		t.Fatal(err)
	}
	cv := view(t, m, "c")
	put(t, cv, "f.txt", "child\n")
	os.Remove(filepath.Join(cv, "aa", "y"))
	os.Remove(filepath.Join(cv, "zz", "x"))
	out := t.TempDir()
	for _, f := range []string{"f.txt", "keep.txt", "gone.txt", "dir/a", "dir/b", "aa/y", "zz/x"} {
		put(t, out, f, read(t, base, f))
	}
	before := state(t, out)
	a, unhold, _ := m.hold("c", true)
	defer unhold()
	target, _ := openTree(out, out)
	defer target.close()
	v, err := m.openSince("c", a)
	if err != nil {
		t.Fatal(err)
	}
	defer v.close()
	cs, _ := v.changes()
	todo, err := plan(cs, v.now, v.then, target)
	if err != nil {
		t.Fatal(err)
	}
	j := &journal{ID: newID(), Agent: "c", Dir: out, State: journalStaging}
	if err := m.saveJournal(j); err != nil {
		t.Fatal(err)
	}
	if err := stageAll(j, todo, v.now, target); err != nil {
		t.Fatal(err)
	}
	if len(j.Deletes) != 2 {
		t.Fatalf("deletions %v, want aa/y and zz/x", j.Deletes)
	}
	// The first is deleted; the second's directory becomes a link before
	// its turn.
	first, second := j.Deletes[0], path.Dir(j.Deletes[1])
	if err := os.Rename(filepath.Join(out, second), filepath.Join(t.TempDir(), "moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(t.TempDir(), filepath.Join(out, second)); err != nil {
		t.Fatal(err)
	}
	err = commit(j, target)
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("a commit through a planted link: %v", err)
	}
	after := state(t, out)
	for _, st := range []map[string]string{before, after} {
		for k := range st {
			if k == second || strings.HasPrefix(k, second+"/") {
				delete(st, k)
			}
		}
	}
	if !maps.Equal(after, before) {
		t.Errorf("not rolled back:\n got %v\nwant %v", after, before)
	}
	if _, err := os.Lstat(filepath.Join(out, first)); err != nil {
		t.Errorf("the deleted %s was not put back: %v", first, err)
	}
}
