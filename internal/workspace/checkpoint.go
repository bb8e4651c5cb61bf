package workspace

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/dshd/dshd/internal/faults"
)

// Checkpoints: every model tool call of an agent with a snapshot view ends
// with its upper layer frozen and a fresh one started (Checkpoint), so that
// the view can be set back to before or after any call (Rewind), whatever
// the call's commands did to it. The frozen layers are the agent's Layers;
// a checkpoint records how deep the stack was once it was frozen.
//
// A call that changed nothing makes no layer and no checkpoint: before and
// after it the view is that of the checkpoint before it. A call at whose
// end another job of the view still runs (a background job, a process a
// call left running) cannot be frozen without the frozen layer changing
// under the view: its changes stay in the upper layer with the calls after
// it until a call ends with the view still, and the checkpoint then made
// spans them all (its CallIDs). A rewind goes to a checkpoint's edges.

// ErrCheckpointNotFound: no checkpoint holds the call named.
var ErrCheckpointNotFound = errors.New("checkpoint not found")

// DefaultMaxLayers bounds an agent's stack of frozen layers (overlayfs
// mounts at most 500 lower layers): at that depth a call's changes stay in
// the upper layer and are checkpointed with a later call once a rewind has
// made room (see Checkpoint).
const DefaultMaxLayers = 400

// MaxLayersLimit is the most SetMaxLayers takes.
const MaxLayersLimit = 480

// Checkpoint is one frozen point of an agent's view.
type Checkpoint struct {
	// CallIDs are the calls whose changes the checkpoint's layer holds,
	// oldest first: one, or several when calls ended while another job of
	// the view ran.
	CallIDs []string `json:"callIds"`
	// Seq is the transcript seq of the last call's result.
	Seq int64 `json:"seq"`
	// Time is when it was made.
	Time time.Time `json:"time"`
	// Layer is the frozen layer that holds the calls' changes.
	Layer string `json:"layer"`
	// Depth is the number of the agent's frozen layers once it was made:
	// the view after it is Layers[:Depth], before it Layers[:Depth-1].
	Depth int `json:"depth"`
	// Compacted: the checkpoint is a run of checkpoints merged into one
	// layer (compact.go): its calls are theirs, and only its edges
	// (before its first call, after its last) can be gone back to.
	// FirstSeq is then the seq of the first of them (the views from
	// there to Seq are gone).
	Compacted bool  `json:"compacted,omitempty"`
	FirstSeq  int64 `json:"firstSeq,omitempty"`
}

// aside is what a rewind set aside, for an undo: the stack above Depth,
// the upper layer (if it held anything) and their checkpoints.
type aside struct {
	Depth       int          `json:"depth"`
	Own         int          `json:"own"`
	Layers      []string     `json:"layers"`
	Checkpoints []Checkpoint `json:"checkpoints,omitempty"`
	Pending     []string     `json:"pending,omitempty"`
}

// checkpointIdle is how long Checkpoint waits for the lease of the call's
// own job, given back a moment after its end.
const checkpointIdle = 100 * time.Millisecond

// Checkpoint ends the tool call callID (its result recorded at seq) of
// agent: when the agent's view is still (busy reports no job or process of
// it), what the view's upper layer holds is frozen into a layer of its own
// and a fresh upper started; the checkpoint is recorded, in the same write
// of the state, before Checkpoint returns. made is false when the agent
// has no snapshot view, the call changed nothing, or the view was not
// still (the call is then pending: checkpointed with a later one).
func (m *Manager) Checkpoint(agent, callID string, seq int64) (made bool, err error) {
	if m == nil {
		return false, nil
	}
	m.mu.Lock()
	owner := m.ownerLocked(agent)
	a, ok := m.agents[owner]
	if !ok || a.Dropped || a.Shares != "" || m.why != "" {
		m.mu.Unlock()
		return false, nil
	}
	ids := m.viewAgentsLocked(owner)
	busy := m.busy
	m.mu.Unlock()
	still := busy == nil || busy(ids) == 0
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lockOpLocked(owner, true)
	defer m.unlockOpLocked(owner, true)
	if a = m.agents[owner]; a == nil || a.Dropped {
		return false, nil
	}
	if still {
		m.waitIdleForLocked(owner, checkpointIdle)
		still = m.active[owner] == 0
	}
	// A compaction waiting for the view to be still goes into the same
	// write of the state.
	base, retired, unused := a, []string(nil), []string(nil)
	if still {
		base, retired, unused = m.commitLocked(owner, a)
	}
	defer func() {
		if len(unused) > 0 {
			go m.removeLayers(unused)
		}
	}()
	empty, _ := emptyDir(m.upperDir(a.Upper))
	switch {
	case empty && base == a:
		return false, nil
	case empty:
		m.agents[owner] = base
		if err := m.appendLocked(logRecord{Agent: owner, State: base}); err != nil {
			m.agents[owner] = a
			return false, err
		}
		m.remountLocked(owner, base.Upper, "", retired)
		return false, nil
	case !still || len(base.Layers) >= m.maxLayersOr():
		na := *base
		na.Pending = append(slices.Clone(base.Pending), callID)
		m.agents[owner] = &na
		m.maybeCompactLocked(owner)
		return false, nil // recorded with the next save
	}
	return m.layerLocked(owner, a, base, callID, seq, retired)
}

// layerLocked freezes what the upper layer of a (the agent's state before
// this checkpoint) holds into a layer above base (that state after any
// compaction committed with it), starts a fresh upper, records the
// checkpoint of callID in one write of the state and mounts the view
// afresh on the new upper. It runs with m.mu and the operation lock of
// owner held, as Checkpoint holds them.
func (m *Manager) layerLocked(owner string, a, base *agentState, callID string, seq int64, retired []string) (bool, error) {
	up, err := m.spareLayerLocked()
	if err != nil {
		return false, err
	}
	na := *base
	na.Layers = append(slices.Clone(base.Layers), a.Upper)
	na.Upper = up
	na.Checkpoints = append(slices.Clone(base.Checkpoints), Checkpoint{
		CallIDs: append(slices.Clone(base.Pending), callID), Seq: seq, Time: time.Now().UTC(), Layer: a.Upper, Depth: len(na.Layers),
	})
	na.Pending = nil
	na.Own = base.Own + 1
	m.agents[owner] = &na
	faults.Point("workspace.checkpoint.layered") // a new layer, not recorded
	// One record of the state's log: what this checkpoint changed, or,
	// with a compaction committed, the agent's whole record.
	rec := logRecord{Agent: owner, Checkpoint: &na.Checkpoints[len(na.Checkpoints)-1], Upper: up, Own: na.Own}
	if base != a {
		rec = logRecord{Agent: owner, State: &na}
	}
	if err := m.appendLocked(rec); err != nil {
		m.agents[owner] = a
		m.removeLayers([]string{up})
		return false, err
	}
	faults.Point("workspace.checkpoint.saved")
	// overlayfs's work directory of a frozen layer is not needed, and the
	// view is mounted afresh, on the new upper, ahead of the next job.
	m.remountLocked(owner, up, a.Upper, retired)
	m.maybeCompactLocked(owner)
	return true, nil
}

// premount mounts agent's view on its upper up (the lock released
// meanwhile), unless a job has mounted it first or the view changed.
func (m *Manager) premount(agent, up string) {
	m.mu.Lock()
	done := func() {
		delete(m.preparing, agent)
		m.cond.Broadcast()
	}
	a := m.agents[agent]
	if a == nil || a.Upper != up || m.closed {
		done()
		m.mu.Unlock()
		return
	}
	lowers := m.lowers(a)
	m.mu.Unlock()
	fd, err := mountOverlay(lowers, m.upperDir(up), m.workDir(up))
	m.mu.Lock()
	defer m.mu.Unlock()
	defer done()
	if err != nil {
		return // the next job mounts it, and says why
	}
	_, mounted := m.mounts[agent]
	if a := m.agents[agent]; a == nil || a.Upper != up || mounted || m.closed {
		closeFD(fd)
		return
	}
	m.mounts[agent] = fd
	if len(m.remounted[agent]) == 0 {
		return
	}
	// The hooks run with the lock released but the view still preparing,
	// so that no job of it starts before they return; on a descriptor of
	// their own, which a drop meanwhile does not close.
	dup, err := dupFD(fd)
	if err != nil {
		return
	}
	hooks := make([]func(int), 0, len(m.remounted[agent]))
	for _, h := range m.remounted[agent] {
		hooks = append(hooks, h)
	}
	m.mu.Unlock()
	for _, h := range hooks {
		h(dup)
	}
	closeFD(dup)
	m.mu.Lock()
}

// OnRemount calls fn, from then on, with a descriptor of agent's view each
// time a checkpoint mounts it afresh (the same files on a new mount),
// before any job of the view starts on it; fn must return soon and keep
// no copy of the descriptor. A watch of the view's files follows it so.
// The function returned stops the calls.
func (m *Manager) OnRemount(agent string, fn func(fd int)) (cancel func()) {
	if m == nil {
		return func() {}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	owner := m.ownerLocked(agent)
	m.hookSeq++
	id := m.hookSeq
	if m.remounted[owner] == nil {
		m.remounted[owner] = map[int]func(int){}
	}
	m.remounted[owner][id] = fn
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		delete(m.remounted[owner], id)
		if len(m.remounted[owner]) == 0 {
			delete(m.remounted, owner)
		}
	}
}

// viewAgentsLocked are owner and the agents sharing its view.
func (m *Manager) viewAgentsLocked(owner string) []string {
	ids := []string{owner}
	for id, o := range m.agents {
		if o.Shares == owner {
			ids = append(ids, id)
		}
	}
	return ids
}

// waitIdleForLocked waits, unlocking meanwhile, up to d for agent to hold
// no lease (a lease given back wakes it at once).
func (m *Manager) waitIdleForLocked(agent string, d time.Duration) {
	if m.active[agent] == 0 {
		return
	}
	t := time.AfterFunc(d, func() {
		m.mu.Lock()
		m.cond.Broadcast()
		m.mu.Unlock()
	})
	defer t.Stop()
	for deadline := time.Now().Add(d); m.active[agent] > 0 && time.Now().Before(deadline); {
		m.cond.Wait()
	}
}

func (m *Manager) maxLayersOr() int {
	if m.maxLayers > 0 {
		return m.maxLayers
	}
	return DefaultMaxLayers
}

// SetMaxLayers bounds an agent's stack of frozen layers (0: the default).
func (m *Manager) SetMaxLayers(n int) { m.maxLayers = min(max(n, 0), MaxLayersLimit) }

// CheckpointList is an agent's checkpoints.
type CheckpointList struct {
	Checkpoints []Checkpoint
	// Pending are the calls whose changes are not yet in a checkpoint.
	Pending []string
	// Undo: a rewind can be undone (what it set aside is kept).
	Undo bool
}

// Checkpoints lists agent's checkpoints, oldest first. ErrNotFound for an
// agent without a snapshot view of its own.
func (m *Manager) Checkpoints(agent string) (CheckpointList, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, err := m.liveLocked(agent)
	if err != nil {
		return CheckpointList{}, err
	}
	return CheckpointList{Checkpoints: slices.Clone(a.Checkpoints), Pending: slices.Clone(a.Pending), Undo: a.Aside != nil}, nil
}

// CheckpointChanges lists what the checkpoint holding callID changed: its
// layer against the view below it. With diff, unified diffs as Changes.
func (m *Manager) CheckpointChanges(agent, callID string, diff bool) (Checkpoint, []Change, error) {
	a, unhold, err := m.hold(agent, false)
	if err != nil {
		return Checkpoint{}, nil, err
	}
	defer unhold()
	i := findCheckpoint(a.Checkpoints, callID)
	if i < 0 {
		return Checkpoint{}, nil, fmt.Errorf("%w: agent %s has no checkpoint holding call %s", ErrCheckpointNotFound, agent, callID)
	}
	c := a.Checkpoints[i]
	below := &agentState{Base: a.Base, Layers: a.Layers[:c.Depth-1], Upper: c.Layer}
	upper, base, done, err := m.openLayers(below)
	if err != nil {
		return c, nil, err
	}
	defer done()
	cs, err := changes(upper, base)
	if err != nil {
		return c, nil, err
	}
	if diff {
		addDiffs(cs, upper, base)
	}
	return c, cs, nil
}

func findCheckpoint(cs []Checkpoint, callID string) int {
	for i, c := range cs {
		if slices.Contains(c.CallIDs, callID) {
			return i
		}
	}
	return -1
}

// DepthAt is the point of agent's stack before (after false) or after the
// call callID: ErrCheckpointNotFound when no checkpoint holds it. A call
// that made no checkpoint is resolved by the caller (seq: the checkpoints
// made before the call's seq).
func (m *Manager) DepthAt(agent, callID string, after bool) (Mark, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, err := m.liveLocked(agent)
	if err != nil {
		return Mark{}, err
	}
	i := findCheckpoint(a.Checkpoints, callID)
	if i < 0 {
		return Mark{}, fmt.Errorf("%w: agent %s has no checkpoint holding call %s", ErrCheckpointNotFound, agent, callID)
	}
	c := a.Checkpoints[i]
	if c.Compacted && !(after && callID == last(c.CallIDs) || !after && callID == first(c.CallIDs)) {
		return Mark{}, compactedError(agent, callID, c)
	}
	if after {
		return markAt(a, c.Depth), nil
	}
	return markAt(a, c.Depth-1), nil
}

func compactedError(agent, callID string, c Checkpoint) error {
	return fmt.Errorf("%w: agent %s's views from call %s to call %s were merged into one layer (past workspaces.checkpointDepth); call %s is inside them: rewind to before call %s or after call %s",
		ErrCheckpointCompacted, agent, first(c.CallIDs), last(c.CallIDs), callID, first(c.CallIDs), last(c.CallIDs))
}

func first(ids []string) string {
	if len(ids) == 0 {
		return ""
	}
	return ids[0]
}

func last(ids []string) string {
	if len(ids) == 0 {
		return ""
	}
	return ids[len(ids)-1]
}

// DepthBeforeSeq is the point of agent's stack as it was at transcript seq
// (the checkpoints made at or before it): for a call that changed nothing.
func (m *Manager) DepthBeforeSeq(agent string, seq int64) (Mark, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, err := m.liveLocked(agent)
	if err != nil {
		return Mark{}, err
	}
	d := firstDepth(a)
	for _, c := range a.Checkpoints {
		if c.Compacted && c.FirstSeq <= seq && seq < c.Seq {
			return Mark{}, fmt.Errorf("%w: agent %s's views from seq %d to %d were merged into one layer (past workspaces.checkpointDepth): rewind to before call %s or after call %s",
				ErrCheckpointCompacted, agent, c.FirstSeq, c.Seq, first(c.CallIDs), last(c.CallIDs))
		}
		if c.Seq <= seq {
			d = c.Depth
		}
	}
	return markAt(a, d), nil
}

// Rewind sets agent's view back to its stack at the point at (a
// checkpoint's edge, from DepthAt, found again in the stack as it is now:
// see Mark): the layers above it and the upper layer are set aside (an
// undo brings them back), and the view is mounted afresh. ErrBusy while a
// job of the view runs or lingers. undo swaps back what the last rewind
// set aside (at is then ignored).
func (m *Manager) Rewind(agent string, at Mark, undo bool) error {
	a, unhold, err := m.hold(agent, true)
	if err != nil {
		return err
	}
	defer unhold()
	if err := m.still(agent); err != nil {
		return err
	}
	var unused []string
	defer func() { m.removeLayers(unused) }() // after the unlock below
	m.mu.Lock()
	defer m.mu.Unlock()
	a = m.agents[agent]
	depth, err := rewindDepth(agent, a, at, undo)
	if err != nil {
		return err
	}
	if first := firstDepth(a); depth < first || depth > len(a.Layers) {
		return fmt.Errorf("%w: depth %d is outside agent %s's checkpoints (%d to %d)", ErrInvalid, depth, agent, first, len(a.Layers))
	}
	up, err := m.spareLayerLocked()
	if err != nil {
		return err
	}
	// Set aside: the layers above depth, the upper if it holds anything
	// (frozen as it is: the view is still), and their checkpoints.
	set := &aside{Depth: depth, Layers: slices.Clone(a.Layers[depth:]), Own: a.Own}
	for _, c := range a.Checkpoints {
		if c.Depth > depth {
			set.Checkpoints = append(set.Checkpoints, c)
		}
	}
	upperEmpty, _ := emptyDir(m.upperDir(a.Upper))
	if upperEmpty {
		set.Pending = slices.Clone(a.Pending)
	} else {
		set.Own = a.Own + 1
		set.Layers = append(set.Layers, a.Upper)
		set.Checkpoints = append(set.Checkpoints, Checkpoint{CallIDs: slices.Clone(a.Pending), Time: time.Now().UTC(), Layer: a.Upper, Depth: len(a.Layers) + 1})
	}
	na := *a
	na.Layers = slices.Clone(a.Layers[:depth])
	na.Checkpoints = nil
	for _, c := range a.Checkpoints {
		if c.Depth <= depth {
			na.Checkpoints = append(na.Checkpoints, c)
		}
	}
	na.Pending = nil
	na.Upper = up
	na.Own = max(0, a.Own-(len(a.Layers)-depth))
	if undo {
		na.Own = a.Aside.Own
		// Back on top: what the last rewind set aside.
		na.Layers = append(na.Layers, a.Aside.Layers...)
		na.Checkpoints = append(na.Checkpoints, a.Aside.Checkpoints...)
		na.Pending = slices.Clone(a.Aside.Pending)
	}
	na.Aside = set
	m.agents[agent] = &na
	faults.Point("workspace.rewind.layered")
	if err := m.saveLocked(); err != nil {
		m.agents[agent] = a
		m.removeLayers([]string{up})
		return err
	}
	faults.Point("workspace.rewind.saved")
	m.closeMountLocked(agent)
	if !upperEmpty {
		os.RemoveAll(m.workDir(a.Upper))
	}
	// The empty upper, and what an earlier aside held, go.
	unused = m.unusedLocked()
	return nil
}

// rewindDepth is the depth a rewind of agent (state a) to at sets its
// stack back to; for an undo, where the last rewind went.
func rewindDepth(agent string, a *agentState, at Mark, undo bool) (int, error) {
	if !undo {
		return at.depthIn(agent, a)
	}
	if a.Aside == nil {
		return 0, fmt.Errorf("%w: agent %s has no rewind to undo", ErrCheckpointNotFound, agent)
	}
	return a.Aside.Depth, nil
}

// firstDepth is the depth of a's stack below its first checkpoint: a
// rewind goes no lower (those layers are its fork's).
func firstDepth(a *agentState) int {
	if len(a.Checkpoints) > 0 {
		return a.Checkpoints[0].Depth - 1
	}
	if a.Aside != nil {
		return min(a.Aside.Depth, len(a.Layers))
	}
	return len(a.Layers)
}

// Edges of the views CheckpointDiff compares when a side is not named.
var (
	// Floor: the view before the agent's first checkpoint.
	Floor = Mark{Depth: -1}
	// Top: the view after its last checkpoint.
	Top = Mark{Depth: -2}
)

// CheckpointDiff lists what differs between agent's view at the point
// from and at the point to (each from DepthAt, or Floor, Top), sorted by
// path, as Changes does: the paths the layers between the two touched,
// each compared as it is in the to view with what it is in the from view
// (either may be the earlier one). With diff, unified diffs of text
// files. Both views are read by descriptor, no link followed.
// ErrInvalid for a depth outside the agent's checkpoints.
func (m *Manager) CheckpointDiff(agent string, fromAt, toAt Mark, diff bool) ([]Change, error) {
	a, unhold, err := m.hold(agent, false)
	if err != nil {
		return nil, err
	}
	defer unhold()
	edge := func(mk Mark) (int, error) {
		switch mk {
		case Floor:
			return firstDepth(a), nil
		case Top:
			return len(a.Layers), nil
		}
		return mk.depthIn(agent, a)
	}
	from, err := edge(fromAt)
	if err != nil {
		return nil, err
	}
	to, err := edge(toAt)
	if err != nil {
		return nil, err
	}
	for _, d := range []int{from, to} {
		if first := firstDepth(a); d < first || d > len(a.Layers) {
			return nil, fmt.Errorf("%w: depth %d is outside agent %s's checkpoints (%d to %d)", ErrInvalid, d, agent, first, len(a.Layers))
		}
	}
	v := &since{}
	defer v.close()
	for _, id := range a.Layers[min(from, to):max(from, to)] {
		t, err := openTree(m.upperDir(id), "layer "+id)
		if err != nil {
			return nil, err
		}
		v.layers = append(v.layers, t)
	}
	if v.then, _, err = m.openStack(a.Base, a.Layers[:from]); err != nil {
		return nil, err
	}
	if v.now, _, err = m.openStack(a.Base, a.Layers[:to]); err != nil {
		return nil, err
	}
	cs, err := v.changes()
	if err != nil {
		return nil, fmt.Errorf("checkpoint diff of agent %s: %w", agent, err)
	}
	if diff {
		addDiffs(cs, v.now, v.then)
	}
	return cs, nil
}
