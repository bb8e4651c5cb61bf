package workspace

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/testenv"
)

// fixture is a base directory and a Manager over a fresh home.
func fixture(t *testing.T) (m *Manager, home, base string) {
	t.Helper()
	testenv.NeedRoot(t, "overlayfs mounts and trusted.* xattrs need CAP_SYS_ADMIN")
	home, base = t.TempDir(), t.TempDir()
	put(t, base, "f.txt", "one\ntwo\nthree\n")
	put(t, base, "keep.txt", "keep\n")
	put(t, base, "gone.txt", "bye\n")
	put(t, base, "dir/a", "a\n")
	put(t, base, "dir/b", "b\n")
	m = open(t, home)
	return m, home, base
}

func open(t *testing.T, home string) *Manager {
	t.Helper()
	m, err := Open(filepath.Join(home, "workspaces"), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if ok, why := m.Available(); !ok {
		testenv.Need(t, "overlay snapshots: %s", why)
	}
	m.SetHome(home)
	m.Recover()
	t.Cleanup(m.Close)
	return m
}

func put(t *testing.T, dir, rel, s string) {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// view returns the directory showing agent's view, and releases its lease
// at the end of the test.
func view(t *testing.T, m *Manager, agent string) string {
	t.Helper()
	l, err := m.Acquire(agent)
	if err != nil || l == nil {
		t.Fatalf("acquire %s: %v %v", agent, l, err)
	}
	l.Release()
	return viewPath(l.FD)
}

func read(t *testing.T, dir, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, rel))
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(b)
}

func summary(cs []Change) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Kind+" "+c.Type+" "+c.Path)
	}
	return out
}

func TestForkIsolatesEachView(t *testing.T) {
	t.Parallel()
	m, _, base := fixture(t)
	if err := m.Fork("p", base, "c1"); err != nil {
		t.Fatal(err)
	}
	put(t, view(t, m, "p"), "f.txt", "parent\n")
	if err := m.Fork("p", base, "c2"); err != nil {
		t.Fatal(err)
	}
	pv, c1, c2 := view(t, m, "p"), view(t, m, "c1"), view(t, m, "c2")
	put(t, c1, "f.txt", "child one\n")
	put(t, c2, "new.txt", "two's\n")
	put(t, pv, "p.txt", "p\n")
	for _, c := range []struct{ dir, rel, want string }{
		{pv, "f.txt", "parent\n"}, {c1, "f.txt", "child one\n"}, {c2, "f.txt", "parent\n"},
		{base, "f.txt", "one\ntwo\nthree\n"},
		{c1, "new.txt", "<open " + c1 + "/new.txt: no such file or directory>"},
		{pv, "new.txt", "<open " + pv + "/new.txt: no such file or directory>"},
		{c2, "new.txt", "two's\n"},
		{c1, "p.txt", "<open " + c1 + "/p.txt: no such file or directory>"},
		{base, "p.txt", "<open " + base + "/p.txt: no such file or directory>"},
	} {
		if got := read(t, c.dir, c.rel); got != c.want {
			t.Errorf("%s/%s = %q, want %q", c.dir, c.rel, got, c.want)
		}
	}
	if i := m.Info("c2"); i.Mode != Snapshot || i.Parent != "p" || i.Layers != 1 || i.Path != base {
		t.Errorf("info c2 = %+v", i)
	}
}

func TestChangesListWhiteoutsAndOpaqueDirs(t *testing.T) {
	t.Parallel()
	m, _, base := fixture(t)
	if err := m.Fork("p", base, "c"); err != nil {
		t.Fatal(err)
	}
	v := view(t, m, "c")
	put(t, v, "f.txt", "one\nTWO\nthree\n")
	put(t, v, "added/x", "x\n")
	if err := os.Remove(filepath.Join(v, "gone.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(v, "dir")); err != nil {
		t.Fatal(err)
	}
	put(t, v, "dir/b", "b\n") // same as before: no change
	put(t, v, "dir/c", "c\n")
	// Copied up without a change: not a change.
	if err := os.Chmod(filepath.Join(v, "keep.txt"), 0o644); err != nil {
		t.Fatal(err)
	}
	cs, err := m.Changes("c", true)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"added dir added", "added file added/x", "deleted file dir/a", "added file dir/c", "modified file f.txt", "deleted file gone.txt"}
	if got := summary(cs); !slices.Equal(got, want) {
		t.Fatalf("changes = %q, want %q", got, want)
	}
	for _, c := range cs {
		if c.Path == "f.txt" {
			wantDiff := "--- a/f.txt\n+++ b/f.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three\n"
			if c.Diff != wantDiff || c.Size != 14 {
				t.Errorf("f.txt: size %d diff %q, want %q", c.Size, c.Diff, wantDiff)
			}
		}
		if c.Path == "gone.txt" && (c.Size != 4 || !strings.HasPrefix(c.Diff, "--- a/gone.txt\n+++ /dev/null\n")) {
			t.Errorf("gone.txt: %+v", c)
		}
	}
	if cs, _ := m.Changes("p", false); len(cs) != 0 {
		t.Errorf("parent changes = %q", summary(cs))
	}
}

func TestApplyAllOrNothing(t *testing.T) {
	t.Parallel()
	m, _, base := fixture(t)
	for _, c := range []string{"c1", "c2"} {
		if err := m.Fork("p", base, c); err != nil {
			t.Fatal(err)
		}
	}
	c1, c2 := view(t, m, "c1"), view(t, m, "c2")
	put(t, c1, "f.txt", "from c1\n")
	put(t, c1, "c1/new", "n\n")
	os.Remove(filepath.Join(c1, "gone.txt"))
	put(t, c2, "f.txt", "from c2\n")
	put(t, c2, "c2.txt", "c2\n")
	put(t, c2, "keep.txt", "changed by c2\n")

	res, err := m.Apply("c1", "")
	if err != nil {
		t.Fatal(err)
	}
	if res.Parent != "p" || res.Target != base || len(res.Changes) != 4 {
		t.Errorf("applied = %+v", res)
	}
	pv := view(t, m, "p")
	if read(t, pv, "f.txt") != "from c1\n" || read(t, pv, "c1/new") != "n\n" || read(t, pv, "gone.txt") == "bye\n" {
		t.Errorf("parent view after apply: f=%q new=%q gone=%q", read(t, pv, "f.txt"), read(t, pv, "c1/new"), read(t, pv, "gone.txt"))
	}
	before, _ := m.Changes("p", false)

	_, err = m.Apply("c2", "")
	var ce *ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, ErrConflict) || !slices.Equal(ce.Paths, []string{"f.txt"}) {
		t.Fatalf("second apply: %v", err)
	}
	after, _ := m.Changes("p", false)
	if !slices.Equal(summary(before), summary(after)) || read(t, pv, "c2.txt") != "<open "+pv+"/c2.txt: no such file or directory>" || read(t, pv, "keep.txt") != "keep\n" {
		t.Errorf("a refused apply changed the parent: %q -> %q", summary(before), summary(after))
	}
	if read(t, base, "f.txt") != "one\ntwo\nthree\n" {
		t.Error("the base changed")
	}

	// Onto a directory: the same rule.
	out := t.TempDir()
	put(t, out, "f.txt", "one\ntwo\nthree\n")
	put(t, out, "keep.txt", "keep\n")
	if _, err := m.Apply("c2", out); err != nil {
		t.Fatal(err)
	}
	if read(t, out, "f.txt") != "from c2\n" || read(t, out, "c2.txt") != "c2\n" || read(t, out, "keep.txt") != "changed by c2\n" {
		t.Error("apply to a directory")
	}
	// A directory the target turned into a link is a conflict: the write
	// would leave the target.
	elsewhere := t.TempDir()
	put(t, view(t, m, "c2"), "dir/sub/new.txt", "x\n")
	out2 := t.TempDir()
	if err := os.Symlink(elsewhere, filepath.Join(out2, "dir")); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Apply("c2", out2); !errors.As(err, &ce) || !slices.Contains(ce.Paths, "dir/sub/new.txt") {
		t.Errorf("apply through a link: %v", err)
	}
	if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
		t.Errorf("apply wrote through a link: %v", ents)
	}
	if _, err := m.Apply("c2", base); !errors.Is(err, ErrBusy) {
		t.Errorf("apply onto the tree's base: %v", err)
	}
}

func TestRestartKeepsLayers(t *testing.T) {
	t.Parallel()
	m, home, base := fixture(t)
	if err := m.Fork("p", base, "c"); err != nil {
		t.Fatal(err)
	}
	put(t, view(t, m, "c"), "f.txt", "child\n")
	put(t, view(t, m, "p"), "p.txt", "parent\n")
	m.Close()
	m2 := open(t, home)
	if got := read(t, view(t, m2, "c"), "f.txt"); got != "child\n" {
		t.Errorf("child after restart: %q", got)
	}
	if got := read(t, view(t, m2, "p"), "p.txt"); got != "parent\n" {
		t.Errorf("parent after restart: %q", got)
	}
	if _, err := m2.Apply("c", ""); err != nil {
		t.Fatal(err)
	}
	if got := read(t, view(t, m2, "p"), "f.txt"); got != "child\n" {
		t.Errorf("applied after restart: %q", got)
	}
}

func TestBusyAndDrop(t *testing.T) {
	t.Parallel()
	m, home, base := fixture(t)
	if err := m.Fork("p", base, "c"); err != nil {
		t.Fatal(err)
	}
	l, err := m.Acquire("p")
	if err != nil {
		t.Fatal(err)
	}
	m.releaseWait = 20 * time.Millisecond
	before := m.Info("p")
	if err := m.CheckFork("p", base); !errors.Is(err, ErrBusy) {
		t.Errorf("fork of a running parent: %v", err)
	}
	if err := m.Fork("p", base, "c2"); !errors.Is(err, ErrBusy) {
		t.Errorf("fork of a running parent: %v", err)
	}
	// A failed fork records nothing of the child (whose header is then
	// never written: Fork runs before it), and leaves the parent as it was.
	m.mu.Lock()
	_, recorded := m.agents["c2"]
	m.mu.Unlock()
	if recorded {
		t.Errorf("a fork that failed recorded its child")
	}
	if i := m.Info("p"); i != before {
		t.Errorf("a fork that failed changed its parent: %+v", i)
	}
	l.Release()
	put(t, view(t, m, "c"), "x", "x\n")
	layers := func() int { e, _ := os.ReadDir(filepath.Join(home, "workspaces", "layers")); return len(e) }
	n := layers()
	if err := m.Drop("c"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Acquire("c"); !errors.Is(err, ErrDropped) {
		t.Errorf("acquire after drop: %v", err)
	}
	if got := layers(); got != n-1 {
		t.Errorf("layers %d -> %d after drop", n, got)
	}
	// An agent without a workspace of its own runs in the shared
	// directory, and its first snapshot fork waits for its jobs too.
	l, err = m.Acquire("shared")
	if err != nil || l.FD != -1 {
		t.Fatalf("an agent without a workspace: %+v %v", l, err)
	}
	if err := m.CheckFork("shared", t.TempDir()); !errors.Is(err, ErrBusy) {
		t.Errorf("first snapshot fork of a running shared agent: %v", err)
	}
	l.Release()
	if err := m.CheckFork("shared", t.TempDir()); err != nil {
		t.Errorf("first snapshot fork of an idle shared agent: %v", err)
	}
}

// A snapshot fork is refused while the layers use workspaces.maxBytes,
// and allowed again once a drop frees them (counted afresh, not from the
// cached figure).
func TestForkBudget(t *testing.T) {
	t.Parallel()
	m, _, base := fixture(t)
	m.SetMaxBytes(64 << 10)
	if err := m.Fork("p", base, "c"); err != nil {
		t.Fatal(err)
	}
	put(t, view(t, m, "c"), "big", strings.Repeat("x", 128<<10))
	if err := m.CheckFork("c", base); !errors.Is(err, ErrOverBudget) {
		t.Fatalf("fork with the layers over budget: %v, want ErrOverBudget", err)
	}
	if err := m.Fork("p", base, "c2"); !errors.Is(err, ErrOverBudget) {
		t.Fatalf("fork with the layers over budget: %v, want ErrOverBudget", err)
	}
	if err := m.Drop("c"); err != nil {
		t.Fatal(err)
	}
	if err := m.Fork("p", base, "c3"); err != nil {
		t.Errorf("fork after the drop freed the budget: %v", err)
	}
	m.SetMaxBytes(0)
	put(t, view(t, m, "c3"), "big", strings.Repeat("x", 128<<10))
	if err := m.Fork("p", base, "c4"); err != nil {
		t.Errorf("fork without a budget: %v", err)
	}
}

// A shared child of a snapshot agent shares its view (not the base
// directory); its snapshot forks fork that view.
func TestSharedChildOfSnapshotAgent(t *testing.T) {
	t.Parallel()
	m, home, base := fixture(t)
	if err := m.Fork("p", base, "c"); err != nil {
		t.Fatal(err)
	}
	if err := m.Share("c", "s"); err != nil {
		t.Fatal(err)
	}
	if err := m.Share("root-less", "x"); err != nil || m.Info("x").Mode != Shared {
		t.Errorf("share of a plain agent: %v %+v", err, m.Info("x"))
	}
	put(t, view(t, m, "s"), "f.txt", "from s\n")
	if got := read(t, view(t, m, "c"), "f.txt"); got != "from s\n" {
		t.Errorf("c does not see its shared child's write: %q", got)
	}
	if i := m.Info("s"); i.Mode != Shared || i.Parent != "c" || i.Path != base {
		t.Errorf("info s = %+v", i)
	}
	if _, err := m.Changes("s", false); !errors.Is(err, ErrNotFound) {
		t.Errorf("changes of a sharing agent: %v", err)
	}
	if err := m.Fork("s", base, "g"); err != nil {
		t.Fatal(err)
	}
	if got := read(t, view(t, m, "g"), "f.txt"); got != "from s\n" {
		t.Errorf("a snapshot of the shared view: %q", got)
	}
	if i := m.Info("g"); i.Parent != "c" {
		t.Errorf("g's parent = %q, want the view's owner c", i.Parent)
	}
	// Jobs of the sharing agent count as the owner's.
	l, err := m.Acquire("s")
	if err != nil {
		t.Fatal(err)
	}
	m.releaseWait = 20 * time.Millisecond
	if err := m.CheckFork("c", base); !errors.Is(err, ErrBusy) {
		t.Errorf("fork of c while s runs: %v", err)
	}
	l.Release()
	m.Close()
	m2 := open(t, home)
	if got := read(t, view(t, m2, "s"), "f.txt"); got != "from s\n" {
		t.Errorf("after a restart: %q", got)
	}
	if err := m2.Drop("c"); err != nil {
		t.Fatal(err)
	}
	if _, err := m2.Acquire("s"); !errors.Is(err, ErrDropped) {
		t.Errorf("a sharing agent of a dropped workspace runs: %v", err)
	}
}

func TestDisabledSaysWhy(t *testing.T) {
	t.Parallel()
	m, err := Open(filepath.Join(t.TempDir(), "workspaces"), "cluster mode", nil)
	if err != nil {
		t.Fatal(err)
	}
	var ue *UnavailableError
	if err := m.CheckFork("p", t.TempDir()); !errors.As(err, &ue) || !errors.Is(err, ErrUnavailable) || ue.Reason != "cluster mode" {
		t.Errorf("fork with snapshots off: %v", err)
	}
	if ok, why := m.Available(); ok || why != "cluster mode" {
		t.Errorf("available = %v %q", ok, why)
	}
}

func TestUnifiedDiffHunks(t *testing.T) {
	t.Parallel()
	var a, b strings.Builder
	for i := range 20 {
		a.WriteString(strings.Repeat("x", i) + "\n")
		if i == 2 || i == 15 {
			b.WriteString("changed\n")
		} else {
			b.WriteString(strings.Repeat("x", i) + "\n")
		}
	}
	d, ok := unifiedDiff("f", []byte(a.String()), []byte(b.String()), Modified)
	if !ok || strings.Count(d, "@@ ") != 2 || !strings.Contains(d, "@@ -1,6 +1,6 @@\n") || !strings.Contains(d, "@@ -13,7 +13,7 @@\n") {
		t.Errorf("diff:\n%s", d)
	}
	if d, _ := unifiedDiff("f", []byte("a"), []byte("b"), Modified); d != "--- a/f\n+++ b/f\n@@ -1,1 +1,1 @@\n-a\n\\ No newline at end of file\n+b\n\\ No newline at end of file\n" {
		t.Errorf("no newline: %q", d)
	}
}
