package files

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Moved is what Move did: From was renamed to Path.
type Moved struct {
	From, Path string
}

// Move renames from to to (each Abs), both under the write rules: only
// below a writable root, never into or out of a .git directory or a
// protected path while the policy protects them, never the home, the token
// or a hidden path nor a directory holding one, no link on either way
// followed (the last names are renamed, never followed: a link moves as
// the link it is). It is one renameat2 between the two directories'
// descriptors, with RENAME_NOREPLACE unless overwrite: an existing target
// is ErrExists. With overwrite, a file replaces a file and a directory an
// empty directory. parents makes the target's missing directories.
//
// A directory holding a .git is not moved while the policy protects them
// (ErrProtected); a directory moved into itself is ErrInvalidPath; two
// file systems (or a directory of a snapshot's lower layer, which
// overlayfs does not rename) are ErrCrossDevice.
func (s *Scope) Move(from, to string, overwrite, parents bool) (Moved, error) {
	src, err := s.placeFor(from, false)
	if err != nil {
		return Moved{}, err
	}
	defer src.close()
	if s.holdsHidden(src.abs) {
		return Moved{}, fmt.Errorf("move %s: %w: it holds the dshd home, the token or a hidden path", src.abs, ErrHidden)
	}
	if within(s.Cwd, src.abs) {
		return Moved{}, fmt.Errorf("move %s: %w: the agent's working directory, or a directory holding it", src.abs, ErrInvalidPath)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(src.dir, src.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return Moved{}, mapErr("move", src.abs, err)
	}
	if src.protect && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		if g, err := findGit(src.dir, src.name, src.name); err != nil {
			return Moved{}, mapErr("move", src.abs, err)
		} else if g != "" {
			return Moved{}, fmt.Errorf("move %s: %w: it holds %s, read-only", src.abs, ErrProtected, g)
		}
	}
	dst, err := s.placeFor(to, parents)
	if err != nil {
		return Moved{}, err
	}
	defer dst.close()
	var flags uint = unix.RENAME_NOREPLACE
	if overwrite {
		flags = 0
	}
	err = unix.Renameat2(src.dir, src.name, dst.dir, dst.name, flags)
	switch {
	case err == nil:
		return Moved{From: src.abs, Path: dst.abs}, nil
	case errors.Is(err, unix.EXDEV):
		return Moved{}, fmt.Errorf("move %s to %s: %w", src.abs, dst.abs, ErrCrossDevice)
	case errors.Is(err, unix.EINVAL):
		return Moved{}, fmt.Errorf("move %s to %s: %w: a directory cannot move into itself", src.abs, dst.abs, ErrInvalidPath)
	case errors.Is(err, unix.EEXIST), errors.Is(err, unix.ENOTEMPTY):
		if overwrite {
			return Moved{}, fmt.Errorf("move %s to %s: %w", src.abs, dst.abs, ErrNotEmpty)
		}
		return Moved{}, fmt.Errorf("move %s to %s: %w (overwrite=true replaces it)", src.abs, dst.abs, ErrExists)
	}
	return Moved{}, mapErr("move", dst.abs, err)
}

// holdsHidden reports whether the directory abs holds the home, the token
// or a hidden path (a recursive removal or a move of it would take them).
func (s *Scope) holdsHidden(abs string) bool {
	if s.Home != "" && within(s.Home, abs) || s.Token != "" && within(s.Token, abs) {
		return true
	}
	for _, h := range s.Hidden {
		if within(h, abs) {
			return true
		}
	}
	return false
}
