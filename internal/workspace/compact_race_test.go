package workspace

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// A compaction merges older layers with no lock held (compact.go): a
// rewind, an undo, a fork from a checkpoint or a drop may come while it
// merges. These tests hold a compaction at one of its points (testPoint),
// make the race happen there, let the compaction go on, and check that the
// view is exactly the view asked for, that every checkpoint listed is the
// layer at its depth, that every layer referenced is on disk and that the
// layers directory holds nothing else.

// raceRig is agent "a", a snapshot fork of "p" standing on a layer of p's
// (so that its changes are counted from a fork point above the base),
// with workspaces.checkpointDepth 4: its sixth checkpoint starts a
// compaction of its first two, which the rig holds at the point named.
type raceRig struct {
	t       *testing.T
	m       *Manager
	views   []map[string]string // the view after each call (0: before the first)
	held    chan struct{}       // closed once the compaction is held
	release chan struct{}       // close to let it go on
}

func newRaceRig(t *testing.T, point string) *raceRig {
	t.Helper()
	m, _, base := fixture(t)
	m.SetCheckpointDepth(4)
	r := &raceRig{t: t, m: m, held: make(chan struct{}), release: make(chan struct{})}
	var once sync.Once
	m.testPoint = func(name string) {
		if name == point {
			once.Do(func() { close(r.held); <-r.release })
		}
	}
	t.Cleanup(func() {
		select {
		case <-r.release:
		default:
			close(r.release)
		}
	})
	if err := m.Fork("p", base, "x"); err != nil {
		t.Fatal(err)
	}
	put(t, view(t, m, "p"), "parent.txt", "the parent's\n")
	if err := m.Fork("p", base, "a"); err != nil {
		t.Fatal(err)
	}
	r.views = append(r.views, state(t, view(t, m, "a")))
	for range 5 {
		r.call()
	}
	select {
	case <-r.held:
		t.Fatal("a compaction started before the sixth checkpoint")
	default:
	}
	r.call()
	<-r.held
	return r
}

// call makes the next call of a: it writes a file of its own and rewrites
// f.txt (the third removes dir, the fifth gone.txt), then checkpoints.
func (r *raceRig) call() {
	r.t.Helper()
	i := len(r.views)
	v := view(r.t, r.m, "a")
	put(r.t, v, fmt.Sprint("calls/c", i), fmt.Sprint(i, "\n"))
	put(r.t, v, "f.txt", fmt.Sprint("after call ", i, "\n"))
	switch i {
	case 3:
		os.RemoveAll(filepath.Join(v, "dir"))
	case 5:
		os.Remove(filepath.Join(v, "gone.txt"))
	}
	if made, err := r.m.Checkpoint("a", fmt.Sprint("call_", i), int64(2*i)); !made || err != nil {
		r.t.Fatalf("call %d: %v %v", i, made, err)
	}
	r.views = append(r.views, state(r.t, view(r.t, r.m, "a")))
}

// goOn lets the compaction go on and waits until it is recorded or
// dropped and its layers removed.
func (r *raceRig) goOn() {
	r.t.Helper()
	close(r.release)
	r.m.WaitCompactions("a")
	r.m.wg.Wait() // a discarded compaction removes its layers last
}

// at resolves the view before (after false) or after call i of agent.
func (r *raceRig) at(agent string, i int, after bool) Mark {
	r.t.Helper()
	at, err := r.m.DepthAt(agent, fmt.Sprint("call_", i), after)
	if err != nil {
		r.t.Fatal(err)
	}
	return at
}

func (r *raceRig) rewind(i int, after bool) {
	r.t.Helper()
	if err := r.m.Rewind("a", r.at("a", i, after), false); err != nil {
		r.t.Fatal(err)
	}
}

func (r *raceRig) undo() {
	r.t.Helper()
	if err := r.m.Rewind("a", Mark{}, true); err != nil {
		r.t.Fatal(err)
	}
}

// is checks that agent's view is want.
func (r *raceRig) is(agent, what string, want map[string]string) {
	r.t.Helper()
	if got := state(r.t, view(r.t, r.m, agent)); !maps.Equal(got, want) {
		r.t.Errorf("%s: agent %s's view:\n got %v\nwant %v", what, agent, got, want)
	}
}

// compacted reports whether a's first checkpoint is the compacted run
// of calls 1 and 2.
func (r *raceRig) compacted() bool {
	list, err := r.m.Checkpoints("a")
	if err != nil {
		r.t.Fatal(err)
	}
	if len(list.Checkpoints) == 0 {
		return false
	}
	c := list.Checkpoints[0]
	return c.Compacted && slices.Equal(c.CallIDs, []string{"call_1", "call_2"})
}

// consistent checks every agent's record against the layers: each
// checkpoint (set aside or not) is the layer at its depth, depths rise,
// a's changes are counted from its fork (its parent's file is not one),
// every layer referenced is on disk and nothing else is.
func (r *raceRig) consistent() {
	r.t.Helper()
	m := r.m
	m.mu.Lock()
	for id, a := range m.agents {
		if a.Dropped {
			continue
		}
		prev := 0
		for _, c := range a.Checkpoints {
			if c.Depth <= prev || c.Depth > len(a.Layers) || a.Layers[c.Depth-1] != c.Layer {
				r.t.Errorf("agent %s: checkpoint %v at depth %d is not its layer (stack %v)", id, c.CallIDs, c.Depth, a.Layers)
			}
			prev = c.Depth
		}
		if s := a.Aside; s != nil {
			for _, c := range s.Checkpoints {
				if i := c.Depth - s.Depth - 1; i < 0 || i >= len(s.Layers) || s.Layers[i] != c.Layer {
					r.t.Errorf("agent %s: a checkpoint set aside %v at depth %d is not its layer (aside at %d: %v)", id, c.CallIDs, c.Depth, s.Depth, s.Layers)
				}
			}
		}
		if id == "a" && len(a.Layers)-a.Own != 1 {
			r.t.Errorf("agent a's changes are counted from depth %d, not from its fork at 1", len(a.Layers)-a.Own)
		}
	}
	used := m.usedLocked()
	delete(used, m.makingSpare) // a spare layer being made in the background
	unused := m.unusedLocked()
	m.mu.Unlock()
	for id := range used {
		if _, err := os.Stat(m.upperDir(id)); err != nil {
			r.t.Errorf("a layer referenced is gone: %v", err)
		}
	}
	if len(unused) > 0 {
		r.t.Errorf("layers left that nothing references: %v", unused)
	}
	if info := m.Info("a"); !info.Dropped {
		cs, err := m.Changes("a", false)
		if err != nil {
			r.t.Fatal(err)
		}
		for _, c := range cs {
			if c.Path == "parent.txt" {
				r.t.Errorf("agent a's changes list its parent's file: %v", summary(cs))
			}
		}
	}
}

// A rewind while the merge runs is served at once (the merge holds no
// lock): the view is the one asked for, before and after the compaction
// is recorded under it. A rewind resolved while the merge ran and made
// after it was recorded (the stack renumbered meanwhile) still goes to
// the view it named, and an undo across the compaction comes back.
func TestCompactionRacesRewind(t *testing.T) {
	t.Parallel()
	r := newRaceRig(t, "workspace.compact.merging")
	for range 3 {
		r.call() // calls 7 to 9 checkpoint while it merges
	}
	r.rewind(9, false)
	r.is("a", "rewound to before call 9 while merging", r.views[8])
	stale := r.at("a", 8, false)
	r.goOn()
	if !r.compacted() {
		t.Error("the compaction was not recorded under the rewind")
	}
	r.is("a", "before call 9, compacted beneath", r.views[8])
	r.consistent()
	r.undo()
	r.is("a", "the rewind undone across the compaction", r.views[9])
	if err := r.m.Rewind("a", stale, false); err != nil {
		t.Fatal(err)
	}
	r.is("a", "a rewind to before call 8 resolved before the compaction was recorded", r.views[7])
	r.consistent()
}

// A rewind into the very run being merged, while it merges, is served:
// the compaction, whose run the rewind split, is dropped (its merged layer
// removed), and an undo of the rewind while it still merges is served too.
func TestCompactionRacesRewindIntoItsRun(t *testing.T) {
	t.Parallel()
	r := newRaceRig(t, "workspace.compact.merging")
	r.rewind(2, false)
	r.is("a", "rewound into the run while merging", r.views[1])
	r.goOn()
	if r.compacted() {
		t.Error("a run split by a rewind was compacted")
	}
	r.is("a", "rewound into the run", r.views[1])
	r.consistent()
	r.undo()
	r.is("a", "undone", r.views[6])
	r.consistent()
}

// An undo while the merge runs, of a rewind made before it, with what was
// written after the rewind (set aside by the undo): the compaction is
// recorded under the stack the undo brought back, and undoing the undo
// brings back what was written after the rewind.
func TestCompactionRacesUndo(t *testing.T) {
	t.Parallel()
	r := newRaceRig(t, "workspace.compact.merging")
	r.rewind(5, false)
	put(t, view(t, r.m, "a"), "after-rewind", "x\n")
	rewound := state(t, view(t, r.m, "a"))
	r.undo()
	r.is("a", "undone while merging", r.views[6])
	r.goOn()
	if !r.compacted() {
		t.Error("the compaction was not recorded under the undo")
	}
	r.is("a", "undone, compacted beneath", r.views[6])
	r.consistent()
	r.undo()
	r.is("a", "the undo undone", rewound)
	r.consistent()
	r.undo()
	r.rewind(3, false)
	r.is("a", "before call 3 (kept)", r.views[2])
	r.consistent()
}

// Forks from a checkpoint while the merge runs stand on the layers being
// merged: the compaction is recorded in the parent's stack, the layers it
// retired stay while a fork stands on them and go with the last one; a
// fork resolved while the merge ran and made after it was recorded gets
// the view it named.
func TestCompactionRacesForkFrom(t *testing.T) {
	t.Parallel()
	r := newRaceRig(t, "workspace.compact.merging")
	if err := r.m.ForkAt("a", "f1", r.at("a", 2, true)); err != nil {
		t.Fatal(err)
	}
	r.is("f1", "forked from after call 2 while merging", r.views[2])
	stale := r.at("a", 4, true)
	r.m.mu.Lock()
	run := slices.Clone(r.m.agents["a"].Layers[1:3])
	r.m.mu.Unlock()
	r.goOn()
	if !r.compacted() {
		t.Error("the compaction was not recorded beside a fork")
	}
	r.is("f1", "a fork on the merged layers, after the compaction", r.views[2])
	r.is("a", "the parent, compacted", r.views[6])
	if err := r.m.ForkAt("a", "f2", stale); err != nil {
		t.Fatal(err)
	}
	r.is("f2", "a fork from after call 4 resolved before the compaction was recorded", r.views[4])
	r.consistent()
	for _, id := range run {
		if _, err := os.Stat(r.m.upperDir(id)); err != nil {
			t.Errorf("a layer a fork stands on was removed: %v", err)
		}
	}
	if err := r.m.Drop("f1"); err != nil {
		t.Fatal(err)
	}
	for _, id := range run {
		if _, err := os.Stat(r.m.layerDir(id)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a merged-away layer outlived the last fork on it: %v", err)
		}
	}
	r.is("f2", "the second fork, the first dropped", r.views[4])
	r.consistent()
}

// A drop of the agent's workspace while the merge runs: the merge's
// layers (the run it read, which nothing else holds, and the layer it
// wrote) are removed when it ends; its parent's and sibling's stay.
func TestCompactionRacesDrop(t *testing.T) {
	t.Parallel()
	r := newRaceRig(t, "workspace.compact.merging")
	if err := r.m.Drop("a"); err != nil {
		t.Fatal(err)
	}
	r.goOn()
	r.consistent()
	r.is("p", "the parent", r.views[0])
	if _, err := r.m.Acquire("a"); !errors.Is(err, ErrDropped) {
		t.Errorf("a job of the dropped agent: %v", err)
	}
}

// A drop while the compaction waits, merged, for the view to be still (a
// job of it ran when the merge ended): the merged layers and the run's go.
func TestCompactionReadyThenDrop(t *testing.T) {
	t.Parallel()
	r := newRaceRig(t, "workspace.compact.merged")
	r.m.SetBusy(func([]string) int { return 1 })
	close(r.release)
	r.m.mu.Lock()
	for r.m.compacting["a"] {
		r.m.cond.Wait()
	}
	ready := r.m.ready["a"] != nil
	r.m.mu.Unlock()
	if !ready {
		t.Fatal("the compaction is not waiting for the view to be still")
	}
	if err := r.m.Drop("a"); err != nil {
		t.Fatal(err)
	}
	r.m.WaitCompactions("a")
	r.m.wg.Wait()
	r.consistent()
}

// The layer a compaction merges into is made before the merge: a rewind
// or an undo removing the layers nothing references, at that moment, does
// not take it.
func TestCompactionLayerSurvivesCleanup(t *testing.T) {
	t.Parallel()
	r := newRaceRig(t, "workspace.compact.layer")
	r.rewind(6, false)
	r.undo()
	r.goOn()
	if !r.compacted() {
		t.Error("the compaction was not recorded")
	}
	r.is("a", "after the compaction", r.views[6])
	r.consistent()
}

// Two rewinds while the merge runs: the first sets the run's upper layers
// aside, the second lets them go (an earlier rewind's set-aside layers are
// freed) while the merge still pins them; the compaction, whose run is no
// longer in the stack, is dropped and removes them with its merged layer.
func TestCompactionRacesTwoRewinds(t *testing.T) {
	t.Parallel()
	r := newRaceRig(t, "workspace.compact.merging")
	r.rewind(2, false)
	r.rewind(1, false)
	r.is("a", "rewound twice while merging", r.views[0])
	r.goOn()
	if r.compacted() {
		t.Error("a run set aside was compacted")
	}
	r.consistent()
	r.undo()
	r.is("a", "the second rewind undone", r.views[1])
	r.consistent()
}

// A view resolved while the merge runs that the compaction then merges
// away (inside its run) is refused with ErrCheckpointCompacted, as a fresh
// resolution would be; one a rewind set aside meanwhile, with
// ErrCheckpointNotFound. Neither changes anything.
func TestCompactionStaleMarkRefused(t *testing.T) {
	t.Parallel()
	r := newRaceRig(t, "workspace.compact.merging")
	inside := r.at("a", 1, true)
	later := r.at("a", 5, true)
	r.goOn()
	if !r.compacted() {
		t.Fatal("the compaction was not recorded")
	}
	if _, err := r.m.DepthAt("a", "call_1", true); !errors.Is(err, ErrCheckpointCompacted) {
		t.Errorf("a fresh resolution inside the compacted run: %v", err)
	}
	if err := r.m.Rewind("a", inside, false); !errors.Is(err, ErrCheckpointCompacted) {
		t.Errorf("a rewind to a view merged away meanwhile: %v", err)
	}
	if err := r.m.ForkAt("a", "f", inside); !errors.Is(err, ErrCheckpointCompacted) {
		t.Errorf("a fork from a view merged away meanwhile: %v", err)
	}
	if _, err := r.m.CheckpointDiff("a", inside, Top, false); !errors.Is(err, ErrCheckpointCompacted) {
		t.Errorf("a diff from a view merged away meanwhile: %v", err)
	}
	r.is("a", "after the refusals", r.views[6])
	r.rewind(4, false)
	if err := r.m.Rewind("a", later, false); !errors.Is(err, ErrCheckpointNotFound) {
		t.Errorf("a rewind to a view set aside meanwhile: %v", err)
	}
	r.is("a", "after the refusal", r.views[3])
	cs, err := r.m.CheckpointDiff("a", r.at("a", 3, true), Top, false)
	if err != nil || !slices.Equal(kinds(cs), expectedDiff(r.views[3], r.views[3])) {
		t.Errorf("the diff from after call 3 to the rewound view: %v %v", kinds(cs), err)
	}
	r.consistent()
}
