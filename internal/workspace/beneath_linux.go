package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dshd/dshd/internal/beneath"
)

// A tree is a directory that dshd reads or writes by descriptor, never by
// path: every name below it is resolved by openat2 with RESOLVE_BENEATH
// and RESOLVE_NO_SYMLINKS (each step relative to a descriptor already
// open), so no symbolic link, one there from the start or one a running
// command plants between a check and a write, ever leads a read, a write,
// a rename or a removal out of it. A link below the root is an entry like
// any other: it is listed, compared, copied and removed as a link.
type tree struct {
	fd   int    // O_RDONLY|O_DIRECTORY
	name string // for messages: what the tree is
}

// openTree opens the directory dir (a path dshd chose itself, or one the
// caller has checked) as a tree. The last component is not followed if it
// is a link.
func openTree(dir, name string) (*tree, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	return &tree{fd: fd, name: name}, nil
}

// treeAt opens the root of the mount (or directory) descriptor fd as a
// tree; fd stays the caller's.
func treeAt(fd int, name string) (*tree, error) {
	nfd, err := openat2(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	return &tree{fd: nfd, name: name}, nil
}

func (t *tree) close() {
	if t != nil && t.fd >= 0 {
		unix.Close(t.fd)
		t.fd = -1
	}
}

// openat2 opens rel beneath dirfd without following any link, retrying
// the EAGAIN the kernel answers when a rename raced the lookup.
func openat2(dirfd int, rel string, flags int, mode uint32) (int, error) {
	return beneath.Openat2(dirfd, rel, flags, mode, beneath.Resolve)
}

// open opens rel for reading (a regular file or a directory); a link is
// refused (ELOOP).
func (t *tree) open(rel string) (*os.File, error) {
	fd, err := openat2(t.fd, rel, unix.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: t.name + "/" + rel, Err: err}
	}
	return os.NewFile(uintptr(fd), t.name+"/"+rel), nil
}

// openDir opens the directory rel ("" or "." for the root).
func (t *tree) openDir(rel string) (int, error) {
	fd, err := openat2(t.fd, rel, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: t.name + "/" + rel, Err: err}
	}
	return fd, nil
}

// lstat is Lstat of rel: a link is described, not followed.
func (t *tree) lstat(rel string) (fs.FileInfo, error) {
	if rel == "" || rel == "." {
		return fstatInfo(t.fd, ".")
	}
	dir, base := path.Split(rel)
	dfd, err := t.openDir(dir)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	return statAt(dfd, base)
}

// readlink reads the link rel.
func (t *tree) readlink(rel string) (string, error) {
	dir, base := path.Split(rel)
	dfd, err := t.openDir(dir)
	if err != nil {
		return "", err
	}
	defer unix.Close(dfd)
	return readlinkAt(dfd, base)
}

// readDir lists the directory rel, sorted by name.
func (t *tree) readDir(rel string) ([]fs.FileInfo, error) {
	dfd, err := t.openDir(rel)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	return readDirAt(dfd)
}

// opaque reports whether the upper directory rel hides everything below it
// (trusted.overlay.opaque "y": it was deleted and made again).
func (t *tree) opaque(rel string) bool {
	dfd, err := t.openDir(rel)
	if err != nil {
		return false
	}
	defer unix.Close(dfd)
	buf := make([]byte, 8)
	n, err := unix.Fgetxattr(dfd, "trusted.overlay.opaque", buf)
	return err == nil && n > 0 && buf[0] == 'y'
}

// walk calls fn for every entry below the root (not the root itself), a
// directory before what it holds, in name order, with its path relative
// to the root (slashes) and its Lstat. fn returning fs.SkipDir for a
// directory skips what it holds. Directories are entered by descriptor
// (O_NOFOLLOW), so a directory swapped for a link during the walk is not
// entered.
func (t *tree) walk(fn func(rel string, fi fs.FileInfo) error) error {
	dfd, err := t.openDir(".")
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	return walkAt(dfd, "", fn)
}

func walkAt(dfd int, prefix string, fn func(rel string, fi fs.FileInfo) error) error {
	ents, err := readDirAt(dfd)
	if err != nil {
		return err
	}
	for _, fi := range ents {
		rel := prefix + fi.Name()
		err := fn(rel, fi)
		if err == fs.SkipDir {
			continue
		}
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			continue
		}
		sub, err := unix.Openat(dfd, fi.Name(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return &fs.PathError{Op: "open", Path: rel, Err: err}
		}
		err = walkAt(sub, rel+"/", fn)
		unix.Close(sub)
		if err != nil {
			return err
		}
	}
	return nil
}

func readDirAt(dfd int) ([]fs.FileInfo, error) {
	names, err := beneath.Names(dfd)
	if err != nil {
		return nil, err
	}
	out := make([]fs.FileInfo, 0, len(names))
	for _, n := range names {
		fi, err := statAt(dfd, n)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since the listing
		}
		if err != nil {
			return nil, err
		}
		out = append(out, fi)
	}
	return out, nil
}

func statAt(dfd int, name string) (fs.FileInfo, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, &fs.PathError{Op: "lstat", Path: name, Err: err}
	}
	return &statInfo{name: name, st: st}, nil
}

func fstatInfo(fd int, name string) (fs.FileInfo, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &fs.PathError{Op: "fstat", Path: name, Err: err}
	}
	return &statInfo{name: name, st: st}, nil
}

func readlinkAt(dfd int, name string) (string, error) { return beneath.ReadlinkAt(dfd, name) }

// statInfo is an fs.FileInfo from a stat done relative to a descriptor.
type statInfo struct {
	name string
	st   unix.Stat_t
}

func (s *statInfo) Name() string       { return s.name }
func (s *statInfo) Size() int64        { return s.st.Size }
func (s *statInfo) ModTime() time.Time { return time.Unix(s.st.Mtim.Unix()) }
func (s *statInfo) IsDir() bool        { return s.Mode().IsDir() }
func (s *statInfo) Sys() any           { return &s.st }

func (s *statInfo) Mode() fs.FileMode {
	m := fs.FileMode(s.st.Mode & 0o777)
	switch s.st.Mode & unix.S_IFMT {
	case unix.S_IFBLK:
		m |= fs.ModeDevice
	case unix.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFDIR:
		m |= fs.ModeDir
	case unix.S_IFIFO:
		m |= fs.ModeNamedPipe
	case unix.S_IFLNK:
		m |= fs.ModeSymlink
	case unix.S_IFSOCK:
		m |= fs.ModeSocket
	}
	if s.st.Mode&unix.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if s.st.Mode&unix.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if s.st.Mode&unix.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// rdev is the device number of a character or block device's FileInfo
// (-1 when it has none to tell).
func rdev(fi fs.FileInfo) int64 {
	switch st := fi.Sys().(type) {
	case *unix.Stat_t:
		return int64(st.Rdev)
	case *syscall.Stat_t:
		return int64(st.Rdev)
	}
	return -1
}

// errNotDir: a directory on the way to a path is not one (a file, a link).
var errNotDir = errors.New("not a directory (or a link) on the way")

// dirs opens the directory rel (slashes), making the missing ones with
// perm; made are those it made, outermost first, relative to the root.
// Nothing on the way is a link: a link, or a file, is errNotDir.
func (t *tree) dirs(rel string, perm fs.FileMode) (fd int, made []string, err error) {
	cur, err := unix.Dup(t.fd)
	if err != nil {
		return -1, nil, err
	}
	unix.CloseOnExec(cur)
	done := ""
	for _, part := range strings.Split(rel, "/") {
		if part == "" || part == "." {
			continue
		}
		next, err := openat2(cur, part, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
		if errors.Is(err, unix.ENOENT) {
			if err := unix.Mkdirat(cur, part, uint32(perm.Perm())); err != nil && !errors.Is(err, unix.EEXIST) {
				unix.Close(cur)
				return -1, made, &fs.PathError{Op: "mkdir", Path: done + part, Err: err}
			} else if err == nil {
				made = append(made, done+part)
			}
			next, err = openat2(cur, part, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
		}
		unix.Close(cur)
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EXDEV) {
			return -1, made, fmt.Errorf("%s: %w", done+part, errNotDir)
		}
		if err != nil {
			return -1, made, &fs.PathError{Op: "open", Path: done + part, Err: err}
		}
		cur = next
		done += part + "/"
	}
	return cur, made, nil
}

// realDirs reports whether every directory on the way to rel (not rel
// itself) is a directory below the root, no link, or is missing (to be
// made).
func (t *tree) realDirs(rel string) bool {
	dir := path.Dir(rel)
	if dir == "." {
		return true
	}
	fd, err := openat2(t.fd, dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err == nil {
		unix.Close(fd)
		return true
	}
	if !errors.Is(err, unix.ENOENT) {
		return false
	}
	// Missing somewhere: what exists must be directories.
	for p := path.Dir(dir); p != "."; p = path.Dir(p) {
		fi, err := t.lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		return err == nil && fi.IsDir()
	}
	return true
}

// removeAllAt removes name in the directory dfd and everything below it,
// by descriptor; a link is removed, never followed. A missing name is no
// error.
func removeAllAt(dfd int, name string) error { return beneath.RemoveAllAt(dfd, name) }

// fdPath is what the kernel says the descriptor fd is: the path of the
// directory it opened, however it was reached.
func fdPath(fd int) (string, error) { return beneath.FdPath(fd) }
