package files

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dshd/dshd/internal/beneath"
)

// CheckWritable reports whether the agent may write p (Abs): the error a
// write of p would meet for its place (ErrHidden, ErrNotWritable,
// ErrProtected, ErrInvalidPath, ErrThroughLink for a link on the way, or
// ErrNotDir for a file there), nil when there is none. Directories that
// do not exist yet are no error (a write makes them). A caller checks every
// path of a change first, so that a refused one stops it before anything
// was written; the write itself decides again, by descriptor.
func (s *Scope) CheckWritable(p string) error {
	abs, err := s.Abs(p)
	if err != nil {
		return err
	}
	root, relp, err := s.writable(abs)
	if err != nil {
		return err
	}
	defer unix.Close(root)
	if relp == "." {
		return fmt.Errorf("write %s: %w: a writable root itself", abs, ErrInvalidPath)
	}
	cur, err := unix.Dup(root)
	if err != nil {
		return err
	}
	defer func() { unix.Close(cur) }()
	for _, part := range strings.Split(path.Dir(relp), "/") {
		if part == "" || part == "." {
			continue
		}
		next, err := beneath.Openat2(cur, part, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, resolveBeneath)
		if errors.Is(err, unix.ENOENT) {
			return nil // made by the write
		}
		if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			var st unix.Stat_t
			if unix.Fstatat(cur, part, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				err = unix.ELOOP
			}
		}
		if err != nil {
			return mapErr("write", abs, err)
		}
		unix.Close(cur)
		cur = next
	}
	return nil
}
