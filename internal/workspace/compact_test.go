package workspace

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// Past workspaces.checkpointDepth the oldest checkpoints of a view are
// merged into one layer, honouring overlayfs's semantics (whiteouts, opaque
// directories, a directory over a whiteout or a link, links, hard links,
// modes, extended attributes): the view is the same byte for byte, the
// stack is shorter, the newest checkpoints are each still rewound to, a
// compacted run's edges are too and a view inside it is refused with
// ErrCheckpointCompacted; a link in a layer is merged as a link, never
// followed out; a restart keeps it all.
func TestCheckpointCompaction(t *testing.T) {
	t.Parallel()
	m, home, base := fixture(t)
	m.SetCheckpointDepth(4)
	put(t, base, "tree/a", "a\n")
	if err := m.Adopt("a", base); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	xattrs := unix.Setxattr(filepath.Join(base, "keep.txt"), "user.probe", []byte("1"), 0) == nil
	calls := []func(v string){
		func(v string) { put(t, v, "src/main.go", "package main\n") },
		func(v string) { put(t, v, "f.txt", "one\nTWO\nthree\n") },
		func(v string) { os.Chmod(filepath.Join(v, "keep.txt"), 0o600) },
		func(v string) { os.Remove(filepath.Join(v, "gone.txt")) },
		func(v string) { // deleted and made again: opaque
			os.RemoveAll(filepath.Join(v, "dir"))
			put(t, v, "dir/c", "c\n")
		},
		func(v string) {
			os.Symlink("src/main.go", filepath.Join(v, "link"))
			os.Symlink(outside, filepath.Join(v, "escape"))
		},
		func(v string) {
			os.Link(filepath.Join(v, "src/main.go"), filepath.Join(v, "src/hard.go"))
			put(t, v, "h/one", "one name of two\n")
			os.Link(filepath.Join(v, "h/one"), filepath.Join(v, "h/two"))
		},
		func(v string) {
			if xattrs {
				unix.Setxattr(filepath.Join(v, "f.txt"), "user.color", []byte("blue"), 0)
			}
			os.Mkdir(filepath.Join(v, "xd"), 0o750)
		},
		func(v string) { // a link replaced by a directory: never followed
			os.Remove(filepath.Join(v, "escape"))
			put(t, v, "escape/pwn", "pwned\n")
		},
		func(v string) { put(t, v, "gone.txt", "back\n") },
		func(v string) { os.RemoveAll(filepath.Join(v, "tree")) },
		func(v string) { put(t, v, "tree/b", "b\n") }, // a directory over a whiteout
		func(v string) { os.Remove(filepath.Join(v, "keep.txt")) },
		func(v string) { put(t, v, "keep.txt/inside", "x\n") }, // over a file deleted
		func(v string) { os.RemoveAll(filepath.Join(v, "src")) },
		func(v string) { put(t, v, "src/new.go", "package new\n") },
		func(v string) { // a directory moved (as mv does across layers)
			put(t, v, "dir2/c", read(t, v, "dir/c"))
			os.RemoveAll(filepath.Join(v, "dir"))
		},
		func(v string) { put(t, v, "f.txt", "last\n") },
		func(v string) { put(t, v, "dir2/d", "d\n") },
		func(v string) { os.Remove(filepath.Join(v, "link")) },
	}
	// The views a stack never compacted shows: what each call's view
	// must be.
	ref, _, refBase := fixture(t)
	ref.SetCheckpointDepth(1000)
	put(t, refBase, "tree/a", "a\n")
	if err := ref.Adopt("r", refBase); err != nil {
		t.Fatal(err)
	}
	if xattrs {
		unix.Setxattr(filepath.Join(refBase, "keep.txt"), "user.probe", []byte("1"), 0)
	}
	var after []map[string]string
	initial := state(t, view(t, m, "a"))
	for i, call := range calls {
		call(view(t, ref, "r"))
		after = append(after, state(t, view(t, ref, "r")))
		m.WaitCompactions("a") // the view's path is the mount's descriptor
		call(view(t, m, "a"))
		if made, err := m.Checkpoint("a", fmt.Sprint("call_", i+1), int64(2*i+2)); !made || err != nil {
			t.Fatalf("call %d: %v %v", i+1, made, err)
		}
		m.WaitCompactions("a")
		if got := state(t, view(t, m, "a")); !maps.Equal(got, after[i]) {
			t.Fatalf("after call %d, a compacted view:\n got %v\nwant %v", i+1, got, after[i])
		}
	}
	m.WaitCompactions("a")
	final := after[len(after)-1]
	if got := state(t, view(t, m, "a")); !maps.Equal(got, final) {
		t.Fatalf("the view changed in a compaction:\n got %v\nwant %v", got, final)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("a merge followed a layer's link out: %v", ents)
	}
	v := view(t, m, "a")
	var one, two unix.Stat_t
	if unix.Lstat(filepath.Join(v, "h/one"), &one) != nil || unix.Lstat(filepath.Join(v, "h/two"), &two) != nil || one.Ino != two.Ino {
		t.Errorf("a hard link was not kept: inodes %d and %d", one.Ino, two.Ino)
	}
	if xattrs {
		buf := make([]byte, 16)
		if n, err := unix.Getxattr(filepath.Join(v, "f.txt"), "user.color", buf); err != nil || string(buf[:n]) != "blue" {
			t.Errorf("an extended attribute was not kept: %q %v", buf, err)
		}
	}
	list, _ := m.Checkpoints("a")
	n := len(list.Checkpoints)
	if n < 5 || !list.Checkpoints[0].Compacted || list.Checkpoints[0].CallIDs[0] != "call_1" {
		t.Fatalf("checkpoints after compaction: %+v", list.Checkpoints)
	}
	for _, c := range list.Checkpoints[n-4:] {
		if c.Compacted || len(c.CallIDs) != 1 {
			t.Errorf("a kept checkpoint: %+v", c)
		}
	}
	if l := m.Info("a").Layers; l >= len(calls) {
		t.Errorf("the stack holds %d layers after compaction", l)
	}
	span := list.Checkpoints[0]
	if _, cs, err := m.CheckpointChanges("a", span.CallIDs[0], false); err != nil || len(cs) == 0 {
		t.Errorf("a compacted checkpoint's changes: %v %v", summary(cs), err)
	}

	rewind := func(call string, after bool) error {
		d, err := m.DepthAt("a", call, after)
		if err != nil {
			return err
		}
		return m.Rewind("a", d, false)
	}
	check := func(what string, want map[string]string) {
		t.Helper()
		if got := state(t, view(t, m, "a")); !maps.Equal(got, want) {
			t.Errorf("%s:\n got %v\nwant %v", what, got, want)
		}
	}
	undo := func() {
		t.Helper()
		if err := m.Rewind("a", Mark{}, true); err != nil {
			t.Fatal(err)
		}
		check("undone", final)
	}
	// Each kept checkpoint, both sides.
	for i := len(calls) - 4; i < len(calls); i++ {
		if err := rewind(fmt.Sprint("call_", i+1), false); err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprint("before call ", i+1), after[i-1])
		undo()
	}
	// The compacted run's edges, and a view inside it refused.
	lastCall := span.CallIDs[len(span.CallIDs)-1]
	var k int
	fmt.Sscanf(lastCall, "call_%d", &k)
	if err := rewind(lastCall, true); err != nil {
		t.Fatal(err)
	}
	check("after the compacted run", after[k-1])
	undo()
	if err := rewind("call_1", false); err != nil {
		t.Fatal(err)
	}
	check("before the compacted run", initial)
	undo()
	if err := rewind("call_2", false); !errors.Is(err, ErrCheckpointCompacted) {
		t.Errorf("rewind inside a compacted run: %v", err)
	}
	if _, err := m.DepthBeforeSeq("a", 3); !errors.Is(err, ErrCheckpointCompacted) {
		t.Errorf("a view by seq inside a compacted run: %v", err)
	}

	// A restart keeps it, and no layer is left that nothing references.
	m.Close()
	m = open(t, home)
	check("after a restart", final)
	if l2, _ := m.Checkpoints("a"); len(l2.Checkpoints) != n {
		t.Errorf("%d checkpoints after a restart, want %d", len(l2.Checkpoints), n)
	}
	m.mu.Lock()
	unused := m.unusedLocked()
	m.mu.Unlock()
	if len(unused) != 0 {
		t.Errorf("layers left unreferenced: %v", unused)
	}
}
