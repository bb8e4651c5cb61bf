package workspace

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"sort"

	"golang.org/x/sys/unix"
)

// Change kinds.
const (
	Added    = "added"
	Modified = "modified"
	Deleted  = "deleted"
)

// Change is one path an agent changed since its fork.
type Change struct {
	// Path is relative to the workspace directory, with slashes.
	Path string
	// Kind is Added, Modified or Deleted.
	Kind string
	// Type is "file", "dir", "symlink" or "other" (the new one; for a
	// deletion, the old one).
	Type string
	// Size is the new size in bytes (for a deletion: the old size; a
	// deleted directory: the bytes of the files under it).
	Size int64
	// Diff is a unified diff of a text file (with diff requested).
	Diff string
	// DiffOmitted says why Diff is empty when one was requested ("binary",
	// "too large", "budget").
	DiffOmitted string
}

// Diff bounds: a file larger than MaxDiffFileBytes gets no diff, and a
// listing carries at most MaxDiffBytes of diffs in all.
const (
	MaxDiffFileBytes = 1 << 20
	MaxDiffBytes     = 4 << 20
)

// Changes lists what agent changed since its fork (its upper layer against
// the frozen view under it), sorted by path; with diff, unified diffs of
// text files, bounded. ErrNotFound for an agent without a workspace,
// ErrDropped for a dropped one.
//
// It holds no lock of the Manager's while it reads the layers (their size
// is the agent's): other agents' jobs start meanwhile, and the agent's own
// jobs go on writing (the listing is of the moment each path is read). Its
// layers stay as they are: a fork, an apply or a drop of this agent waits.
func (m *Manager) Changes(agent string, diff bool) ([]Change, error) {
	a, unhold, err := m.hold(agent, false)
	if err != nil {
		return nil, err
	}
	defer unhold()
	v, err := m.openSince(agent, a)
	if err != nil {
		return nil, err
	}
	defer v.close()
	cs, err := v.changes()
	if err != nil {
		return nil, fmt.Errorf("workspace changes of agent %s: %w", agent, err)
	}
	if diff {
		addDiffs(cs, v.now, v.then)
	}
	return cs, nil
}

// since is what an agent changed since its fork, to read: the layers it
// wrote since (its own checkpoints' and its upper), its view now, and the
// view it was given then.
type since struct {
	layers    []*tree // oldest first
	now, then *tree
	done      []func()
}

func (v *since) close() {
	for _, t := range v.layers {
		t.close()
	}
	if v.now != nil {
		v.now.close()
	}
	if v.then != nil {
		v.then.close()
	}
	for _, f := range v.done {
		f()
	}
}

// openSince opens agent's changes since its fork (a its state).
func (m *Manager) openSince(agent string, a *agentState) (*since, error) {
	v := &since{}
	fork := len(a.Layers) - min(a.Own, len(a.Layers))
	for _, id := range append(slices.Clone(a.Layers[fork:]), a.Upper) {
		t, err := openTree(m.upperDir(id), "layer "+id)
		if err != nil {
			v.close()
			return nil, err
		}
		v.layers = append(v.layers, t)
	}
	m.mu.Lock()
	fd, err := m.mountLocked(agent, a)
	if err == nil {
		v.now, err = treeAt(fd, "agent "+agent+"'s view")
	}
	m.mu.Unlock()
	if err != nil {
		v.close()
		return nil, err
	}
	then, done, err := m.openStack(a.Base, a.Layers[:fork])
	if err != nil {
		v.close()
		return nil, err
	}
	v.then, v.done = then, append(v.done, done)
	return v, nil
}

// openStack opens the read-only view of base under layers (lowest first).
func (m *Manager) openStack(base string, layers []string) (*tree, func(), error) {
	if len(layers) == 0 {
		t, err := openTree(base, base)
		return t, func() {}, err
	}
	fd, err := mountOverlay(m.lowers(&agentState{Base: base, Layers: layers}), "", "")
	if err != nil {
		return nil, nil, unavailable("mount the frozen view: %v", err)
	}
	t, err := treeAt(fd, "frozen view of "+base)
	closeFD(fd)
	return t, func() {}, err
}

// changes lists what differs between then and now among the paths the
// layers touched, sorted by path: a path the layers hold is compared as it
// is now with what it was then (a file made in one layer and deleted in a
// later one is no change); a directory a layer made opaque lists what it
// held then and holds no more.
func (v *since) changes() ([]Change, error) {
	touched, opaque, err := v.touchedPaths()
	if err != nil {
		return nil, err
	}
	var cs []Change
	for rel := range touched {
		more, err := v.changed(rel, touched, opaque)
		if err != nil {
			return nil, err
		}
		cs = append(cs, more...)
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].Path < cs[j].Path })
	return cs, nil
}

// touchedPaths returns the paths the layers hold, and among them those that
// hide what they held before.
func (v *since) touchedPaths() (touched, opaque map[string]bool, err error) {
	touched = map[string]bool{}
	opaque = map[string]bool{}
	for _, l := range v.layers {
		err := l.walk(func(rel string, fi fs.FileInfo) error {
			touched[rel] = true
			// A directory made opaque, or deleted (a whiteout) or
			// replaced by a non-directory in a layer and made again in
			// a later one, hides what it held before.
			if !fi.IsDir() || l.opaque(rel) {
				opaque[rel] = true
			}
			return nil
		})
		if err != nil {
			return nil, nil, err
		}
	}
	return touched, opaque, nil
}

// changed compares the touched path rel as it is now with what it was then.
func (v *since) changed(rel string, touched, opaque map[string]bool) ([]Change, error) {
	nfi, nerr := v.now.lstat(rel)
	tfi, terr := v.then.lstat(rel)
	for _, err := range []error{nerr, terr} {
		if err != nil && !missing(err) && !belowLink(err) {
			return nil, err
		}
	}
	var cs []Change
	isNow, wasThen := nerr == nil, terr == nil
	switch {
	case !isNow && wasThen:
		// Only where what holds it was not deleted too: one entry
		// for a deleted directory, not one for each file in it.
		if parent := path.Dir(rel); parent == "." || v.present(parent) {
			cs = append(cs, Change{Path: rel, Kind: Deleted, Type: typeOf(tfi), Size: treeSize(v.then, rel, tfi)})
		}
	case isNow && !wasThen:
		cs = append(cs, Change{Path: rel, Kind: Added, Type: typeOf(nfi), Size: sizeOf(nfi)})
		if nfi.IsDir() {
			// What it holds that no layer between touched (views
			// compared from a later one back to an earlier one).
			more, err := v.untouched(v.now, rel, touched, Added)
			if err != nil {
				return nil, err
			}
			cs = append(cs, more...)
		}
	case isNow && wasThen && nfi.IsDir() && tfi.IsDir():
		if !opaque[rel] {
			return nil, nil
		}
		return v.reopened(rel, touched)
	case isNow && wasThen:
		same, err := sameEntry(v.now, rel, nfi, v.then, rel, tfi)
		if err != nil {
			return nil, err
		}
		if !same {
			cs = append(cs, Change{Path: rel, Kind: Modified, Type: typeOf(nfi), Size: sizeOf(nfi)})
		}
		if nfi.IsDir() && !tfi.IsDir() {
			more, err := v.untouched(v.now, rel, touched, Added)
			if err != nil {
				return nil, err
			}
			cs = append(cs, more...)
		}
	}
	return cs, nil
}

// reopened lists, below the directory rel that a layer made opaque, what
// it held then and holds no more, and what it holds now that it did not
// then, leaving out what a layer touched (compared on its own).
func (v *since) reopened(rel string, touched map[string]bool) ([]Change, error) {
	var cs []Change
	ents, err := v.then.readDir(rel)
	if err != nil {
		return nil, err
	}
	for _, li := range ents {
		child := rel + "/" + li.Name()
		if touched[child] {
			continue // compared on its own
		}
		if _, err := v.now.lstat(child); missing(err) {
			cs = append(cs, Change{Path: child, Kind: Deleted, Type: typeOf(li), Size: treeSize(v.then, child, li)})
		}
	}
	// And what it holds now that it did not then, no layer
	// between touched (compared from a later view back).
	ents, err = v.now.readDir(rel)
	if err != nil {
		return nil, err
	}
	for _, ni := range ents {
		child := rel + "/" + ni.Name()
		if touched[child] {
			continue
		}
		if _, err := v.then.lstat(child); missing(err) {
			cs = append(cs, Change{Path: child, Kind: Added, Type: typeOf(ni), Size: sizeOf(ni)})
			if ni.IsDir() {
				more, err := v.untouched(v.now, child, touched, Added)
				if err != nil {
					return nil, err
				}
				cs = append(cs, more...)
			}
		}
	}
	return cs, nil
}

// untouched lists as kind what t holds below the directory rel that no
// layer touched.
func (v *since) untouched(t *tree, rel string, touched map[string]bool, kind string) ([]Change, error) {
	fd, err := t.openDir(rel)
	if err != nil {
		return nil, err
	}
	defer closeFD(fd)
	var cs []Change
	err = walkAt(fd, rel+"/", func(p string, fi fs.FileInfo) error {
		if !touched[p] {
			cs = append(cs, Change{Path: p, Kind: kind, Type: typeOf(fi), Size: sizeOf(fi)})
		}
		return nil
	})
	return cs, err
}

// present reports whether rel is in the view now.
func (v *since) present(rel string) bool {
	_, err := v.now.lstat(rel)
	return err == nil
}

// sizeOf is a Change's size of what fi describes now (0 for a directory).
func sizeOf(fi fs.FileInfo) int64 {
	if fi.IsDir() {
		return 0
	}
	return fi.Size()
}

func (m *Manager) liveLocked(agent string) (*agentState, error) {
	a, ok := m.agents[agent]
	if !ok {
		return nil, fmt.Errorf("%w: agent %s", ErrNotFound, agent)
	}
	if a.Shares != "" {
		return nil, fmt.Errorf("%w: agent %s shares agent %s's workspace", ErrNotFound, agent, a.Shares)
	}
	if a.Dropped {
		return nil, fmt.Errorf("%w: agent %s", ErrDropped, agent)
	}
	return a, nil
}

// openLayers opens a's upper layer and its frozen view (what it saw at its
// fork: the base itself, or a read-only overlay of its layers) as trees.
func (m *Manager) openLayers(a *agentState) (upper, base *tree, done func(), err error) {
	upper, err = openTree(m.upperDir(a.Upper), "layer "+a.Upper)
	if err != nil {
		return nil, nil, nil, err
	}
	if len(a.Layers) == 0 {
		if base, err = openTree(a.Base, a.Base); err != nil {
			upper.close()
			return nil, nil, nil, err
		}
		return upper, base, func() { upper.close(); base.close() }, nil
	}
	fd, err := mountOverlay(m.lowers(a), "", "")
	if err != nil {
		upper.close()
		return nil, nil, nil, unavailable("mount the frozen view: %v", err)
	}
	base, err = treeAt(fd, "frozen view of "+a.Base)
	closeFD(fd)
	if err != nil {
		upper.close()
		return nil, nil, nil, err
	}
	return upper, base, func() { upper.close(); base.close() }, nil
}

// isWhiteout reports whether fi is overlayfs's mark of a deleted path: a
// character device 0/0.
func isWhiteout(fi fs.FileInfo) bool {
	return fi.Mode()&fs.ModeCharDevice != 0 && rdev(fi) == 0
}

func typeOf(fi fs.FileInfo) string {
	switch {
	case fi.Mode().IsRegular():
		return "file"
	case fi.IsDir():
		return "dir"
	case fi.Mode()&fs.ModeSymlink != 0:
		return "symlink"
	}
	return "other"
}

// changes compares the upper layer upper with the view below it, base.
func changes(upper, base *tree) ([]Change, error) {
	var cs []Change
	err := upper.walk(func(rel string, fi fs.FileInfo) error {
		lfi, lerr := base.lstat(rel)
		if lerr != nil && !errors.Is(lerr, fs.ErrNotExist) && !errors.Is(lerr, unix.ENOTDIR) {
			return lerr
		}
		existed := lerr == nil
		switch {
		case isWhiteout(fi):
			if existed {
				cs = append(cs, Change{Path: rel, Kind: Deleted, Type: typeOf(lfi), Size: treeSize(base, rel, lfi)})
			}
			return nil
		case fi.IsDir():
			switch {
			case !existed:
				cs = append(cs, Change{Path: rel, Kind: Added, Type: "dir"})
			case !lfi.IsDir():
				cs = append(cs, Change{Path: rel, Kind: Modified, Type: "dir"})
			case upper.opaque(rel):
				// Deleted and made again: what was below and is not in
				// the new directory is gone.
				ents, err := base.readDir(rel)
				if err != nil {
					return err
				}
				for _, li := range ents {
					if _, err := upper.lstat(rel + "/" + li.Name()); err == nil {
						continue
					}
					cs = append(cs, Change{Path: rel + "/" + li.Name(), Kind: Deleted, Type: typeOf(li), Size: treeSize(base, rel+"/"+li.Name(), li)})
				}
			}
			return nil
		}
		if existed {
			same, err := sameEntry(upper, rel, fi, base, rel, lfi)
			if err != nil {
				return err
			}
			if !same {
				cs = append(cs, Change{Path: rel, Kind: Modified, Type: typeOf(fi), Size: fi.Size()})
			}
			return nil
		}
		cs = append(cs, Change{Path: rel, Kind: Added, Type: typeOf(fi), Size: fi.Size()})
		return nil
	})
	sort.Slice(cs, func(i, j int) bool { return cs[i].Path < cs[j].Path })
	return cs, err
}

// treeSize is the bytes of the regular files at rel in t (fi its Lstat).
func treeSize(t *tree, rel string, fi fs.FileInfo) int64 {
	if !fi.IsDir() {
		return fi.Size()
	}
	var n int64
	if fd, err := t.openDir(rel); err == nil {
		_ = walkAt(fd, "", func(_ string, fi fs.FileInfo) error {
			if fi.Mode().IsRegular() {
				n += fi.Size()
			}
			return nil
		})
		closeFD(fd)
	}
	return n
}

// sameEntry reports whether a's arel and b's brel (their Lstat results ai,
// bi) hold the same thing: type, permissions and contents (a link's
// target; for directories, recursively, the same entries).
func sameEntry(a *tree, arel string, ai fs.FileInfo, b *tree, brel string, bi fs.FileInfo) (bool, error) {
	if ai.Mode().Type() != bi.Mode().Type() || (!isWhiteout(ai) && ai.Mode().Perm() != bi.Mode().Perm()) {
		return false, nil
	}
	switch {
	case ai.Mode().IsRegular():
		if ai.Size() != bi.Size() {
			return false, nil
		}
		return sameContents(a, arel, b, brel)
	case ai.Mode()&fs.ModeSymlink != 0:
		la, err := a.readlink(arel)
		if err != nil {
			return false, err
		}
		lb, err := b.readlink(brel)
		return err == nil && la == lb, err
	case ai.IsDir():
		ea, err := a.readDir(arel)
		if err != nil {
			return false, err
		}
		eb, err := b.readDir(brel)
		if err != nil {
			return false, err
		}
		if len(ea) != len(eb) {
			return false, nil
		}
		for i := range ea {
			if ea[i].Name() != eb[i].Name() {
				return false, nil
			}
			same, err := sameEntry(a, arel+"/"+ea[i].Name(), ea[i], b, brel+"/"+eb[i].Name(), eb[i])
			if err != nil || !same {
				return false, err
			}
		}
		return true, nil
	}
	return true, nil
}

// samePath is sameEntry on two paths either of which may be missing (a
// path below something that is not a directory is missing).
func samePath(a *tree, arel string, b *tree, brel string) (bool, error) {
	ai, aerr := a.lstat(arel)
	bi, berr := b.lstat(brel)
	aMissing, bMissing := missing(aerr), missing(berr)
	switch {
	case aMissing && bMissing:
		return true, nil
	case aMissing || bMissing:
		return false, nil
	case aerr != nil:
		return false, aerr
	case berr != nil:
		return false, berr
	}
	return sameEntry(a, arel, ai, b, brel, bi)
}

func missing(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR)
}

// belowLink: a path under a link (which a tree never follows) is not in
// the tree, as a path under a file is not.
func belowLink(err error) bool { return errors.Is(err, unix.ELOOP) }

func sameContents(a *tree, arel string, b *tree, brel string) (bool, error) {
	fa, err := a.open(arel)
	if err != nil {
		return false, err
	}
	defer fa.Close()
	fb, err := b.open(brel)
	if err != nil {
		return false, err
	}
	defer fb.Close()
	ba, bb := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		na, ea := io.ReadFull(fa, ba)
		nb, eb := io.ReadFull(fb, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return false, nil
		}
		if ea == io.EOF || ea == io.ErrUnexpectedEOF {
			return eb == io.EOF || eb == io.ErrUnexpectedEOF, nil
		}
		if ea != nil {
			return false, ea
		}
		if eb != nil {
			return false, eb
		}
	}
}

// addDiffs fills in the unified diffs of the text files among cs.
func addDiffs(cs []Change, upper, base *tree) {
	budget := MaxDiffBytes
	for i := range cs {
		c := &cs[i]
		if c.Type != "file" {
			continue
		}
		var old, cur []byte
		var err error
		if c.Kind != Added {
			if old, err = readBounded(base, c.Path); err != nil {
				c.DiffOmitted = omitted(err)
				continue
			}
		}
		if c.Kind != Deleted {
			if cur, err = readBounded(upper, c.Path); err != nil {
				c.DiffOmitted = omitted(err)
				continue
			}
		}
		if bytes.IndexByte(old, 0) >= 0 || bytes.IndexByte(cur, 0) >= 0 {
			c.DiffOmitted = "binary"
			continue
		}
		d, ok := unifiedDiff(c.Path, old, cur, c.Kind)
		if !ok {
			c.DiffOmitted = "too large"
			continue
		}
		if len(d) > budget {
			c.DiffOmitted = "budget"
			continue
		}
		budget -= len(d)
		c.Diff = d
	}
}

var errTooLarge = errors.New("too large")

func omitted(err error) string {
	if errors.Is(err, errTooLarge) {
		return "too large"
	}
	return "unreadable"
}

func readBounded(t *tree, rel string) ([]byte, error) {
	f, err := t.open(rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxDiffFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxDiffFileBytes {
		return nil, errTooLarge
	}
	return b, nil
}

// paths returns the paths of cs.
func paths(cs []Change) []string {
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.Path)
	}
	return slices.Compact(out)
}
