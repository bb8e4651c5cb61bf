package workspace

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dshd/dshd/internal/atomicfile"
	"github.com/dshd/dshd/internal/beneath"
	"github.com/dshd/dshd/internal/faults"
)

// Applied is what Apply did.
type Applied struct {
	// Target is where the changes went: the parent's view (as its
	// commands see it, the workspace directory) or the directory named.
	Target string
	// Parent is the agent whose view received them ("" for a directory).
	Parent string
	// Changes are the agent's changes: the target now holds each of them
	// (those it already held were left as they were).
	Changes []Change
}

// Apply writes agent's changes onto its parent's view (dir "") or onto the
// directory dir, all or nothing, also across a crash.
//
// A path the target changed since the fork (it no longer holds what agent
// saw at the fork, nor what agent made of it) is a conflict: Apply then
// returns a *ConflictError listing every such path and changes nothing. A
// path the target already holds as agent made it (a deletion already made
// included) is left alone, so applying twice changes nothing the second
// time.
//
// Every read and write is by descriptor beneath the layers and the target
// (see tree): no link, planted before or during the apply, leads one out.
// The writers are held still: ErrBusy while agent, or the parent whose view
// is the target, runs a job or has processes left running by one, and
// neither starts a job until the apply is done (their job starts wait).
//
// The new files are first written into a staging directory at the
// target's root, recorded in a journal under the workspaces directory,
// then moved into place and the deletions made; the next start completes
// a journal that was recorded (or removes a staging directory that was
// not), so that kill -9 at any point leaves the target untouched or fully
// applied.
//
// dir may not be a directory another live workspace stands on (ErrBusy):
// overlayfs does not define what a view shows when its lower layer changes
// under it. The agent's own base directory is allowed when it runs no job;
// its view shows the same before and after. dir may not overlap the dshd
// home (ErrInvalid).
func (m *Manager) Apply(agent, dir string) (Applied, error) {
	a, unhold, err := m.hold(agent, true)
	if err != nil {
		return Applied{}, err
	}
	defer unhold()
	res := Applied{Target: dir}
	j := &journal{ID: newID(), Agent: agent}
	var target *tree
	if dir == "" {
		if a.Parent == "" {
			return Applied{}, fmt.Errorf("%w: agent %s has no parent to apply to; name a directory", ErrInvalid, agent)
		}
		p, unholdParent, err := m.hold(a.Parent, true)
		if err != nil {
			return Applied{}, err
		}
		defer unholdParent()
		if err := m.still(agent, a.Parent); err != nil {
			return Applied{}, err
		}
		m.mu.Lock()
		fd, err := m.mountLocked(a.Parent, p)
		if err == nil {
			target, err = treeAt(fd, "agent "+a.Parent+"'s view")
		}
		m.mu.Unlock()
		if err != nil {
			return Applied{}, err
		}
		res.Target, res.Parent, j.Parent = p.Base, a.Parent, a.Parent
	} else {
		if err := m.still(agent); err != nil {
			return Applied{}, err
		}
		if target, err = m.openTarget(agent, dir); err != nil {
			return Applied{}, err
		}
		res.Target, j.Dir = filepath.Clean(dir), filepath.Clean(dir)
		// The lower layer changes: the view is mounted afresh next time.
		defer func() {
			m.mu.Lock()
			m.closeMountLocked(agent)
			m.mu.Unlock()
		}()
	}
	defer target.close()
	v, err := m.openSince(agent, a)
	if err != nil {
		return Applied{}, err
	}
	defer v.close()
	cs, err := v.changes()
	if err != nil {
		return Applied{}, changedUnder(agent, fmt.Errorf("workspace changes of agent %s: %w", agent, err))
	}
	res.Changes = cs
	// What the agent made is read from its view (held still), what it
	// saw at the fork from the view it was given.
	todo, err := plan(cs, v.now, v.then, target)
	if err != nil {
		return Applied{}, changedUnder(agent, err)
	}
	if len(todo) == 0 {
		return res, nil
	}
	if err := m.apply(j, todo, v.now, target); err != nil {
		return Applied{}, fmt.Errorf("apply agent %s's changes to %s: %w", agent, res.Target, err)
	}
	return res, nil
}

// changedUnder is err, or ErrBusy when err is a path that vanished or
// changed type while the apply read or wrote it: a process dshd does not
// account for (group containment) changed the view or the target under it.
func changedUnder(agent string, err error) error {
	if errors.Is(err, ErrBusy) || errors.Is(err, ErrConflict) {
		return err
	}
	for _, e := range []error{unix.ENOENT, unix.ELOOP, unix.ENOTDIR, unix.EISDIR, unix.EXDEV, errNotDir} {
		if errors.Is(err, e) {
			return fmt.Errorf("%w: agent %s's view or its target changed while the apply read it (%w); nothing was applied", ErrBusy, agent, err)
		}
	}
	return err
}

// still returns ErrBusy when any of agents (or an agent sharing its view)
// runs a job or has processes a job left running: they could write the
// layers or the target while an apply reads and writes them.
func (m *Manager) still(agents ...string) error {
	m.mu.Lock()
	var ids []string
	for _, a := range agents {
		m.waitIdleLocked(a)
		if n := m.active[a]; n > 0 {
			m.mu.Unlock()
			return fmt.Errorf("%w: agent %s runs %d job(s); an apply needs its source and its target still", ErrBusy, a, n)
		}
		ids = append(ids, a)
		for id, o := range m.agents {
			if o.Shares == a {
				ids = append(ids, id)
			}
		}
	}
	busy, wait := m.busy, m.releaseWait
	m.mu.Unlock()
	if busy == nil {
		return nil
	}
	// A job that has just ended may still be counted with what it left
	// (its group empties a moment after its leader, and the count is
	// polled): wait for it as for a lease.
	n := busy(ids)
	for deadline := time.Now().Add(wait); n > 0 && time.Now().Before(deadline); n = busy(ids) {
		time.Sleep(20 * time.Millisecond)
	}
	if n > 0 {
		return fmt.Errorf("%w: agents %s have %d job(s) or processes left running by them; an apply needs its source and its target still (stop them: DELETE /jobs/{id})", ErrBusy, strings.Join(ids, ", "), n)
	}
	return nil
}

// SetBusy gives the Manager a way to count, for a set of agents, their jobs
// and the processes their ended jobs left running (a lease covers a job
// until its leader exits; what outlives it may still write). Apply refuses
// while the count is not zero.
func (m *Manager) SetBusy(f func(agents []string) int) {
	m.mu.Lock()
	m.busy = f
	m.mu.Unlock()
}

// openTarget checks and opens the directory dir for agent's apply.
func (m *Manager) openTarget(agent, dir string) (*tree, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("%w: directory %q is not absolute", ErrInvalid, dir)
	}
	t, err := m.openDir(filepath.Clean(dir))
	if err != nil {
		return nil, err
	}
	real, err := fdPath(t.fd)
	if err != nil {
		t.close()
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, o := range m.agents {
		if o.Dropped || o.Shares != "" || !(beneath.Within(real, o.Base) || beneath.Within(o.Base, real)) {
			continue
		}
		if id != agent {
			t.close()
			return nil, fmt.Errorf("%w: %s is under agent %s's workspace, which stands on %s", ErrBusy, dir, id, o.Base)
		}
	}
	return t, nil
}

// openDir opens the directory dir as an apply's target: not a link, and
// not overlapping the dshd home, by what the kernel says was opened
// (whatever links on the way led there).
func (m *Manager) openDir(dir string) (*tree, error) {
	t, err := openTree(dir, dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %s is not a directory (a link is not followed)", ErrInvalid, dir)
	}
	real, err := fdPath(t.fd)
	if err != nil {
		t.close()
		return nil, err
	}
	for _, p := range m.protected() {
		if beneath.Within(real, p) || beneath.Within(p, real) {
			t.close()
			return nil, fmt.Errorf("%w: %s overlaps the dshd home (%s)", ErrInvalid, dir, p)
		}
	}
	return t, nil
}

// protected are the directories no apply may write: the workspaces
// directory and the dshd home, as given and as resolved.
func (m *Manager) protected() []string {
	out := []string{m.dir}
	if m.home != "" {
		out = append(out, m.home)
	}
	for _, p := range slices.Clone(out) {
		if r, err := filepath.EvalSymlinks(p); err == nil && r != p {
			out = append(out, r)
		}
	}
	return out
}

// step is one change to make: a path to put in place (from the layer) or
// to delete.
type step struct {
	Change
	del bool
}

// plan decides, for each of the agent's changes cs, whether the target
// already holds it (nothing to do), conflicts, or is to be changed.
func plan(cs []Change, upper, base, target *tree) ([]step, error) {
	var todo []step
	var conflicts []string
	for _, c := range cs {
		if c.Kind == Deleted {
			if _, err := target.lstat(c.Path); missing(err) {
				continue // already gone
			}
		} else if c.Type != "dir" {
			if same, err := samePath(upper, c.Path, target, c.Path); err == nil && same {
				continue // the target holds it already
			}
		}
		same, err := samePath(base, c.Path, target, c.Path)
		if err != nil {
			return nil, fmt.Errorf("compare %s: %w", c.Path, err)
		}
		if c.Type == "dir" && c.Kind == Added {
			// An added directory conflicts only with something else there.
			fi, err := target.lstat(c.Path)
			if err == nil && fi.IsDir() {
				continue // there already
			}
			same = err != nil
		}
		// Every directory above it must still be one (or be missing, to
		// be made): never a file, never a link.
		if !same || !target.realDirs(c.Path) {
			conflicts = append(conflicts, c.Path)
			continue
		}
		todo = append(todo, step{Change: c, del: c.Kind == Deleted})
	}
	if len(conflicts) > 0 {
		return nil, &ConflictError{Paths: slices.Compact(conflicts)}
	}
	return todo, nil
}

// journal records an apply between its staging and its end, so that the
// next start completes it (State "commit") or removes its staging
// directory (State "staging").
type journal struct {
	ID    string `json:"id"`
	Agent string `json:"agent"`
	// Parent is the agent whose view is the target; Dir the directory.
	Parent string `json:"parent,omitempty"`
	Dir    string `json:"dir,omitempty"`
	State  string `json:"state"`
	// Moves are the staged entries, in path order: Stage/<index> goes to
	// Path.
	Moves []string `json:"moves,omitempty"`
	// Deletes are the paths to delete after the moves, deepest first.
	Deletes []string `json:"deletes,omitempty"`
}

const (
	journalStaging = "staging"
	journalCommit  = "commit"
)

// stage is the name of j's staging directory at the target's root.
func (j *journal) stage() string { return ".dshd-apply-" + j.ID }

func (m *Manager) journalDir() string { return filepath.Join(m.dir, "applies") }

func (m *Manager) journalPath(id string) string {
	return filepath.Join(m.journalDir(), id+".json")
}

func (m *Manager) saveJournal(j *journal) error {
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(m.journalDir(), 0o700); err != nil {
		return err
	}
	return atomicfile.Write(m.journalPath(j.ID), b, atomicfile.Options{})
}

// apply stages todo (from upper) under target, records the journal, then
// commits it.
func (m *Manager) apply(j *journal, todo []step, upper, target *tree) error {
	j.State = journalStaging
	if err := m.saveJournal(j); err != nil {
		return err
	}
	faults.Point("workspace.apply.journaled")
	if err := stageAll(j, todo, upper, target); err != nil {
		removeAllAt(target.fd, j.stage())
		os.Remove(m.journalPath(j.ID))
		return changedUnder(j.Agent, err)
	}
	faults.Point("workspace.apply.staged")
	// What was staged is on disk before the journal says it is to be
	// moved into place.
	if err := unix.Syncfs(target.fd); err != nil {
		removeAllAt(target.fd, j.stage())
		os.Remove(m.journalPath(j.ID))
		return fmt.Errorf("sync the staged files: %w", err)
	}
	j.State = journalCommit
	if err := m.saveJournal(j); err != nil {
		removeAllAt(target.fd, j.stage())
		os.Remove(m.journalPath(j.ID))
		return err
	}
	faults.Point("workspace.apply.committed")
	if err := commit(j, target); err != nil {
		if errors.Is(err, ErrBusy) {
			os.Remove(m.journalPath(j.ID)) // rolled back: nothing to finish
		}
		return err
	}
	return os.Remove(m.journalPath(j.ID))
}

// stageAll writes every entry to put in place into the staging directory,
// numbered in path order, and lists them and the deletions in j.
func stageAll(j *journal, todo []step, upper, target *tree) error {
	if err := unix.Mkdirat(target.fd, j.stage(), 0o700); err != nil {
		return fmt.Errorf("make the staging directory: %w", err)
	}
	sfd, err := openat2(target.fd, j.stage(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer unix.Close(sfd)
	for _, s := range todo {
		if s.del {
			continue
		}
		name := strconv.Itoa(len(j.Moves))
		if err := copyEntry(upper, s.Path, sfd, name); err != nil {
			return err
		}
		j.Moves = append(j.Moves, s.Path)
	}
	for i := len(todo) - 1; i >= 0; i-- {
		if todo[i].del {
			j.Deletes = append(j.Deletes, todo[i].Path)
		}
	}
	return nil
}

// commit moves j's staged entries into place and makes its deletions,
// keeping what each replaces or deletes in the staging directory (b<i>,
// d<i>) until all is done, so that a failure part way (the target changed
// under the apply by a process dshd does not account for) is rolled back:
// the target is left as it was and the error is ErrBusy. It can be run
// again after a crash in the middle: an entry no longer staged was moved,
// a deletion already made is no error.
func commit(j *journal, target *tree) error {
	sfd, err := openat2(target.fd, j.stage(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil // finished before a crash, but for the journal
	}
	if err != nil {
		return fmt.Errorf("open the staging directory: %w", err)
	}
	defer unix.Close(sfd)
	err = func() error {
		for i, p := range j.Moves {
			if err := moveInPlace(sfd, i, target, p); err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			faults.Point("workspace.apply.moved")
		}
		for i, p := range j.Deletes {
			if err := deleteAside(sfd, i, target, p); err != nil {
				return fmt.Errorf("delete %s: %w", p, err)
			}
		}
		return nil
	}()
	if err != nil {
		if rerr := rollback(j, sfd, target); rerr != nil {
			return fmt.Errorf("%w; rolling back: %w", err, rerr)
		}
		return fmt.Errorf("%w: the target changed while the apply wrote it (%w); nothing was applied", ErrBusy, err)
	}
	return removeAllAt(target.fd, j.stage())
}

func staged(i int) string   { return strconv.Itoa(i) }
func replaced(i int) string { return "b" + strconv.Itoa(i) }
func deleted(i int) string  { return "d" + strconv.Itoa(i) }

// moveInPlace renames the staged entry i (in the staging directory sfd)
// to rel in target, making the directories on the way; what stands there
// is first moved aside into the staging directory (removed, where it
// cannot be moved: a directory overlayfs cannot rename).
func moveInPlace(sfd, i int, target *tree, rel string) error {
	sfi, err := statAt(sfd, staged(i))
	if errors.Is(err, fs.ErrNotExist) {
		return nil // moved before a crash
	}
	if err != nil {
		return err
	}
	dir, base := path.Split(rel)
	dfd, _, err := target.dirs(dir, 0o755)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	if dfi, err := statAt(dfd, base); err == nil {
		if err := unix.Renameat(dfd, base, sfd, replaced(i)); err != nil {
			if !dfi.IsDir() && !sfi.IsDir() {
				// A file over a file: rename replaces it in one step.
				goto move
			}
			if err := removeAllAt(dfd, base); err != nil {
				return err
			}
		}
	}
move:
	if err := unix.Renameat(sfd, staged(i), dfd, base); err != nil {
		return &fs.PathError{Op: "rename", Path: rel, Err: err}
	}
	return nil
}

// deleteAside moves rel out of target into the staging directory as d<i>
// (removed, where it cannot be moved).
func deleteAside(sfd, i int, target *tree, rel string) error {
	dir, name := path.Split(rel)
	dfd, err := openat2(target.fd, dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if missing(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	if _, err := statAt(dfd, name); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := unix.Renameat(dfd, name, sfd, deleted(i)); err == nil {
		return nil
	}
	return removeAllAt(dfd, name)
}

// rollback undoes what commit did, last first: an entry moved into place
// is taken back out and what it replaced put back; what was deleted is put
// back.
func rollback(j *journal, sfd int, target *tree) error {
	var errs []error
	for i := len(j.Deletes) - 1; i >= 0; i-- {
		if _, err := statAt(sfd, deleted(i)); err != nil {
			continue
		}
		dir, name := path.Split(j.Deletes[i])
		dfd, _, err := target.dirs(dir, 0o755)
		if err == nil {
			err = unix.Renameat(sfd, deleted(i), dfd, name)
			unix.Close(dfd)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("put back %s: %w", j.Deletes[i], err))
		}
	}
	for i := len(j.Moves) - 1; i >= 0; i-- {
		if _, err := statAt(sfd, staged(i)); err == nil {
			continue // never moved
		}
		rel := j.Moves[i]
		dir, name := path.Split(rel)
		dfd, err := openat2(target.fd, dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
		if err != nil {
			errs = append(errs, fmt.Errorf("take back %s: %w", rel, err))
			continue
		}
		if err := removeAllAt(dfd, name); err != nil {
			errs = append(errs, fmt.Errorf("take back %s: %w", rel, err))
		} else if _, err := statAt(sfd, replaced(i)); err == nil {
			if err := unix.Renameat(sfd, replaced(i), dfd, name); err != nil {
				errs = append(errs, fmt.Errorf("put back %s: %w", rel, err))
			}
		}
		unix.Close(dfd)
	}
	if len(errs) == 0 {
		errs = append(errs, removeAllAt(target.fd, j.stage()))
	}
	return errors.Join(errs...)
}

// copyEntry copies the file, link or (empty) directory rel of src into
// the directory dfd as name, with its permissions and modification time.
// Only what is there when it is opened is copied: a link is copied as a
// link, never followed.
func copyEntry(src *tree, rel string, dfd int, name string) error {
	fi, err := src.lstat(rel)
	if err != nil {
		return err
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		l, err := src.readlink(rel)
		if err != nil {
			return err
		}
		return unix.Symlinkat(l, dfd, name)
	case fi.IsDir():
		if err := unix.Mkdirat(dfd, name, uint32(fi.Mode().Perm())); err != nil {
			return err
		}
		return unix.Fchmodat(dfd, name, uint32(fi.Mode().Perm()), 0)
	case fi.Mode().IsRegular():
		in, err := src.open(rel)
		if err != nil {
			return err
		}
		defer in.Close()
		// What was opened, not what was listed: a regular file.
		ifi, err := in.Stat()
		if err != nil {
			return err
		}
		if !ifi.Mode().IsRegular() {
			return fmt.Errorf("%s: changed type while being applied", rel)
		}
		ofd, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(ifi.Mode().Perm()))
		if err != nil {
			return &fs.PathError{Op: "create", Path: rel, Err: err}
		}
		out := os.NewFile(uintptr(ofd), rel)
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		if err := out.Chmod(ifi.Mode().Perm()); err != nil {
			out.Close()
			return err
		}
		mt := unix.NsecToTimespec(ifi.ModTime().UnixNano())
		if err := unix.UtimesNanoAt(ofd, "", []unix.Timespec{{Nsec: unix.UTIME_OMIT}, mt}, unix.AT_EMPTY_PATH); err != nil {
			// Older kernels take no empty path here; the mtime is a nicety.
			_ = os.Chtimes(out.Name(), time.Time{}, ifi.ModTime())
		}
		return out.Close()
	}
	return fmt.Errorf("%s: cannot apply a %s", rel, typeOf(fi))
}

// recoverApplies completes the applies a crash interrupted after their
// journal was committed, and removes the staging directories of those it
// interrupted before. An apply it cannot finish (its target gone) is
// logged and its journal kept.
func (m *Manager) recoverApplies() {
	ents, err := os.ReadDir(m.journalDir())
	if err != nil {
		return
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		p := filepath.Join(m.journalDir(), e.Name())
		b, err := os.ReadFile(p)
		var j journal
		if err == nil {
			err = json.Unmarshal(b, &j)
		}
		if err != nil {
			m.log.Error("unreadable apply journal; left as it is", "path", p, "err", err)
			continue
		}
		if err := m.recoverApply(&j); errors.Is(err, ErrBusy) {
			m.log.Warn("rolled back an apply interrupted by a crash: its target had changed", "agent_id", j.Agent, "parent_id", j.Parent, "dir", j.Dir, "err", err)
			os.Remove(p)
			continue
		} else if err != nil {
			m.log.Error("could not finish an interrupted apply; its journal is kept", "path", p, "agent_id", j.Agent, "err", err)
			continue
		}
		os.Remove(p)
		m.log.Info("finished an apply interrupted by a crash", "agent_id", j.Agent, "parent_id", j.Parent, "dir", j.Dir, "completed", j.State == journalCommit)
	}
}

func (m *Manager) recoverApply(j *journal) error {
	var target *tree
	var err error
	if j.Parent != "" {
		m.mu.Lock()
		p, ok := m.agents[j.Parent]
		var fd int
		if !ok || m.why != "" {
			err = fmt.Errorf("agent %s's view cannot be mounted (%s)", j.Parent, m.why)
		} else if fd, err = m.mountLocked(j.Parent, p); err == nil {
			target, err = treeAt(fd, "agent "+j.Parent+"'s view")
		}
		m.mu.Unlock()
	} else {
		target, err = m.openDir(j.Dir)
	}
	if err != nil {
		return err
	}
	defer target.close()
	if j.State != journalCommit {
		return removeAllAt(target.fd, j.stage())
	}
	return commit(j, target)
}
