// Package homefs prepares the dshd home so that nothing dshd writes there
// can be redirected elsewhere: the directories and files it owns are never
// symbolic links, belong to the server's user and are private to it.
//
// The home itself may be a symbolic link (a user may keep it on another
// disk), but what dshd creates inside it may not: a link placed there
// (sessions -> /etc, jobs -> somewhere) would make dshd write, chmod or
// delete files outside the home.
//
// Floor 0 of the layout (docs/design.md#floors): it imports no other package of dshd.
package homefs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// DirMode and FileMode are the modes of what dshd keeps in the home.
const (
	DirMode  fs.FileMode = 0o700
	FileMode fs.FileMode = 0o600
)

// ErrUnsafe is wrapped by every refusal of Prepare: a symbolic link, a file
// of the wrong type or an entry owned by another user where dshd writes.
var ErrUnsafe = errors.New("unsafe home")

// Layout names what dshd owns in the home, relative to it.
type Layout struct {
	// Dirs are created (DirMode) when missing and tightened to DirMode.
	Dirs []string
	// Files are checked when present: regular, not linked, owned by the
	// server's user; tightened to FileMode.
	Files []string
}

// Prepare creates home (DirMode) when missing and checks it and every entry
// of l. It refuses, with an error wrapping ErrUnsafe that names the path,
// a home or entry owned by another user, an entry that is a symbolic link,
// a directory entry that is not a directory and a file entry that is not a
// regular file. It tightens modes that are wider than DirMode or FileMode.
// Nothing is followed: checks use lstat, and modes are changed through a
// descriptor opened with O_NOFOLLOW.
func Prepare(home string, l Layout) error {
	if err := os.MkdirAll(home, DirMode); err != nil {
		return fmt.Errorf("create home: %w", err)
	}
	// The home itself: a link to a directory is allowed (resolved here once).
	fi, err := os.Stat(home)
	if err != nil {
		return fmt.Errorf("home %s: %w", home, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: home %s is not a directory", ErrUnsafe, home)
	}
	if err := checkOwner(home, fi); err != nil {
		return err
	}
	real, err := filepath.EvalSymlinks(home)
	if err != nil {
		return fmt.Errorf("home %s: %w", home, err)
	}
	if err := tighten(real, DirMode, true); err != nil {
		return err
	}
	for _, d := range l.Dirs {
		p := filepath.Join(home, d)
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			if err := os.Mkdir(p, DirMode); err != nil {
				return fmt.Errorf("create %s: %w", p, err)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("home directory %s: %w", p, err)
		}
		if err := checkEntry(p, fi, true); err != nil {
			return err
		}
		if err := tighten(p, DirMode, true); err != nil {
			return err
		}
	}
	for _, f := range l.Files {
		p := filepath.Join(home, f)
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("home file %s: %w", p, err)
		}
		if err := checkEntry(p, fi, false); err != nil {
			return err
		}
		if err := tighten(p, FileMode, false); err != nil {
			return err
		}
	}
	return nil
}

func checkEntry(p string, fi fs.FileInfo, dir bool) error {
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, _ := os.Readlink(p)
		return fmt.Errorf("%w: %s is a symbolic link (to %q); dshd never follows links in its home: replace it with a real %s", ErrUnsafe, p, target, kind(dir))
	case dir && !fi.IsDir(), !dir && !fi.Mode().IsRegular():
		return fmt.Errorf("%w: %s is not a %s", ErrUnsafe, p, kind(dir))
	}
	return checkOwner(p, fi)
}

func kind(dir bool) string {
	if dir {
		return "directory"
	}
	return "regular file"
}

func checkOwner(p string, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil // not a Unix file system: ownership cannot be checked
	}
	if uid := os.Geteuid(); int(st.Uid) != uid {
		return fmt.Errorf("%w: %s is owned by uid %d, not by the server's user (uid %d)", ErrUnsafe, p, st.Uid, uid)
	}
	return nil
}

// tighten removes every permission bit outside mode, through a descriptor
// that cannot have followed a link swapped in since the check.
func tighten(p string, mode fs.FileMode, dir bool) error {
	flags := os.O_RDONLY | syscall.O_NOFOLLOW | syscall.O_CLOEXEC | syscall.O_NONBLOCK
	if dir {
		flags |= syscall.O_DIRECTORY
	}
	f, err := os.OpenFile(p, flags, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return fmt.Errorf("%w: %s is a symbolic link", ErrUnsafe, p)
		}
		return fmt.Errorf("secure %s: %w", p, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("secure %s: %w", p, err)
	}
	if err := checkOwner(p, fi); err != nil {
		return err
	}
	if fi.Mode().Perm()&^mode == 0 {
		return nil
	}
	if err := f.Chmod(fi.Mode().Perm() & mode); err != nil {
		return fmt.Errorf("secure %s: %w", p, err)
	}
	return nil
}
