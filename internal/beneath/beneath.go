// Package beneath resolves names below a directory descriptor, never by a
// path string: each lookup is openat2(2) relative to a descriptor already
// open, so no symbolic link, one there from the start or one planted
// between a check and a use, leads a read or a write out of the directory.
// The workspaces (their layers and views) and the file routes build on it.
// Within is the project's one containment check of names by themselves
// (lexical), for decisions made before any descriptor is open.
//
// Floor 0 of the layout (docs/design.md#floors): it imports no other package of dshd.
package beneath

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// Resolve is how a name below a directory is resolved when no link may be
// followed at all: beneath it, no symbolic link, no /proc magic link.
const Resolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// Openat2 opens rel ("" is ".") relative to dirfd with flags (O_CLOEXEC
// added), mode and resolve, retrying the EAGAIN the kernel answers when a
// rename raced the lookup.
func Openat2(dirfd int, rel string, flags int, mode uint32, resolve uint64) (int, error) {
	if rel == "" {
		rel = "."
	}
	how := &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Mode: uint64(mode), Resolve: resolve}
	for range 64 {
		fd, err := unix.Openat2(dirfd, rel, how)
		if err != unix.EAGAIN && err != unix.EINTR {
			return fd, err
		}
	}
	return -1, unix.EAGAIN
}

// Names lists the directory dfd (which stays the caller's), sorted.
func Names(dfd int) ([]string, error) {
	// A second descriptor for the listing: os.File takes ownership of it.
	lfd, err := unix.Openat(dfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(lfd), ".")
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	return names, nil
}

// ReadlinkAt reads the link name in the directory dfd.
func ReadlinkAt(dfd int, name string) (string, error) {
	for n := 256; ; n *= 2 {
		buf := make([]byte, n)
		k, err := unix.Readlinkat(dfd, name, buf)
		if err != nil {
			return "", &fs.PathError{Op: "readlink", Path: name, Err: err}
		}
		if k < n {
			return string(buf[:k]), nil
		}
	}
}

// RemoveAllAt removes name in the directory dfd and everything below it,
// by descriptor; a link is removed, never followed. A missing name is no
// error.
func RemoveAllAt(dfd int, name string) error {
	err := unix.Unlinkat(dfd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return &fs.PathError{Op: "unlink", Path: name, Err: err}
	}
	sub, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: name, Err: err}
	}
	names, err := Names(sub)
	if err == nil {
		for _, n := range names {
			if err = RemoveAllAt(sub, n); err != nil {
				break
			}
		}
	}
	unix.Close(sub)
	if err != nil {
		return err
	}
	if err := unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return &fs.PathError{Op: "rmdir", Path: name, Err: err}
	}
	return nil
}

// FdPath is what the kernel says the descriptor fd is: the path of what
// it opened, however it was reached.
func FdPath(fd int) (string, error) {
	return os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
}

// FdName is the /proc path that reopens the descriptor fd's file.
func FdName(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }
