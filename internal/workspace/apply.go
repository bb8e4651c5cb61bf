package workspace

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Applied is what Apply did.
type Applied struct {
	// Target is where the changes went: the parent's view (as its
	// commands see it, the workspace directory) or the directory named.
	Target string
	// Parent is the agent whose view received them ("" for a directory).
	Parent string
	// Changes are the changes applied (none was skipped).
	Changes []Change
}

// Apply writes agent's changes onto its parent's view (dir "") or onto the
// directory dir, all or nothing. A path the target changed since the fork
// (it no longer holds what agent saw at the fork, nor what agent made of
// it) is a conflict: Apply then returns a *ConflictError listing every
// such path and changes nothing. Otherwise every file is first written
// beside its place under a temporary name, then renamed into place, then
// deletions are made: a failure while writing removes what was written and
// leaves the target as it was.
//
// dir may not be a directory another live workspace stands on (ErrBusy):
// overlayfs does not define what a view shows when its lower layer changes
// under it. The agent's own base directory is allowed when it runs no job;
// its view shows the same before and after.
func (m *Manager) Apply(agent, dir string) (Applied, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, err := m.liveLocked(agent)
	if err != nil {
		return Applied{}, err
	}
	res := Applied{Target: dir}
	var target string
	if dir == "" {
		if a.Parent == "" {
			return Applied{}, fmt.Errorf("%w: agent %s has no parent to apply to; name a directory", ErrInvalid, agent)
		}
		p, err := m.liveLocked(a.Parent)
		if err != nil {
			return Applied{}, err
		}
		fd, err := m.mountLocked(a.Parent, p)
		if err != nil {
			return Applied{}, err
		}
		target, res.Target, res.Parent = viewPath(fd), p.Base, a.Parent
	} else {
		if !filepath.IsAbs(dir) {
			return Applied{}, fmt.Errorf("%w: directory %q is not absolute", ErrInvalid, dir)
		}
		dir = filepath.Clean(dir)
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return Applied{}, fmt.Errorf("%w: %s is not a directory", ErrInvalid, dir)
		}
		if within(dir, m.dir) || within(m.dir, dir) {
			return Applied{}, fmt.Errorf("%w: %s overlaps the dshd home", ErrInvalid, dir)
		}
		for id, o := range m.agents {
			if o.Dropped || o.Shares != "" || !(within(dir, o.Base) || within(o.Base, dir)) {
				continue
			}
			if id != agent {
				return Applied{}, fmt.Errorf("%w: %s is under agent %s's workspace, which stands on %s", ErrBusy, dir, id, o.Base)
			}
			if n := m.active[agent]; n > 0 {
				return Applied{}, fmt.Errorf("%w: agent %s runs %d job(s) on %s", ErrBusy, agent, n, o.Base)
			}
		}
		target = dir
		// The lower layer changes: the view is mounted afresh next time.
		defer m.closeMountLocked(agent)
	}
	base, done, err := m.lowerView(a)
	if err != nil {
		return Applied{}, err
	}
	defer done()
	upper := m.upperDir(a.Upper)
	cs, err := changes(upper, base)
	if err != nil {
		return Applied{}, fmt.Errorf("workspace changes of agent %s: %w", agent, err)
	}
	res.Changes = cs
	var conflicts []string
	for _, c := range cs {
		t := filepath.Join(target, c.Path)
		if c.Kind != Deleted {
			if same, err := samePath(filepath.Join(upper, c.Path), t); err == nil && same && c.Type != "dir" {
				continue // the target made the same change
			}
		}
		same, err := samePath(filepath.Join(base, c.Path), t)
		if err != nil {
			return Applied{}, fmt.Errorf("compare %s: %w", c.Path, err)
		}
		if c.Type == "dir" && c.Kind == Added {
			// An added directory conflicts only with something else there.
			fi, err := os.Lstat(t)
			same = err != nil || fi.IsDir()
		}
		if !same {
			conflicts = append(conflicts, c.Path)
			continue
		}
		// Every directory above it must still be one (or be missing, to be
		// made): never a file, never a link that would lead the write or
		// the deletion out of the target.
		if !realDirs(target, c.Path) {
			conflicts = append(conflicts, c.Path)
		}
	}
	if len(conflicts) > 0 {
		return Applied{}, &ConflictError{Paths: slices.Compact(conflicts)}
	}
	if err := write(upper, target, cs); err != nil {
		return Applied{}, fmt.Errorf("apply agent %s's changes to %s: %w", agent, res.Target, err)
	}
	return res, nil
}

// realDirs reports whether every existing directory above rel in target
// is a directory (Lstat: a link is not) and, below the first missing one,
// nothing exists.
func realDirs(target, rel string) bool {
	p := target
	parts := strings.Split(filepath.ToSlash(filepath.Dir(rel)), "/")
	for _, part := range parts {
		if part == "." || part == "" {
			continue
		}
		p = filepath.Join(p, part)
		fi, err := os.Lstat(p)
		if err != nil {
			return errors.Is(err, fs.ErrNotExist)
		}
		if !fi.IsDir() {
			return false
		}
	}
	return true
}

// write applies cs (from upper) onto target: stage, rename, delete.
func write(upper, target string, cs []Change) (err error) {
	type staged struct{ tmp, dst string }
	var made []string // directories made, in order
	var stage []staged
	defer func() {
		if err == nil {
			return
		}
		for _, s := range stage {
			os.Remove(s.tmp)
		}
		for i := len(made) - 1; i >= 0; i-- {
			os.Remove(made[i])
		}
	}()
	mkdirs := func(d string, perm fs.FileMode) error {
		var todo []string
		for p := d; p != target && within(p, target); p = filepath.Dir(p) {
			if _, err := os.Lstat(p); err == nil {
				break
			}
			todo = append(todo, p)
		}
		for i := len(todo) - 1; i >= 0; i-- {
			if err := os.Mkdir(todo[i], perm); err != nil {
				return err
			}
			made = append(made, todo[i])
		}
		return nil
	}
	n := 0
	for _, c := range cs {
		if c.Kind == Deleted {
			continue
		}
		src, dst := filepath.Join(upper, c.Path), filepath.Join(target, c.Path)
		fi, err := os.Lstat(src)
		if err != nil {
			return err
		}
		if fi.IsDir() {
			dfi, err := os.Lstat(dst)
			switch {
			case err == nil && dfi.IsDir():
				continue
			case err != nil:
				if err := mkdirs(dst, fi.Mode().Perm()); err != nil {
					return err
				}
				continue
			}
			// A file there becomes a directory: staged, swapped below.
			n++
			tmp := filepath.Join(filepath.Dir(dst), fmt.Sprintf(".dshd-apply-%d-%d", os.Getpid(), n))
			if err := os.Mkdir(tmp, fi.Mode().Perm()); err != nil {
				return err
			}
			stage = append(stage, staged{tmp, dst})
			continue
		}
		if err := mkdirs(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		n++
		tmp := filepath.Join(filepath.Dir(dst), fmt.Sprintf(".dshd-apply-%d-%d", os.Getpid(), n))
		if err := copyEntry(src, tmp, fi); err != nil {
			os.Remove(tmp)
			return err
		}
		stage = append(stage, staged{tmp, dst})
	}
	// Into place: what stands in the way of a new type goes first.
	for i, s := range stage {
		if fi, err := os.Lstat(s.dst); err == nil && fi.IsDir() {
			if err := os.RemoveAll(s.dst); err != nil {
				stage = stage[i:]
				return err
			}
		}
		if err := os.Rename(s.tmp, s.dst); err != nil {
			stage = stage[i:]
			return err
		}
	}
	stage, made = nil, nil
	var errs []error
	for i := len(cs) - 1; i >= 0; i-- {
		if cs[i].Kind == Deleted {
			if err := os.RemoveAll(filepath.Join(target, cs[i].Path)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// copyEntry copies the file or link src (fi its Lstat) to dst, with its
// permissions and modification time.
func copyEntry(src, dst string, fi fs.FileInfo) error {
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		l, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(l, dst)
	case fi.Mode().IsRegular():
		in, err := os.Open(src)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fi.Mode().Perm())
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		if err := out.Chmod(fi.Mode().Perm()); err != nil {
			out.Close()
			return err
		}
		if err := out.Close(); err != nil {
			return err
		}
		return os.Chtimes(dst, time.Time{}, fi.ModTime())
	}
	return fmt.Errorf("%s: cannot apply a %s", strings.TrimPrefix(src, "/"), typeOf(fi))
}
