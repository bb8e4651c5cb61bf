package workspace

import (
	"errors"
	"fmt"
	"slices"

	"github.com/dshd/dshd/internal/faults"
)

// Compaction: overlayfs mounts at most 500 layers, and every checkpoint
// adds one to its agent's stack. Past the configured depth (the newest N
// checkpoints kept individually), a run of older layers is merged into one
// layer that shows, under the same lower layers, exactly what the run
// showed (compactLayers, merge_linux.go), and the run's checkpoints become
// one compacted checkpoint spanning their calls: its edges (before its
// first call, after its last) can still be rewound to and forked from, the
// points inside it cannot (ErrCheckpointCompacted), and its changes are
// the merged layer's.
//
// The merge reads frozen layers and writes a layer of its own that nothing
// references yet: it runs in the background with no lock held, the layers
// it reads pinned so that no rewind or drop removes them meanwhile. The
// merged layers then replace the runs in the agent's stack in one write of
// the state, made when the view is still (as a checkpoint is): the view is
// mounted afresh on the new stack and the layers the runs were made of
// removed, unless another agent stands on them. A crash before that write
// leaves merged layers nothing references (removed at the next start); a
// crash after it, the runs' layers (removed likewise). The view is the
// same either way.

// ErrCheckpointCompacted: the view named (before or after a call) was
// inside a run of checkpoints merged into one layer: only the run's edges
// remain.
var ErrCheckpointCompacted = errors.New("checkpoint compacted")

// DefaultCheckpointDepth is how many of an agent's newest checkpoints are
// kept individually (workspaces.checkpointDepth): rewinds go back a few
// calls far more often than a hundred, each layer of a view costs every
// lookup that misses and every mount, and 100 (plus a batch of a quarter
// before a compaction runs) leaves room below DefaultMaxLayers for the
// layers a fork inherits.
const DefaultCheckpointDepth = 100

// SetCheckpointDepth sets how many of an agent's newest checkpoints are
// kept individually (0: DefaultCheckpointDepth).
func (m *Manager) SetCheckpointDepth(n int) { m.checkpointDepth = max(n, 0) }

func (m *Manager) checkpointDepthOr() int {
	if m.checkpointDepth > 0 {
		return m.checkpointDepth
	}
	return DefaultCheckpointDepth
}

// compactBatch is how many layers a compaction must save before it runs
// (so that merging a large run is not done again at every checkpoint),
// unless the stack is that close to maxLayers.
func (m *Manager) compactBatch() int { return max(m.checkpointDepthOr()/4, 1) }

// run is a range of an agent's layers to merge, and the merged layer.
type run struct {
	ids    []string // the layers, lowest first, contiguous in the stack
	merged string
}

// protected are the depths of a's stack that must stay addressable: its
// bottom and top, its latest fork (its changes are counted from there),
// the floor of its rewinds, where the last rewind went (an undo comes back
// to it), and both edges of each of the newest kept checkpoints.
func protected(a *agentState, keep int) []int {
	n := len(a.Layers)
	ps := []int{0, n, n - min(a.Own, n), firstDepth(a)}
	if a.Aside != nil {
		ps = append(ps, min(a.Aside.Depth, n))
	}
	for _, c := range a.Checkpoints[max(0, len(a.Checkpoints)-keep):] {
		ps = append(ps, c.Depth-1, c.Depth)
	}
	slices.Sort(ps)
	return slices.Compact(ps)
}

// planLocked lists the runs of a's stack a compaction would merge: every
// stretch of two or more layers between protected depths. Nil when that
// would save fewer layers than a batch, unless the stack is within a batch
// of maxLayers.
func (m *Manager) planLocked(a *agentState) []run {
	ps := protected(a, m.checkpointDepthOr())
	var runs []run
	saved := 0
	for i := 1; i < len(ps); i++ {
		lo, hi := ps[i-1], ps[i]
		if lo < 0 || hi-lo < 2 {
			continue
		}
		runs = append(runs, run{ids: slices.Clone(a.Layers[lo:hi])})
		saved += hi - lo - 1
	}
	batch := m.compactBatch()
	if saved == 0 || saved < batch && len(a.Layers)+batch < m.maxLayersOr() {
		return nil
	}
	return runs
}

// maybeCompactLocked starts a compaction of owner's stack in the
// background when one is due and none runs.
func (m *Manager) maybeCompactLocked(owner string) {
	a := m.agents[owner]
	if a == nil || a.Dropped || m.closed || m.compacting[owner] || m.ready[owner] != nil {
		return
	}
	runs := m.planLocked(a)
	if runs == nil {
		return
	}
	m.compacting[owner] = true
	for _, r := range runs {
		m.pinLocked(r.ids, 1)
	}
	m.wg.Add(1)
	go m.compact(owner, runs)
}

func (m *Manager) pinLocked(ids []string, d int) {
	for _, id := range ids {
		if m.pinned[id] += d; m.pinned[id] <= 0 {
			delete(m.pinned, id)
		}
	}
}

// compact merges each run into a layer of its own (no lock held), then
// offers them to commitLocked: at once if the view is still, else at the
// next checkpoint.
func (m *Manager) compact(owner string, runs []run) {
	defer m.wg.Done()
	var err error
	for i := range runs {
		// Pinned before it is made: a rewind or a drop meanwhile removes
		// the layers nothing references, and would take it.
		runs[i].merged = newID()
		m.mu.Lock()
		m.pinLocked([]string{runs[i].merged}, 1)
		m.mu.Unlock()
		if err = m.newFrozenLayer(runs[i].merged); err != nil {
			break
		}
		m.point("workspace.compact.layer")
		if err = m.mergeLayers(runs[i].merged, runs[i].ids); err != nil {
			err = fmt.Errorf("merge %d layers of agent %s: %w", len(runs[i].ids), owner, err)
			break
		}
	}
	m.point("workspace.compact.merged") // merged layers, not recorded
	var unused []string
	defer func() { m.removeLayers(unused) }() // after the unlock below
	m.mu.Lock()
	defer m.mu.Unlock()
	defer m.cond.Broadcast()
	delete(m.compacting, owner)
	if err != nil || m.closed {
		if err != nil && !errors.Is(err, errClosing) {
			m.log.Error("compact a workspace's checkpoints; its stack stays as it is", "agent_id", owner, "err", err)
		}
		unused = m.discardLocked(runs)
		return
	}
	m.ready[owner] = runs
	if m.busy != nil {
		ids := m.viewAgentsLocked(owner)
		busy := m.busy
		m.mu.Unlock()
		n := busy(ids)
		m.mu.Lock()
		if n > 0 {
			return // the next checkpoint records it
		}
	}
	if m.ready[owner] == nil || m.active[owner] > 0 || m.closed {
		return
	}
	// As a checkpoint: no listing reads the stack, no job starts, the
	// mounts of the last checkpoint have settled.
	m.lockOpLocked(owner, true)
	defer m.unlockOpLocked(owner, true)
	a := m.agents[owner]
	if a == nil || a.Dropped {
		unused = m.forgetCompactionLocked(owner)
		return
	}
	if m.active[owner] > 0 || m.closed {
		return
	}
	na, retired, discarded := m.commitLocked(owner, a)
	unused = discarded
	if na == a {
		return
	}
	m.agents[owner] = na
	if err := m.saveLocked(); err != nil {
		m.agents[owner] = a
		m.log.Error("record a workspace's compaction; its stack stays as it is", "agent_id", owner, "err", err)
		unused = append(unused, mergedOf(runs)...)
		return
	}
	m.point("workspace.compact.saved")
	m.remountLocked(owner, na.Upper, "", retired)
}

// point is faults.Point, then the tests' hook (testPoint) when one is set.
func (m *Manager) point(name string) {
	faults.Point(name)
	if m.testPoint != nil {
		m.testPoint(name)
	}
}

func mergedOf(runs []run) []string {
	var out []string
	for _, r := range runs {
		if r.merged != "" {
			out = append(out, r.merged)
		}
	}
	return out
}

// forgetCompactionLocked drops agent's ready compaction (the agent was
// dropped or forgotten) and returns its merged layers, for the caller to
// remove unlocked.
func (m *Manager) forgetCompactionLocked(agent string) []string {
	runs := m.ready[agent]
	delete(m.ready, agent)
	return m.discardLocked(runs)
}

// discardLocked unpins what runs pinned and returns their merged layers,
// which nothing will use, and those of their layers nothing references any
// more (a drop or a rewind let them go while they were pinned, and left
// them): the caller removes them, unlocked.
func (m *Manager) discardLocked(runs []run) []string {
	var ids []string
	for _, r := range runs {
		m.pinLocked(r.ids, -1)
		ids = append(ids, r.ids...)
		if r.merged != "" {
			m.pinLocked([]string{r.merged}, -1)
		}
	}
	return append(mergedOf(runs), m.unreferencedLocked(ids)...)
}

// commitLocked applies owner's ready compaction to its state a (the
// lock held, the view still): each run still contiguous in the stack and
// with no protected depth inside it is replaced by its merged layer. It
// returns the new state (a itself when nothing changed), the layers it
// retired and the merged layers it could not use (for the caller to
// remove, unlocked); the caller saves the state. The ready compaction is
// consumed either way.
func (m *Manager) commitLocked(owner string, a *agentState) (na *agentState, retired, unused []string) {
	runs := m.ready[owner]
	if runs == nil {
		return a, nil, nil
	}
	delete(m.ready, owner)
	na = a
	var left []run
	for i := len(runs) - 1; i >= 0; i-- { // the highest first
		next, ok := replaceRun(na, runs[i], m.checkpointDepthOr())
		if !ok {
			left = append(left, runs[i])
			continue
		}
		na = next
		retired = append(retired, runs[i].ids...)
		m.pinLocked(runs[i].ids, -1)
		m.pinLocked([]string{runs[i].merged}, -1)
	}
	return na, retired, m.discardLocked(left)
}

// replaceRun returns a with the run r's layers replaced by r.merged, when
// they are still contiguous in its stack with no protected depth inside.
func replaceRun(a *agentState, r run, keep int) (*agentState, bool) {
	lo := -1
	for i := 0; i+len(r.ids) <= len(a.Layers); i++ {
		if slices.Equal(a.Layers[i:i+len(r.ids)], r.ids) {
			lo = i
			break
		}
	}
	if lo < 0 {
		return a, false
	}
	hi := lo + len(r.ids)
	for _, p := range protected(a, keep) {
		if lo < p && p < hi {
			return a, false
		}
	}
	shift := hi - lo - 1
	at := func(d int) int {
		switch {
		case d <= lo:
			return d
		case d >= hi:
			return d - shift
		}
		return lo + 1
	}
	na := *a
	na.Layers = slices.Concat(a.Layers[:lo], []string{r.merged}, a.Layers[hi:])
	na.Checkpoints = nil
	var span *Checkpoint
	for _, c := range a.Checkpoints {
		if c.Depth <= lo || c.Depth > hi {
			c.Depth = at(c.Depth)
			na.Checkpoints = append(na.Checkpoints, c)
			continue
		}
		if span == nil {
			first := c.FirstSeq
			if !c.Compacted {
				first = c.Seq
			}
			na.Checkpoints = append(na.Checkpoints, Checkpoint{FirstSeq: first, Layer: r.merged, Depth: lo + 1, Compacted: true})
			span = &na.Checkpoints[len(na.Checkpoints)-1]
		}
		span.CallIDs = append(span.CallIDs, c.CallIDs...)
		span.Seq, span.Time = c.Seq, c.Time
	}
	if fork := len(a.Layers) - min(a.Own, len(a.Layers)); fork <= lo {
		na.Own = a.Own - shift
	}
	if a.Aside != nil && a.Aside.Depth >= hi {
		set := *a.Aside
		// Its changes, once undone back, are counted from the same fork.
		if fork := set.Depth + len(set.Layers) - set.Own; fork <= lo {
			set.Own -= shift
		}
		set.Depth = at(set.Depth)
		set.Checkpoints = slices.Clone(set.Checkpoints)
		for i := range set.Checkpoints {
			set.Checkpoints[i].Depth -= shift
		}
		na.Aside = &set
	}
	return &na, true
}

// remountLocked lets owner's mount go and mounts its view afresh on up
// off the caller's path (unmounting an overlay syncs its upper file
// system; mounting one with many layers takes a while): a job of the view
// that starts meanwhile waits for it (Acquire), so that no layer is ever
// an upper of one mount and a lower of another. frozen, when not "", is a
// layer just frozen whose work directory goes; retired are layers the
// stack no longer holds, removed once the old mount is gone unless an
// agent stands on them.
func (m *Manager) remountLocked(owner, up, frozen string, retired []string) {
	old, had := m.mounts[owner]
	delete(m.mounts, owner)
	m.preparing[owner] = true
	go func() {
		if had {
			closeFD(old)
		}
		if frozen != "" {
			removeWorkDir(m.workDir(frozen))
		}
		if len(retired) > 0 {
			m.mu.Lock()
			gone := m.unreferencedLocked(retired)
			m.mu.Unlock()
			m.removeLayers(gone)
		}
		m.premount(owner, up)
	}()
}

// unreferencedLocked are those of ids that no agent's stack, upper or
// set-aside layers hold and no compaction has pinned.
func (m *Manager) unreferencedLocked(ids []string) []string {
	used := m.usedLocked()
	var out []string
	for _, id := range ids {
		if !used[id] {
			out = append(out, id)
		}
	}
	return out
}

// WaitCompactions waits until no compaction of agent runs or waits to be
// recorded (tests; a compaction waiting for a still view waits for the
// next checkpoint).
func (m *Manager) WaitCompactions(agent string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for m.compacting[agent] || m.ready[agent] != nil || m.preparing[agent] {
		m.cond.Wait()
	}
}

// Mark is a point of an agent's stack (a checkpoint's edge) as DepthAt or
// DepthBeforeSeq resolved it: its depth then, and the layers either side
// of it. Rewind, ForkAt and CheckpointDiff find it again in the stack as
// it is when they run, for a compaction recorded meanwhile renumbers the
// stack (a depth alone would then name another view): it is where either
// layer is now, or gone, merged into one layer with those around it
// (ErrCheckpointCompacted) or set aside by a rewind (ErrCheckpointNotFound).
// A Mark of a depth alone (Floor, Top, or made so) is taken as it is.
type Mark struct {
	Depth        int
	below, above string // Layers[Depth-1] and Layers[Depth] then ("" past the ends)
}

func markAt(a *agentState, d int) Mark {
	mk := Mark{Depth: d}
	if d > 0 && d <= len(a.Layers) {
		mk.below = a.Layers[d-1]
	}
	if d >= 0 && d < len(a.Layers) {
		mk.above = a.Layers[d]
	}
	return mk
}

// depthIn is the depth of mk in agent's stack a as it is now.
func (mk Mark) depthIn(agent string, a *agentState) (int, error) {
	if mk.below == "" {
		// The depth alone, or the base: no stack changes below it.
		return mk.Depth, nil
	}
	for i, l := range a.Layers {
		switch l {
		case mk.below:
			return i + 1, nil
		case mk.above:
			return i, nil // the layer below it was merged into another
		}
	}
	if a.Aside != nil && (slices.Contains(a.Aside.Layers, mk.below) || slices.Contains(a.Aside.Layers, mk.above)) {
		return 0, fmt.Errorf("%w: agent %s's view named was set aside by a rewind meanwhile", ErrCheckpointNotFound, agent)
	}
	return 0, fmt.Errorf("%w: agent %s's view named was merged into one layer with those around it (past workspaces.checkpointDepth) meanwhile", ErrCheckpointCompacted, agent)
}
