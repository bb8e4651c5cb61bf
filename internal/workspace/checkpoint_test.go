package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// state is a tree as a test compares it: every path with its type,
// permissions and contents (a link's target).
func state(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	// A view is /proc/self/fd/N, a link: the walk starts beyond it.
	dir += "/"
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		v := fi.Mode().String()
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			v += " -> " + l
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			v += " " + string(b)
		}
		out[rel] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("%s: an empty tree (every tree compared here holds files)", dir)
	}
	return out
}

// Ten calls change a root snapshot agent's view in every way a command can
// (add, modify, chmod, delete, rename, a directory removed whole, links);
// the view rewound to before call 4 is, byte for byte, what it was then;
// the rewind is undone; a fork from call 7 sees the view as it was after
// call 7, and its parent is untouched.
func TestCheckpointsRewindAndForkFrom(t *testing.T) {
	t.Parallel()
	m, home, base := fixture(t)
	if err := m.Adopt("a", base); err != nil {
		t.Fatal(err)
	}
	calls := []func(v string){
		func(v string) { put(t, v, "src/main.go", "package main\n") },
		func(v string) { put(t, v, "f.txt", "one\nTWO\nthree\n") },
		func(v string) { os.Chmod(filepath.Join(v, "keep.txt"), 0o600) },
		func(v string) { os.Remove(filepath.Join(v, "gone.txt")) },
		func(v string) { os.Rename(filepath.Join(v, "f.txt"), filepath.Join(v, "g.txt")) },
		func(v string) { os.RemoveAll(filepath.Join(v, "dir")) },
		func(v string) { os.Symlink("src/main.go", filepath.Join(v, "link")) },
		func(v string) {}, // a call that changes nothing
		func(v string) { put(t, v, "build/out.o", strings.Repeat("o", 10000)) },
		func(v string) { put(t, v, "dir/a", "back again\n") },
	}
	var at [][2]map[string]string // before and after each call
	for i, call := range calls {
		v := view(t, m, "a")
		before := state(t, v)
		call(v)
		after := state(t, v)
		id := fmt.Sprintf("call_%d", i+1)
		made, err := m.Checkpoint("a", id, int64(2*i+2))
		if err != nil {
			t.Fatal(err)
		}
		if made == (i == 7) {
			t.Errorf("%s: made a checkpoint = %v", id, made)
		}
		at = append(at, [2]map[string]string{before, after})
	}
	list, _ := m.Checkpoints("a")
	if len(list.Checkpoints) != 9 {
		t.Fatalf("%d checkpoints, want 9 (one call changed nothing)", len(list.Checkpoints))
	}
	if _, cs, err := m.CheckpointChanges("a", "call_5", false); err != nil || !slices.Equal(summary(cs), []string{"deleted file f.txt", "added file g.txt"}) {
		t.Errorf("changes of call 5: %v %v", summary(cs), err)
	}
	final := at[9][1]

	d, err := m.DepthAt("a", "call_4", false)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Rewind("a", d, false); err != nil {
		t.Fatal(err)
	}
	if got := state(t, view(t, m, "a")); !maps.Equal(got, at[3][0]) {
		t.Errorf("rewound to before call 4:\n got %v\nwant %v", got, at[3][0])
	}
	// A command after the rewind, then the rewind undone: the later
	// calls are back, and what was written after the rewind is set aside.
	put(t, view(t, m, "a"), "after-rewind", "x")
	if err := m.Rewind("a", Mark{}, true); err != nil {
		t.Fatal(err)
	}
	if got := state(t, view(t, m, "a")); !maps.Equal(got, final) {
		t.Errorf("undone rewind:\n got %v\nwant %v", got, final)
	}

	d, err = m.DepthAt("a", "call_7", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.ForkAt("a", "c", d); err != nil {
		t.Fatal(err)
	}
	if got := state(t, view(t, m, "c")); !maps.Equal(got, at[6][1]) {
		t.Errorf("fork from after call 7:\n got %v\nwant %v", got, at[6][1])
	}
	if got := state(t, view(t, m, "a")); !maps.Equal(got, final) {
		t.Error("a fork from a checkpoint changed its parent")
	}
	if _, err := m.DepthAt("a", "call_8", false); !errors.Is(err, ErrCheckpointNotFound) {
		t.Errorf("a call that changed nothing has no checkpoint: %v", err)
	}

	// A restart keeps the checkpoints and the views.
	m.Close()
	m = open(t, home)
	if got := state(t, view(t, m, "a")); !maps.Equal(got, final) {
		t.Error("the view after a restart")
	}
	if l, _ := m.Checkpoints("a"); len(l.Checkpoints) != 9 {
		t.Errorf("%d checkpoints after a restart", len(l.Checkpoints))
	}
}

// A call that ends while another job of the view runs is not frozen (the
// layer would change under the view): it is pending, and the next call
// that ends with the view still makes one checkpoint spanning both. A
// rewind is refused while a job runs.
func TestCheckpointSpansCallsWhileAJobRuns(t *testing.T) {
	t.Parallel()
	m, _, base := fixture(t)
	if err := m.Adopt("a", base); err != nil {
		t.Fatal(err)
	}
	busy := 1
	m.SetBusy(func([]string) int { return busy })
	put(t, view(t, m, "a"), "one", "1")
	if made, err := m.Checkpoint("a", "call_1", 2); made || err != nil {
		t.Fatalf("a checkpoint while a job runs: %v %v", made, err)
	}
	if err := m.Rewind("a", Mark{}, false); !errors.Is(err, ErrBusy) {
		t.Errorf("rewind while a job runs: %v", err)
	}
	busy = 0
	put(t, view(t, m, "a"), "two", "2")
	if made, err := m.Checkpoint("a", "call_2", 4); !made || err != nil {
		t.Fatalf("checkpoint: %v %v", made, err)
	}
	list, _ := m.Checkpoints("a")
	if len(list.Checkpoints) != 1 || !slices.Equal(list.Checkpoints[0].CallIDs, []string{"call_1", "call_2"}) || len(list.Pending) != 0 {
		t.Errorf("checkpoints = %+v", list)
	}
}

// A child's changes since its fork are all of its checkpoints' and its
// upper's, whatever they were split into, and apply takes them all.
func TestChangesSpanCheckpoints(t *testing.T) {
	t.Parallel()
	m, _, base := fixture(t)
	if err := m.Fork("p", base, "c"); err != nil {
		t.Fatal(err)
	}
	steps := []func(v string){
		func(v string) { put(t, v, "new/one", "1\n") },
		func(v string) { put(t, v, "f.txt", "changed\n") },
		func(v string) { os.Remove(filepath.Join(v, "gone.txt")) },
		func(v string) { put(t, v, "tmp", "x"); os.RemoveAll(filepath.Join(v, "dir")) },
		func(v string) { os.Remove(filepath.Join(v, "tmp")) }, // made and removed: no change
	}
	for i, step := range steps {
		step(view(t, m, "c"))
		if _, err := m.Checkpoint("c", fmt.Sprint("call_", i), int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	put(t, view(t, m, "c"), "upper-only", "u\n") // not checkpointed yet
	cs, err := m.Changes("c", false)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"deleted dir dir", "modified file f.txt", "deleted file gone.txt", "added dir new", "added file new/one", "added file upper-only"}
	if !slices.Equal(summary(cs), want) {
		t.Errorf("changes across checkpoints:\n got %v\nwant %v", summary(cs), want)
	}
	if _, err := m.Apply("c", ""); err != nil {
		t.Fatal(err)
	}
	if got, w := state(t, view(t, m, "p")), state(t, view(t, m, "c")); !maps.Equal(got, w) {
		t.Errorf("parent after apply:\n got %v\nwant %v", got, w)
	}
}

// A view stands on as many checkpoint layers as workspaces.maxLayers
// allows (each mounted afresh, off the call's path, while the next job
// waits for it); past that a call's changes stay pending. Compaction is
// out of the way here (every checkpoint is kept individually): the bound
// is what stands when compaction cannot make room (TestCheckpointCompaction).
func TestCheckpointDepthBound(t *testing.T) {
	t.Parallel()
	m, _, base := fixture(t)
	m.SetMaxLayers(120)
	m.SetCheckpointDepth(1000)
	if err := m.Adopt("a", base); err != nil {
		t.Fatal(err)
	}
	for i := range 121 {
		l, err := m.Acquire("a")
		if err != nil {
			t.Fatalf("a job at depth %d: %v", i, err)
		}
		if err := os.WriteFile(filepath.Join(viewPath(l.FD), fmt.Sprint("f", i)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		l.Release()
		made, err := m.Checkpoint("a", fmt.Sprint("call_", i), int64(i))
		if err != nil || made != (i < 120) {
			t.Fatalf("checkpoint %d: %v %v", i, made, err)
		}
	}
	list, _ := m.Checkpoints("a")
	if len(list.Checkpoints) != 120 || !slices.Equal(list.Pending, []string{"call_120"}) {
		t.Errorf("%d checkpoints, pending %v", len(list.Checkpoints), list.Pending)
	}
	if got := len(state(t, view(t, m, "a"))); got != 121+6 {
		t.Errorf("the view holds %d paths", got)
	}
}

// The diff between any two checkpoints, either way round, is what differs
// between their views: for every pair of views of six calls (and the view
// before them), the kinds and paths listed are those a comparison of the
// two trees gives (a deleted directory listed once, an added one with what
// it holds); diffs of text files come with diff.
func TestCheckpointDiff(t *testing.T) {
	t.Parallel()
	m, _, base := fixture(t)
	if err := m.Adopt("a", base); err != nil {
		t.Fatal(err)
	}
	calls := []func(v string){
		func(v string) { put(t, v, "new/one", "1\n"); put(t, v, "new/two", "2\n") },
		func(v string) { put(t, v, "f.txt", "one\nTWO\nthree\n") },
		func(v string) { os.RemoveAll(filepath.Join(v, "dir")) },
		func(v string) { put(t, v, "dir/c", "c\n"); os.Chmod(filepath.Join(v, "keep.txt"), 0o600) },
		func(v string) {
			os.Remove(filepath.Join(v, "gone.txt"))
			os.Symlink("f.txt", filepath.Join(v, "gone.txt"))
		},
		func(v string) { os.RemoveAll(filepath.Join(v, "new")) },
	}
	views := []map[string]string{state(t, view(t, m, "a"))}
	for i, call := range calls {
		call(view(t, m, "a"))
		if made, err := m.Checkpoint("a", fmt.Sprint("call_", i+1), int64(i+1)); !made || err != nil {
			t.Fatal(made, err)
		}
		views = append(views, state(t, view(t, m, "a")))
	}
	depth := func(i int) Mark {
		if i == 0 {
			return Floor
		}
		d, err := m.DepthAt("a", fmt.Sprint("call_", i), true)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for i := range views {
		for j := range views {
			cs, err := m.CheckpointDiff("a", depth(i), depth(j), false)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := kinds(cs), expectedDiff(views[i], views[j]); !slices.Equal(got, want) {
				t.Errorf("diff from view %d to %d:\n got %v\nwant %v", i, j, got, want)
			}
		}
	}
	cs, err := m.CheckpointDiff("a", Floor, Top, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if c.Path == "f.txt" && !strings.Contains(c.Diff, "-two\n+TWO\n") {
			t.Errorf("f.txt's diff: %q", c.Diff)
		}
	}
	if _, err := m.CheckpointDiff("a", Mark{Depth: 99}, Top, false); !errors.Is(err, ErrInvalid) {
		t.Errorf("a depth outside the checkpoints: %v", err)
	}
}

func kinds(cs []Change) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Kind+" "+c.Path)
	}
	return out
}

// expectedDiff is what differs from tree a to tree b (state's form): an
// added path with all it holds, a deleted one once (not what it held),
// a file or link whose type, mode or contents changed.
func expectedDiff(a, b map[string]string) []string {
	var out []string
	for _, p := range slices.Sorted(maps.Keys(b)) {
		va, ok := a[p]
		switch {
		case !ok:
			out = append(out, "added "+p)
		case va != b[p] && !(strings.HasPrefix(va, "d") && strings.HasPrefix(b[p], "d")):
			out = append(out, "modified "+p)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(a)) {
		if _, ok := b[p]; ok {
			continue
		}
		if _, parentGone := a[filepath.Dir(p)]; parentGone && filepath.Dir(p) != "." {
			if _, stays := b[filepath.Dir(p)]; !stays {
				continue
			}
		}
		out = append(out, "deleted "+p)
	}
	slices.SortFunc(out, func(x, y string) int {
		_, px, _ := strings.Cut(x, " ")
		_, py, _ := strings.Cut(y, " ")
		return strings.Compare(px, py)
	})
	return out
}
