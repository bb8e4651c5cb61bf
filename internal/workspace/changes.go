package workspace

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"syscall"

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
func (m *Manager) Changes(agent string, diff bool) ([]Change, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, err := m.liveLocked(agent)
	if err != nil {
		return nil, err
	}
	base, done, err := m.lowerView(a)
	if err != nil {
		return nil, err
	}
	defer done()
	cs, err := changes(m.upperDir(a.Upper), base)
	if err != nil {
		return nil, fmt.Errorf("workspace changes of agent %s: %w", agent, err)
	}
	if diff {
		addDiffs(cs, m.upperDir(a.Upper), base)
	}
	return cs, nil
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

// lowerView returns a directory showing a's frozen view (what it saw at its
// fork): the base itself, or a read-only overlay of its layers.
func (m *Manager) lowerView(a *agentState) (string, func(), error) {
	if len(a.Layers) == 0 {
		return a.Base, func() {}, nil
	}
	fd, err := mountOverlay(m.lowers(a), "", "")
	if err != nil {
		return "", nil, unavailable("mount the frozen view: %v", err)
	}
	return viewPath(fd), func() { closeFD(fd) }, nil
}

// isWhiteout reports whether fi is overlayfs's mark of a deleted path: a
// character device 0/0.
func isWhiteout(fi fs.FileInfo) bool {
	if fi.Mode()&fs.ModeCharDevice == 0 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Rdev == 0
}

// isOpaque reports whether the upper directory dir hides everything below
// it (trusted.overlay.opaque "y": it was deleted and made again).
func isOpaque(dir string) bool {
	buf := make([]byte, 8)
	n, err := unix.Lgetxattr(dir, "trusted.overlay.opaque", buf)
	return err == nil && n > 0 && buf[0] == 'y'
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
func changes(upper, base string) ([]Change, error) {
	var cs []Change
	err := filepath.WalkDir(upper, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(upper, p)
		if rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		lower := filepath.Join(base, rel)
		lfi, lerr := os.Lstat(lower)
		existed := lerr == nil
		switch {
		case isWhiteout(fi):
			if existed {
				cs = append(cs, Change{Path: rel, Kind: Deleted, Type: typeOf(lfi), Size: treeSize(lower, lfi)})
			}
			return nil
		case fi.IsDir():
			switch {
			case !existed:
				cs = append(cs, Change{Path: rel, Kind: Added, Type: "dir"})
			case !lfi.IsDir():
				cs = append(cs, Change{Path: rel, Kind: Modified, Type: "dir"})
			case isOpaque(p):
				// Deleted and made again: what was below and is not in
				// the new directory is gone.
				ents, err := os.ReadDir(lower)
				if err != nil {
					return err
				}
				for _, e := range ents {
					if _, err := os.Lstat(filepath.Join(p, e.Name())); err == nil {
						continue
					}
					li, err := e.Info()
					if err != nil {
						return err
					}
					cs = append(cs, Change{Path: rel + "/" + e.Name(), Kind: Deleted, Type: typeOf(li), Size: treeSize(filepath.Join(lower, e.Name()), li)})
				}
			}
			return nil
		}
		if existed {
			same, err := sameEntry(p, fi, lower, lfi)
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

// treeSize is the bytes of the regular files at p (fi its Lstat).
func treeSize(p string, fi fs.FileInfo) int64 {
	if !fi.IsDir() {
		return fi.Size()
	}
	var n int64
	_ = filepath.WalkDir(p, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if i, err := d.Info(); err == nil {
				n += i.Size()
			}
		}
		return nil
	})
	return n
}

// sameEntry reports whether a and b (their Lstat results ai, bi) hold the
// same thing: type, permissions and contents (a link's target; for
// directories, recursively, the same entries).
func sameEntry(a string, ai fs.FileInfo, b string, bi fs.FileInfo) (bool, error) {
	if ai.Mode().Type() != bi.Mode().Type() || (!isWhiteout(ai) && ai.Mode().Perm() != bi.Mode().Perm()) {
		return false, nil
	}
	switch {
	case ai.Mode().IsRegular():
		if ai.Size() != bi.Size() {
			return false, nil
		}
		return sameContents(a, b)
	case ai.Mode()&fs.ModeSymlink != 0:
		la, err := os.Readlink(a)
		if err != nil {
			return false, err
		}
		lb, err := os.Readlink(b)
		return err == nil && la == lb, err
	case ai.IsDir():
		ea, err := os.ReadDir(a)
		if err != nil {
			return false, err
		}
		eb, err := os.ReadDir(b)
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
			x, err := ea[i].Info()
			if err != nil {
				return false, err
			}
			y, err := eb[i].Info()
			if err != nil {
				return false, err
			}
			same, err := sameEntry(filepath.Join(a, ea[i].Name()), x, filepath.Join(b, eb[i].Name()), y)
			if err != nil || !same {
				return false, err
			}
		}
		return true, nil
	}
	return true, nil
}

// samePath is sameEntry on two paths either of which may be missing.
func samePath(a, b string) (bool, error) {
	ai, aerr := os.Lstat(a)
	bi, berr := os.Lstat(b)
	switch {
	case errors.Is(aerr, fs.ErrNotExist) && errors.Is(berr, fs.ErrNotExist):
		return true, nil
	case errors.Is(aerr, fs.ErrNotExist) || errors.Is(berr, fs.ErrNotExist):
		return false, nil
	case aerr != nil:
		return false, aerr
	case berr != nil:
		return false, berr
	}
	return sameEntry(a, ai, b, bi)
}

func sameContents(a, b string) (bool, error) {
	fa, err := os.Open(a)
	if err != nil {
		return false, err
	}
	defer fa.Close()
	fb, err := os.Open(b)
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
func addDiffs(cs []Change, upper, base string) {
	budget := MaxDiffBytes
	for i := range cs {
		c := &cs[i]
		if c.Type != "file" {
			continue
		}
		var old, cur []byte
		var err error
		if c.Kind != Added {
			if old, err = readBounded(filepath.Join(base, c.Path)); err != nil {
				c.DiffOmitted = omitted(err)
				continue
			}
		}
		if c.Kind != Deleted {
			if cur, err = readBounded(filepath.Join(upper, c.Path)); err != nil {
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

func readBounded(p string) ([]byte, error) {
	f, err := os.Open(p)
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
