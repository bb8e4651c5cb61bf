package files

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dshd/dshd/internal/beneath"

	"github.com/dshd/dshd/internal/sandbox"
)

// place is where a write goes: the descriptor of the directory that holds
// it (or will) and the name in it.
type place struct {
	abs  string
	dir  int // the parent directory, O_RDONLY|O_DIRECTORY
	name string
	// protect: the agent's policy protects .git (workspace-write).
	protect bool
}

func (p *place) close() { unix.Close(p.dir) }

// writable checks that the agent may write abs, and returns its root: the
// directory a write is resolved beneath, as an open descriptor (the view's
// for a path in it), and abs relative to it.
func (s *Scope) writable(abs string) (rootFD int, relp string, err error) {
	if s.hidden(abs) {
		return -1, "", fmt.Errorf("write %s: %w", abs, ErrHidden)
	}
	var root string
	switch s.FS {
	case sandbox.Unrestricted:
		root = "/"
	case sandbox.WorkspaceWrite:
		for _, r := range append([]string{s.Cwd}, s.Roots...) {
			if r != "" && within(abs, r) && len(r) > len(root) {
				root = r
			}
		}
		if root == "" {
			return -1, "", fmt.Errorf("write %s: %w: outside the writable roots (%s)", abs, ErrNotWritable, strings.Join(append([]string{s.Cwd}, s.Roots...), ", "))
		}
		for _, part := range strings.Split(abs, "/") {
			if part == ".git" {
				return -1, "", fmt.Errorf("write %s: %w: a .git directory is read-only", abs, ErrProtected)
			}
		}
		for _, p := range s.Protected {
			if within(abs, path.Clean(p)) {
				return -1, "", fmt.Errorf("write %s: %w: %s is read-only", abs, ErrProtected, p)
			}
		}
	default:
		return -1, "", fmt.Errorf("write %s: %w: the agent's sandbox is read-only", abs, ErrNotWritable)
	}
	if s.hasView() && within(abs, s.ViewTarget) && within(s.ViewTarget, root) {
		root = s.ViewTarget
		fd, err := unix.Dup(s.ViewFD)
		if err != nil {
			return -1, "", err
		}
		unix.CloseOnExec(fd)
		return fd, rel(abs, root), nil
	}
	// The root is the harness's or the configuration's own path: opened
	// as it is; nothing below it is followed.
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, "", mapErr("write", root, err)
	}
	// A root reached through a link (a cwd given as a link's path) is
	// judged where it really is.
	if real, err := beneath.FdPath(fd); err == nil && real != root && s.hidden(path.Join(real, rel(abs, root))) {
		unix.Close(fd)
		return -1, "", fmt.Errorf("write %s: %w (it is %s)", abs, ErrHidden, path.Join(real, rel(abs, root)))
	}
	return fd, rel(abs, root), nil
}

// dirs opens the directory relp below the directory fd (which stays the
// caller's), no link followed, making the missing ones (mode 0755) when
// mkdir is set.
func dirs(fd int, relp string, mkdir bool) (int, error) {
	cur, err := unix.Dup(fd)
	if err != nil {
		return -1, err
	}
	unix.CloseOnExec(cur)
	for _, part := range strings.Split(relp, "/") {
		if part == "" || part == "." {
			continue
		}
		next, err := beneath.Openat2(cur, part, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, resolveBeneath)
		if errors.Is(err, unix.ENOENT) && mkdir {
			if err := unix.Mkdirat(cur, part, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				unix.Close(cur)
				return -1, err
			}
			next, err = beneath.Openat2(cur, part, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, resolveBeneath)
		}
		if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			// O_DIRECTORY|O_NOFOLLOW answers ENOTDIR for a link: tell a
			// link on the way from a file on the way.
			var st unix.Stat_t
			if unix.Fstatat(cur, part, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				err = unix.ELOOP
			}
		}
		unix.Close(cur)
		if err != nil {
			return -1, err
		}
		cur = next
	}
	return cur, nil
}

// placeFor checks abs (Abs) and opens the directory that holds it, making
// the missing ones when parents is set.
func (s *Scope) placeFor(p string, parents bool) (*place, error) {
	abs, err := s.Abs(p)
	if err != nil {
		return nil, err
	}
	root, relp, err := s.writable(abs)
	if err != nil {
		return nil, err
	}
	defer unix.Close(root)
	if relp == "." {
		return nil, fmt.Errorf("write %s: %w: a writable root itself", abs, ErrInvalidPath)
	}
	dir, err := dirs(root, path.Dir(relp), parents)
	if err != nil {
		return nil, mapErr("write", abs, err)
	}
	return &place{abs: abs, dir: dir, name: path.Base(relp), protect: s.FS == sandbox.WorkspaceWrite}, nil
}

// tempName is a fresh name for a file written beside its final name.
func tempName() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return ".dshd-tmp-" + hex.EncodeToString(b)
}

// Written is what Put wrote.
type Written struct {
	Path string
	Size int64
	Mode fs.FileMode
}

// Put writes r to p: to a new file beside it, then renamed over it (a
// reader sees the old file or the new, whole). mode 0 keeps the mode of
// the file it replaces, or 0644. parents makes the missing directories.
func (s *Scope) Put(p string, r io.Reader, mode fs.FileMode, parents bool) (Written, error) {
	pl, err := s.placeFor(p, parents)
	if err != nil {
		return Written{}, err
	}
	defer pl.close()
	var st unix.Stat_t
	switch err := unix.Fstatat(pl.dir, pl.name, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR:
		return Written{}, fmt.Errorf("write %s: %w", pl.abs, ErrIsDir)
	case err == nil && mode == 0 && st.Mode&unix.S_IFMT == unix.S_IFREG:
		mode = fs.FileMode(st.Mode & 0o7777)
	}
	if mode == 0 {
		mode = 0o644
	}
	n, err := writeFile(pl.dir, pl.name, r, mode)
	if err != nil {
		return Written{}, mapErr("write", pl.abs, err)
	}
	return Written{Path: pl.abs, Size: n, Mode: mode}, nil
}

// writeFile writes r to a new file in dir and renames it to name.
func writeFile(dir int, name string, r io.Reader, mode fs.FileMode) (int64, error) {
	tmp := tempName()
	fd, err := unix.Openat(dir, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return 0, err
	}
	f := os.NewFile(uintptr(fd), tmp)
	n, err := io.Copy(f, r)
	if err == nil {
		err = unix.Fchmod(fd, uint32(mode&0o7777))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dir, tmp, dir, name)
	}
	if err != nil {
		_ = unix.Unlinkat(dir, tmp, 0)
		return n, err
	}
	return n, nil
}

// Mkdir makes the directory p (mode 0755 when mode is 0); with parents,
// the missing ones on the way too and an existing directory is no error.
func (s *Scope) Mkdir(p string, mode fs.FileMode, parents bool) (string, error) {
	pl, err := s.placeFor(p, parents)
	if err != nil {
		return "", err
	}
	defer pl.close()
	if mode == 0 {
		mode = 0o755
	}
	err = unix.Mkdirat(pl.dir, pl.name, uint32(mode.Perm()))
	if errors.Is(err, unix.EEXIST) && parents {
		var st unix.Stat_t
		if unix.Fstatat(pl.dir, pl.name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return pl.abs, nil
		}
	}
	if err != nil {
		return "", mapErr("mkdir", pl.abs, err)
	}
	return pl.abs, nil
}

// Remove removes p: a file or a link (never what it points to), an empty
// directory, or with recursive a directory and all it holds (none of it a
// .git directory while the policy protects them).
func (s *Scope) Remove(p string, recursive bool) (string, error) {
	pl, err := s.placeFor(p, false)
	if err != nil {
		return "", err
	}
	defer pl.close()
	var st unix.Stat_t
	if err := unix.Fstatat(pl.dir, pl.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return "", mapErr("remove", pl.abs, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return pl.abs, mapErrOrNil("remove", pl.abs, unix.Unlinkat(pl.dir, pl.name, 0))
	}
	if recursive && s.holdsHidden(pl.abs) {
		return "", fmt.Errorf("remove %s: %w: it holds the dshd home, the token or a hidden path", pl.abs, ErrHidden)
	}
	if within(s.Cwd, pl.abs) {
		return "", fmt.Errorf("remove %s: %w: the agent's working directory, or a directory holding it", pl.abs, ErrInvalidPath)
	}
	if !recursive {
		return pl.abs, mapErrOrNil("remove", pl.abs, unix.Unlinkat(pl.dir, pl.name, unix.AT_REMOVEDIR))
	}
	if pl.protect {
		if g, err := findGit(pl.dir, pl.name, pl.name); err != nil {
			return "", mapErr("remove", pl.abs, err)
		} else if g != "" {
			return "", fmt.Errorf("remove %s: %w: it holds %s, read-only", pl.abs, ErrProtected, g)
		}
	}
	return pl.abs, mapErrOrNil("remove", pl.abs, beneath.RemoveAllAt(pl.dir, pl.name))
}

func mapErrOrNil(op, abs string, err error) error {
	if err == nil {
		return nil
	}
	return mapErr(op, abs, err)
}

// findGit returns the first entry named .git below the directory name in
// dfd ("" when none).
func findGit(dfd int, name, shown string) (string, error) {
	sub, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(sub)
	names, err := beneath.Names(sub)
	if err != nil {
		return "", err
	}
	for _, n := range names {
		if n == ".git" {
			return shown + "/.git", nil
		}
		var st unix.Stat_t
		if unix.Fstatat(sub, n, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			if g, err := findGit(sub, n, shown+"/"+n); err != nil || g != "" {
				return g, err
			}
		}
	}
	return "", nil
}
