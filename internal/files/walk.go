package files

import (
	"errors"
	"io/fs"
	"path"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dshd/dshd/internal/beneath"
)

// Entry is one entry of a directory listing.
type Entry struct {
	// Path is relative to the directory listed (slashes).
	Path string
	// Type is "file", "directory", "symlink" or "other".
	Type  string
	Size  int64
	Mode  fs.FileMode // permission bits, setuid, setgid and sticky
	MTime time.Time
	// Link is a symbolic link's target, as written in it (never followed).
	Link string
}

// Listing bounds.
const (
	DefaultDepth = 1
	MaxDepth     = 8
	// MaxEntries bounds a listing; past it the listing is truncated.
	MaxEntries = 10000
)

// List lists the directory t down to depth levels (1: its own entries),
// in name order, a directory before what it holds, at most max entries
// (truncated then). Links are listed, never followed; a hidden path is
// left out.
func (s *Scope) List(t *Target, depth, max int) (entries []Entry, truncated bool, err error) {
	if !t.IsDir() {
		return nil, false, ErrNotDir
	}
	errFull := errors.New("full")
	err = s.walk(t, depth, func(rel string, dfd int, st *unix.Stat_t) error {
		if len(entries) >= max {
			truncated = true
			return errFull
		}
		e := Entry{Path: rel, Type: typeOf(st.Mode), Size: st.Size, Mode: perm(st.Mode), MTime: time.Unix(st.Mtim.Unix())}
		if e.Type == "symlink" {
			e.Link, _ = beneath.ReadlinkAt(dfd, path.Base(rel))
		}
		entries = append(entries, e)
		return nil
	})
	if err == errFull {
		err = nil
	}
	return entries, truncated, err
}

// walk calls fn for each entry below t (not t itself) down to depth levels
// (0: no bound), with the descriptor of the directory holding it and its
// lstat. Directories are entered by descriptor (O_NOFOLLOW); a hidden path
// (outside the view) is left out.
func (s *Scope) walk(t *Target, depth int, fn func(rel string, dfd int, st *unix.Stat_t) error) error {
	real := ""
	if !t.view {
		r, err := beneath.FdPath(int(t.File.Fd()))
		if err != nil {
			return err
		}
		real = r
	}
	dfd, err := unix.Openat(int(t.File.Fd()), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	return s.walkAt(dfd, real, "", 1, depth, fn)
}

func (s *Scope) walkAt(dfd int, real, prefix string, level, depth int, fn func(rel string, dfd int, st *unix.Stat_t) error) error {
	names, err := beneath.Names(dfd)
	if err != nil {
		return err
	}
	for _, n := range names {
		rel := prefix + n
		if real != "" && s.hidden(path.Join(real, rel)) {
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(dfd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // removed since the listing
			}
			return &fs.PathError{Op: "lstat", Path: rel, Err: err}
		}
		if err := fn(rel, dfd, &st); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR || (depth > 0 && level >= depth) {
			continue
		}
		sub, err := unix.Openat(dfd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EACCES) {
				continue // gone, or swapped for a link, since the stat
			}
			return &fs.PathError{Op: "open", Path: rel, Err: err}
		}
		err = s.walkAt(sub, real, rel+"/", level+1, depth, fn)
		unix.Close(sub)
		if err != nil {
			return err
		}
	}
	return nil
}

func typeOf(m uint32) string {
	switch m & unix.S_IFMT {
	case unix.S_IFREG:
		return "file"
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFLNK:
		return "symlink"
	}
	return "other"
}

func perm(m uint32) fs.FileMode {
	p := fs.FileMode(m & 0o777)
	if m&unix.S_ISUID != 0 {
		p |= fs.ModeSetuid
	}
	if m&unix.S_ISGID != 0 {
		p |= fs.ModeSetgid
	}
	if m&unix.S_ISVTX != 0 {
		p |= fs.ModeSticky
	}
	return p
}
