// Package workspace gives a forked or spawned agent its own copy-on-write
// view of its parent's workspace: overlayfs layers under the dshd home,
// mounted (one superblock per agent, held by dshd as a detached mount) at
// the workspace's own path in each job's mount namespace.
//
// A tree of snapshot agents shares one base directory, the lowest layer,
// which dshd never writes while the tree lives. At the first snapshot fork
// the parent moves onto a layer too: from then on its writes go to an upper
// directory of its own. At each fork the parent's upper is frozen into a
// read-only layer and parent and child each get a fresh, empty upper on top
// of the same stack of frozen layers: each sees the workspace as it was at
// the fork and, from then on, only its own writes. No file is copied.
//
// What a child did is listed (Changes), applied to its parent's view or to
// a directory all or nothing, refusing on conflicts (Apply), or dropped
// (Drop). The stacks are recorded in <dir>/state.json and its log (the
// checkpoints since, statelog.go); the layers are directories under
// <dir>/layers, so they survive a restart.
//
// Linux only (overlayfs, the mount API): on another system the build stops
// at linux_only.go, whose import path says so.
//
// Floor 1 of the layout (docs/design.md#floors): it imports only packages on the floors below.
package workspace

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dshd/dshd/internal/beneath"
)

// Mode is how a forked or spawned agent gets its workspace.
type Mode string

// The modes.
const (
	// Shared: the child works in the same directory as its parent
	// (writes of either are seen by both at once).
	Shared Mode = "shared"
	// Snapshot: the child gets a copy-on-write snapshot of its parent's
	// view at the fork; from then on the two are isolated both ways.
	Snapshot Mode = "snapshot"
)

// Valid reports whether m names a mode ("" means Shared).
func (m Mode) Valid() bool { return m == "" || m == Shared || m == Snapshot }

// Errors.
var (
	// ErrUnavailable: this host (kernel, file system, privileges, cluster
	// mode) cannot give snapshot workspaces; the error says why.
	ErrUnavailable = errors.New("workspace snapshots unavailable")
	// ErrNotFound: the agent has no workspace of its own (it shares its
	// workspace directory).
	ErrNotFound = errors.New("agent has no snapshot workspace")
	// ErrBusy: the operation needs the agent to run no job (freezing its
	// upper layer, dropping it), or a directory that a live workspace
	// stands on.
	ErrBusy = errors.New("workspace busy")
	// ErrDropped: the agent's workspace was dropped (DELETE), or could not
	// be made: none of its commands runs, rather than in a shared
	// directory.
	ErrDropped = errors.New("workspace dropped")
	// ErrConflict: applying would overwrite a change made on the target
	// side since the fork; see ConflictError.
	ErrConflict = errors.New("workspace changes conflict")
	// ErrOverBudget: the layers already use workspaces.maxBytes; no new
	// snapshot is made until workspaces are dropped.
	ErrOverBudget = errors.New("workspace layers over budget")
	// ErrInvalid: a request that cannot be right (a relative target
	// directory, one that does not exist).
	ErrInvalid = errors.New("invalid workspace request")
)

// UnavailableError says why snapshots cannot be had here; it is
// ErrUnavailable.
type UnavailableError struct{ Reason string }

func (e *UnavailableError) Error() string { return ErrUnavailable.Error() + ": " + e.Reason }

// Is makes errors.Is(err, ErrUnavailable) hold.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

func unavailable(format string, args ...any) error {
	return &UnavailableError{Reason: fmt.Sprintf(format, args...)}
}

// ConflictError lists the paths changed on both sides since the fork.
type ConflictError struct{ Paths []string }

func (e *ConflictError) Error() string {
	return fmt.Sprintf("%v: %d path(s) changed on both sides since the fork: %s", ErrConflict, len(e.Paths), strings.Join(e.Paths, ", "))
}

// Is makes errors.Is(err, ErrConflict) hold.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// agentState is one agent's workspace as recorded.
type agentState struct {
	// Base is the workspace directory: the lowest layer of the tree, and
	// where the view is mounted.
	Base string `json:"base"`
	// Layers are the frozen layers' ids, lowest first.
	Layers []string `json:"layers"`
	// Upper is the id of the layer the agent writes to.
	Upper string `json:"upper"`
	// Parent is the agent it was forked or spawned from ("" for the root
	// of a tree, which moved onto a layer at its first snapshot fork).
	Parent string `json:"parent,omitempty"`
	// Created is when the workspace was made.
	Created time.Time `json:"created"`
	// Dropped: DELETE dropped it (or making it failed).
	Dropped bool `json:"dropped,omitempty"`
	// Shares names the agent whose view this one shares (a shared fork or
	// spawn of a snapshot agent); such an entry has no layer of its own.
	Shares string `json:"shares,omitempty"`
	// Checkpoints are the frozen points of its view, oldest first; Pending
	// the calls whose changes are still in Upper; Aside what the last
	// rewind set aside (checkpoint.go).
	Checkpoints []Checkpoint `json:"checkpoints,omitempty"`
	Pending     []string     `json:"pending,omitempty"`
	Aside       *aside       `json:"aside,omitempty"`
	// Own counts the top frozen layers that are the agent's own since its
	// latest fork (its checkpoints'): its changes are those layers and
	// its upper against the view below them.
	Own int `json:"own,omitempty"`
}

type stateFile struct {
	Version int `json:"version"`
	// Generation numbers the last change the file holds (statelog.go).
	Generation int64                  `json:"generation,omitempty"`
	Agents     map[string]*agentState `json:"agents"`
}

// Manager keeps the agents' workspaces. It is safe for concurrent use.
type Manager struct {
	dir  string
	home string // the dshd home, which no apply may write (SetHome)
	log  *slog.Logger
	why  string // "" when snapshots work here

	// mu guards the maps below and is only ever held for work that does
	// not grow with a workspace (no tree walk, no copy, no count): every
	// job start takes it. Work on an agent's files holds the agent instead
	// (ops), with mu released.
	mu     sync.Mutex
	cond   *sync.Cond // on mu: an op ended or a lease was released
	agents map[string]*agentState
	mounts map[string]int // agent -> detached overlay mount (fsmount fd)
	active map[string]int // agent -> jobs holding a Lease
	ops    map[string]*op // agent -> the workspace operations holding it
	// preparing: a checkpoint's old mount is being let go and the new one
	// made; the agent's view is not mounted meanwhile.
	preparing map[string]bool
	// remounted: functions called with an agent's view mounted afresh
	// by a checkpoint, before a job runs on it (OnRemount), by owner.
	remounted map[string]map[int]func(fd int)
	hookSeq   int
	waits     int // job starts waiting for a writer now
	// stateLog: the state's log, open to append to (statelog.go);
	// logSize its bytes; gen the generation of the last change
	// written; flushing: a flush of the log is due. syncMu orders a
	// flush's sync, made with mu released, before the log's close.
	stateLog  *os.File
	logSize   int64
	gen       int64
	flushing  bool
	syncMu    sync.Mutex
	logClosed bool
	// spare: an empty layer made ahead for the next checkpoint or rewind;
	// makingSpare: the one being made (spareLayerLocked).
	spare, makingSpare string
	closed             bool // Close ran: nothing is mounted ahead any more
	over               bool // the layers use maxBytes or more (WatchBudget)
	// busy, when set, counts the processes of the agents' jobs that may
	// still write: leaders and what outlived them (see SetBusy).
	busy func(agents []string) int
	// releaseWait: see defaultReleaseWait (tests shorten it).
	releaseWait time.Duration

	// maxLayers bounds an agent's frozen layers (0: DefaultMaxLayers).
	maxLayers int
	// checkpointDepth: the newest checkpoints kept individually (0:
	// DefaultCheckpointDepth); compacting: a compaction of the agent runs;
	// ready: its merged layers, waiting for the view to be still; pinned:
	// layers a compaction reads or writes, which no removal takes.
	checkpointDepth int
	compacting      map[string]bool
	ready           map[string][]run
	pinned          map[string]int
	closing         atomic.Bool
	wg              sync.WaitGroup
	// testPoint, set by the package's tests, runs at a compaction's
	// points (compact.go's point), so that a test holds it there.
	testPoint func(name string)
	// maxBytes caps the layers' disk use at fork time (0: no cap).
	maxBytes    int64
	usageMu     sync.Mutex
	usageAt     time.Time
	usageBytes  int64
	usageLayers int
}

// Open opens the workspaces kept under dir (created 0700), probes once that
// this host can mount them and removes layers no agent references (left by
// a crash in the middle of a fork or a drop). disabled, when not "", is why
// snapshots are off (cluster mode); the Manager then refuses every fork
// with ErrUnavailable but still lists what it has.
func Open(dir, disabled string, logger *slog.Logger) (*Manager, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m := &Manager{dir: dir, log: logger, agents: map[string]*agentState{}, mounts: map[string]int{}, active: map[string]int{}, ops: map[string]*op{}, preparing: map[string]bool{},
		compacting: map[string]bool{}, ready: map[string][]run{}, pinned: map[string]int{}, remounted: map[string]map[int]func(int){}, releaseWait: defaultReleaseWait}
	m.cond = sync.NewCond(&m.mu)
	if err := os.MkdirAll(filepath.Join(dir, "layers"), 0o700); err != nil {
		return nil, fmt.Errorf("workspaces: %w", err)
	}
	logged, err := m.load()
	if err != nil {
		return nil, err
	}
	if err := m.openLog(logged); err != nil {
		return nil, err
	}
	m.why = disabled
	if m.why == "" {
		if err := probe(dir); err != nil {
			m.why = err.Error()
		}
	}
	m.mu.Lock()
	unused := m.unusedLocked()
	m.mu.Unlock()
	m.removeLayers(unused)
	return m, nil
}

// Recover finishes the applies a crash interrupted (or rolls back those
// it interrupted before their journal was committed). Call it once at
// start, after SetHome: a directory target is checked against the home
// again.
func (m *Manager) Recover() { m.recoverApplies() }

// SetHome names the dshd home: no apply writes a directory that overlaps
// it (the workspaces directory is always refused).
func (m *Manager) SetHome(home string) { m.home = filepath.Clean(home) }

// SetMaxBytes sets the layers' disk budget (workspaces.maxBytes; 0: none).
// A snapshot fork is refused with ErrOverBudget while the layers use that
// much or more; WatchBudget keeps the layers' growth within it.
func (m *Manager) SetMaxBytes(n int64) { m.maxBytes = max(n, 0) }

// Available says whether snapshot workspaces work here, and if not why.
func (m *Manager) Available() (bool, string) {
	if m == nil {
		return false, "workspaces are not configured"
	}
	return m.why == "", m.why
}

func (m *Manager) statePath() string { return filepath.Join(m.dir, "state.json") }

func (m *Manager) layerDir(id string) string { return filepath.Join(m.dir, "layers", id) }

// upperDir and workDir are an upper layer's data and overlayfs's work
// directory; a frozen layer keeps only its data.
func (m *Manager) upperDir(id string) string { return filepath.Join(m.layerDir(id), "fs") }
func (m *Manager) workDir(id string) string  { return filepath.Join(m.layerDir(id), "work") }

// unusedLocked lists the layers no recorded agent references (left by a
// drop, or by a crash in the middle of a fork). A layer unused is never
// used again: removeLayers removes them without the lock.
func (m *Manager) unusedLocked() []string {
	used := m.usedLocked()
	ents, err := os.ReadDir(filepath.Join(m.dir, "layers"))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if !used[e.Name()] {
			out = append(out, e.Name())
		}
	}
	return out
}

// usedLocked are the layers a recorded agent references or a compaction
// has pinned.
func (m *Manager) usedLocked() map[string]bool {
	used := map[string]bool{}
	for _, id := range []string{m.spare, m.makingSpare} {
		if id != "" {
			used[id] = true
		}
	}
	for id := range m.pinned {
		used[id] = true
	}
	for _, a := range m.agents {
		if a.Dropped {
			continue
		}
		for _, l := range a.Layers {
			used[l] = true
		}
		if a.Aside != nil {
			for _, l := range a.Aside.Layers {
				used[l] = true
			}
		}
		used[a.Upper] = true
	}
	return used
}

func (m *Manager) removeLayers(ids []string) {
	for _, id := range ids {
		if err := os.RemoveAll(m.layerDir(id)); err != nil {
			m.log.Warn("remove unused workspace layer", "layer", id, "err", err)
		}
	}
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b[:])
}

// newLayer makes an empty upper layer and returns its id.
func (m *Manager) newLayer() (string, error) {
	id := newID()
	return id, m.makeLayer(id)
}

func (m *Manager) makeLayer(id string) error {
	for _, d := range []string{m.upperDir(id), m.workDir(id)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			os.RemoveAll(m.layerDir(id))
			return fmt.Errorf("workspaces: new layer: %w", err)
		}
	}
	return nil
}

// spareLayerLocked returns an empty upper layer for a checkpoint or a
// rewind: the spare made ahead in the background after the one before
// (its directories made off the call's path), else one made now; and has
// the next spare made. A spare is a layer no agent references: a crash
// leaves it to the start's removal of unused layers, and meanwhile
// usedLocked counts it used, so that no removal takes it.
func (m *Manager) spareLayerLocked() (string, error) {
	id := m.spare
	m.spare = ""
	m.makeSpareLocked()
	if id != "" {
		return id, nil
	}
	return m.newLayer()
}

func (m *Manager) makeSpareLocked() {
	if m.spare != "" || m.makingSpare != "" || m.closed {
		return
	}
	id := newID()
	m.makingSpare = id
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		err := m.makeLayer(id)
		m.mu.Lock()
		defer m.mu.Unlock()
		m.makingSpare = ""
		if err == nil {
			m.spare = id
		}
	}()
}

// Info is what an agent's workspace is, for the API.
type Info struct {
	Mode Mode
	// Path is where its commands see it (its base directory).
	Path string
	// Parent is the agent it was forked from ("" for a tree's root).
	Parent string
	// Layers counts the frozen layers under its upper.
	Layers int
	// Dropped: its workspace was dropped; its commands are refused.
	Dropped bool
}

// Info returns agent's workspace; Mode Shared when it has none.
func (m *Manager) Info(agent string) Info {
	if m == nil {
		return Info{Mode: Shared}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.agents[agent]
	if !ok {
		return Info{Mode: Shared}
	}
	if a.Shares != "" {
		o := m.agents[a.Shares]
		return Info{Mode: Shared, Path: a.Base, Parent: a.Shares, Dropped: a.Dropped || o == nil || o.Dropped}
	}
	return Info{Mode: Snapshot, Path: a.Base, Parent: a.Parent, Layers: len(a.Layers), Dropped: a.Dropped}
}

// CheckFork returns nil when parent, whose workspace directory is cwd, may
// be forked in snapshot mode now: snapshots work here, its workspace was
// not dropped and it runs no job. Call it before making the child agent,
// then Fork.
func (m *Manager) CheckFork(parent, cwd string) error {
	if ok, why := m.Available(); !ok {
		return unavailable("%s", why)
	}
	if err := m.checkBudget(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	parent = m.ownerLocked(parent)
	m.waitIdleLocked(parent)
	return m.checkForkLocked(parent, cwd)
}

// checkBudget is ErrOverBudget while the layers use workspaces.maxBytes.
// Counted afresh, without the Manager's lock: layers hold only what their
// agents changed, and a cached count could let a fork through over budget
// or refuse one a drop has just made room for.
func (m *Manager) checkBudget() error {
	if m.maxBytes <= 0 {
		return nil
	}
	if used, _ := m.usage(true); used >= m.maxBytes {
		return fmt.Errorf("%w: the layers use %d bytes, workspaces.maxBytes is %d; drop the snapshot workspaces no longer needed (DELETE /agents/{id}/workspace)", ErrOverBudget, used, m.maxBytes)
	}
	return nil
}

func (m *Manager) checkForkLocked(parent, cwd string) error {
	if a, ok := m.agents[parent]; ok {
		if a.Dropped {
			return fmt.Errorf("%w: agent %s", ErrDropped, parent)
		}
	} else {
		if !filepath.IsAbs(cwd) {
			return fmt.Errorf("%w: agent %s has no absolute workspace directory (%q)", ErrInvalid, parent, cwd)
		}
		if fi, err := os.Stat(cwd); err != nil || !fi.IsDir() {
			return fmt.Errorf("%w: workspace %s is not a directory", ErrInvalid, cwd)
		}
		if beneath.Within(m.dir, cwd) || beneath.Within(cwd, m.dir) {
			return unavailable("workspace %s and the dshd home overlap", cwd)
		}
	}
	if n := m.active[parent]; n > 0 {
		return fmt.Errorf("%w: agent %s runs %d job(s); a snapshot fork freezes its layer and needs it idle", ErrBusy, parent, n)
	}
	return nil
}

// defaultReleaseWait is how long an operation that needs an agent idle
// waits for the leases of jobs that have just ended (a lease is given back
// by the job's waiter, a moment after the job's end is reported).
const defaultReleaseWait = 2 * time.Second

// waitIdleLocked waits, unlocking meanwhile, up to releaseWait for agent
// to hold no lease.
func (m *Manager) waitIdleLocked(agent string) {
	for deadline := time.Now().Add(m.releaseWait); m.active[agent] > 0 && time.Now().Before(deadline); {
		m.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		m.mu.Lock()
	}
}

// Fork gives child a snapshot of parent's current view. A parent without a
// workspace of its own (whose directory is cwd) moves onto one first. The
// child's workspace and the parent's new layer are recorded in one write
// of the state: on error nothing of the child is recorded and the parent
// is as it was. Call it before the child's header is written
// (agents.Bounds.Prepare), so that no agent exists whose snapshot was not
// recorded; Forget undoes it when the header then cannot be written, and
// Reconcile after a crash in between.
func (m *Manager) Fork(parent, cwd, child string) error {
	if err := m.checkNew(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if a, ok := m.agents[parent]; ok && a.Dropped && a.Shares != "" {
		return fmt.Errorf("%w: agent %s", ErrDropped, parent)
	}
	parent = m.ownerLocked(parent)
	// Its layer is frozen: no listing reads it meanwhile, none of its jobs
	// starts.
	m.lockOpLocked(parent, true)
	defer m.unlockOpLocked(parent, true)
	if err := m.unrecordedLocked(child); err != nil {
		return err
	}
	m.waitIdleLocked(parent)
	if err := m.checkForkLocked(parent, cwd); err != nil {
		return err
	}
	p, had := m.agents[parent]
	if !had {
		p = &agentState{Base: filepath.Clean(cwd), Created: time.Now().UTC()}
	}
	np := m.frozenForFork(p, had)
	c := &agentState{Base: np.Base, Layers: slices.Clone(np.Layers), Parent: parent, Created: time.Now().UTC()}
	// Both views are mounted before anything is recorded: a base or a
	// layer overlayfs refuses (a base on a file system it cannot stack
	// on) fails the fork here, leaving the parent as it was, rather than
	// at the next command of either. The mounts then serve those commands.
	m.closeMountLocked(parent)
	pfd, err := m.newViewLocked(np, fmt.Sprintf("agent %s's workspace on %s", parent, np.Base))
	if err != nil {
		return err
	}
	cfd, err := m.newViewLocked(c, "the snapshot of "+np.Base)
	if err != nil {
		closeFD(pfd)
		m.removeLayers([]string{np.Upper})
		return err
	}
	if err := m.recordViewsLocked(newView{parent, np, pfd}, newView{child, c, cfd}); err != nil {
		return err
	}
	if had {
		if slices.Contains(np.Layers, p.Upper) {
			// Frozen: overlayfs's work directory is no longer needed.
			os.RemoveAll(m.workDir(p.Upper))
		} else {
			os.RemoveAll(m.layerDir(p.Upper))
		}
	}
	return nil
}

// frozenForFork is the parent p (recorded before, had) as a fork leaves
// it, its upper yet to be made: its upper layer frozen when it holds
// anything (with a checkpoint of the calls pending in it), its changes
// counted from the fork on.
func (m *Manager) frozenForFork(p *agentState, had bool) *agentState {
	np := *p
	np.Layers = slices.Clone(p.Layers)
	if had {
		if empty, _ := emptyDir(m.upperDir(p.Upper)); !empty {
			np.Layers = append(np.Layers, p.Upper)
			if len(p.Pending) > 0 {
				// Calls whose changes are in the upper get their
				// checkpoint with the freeze.
				np.Checkpoints = append(slices.Clone(p.Checkpoints), Checkpoint{CallIDs: slices.Clone(p.Pending), Time: time.Now().UTC(), Layer: p.Upper, Depth: len(np.Layers)})
				np.Pending = nil
			}
		}
		// else nothing to freeze: the old upper goes (after the save).
	}
	np.Upper = ""
	np.Own = 0 // its changes are from this fork on
	return &np
}

// checkNew is nil when a new view may be made: snapshots work here and
// the layers are within their budget.
func (m *Manager) checkNew() error {
	if ok, why := m.Available(); !ok {
		return unavailable("%s", why)
	}
	return m.checkBudget()
}

// unrecordedLocked is ErrInvalid when agent has a workspace record.
func (m *Manager) unrecordedLocked(agent string) error {
	if _, ok := m.agents[agent]; ok {
		return fmt.Errorf("%w: agent %s already has a workspace record", ErrInvalid, agent)
	}
	return nil
}

// newViewLocked makes a fresh upper layer for a (a.Upper) and mounts a's
// view on it; what names the view in an error. On error nothing is left.
func (m *Manager) newViewLocked(a *agentState, what string) (int, error) {
	up, err := m.newLayer()
	if err != nil {
		return -1, err
	}
	a.Upper = up
	fd, err := mountOverlay(m.lowers(a), m.upperDir(up), m.workDir(up))
	if err != nil {
		m.removeLayers([]string{up})
		return -1, unavailable("mount %s: %v", what, err)
	}
	return fd, nil
}

// newView is an agent's new state and its mount, to record.
type newView struct {
	agent string
	state *agentState
	fd    int
}

// recordViewsLocked records views in one write of the state and keeps
// their mounts; on error none is recorded (each agent's state is as it
// was), their mounts are closed and their uppers removed.
func (m *Manager) recordViewsLocked(views ...newView) error {
	old := make([]*agentState, len(views))
	for i, v := range views {
		old[i] = m.agents[v.agent]
		m.agents[v.agent] = v.state
	}
	if err := m.saveLocked(); err != nil {
		for i, v := range views {
			if old[i] == nil {
				delete(m.agents, v.agent)
			} else {
				m.agents[v.agent] = old[i]
			}
			closeFD(v.fd)
			m.removeLayers([]string{v.state.Upper})
		}
		return err
	}
	for _, v := range views {
		m.mounts[v.agent] = v.fd
	}
	return nil
}

// ForkAt gives child a snapshot of parent's view as it was at the point at
// (a checkpoint's edge, from DepthAt: see Mark): parent's frozen layers up
// to it and a fresh upper. The parent is left as it is: nothing of it is
// frozen, so it may run jobs meanwhile. Like Fork, call it before the
// child's header.
func (m *Manager) ForkAt(parent, child string, at Mark) error {
	if err := m.checkNew(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	p, err := m.liveLocked(parent)
	if err != nil {
		return err
	}
	if err := m.unrecordedLocked(child); err != nil {
		return err
	}
	depth, err := at.depthIn(parent, p)
	if err != nil {
		return err
	}
	if first := firstDepth(p); depth < first || depth > len(p.Layers) {
		return fmt.Errorf("%w: depth %d is outside agent %s's checkpoints (%d to %d)", ErrInvalid, depth, parent, first, len(p.Layers))
	}
	c := &agentState{Base: p.Base, Layers: slices.Clone(p.Layers[:depth]), Parent: parent, Created: time.Now().UTC()}
	fd, err := m.newViewLocked(c, "the snapshot of "+p.Base)
	if err != nil {
		return err
	}
	return m.recordViewsLocked(newView{child, c, fd})
}

// Adopt gives the root agent, whose workspace directory is cwd, a snapshot
// view of its own from its creation: cwd becomes the frozen base and its
// writes go to a layer (so every tool call of it can be checkpointed).
// Call it before the agent's header, like Fork.
func (m *Manager) Adopt(agent, cwd string) error {
	if err := m.checkNew(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.unrecordedLocked(agent); err != nil {
		return err
	}
	if err := m.checkForkLocked(agent, cwd); err != nil {
		return err
	}
	a := &agentState{Base: filepath.Clean(cwd), Created: time.Now().UTC()}
	fd, err := m.newViewLocked(a, "a snapshot of "+cwd)
	if err != nil {
		return err
	}
	return m.recordViewsLocked(newView{agent, a, fd})
}

// Lease is a job's hold on its agent's view: while any is held, the
// agent's layer is not frozen or dropped. Release it when the job ends.
type Lease struct {
	// Target is where the view is mounted (the workspace directory).
	Target string
	// FD is the detached overlay mount the job's namespace clones, valid
	// until Release; -1 when the agent shares its directory.
	FD int

	m     *Manager
	agent string
	once  sync.Once
}

// Release gives the lease back.
func (l *Lease) Release() {
	if l == nil {
		return
	}
	l.once.Do(func() {
		l.m.mu.Lock()
		defer l.m.mu.Unlock()
		if l.m.active[l.agent]--; l.m.active[l.agent] <= 0 {
			delete(l.m.active, l.agent)
		}
		l.m.cond.Broadcast()
	})
}

// Acquire returns a lease on agent's view for one job; its FD is -1 (no
// view: the job runs in the shared directory) when the agent has no
// workspace of its own. ErrDropped when its workspace was dropped,
// ErrUnavailable when this host cannot mount it any more. A nil Manager
// returns a nil Lease.
func (m *Manager) Acquire(agent string) (*Lease, error) {
	if m == nil {
		return nil, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if a, ok := m.agents[agent]; ok && a.Dropped && a.Shares != "" {
		return nil, fmt.Errorf("%w: agent %s", ErrDropped, agent)
	}
	agent = m.ownerLocked(agent)
	// A fork, an apply or a drop of this very view is changing it: the
	// job starts when it is done. Nothing another agent does is waited
	// for.
	for m.writingLocked(agent) {
		m.waits++
		m.cond.Wait()
		m.waits--
	}
	a, ok := m.agents[agent]
	if !ok {
		// No view, but counted all the same: the agent's first snapshot
		// fork freezes the directory this job writes.
		m.active[agent]++
		return &Lease{FD: -1, m: m, agent: agent}, nil
	}
	if a.Dropped {
		return nil, fmt.Errorf("%w: agent %s", ErrDropped, agent)
	}
	if m.why != "" {
		return nil, unavailable("%s", m.why)
	}
	if m.over {
		return nil, fmt.Errorf("%w: the layers use workspaces.maxBytes (%d bytes); agent %s's jobs are refused until snapshot workspaces are dropped (DELETE /agents/{id}/workspace)", ErrOverBudget, m.maxBytes, agent)
	}
	fd, err := m.mountLocked(agent, a)
	if err != nil {
		return nil, err
	}
	m.active[agent]++
	return &Lease{Target: a.Base, FD: fd, m: m, agent: agent}, nil
}

// mountLocked returns agent's overlay mount, making it if needed (after
// a checkpoint's, which makes it off the call's path: see Checkpoint).
func (m *Manager) mountLocked(agent string, a *agentState) (int, error) {
	for m.preparing[agent] {
		m.cond.Wait()
	}
	if fd, ok := m.mounts[agent]; ok {
		return fd, nil
	}
	if cur := m.agents[agent]; cur != nil {
		a = cur // it may have changed while this waited
	}
	if a.Dropped {
		return -1, fmt.Errorf("%w: agent %s", ErrDropped, agent)
	}
	fd, err := mountOverlay(m.lowers(a), m.upperDir(a.Upper), m.workDir(a.Upper))
	if err != nil {
		return -1, unavailable("mount agent %s's workspace: %v", agent, err)
	}
	m.mounts[agent] = fd
	return fd, nil
}

func (m *Manager) closeMountLocked(agent string) {
	if fd, ok := m.mounts[agent]; ok {
		closeFD(fd)
		delete(m.mounts, agent)
	}
}

// lowers are a's lower directories, top first.
func (m *Manager) lowers(a *agentState) []string {
	l := make([]string, 0, len(a.Layers)+1)
	for i := len(a.Layers) - 1; i >= 0; i-- {
		l = append(l, m.upperDir(a.Layers[i]))
	}
	return append(l, a.Base)
}

// Drop drops agent's layer: its changes are gone and none of its commands
// runs any more (ErrDropped), never in a shared directory. Frozen layers
// no other agent stands on are removed. ErrBusy while it runs a job.
func (m *Manager) Drop(agent string) error {
	m.mu.Lock()
	unused, err := m.dropLocked(agent)
	m.mu.Unlock()
	m.removeLayers(unused)
	return err
}

func (m *Manager) dropLocked(agent string) ([]string, error) {
	a, ok := m.agents[agent]
	if !ok {
		return nil, fmt.Errorf("%w: agent %s", ErrNotFound, agent)
	}
	if a.Shares != "" {
		return nil, fmt.Errorf("%w: agent %s shares agent %s's workspace", ErrNotFound, agent, a.Shares)
	}
	if a.Dropped {
		return nil, nil
	}
	// No listing or apply reads its layer meanwhile.
	m.lockOpLocked(agent, true)
	defer m.unlockOpLocked(agent, true)
	if a = m.agents[agent]; a.Dropped {
		return nil, nil
	}
	m.waitIdleLocked(agent)
	if n := m.active[agent]; n > 0 {
		return nil, fmt.Errorf("%w: agent %s runs %d job(s)", ErrBusy, agent, n)
	}
	na := *a
	na.Dropped = true
	m.agents[agent] = &na
	if err := m.saveLocked(); err != nil {
		m.agents[agent] = a
		return nil, err
	}
	m.closeMountLocked(agent)
	merged := m.forgetCompactionLocked(agent)
	return append(m.unusedLocked(), merged...), nil
}

// usageTTL is how long Usage answers from its last count: /healthz may be
// polled often, and counting walks every layer.
const usageTTL = 10 * time.Second

// Usage is the disk used by every layer, in bytes (the base directories
// not counted), and how many layers there are, as counted at most
// usageTTL ago.
func (m *Manager) Usage() (bytes int64, layers int) { return m.usage(false) }

// usage is Usage, counted afresh when fresh is set.
func (m *Manager) usage(fresh bool) (bytes int64, layers int) {
	m.usageMu.Lock()
	defer m.usageMu.Unlock()
	if !fresh && !m.usageAt.IsZero() && time.Since(m.usageAt) < usageTTL {
		return m.usageBytes, m.usageLayers
	}
	root := filepath.Join(m.dir, "layers")
	ents, _ := os.ReadDir(root)
	// By descriptor: a command swapping a directory of its layer for a
	// link does not send the count out of the layers.
	if t, err := openTree(root, "layers"); err == nil {
		_ = t.walk(func(_ string, fi fs.FileInfo) error {
			if fi.Mode().IsRegular() {
				bytes += fi.Size()
			}
			return nil
		})
		t.close()
	}
	m.usageBytes, m.usageLayers, m.usageAt = bytes, len(ents), time.Now()
	return bytes, len(ents)
}

// Close closes the mounts dshd holds (jobs still running keep theirs).
func (m *Manager) Close() {
	if m == nil {
		return
	}
	// Compactions stop and leave nothing recorded (their layers go at
	// the next start).
	m.closing.Store(true)
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.wg.Wait()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closeLogLocked()
	for a := range m.mounts {
		m.closeMountLocked(a)
	}
}

// ownerLocked is the agent whose workspace agent uses: agent itself, or
// the one it shares.
func (m *Manager) ownerLocked(agent string) string {
	if a, ok := m.agents[agent]; ok && a.Shares != "" {
		return a.Shares
	}
	return agent
}

// Share makes child use parent's view, as a shared fork or spawn does: the
// same directory as its parent means the parent's view when the parent has
// a snapshot workspace (its jobs then count as the parent's). Nothing is
// recorded for a parent without one. Like Fork, call it before the child's
// header is written: if the record cannot be saved, nothing is recorded and
// the child must not be made (it would run in the frozen base directory).
func (m *Manager) Share(parent, child string) error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	owner := m.ownerLocked(parent)
	o, ok := m.agents[owner]
	if !ok {
		return nil
	}
	m.agents[child] = &agentState{Base: o.Base, Shares: owner, Created: time.Now().UTC()}
	if err := m.saveLocked(); err != nil {
		delete(m.agents, child)
		return err
	}
	return nil
}

// Forget removes what Fork or Share recorded for an agent whose header
// could then not be written: no agent stands on it.
func (m *Manager) Forget(agent string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	var unused []string
	if _, ok := m.agents[agent]; ok {
		delete(m.agents, agent)
		m.forgetCompactionLocked(agent) // its merged layers: unused below
		if err := m.saveLocked(); err != nil {
			m.log.Error("forget the workspace of an agent that was not made", "agent_id", agent, "err", err)
		}
		m.closeMountLocked(agent)
		unused = m.unusedLocked()
	}
	m.mu.Unlock()
	m.removeLayers(unused)
}

// Reconcile forgets the workspaces recorded for agents that do not exist
// (exists answers false): a crash after a fork recorded the child's
// workspace and before its header was written. Call it once at start.
func (m *Manager) Reconcile(exists func(agent string) bool) {
	if m == nil {
		return
	}
	m.mu.Lock()
	var gone []string
	for id := range m.agents {
		if !exists(id) {
			gone = append(gone, id)
		}
	}
	m.mu.Unlock()
	for _, id := range gone {
		m.log.Info("forgetting the workspace of an agent a crash left unmade", "agent_id", id)
		m.Forget(id)
	}
}

func emptyDir(d string) (bool, error) {
	f, err := os.Open(d)
	if err != nil {
		return false, err
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	return len(names) == 0 && err != nil, nil
}

// budgetEvery is how often WatchBudget counts the layers.
const budgetEvery = time.Second

// WatchBudget keeps the layers within workspaces.maxBytes until ctx ends:
// every second it counts the upper layers (the frozen ones once, they do
// not change) and, while the layers use maxBytes or more, refuses every
// job of a snapshot agent with ErrOverBudget (Acquire) and calls stop with
// the agents whose layer grew since the count before (and those sharing
// their views), whose jobs stop must end. A layer can overshoot the budget
// by what its writers write in one interval. Nothing to do without a
// budget.
func (m *Manager) WatchBudget(ctx context.Context, stop func(agents []string)) {
	if m == nil || m.maxBytes <= 0 || m.why != "" {
		return
	}
	frozen := map[string]int64{} // layer -> bytes, counted once
	last := map[string]int64{}   // agent -> its upper's bytes at the last count
	t := time.NewTicker(budgetEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		used, grew := m.countBudget(frozen, last)
		m.mu.Lock()
		was := m.over
		m.over = used >= m.maxBytes
		over := m.over
		var writers []string
		if over {
			for _, a := range grew {
				writers = append(writers, a)
				for id, o := range m.agents {
					if o.Shares == a {
						writers = append(writers, id)
					}
				}
			}
		}
		m.mu.Unlock()
		switch {
		case over && !was:
			m.log.Warn("workspace layers reached workspaces.maxBytes: snapshot agents' jobs are refused and the writers stopped until workspaces are dropped", "bytes", used, "max_bytes", m.maxBytes, "writers", writers)
		case !over && was:
			m.log.Info("workspace layers back under workspaces.maxBytes", "bytes", used, "max_bytes", m.maxBytes)
		}
		if len(writers) > 0 && stop != nil {
			stop(writers)
		}
	}
}

// countBudget counts the layers' bytes: the frozen ones from frozen (or
// counted once into it), every upper afresh; grew are the agents whose
// upper grew since last.
func (m *Manager) countBudget(frozen, last map[string]int64) (used int64, grew []string) {
	type up struct{ agent, layer string }
	var ups []up
	layers := map[string]bool{}
	m.mu.Lock()
	for id, a := range m.agents {
		if a.Dropped || a.Shares != "" {
			continue
		}
		ups = append(ups, up{id, a.Upper})
		for _, l := range a.Layers {
			layers[l] = true
		}
		if a.Aside != nil {
			for _, l := range a.Aside.Layers {
				layers[l] = true
			}
		}
	}
	m.mu.Unlock()
	for l := range layers {
		n, ok := frozen[l]
		if !ok {
			n = m.layerBytes(l)
			frozen[l] = n
		}
		used += n
	}
	for l := range frozen {
		if !layers[l] {
			delete(frozen, l)
		}
	}
	seen := map[string]bool{}
	for _, u := range ups {
		n := m.layerBytes(u.layer)
		used += n
		if n > last[u.agent] {
			grew = append(grew, u.agent)
		}
		last[u.agent], seen[u.agent] = n, true
	}
	for a := range last {
		if !seen[a] {
			delete(last, a)
		}
	}
	slices.Sort(grew)
	return used, grew
}

// layerBytes is the bytes of the regular files in layer id, counted by
// descriptor.
func (m *Manager) layerBytes(id string) int64 {
	t, err := openTree(m.upperDir(id), "layer "+id)
	if err != nil {
		return 0
	}
	defer t.close()
	var n int64
	_ = t.walk(func(_ string, fi fs.FileInfo) error {
		if fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// Budget is workspaces.maxBytes (0: none) and whether the layers use it
// all, as WatchBudget last counted.
func (m *Manager) Budget() (maxBytes int64, over bool) {
	if m == nil {
		return 0, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.maxBytes, m.over
}
