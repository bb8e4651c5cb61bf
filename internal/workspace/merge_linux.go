package workspace

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dshd/dshd/internal/beneath"
)

// opaqueXattr marks an upper directory that hides what the layers below
// hold at its path (the view is mounted without userxattr, so overlayfs
// reads its trusted.overlay.* names).
const opaqueXattr = "trusted.overlay.opaque"

// errClosing: the Manager closed while a merge ran.
var errClosing = errors.New("workspaces closing")

// newFrozenLayer makes the empty layer id with no work directory (a
// merged layer is only ever a lower one).
func (m *Manager) newFrozenLayer(id string) error {
	if err := os.MkdirAll(m.upperDir(id), 0o755); err != nil {
		os.RemoveAll(m.layerDir(id))
		return fmt.Errorf("workspaces: new layer: %w", err)
	}
	return nil
}

func removeWorkDir(d string) { os.RemoveAll(d) }

// mergeLayers fills the empty layer id with layers (lowest first) applied
// one on another as overlayfs stacks them, so that under the same lower
// layers it shows exactly what they show:
//
//   - a whiteout (a character device 0/0) removes what the layers below
//     it in the run put at its path, and stays (the stack below may hold
//     the path too);
//   - an opaque directory replaces what the run held at its path, and
//     stays opaque; a directory over a whiteout or a non-directory becomes
//     opaque (overlayfs stops its lookup there); a directory over a
//     directory is merged into it, taking the upper one's mode, owner,
//     extended attributes and times;
//   - anything else (a file, a link, a device, a fifo) replaces what was
//     there: hard-linked from its layer (frozen layers never change, and
//     they all live on one file system), so its inode, contents, mode,
//     owner, extended attributes and its hard links to other names of the
//     same layer are kept; copied when the file system refuses another
//     link.
//
// Every name is resolved by descriptor, no link followed: a link in a
// layer is merged as the link it is.
func (m *Manager) mergeLayers(id string, layers []string) error {
	dst, err := openTree(m.upperDir(id), "merged layer "+id)
	if err != nil {
		return err
	}
	defer dst.close()
	for _, l := range layers {
		src, err := openTree(m.upperDir(l), "layer "+l)
		if err != nil {
			return err
		}
		err = m.mergeDir(dst.fd, src.fd)
		if err == nil {
			var st unix.Stat_t
			// The root: its mode and owner (overlayfs keeps its own
			// marks on a layer's root).
			if err = unix.Fstat(src.fd, &st); err == nil {
				err = errors.Join(unix.Fchown(dst.fd, int(st.Uid), int(st.Gid)), unix.Fchmod(dst.fd, st.Mode&0o7777))
			}
		}
		src.close()
		if err != nil {
			return fmt.Errorf("layer %s: %w", l, err)
		}
		m.point("workspace.compact.merging") // one layer merged
	}
	return nil
}

// mergeDir merges the directory sfd of a layer into dfd of the merged one.
func (m *Manager) mergeDir(dfd, sfd int) error {
	names, err := beneath.Names(sfd)
	if err != nil {
		return err
	}
	for _, name := range names {
		if m.closing.Load() {
			return errClosing
		}
		var ss, ds unix.Stat_t
		if err := unix.Fstatat(sfd, name, &ss, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return &os.PathError{Op: "lstat", Path: name, Err: err}
		}
		derr := unix.Fstatat(dfd, name, &ds, unix.AT_SYMLINK_NOFOLLOW)
		if derr != nil && !errors.Is(derr, unix.ENOENT) {
			return &os.PathError{Op: "lstat", Path: name, Err: derr}
		}
		exists := derr == nil
		if ss.Mode&unix.S_IFMT != unix.S_IFDIR {
			if exists {
				if err := beneath.RemoveAllAt(dfd, name); err != nil {
					return err
				}
			}
			if err := placeEntry(dfd, sfd, name, &ss); err != nil {
				return err
			}
			continue
		}
		if err := m.mergeSubdir(dfd, sfd, name, &ss, exists, exists && ds.Mode&unix.S_IFMT == unix.S_IFDIR); err != nil {
			return err
		}
	}
	return nil
}

// mergeSubdir merges the directory name of sfd (ss its stat) into dfd,
// where something exists (or not), a directory (or not).
func (m *Manager) mergeSubdir(dfd, sfd int, name string, ss *unix.Stat_t, exists, isDir bool) error {
	sub, err := openat2(sfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: name, Err: err}
	}
	defer unix.Close(sub)
	opaque := isOpaque(sub)
	if exists && (!isDir || opaque) {
		if err := beneath.RemoveAllAt(dfd, name); err != nil {
			return err
		}
		// Over a whiteout or a non-directory overlayfs stops looking
		// down, as below an opaque directory.
		opaque = true
	}
	if !exists || !isDir || opaque {
		if err := unix.Mkdirat(dfd, name, 0o700); err != nil {
			return &os.PathError{Op: "mkdir", Path: name, Err: err}
		}
	}
	dsub, err := openat2(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: name, Err: err}
	}
	err = m.mergeDir(dsub, sub)
	if err == nil {
		err = dirMeta(dsub, sub, ss, opaque)
	}
	unix.Close(dsub)
	if err != nil {
		return fmt.Errorf("%s/%w", name, err)
	}
	// Times last: the entries made in it changed them.
	return setTimes(dfd, name, ss)
}

// isOpaque reports whether the directory fd hides what is below it.
func isOpaque(fd int) bool {
	buf := make([]byte, 8)
	n, err := unix.Fgetxattr(fd, opaqueXattr, buf)
	return err == nil && n > 0 && buf[0] == 'y'
}

// dirMeta gives the merged directory dfd the mode, owner and extended
// attributes of the layer's directory sfd (ss its stat), keeping its own
// opaque mark, and setting one when opaque.
func dirMeta(dfd, sfd int, ss *unix.Stat_t, opaque bool) error {
	if err := unix.Fchown(dfd, int(ss.Uid), int(ss.Gid)); err != nil {
		return &os.PathError{Op: "chown", Path: ".", Err: err}
	}
	if err := unix.Fchmod(dfd, ss.Mode&0o7777); err != nil {
		return &os.PathError{Op: "chmod", Path: ".", Err: err}
	}
	if err := copyXattrs(dfd, sfd); err != nil {
		return err
	}
	if opaque {
		if err := unix.Fsetxattr(dfd, opaqueXattr, []byte("y"), 0); err != nil {
			return &os.PathError{Op: "setxattr", Path: ".", Err: err}
		}
	}
	return nil
}

// copyXattrs makes dfd's extended attributes sfd's (an opaque mark on
// dfd is left to the caller).
func copyXattrs(dfd, sfd int) error {
	have, err := xattrNames(dfd)
	if err != nil {
		return err
	}
	want, err := xattrNames(sfd)
	if err != nil {
		return err
	}
	for _, n := range have {
		if n != opaqueXattr && !slices.Contains(want, n) {
			if err := unix.Fremovexattr(dfd, n); err != nil && !errors.Is(err, unix.ENODATA) {
				return &os.PathError{Op: "removexattr " + n, Path: ".", Err: err}
			}
		}
	}
	for _, n := range want {
		if n == opaqueXattr {
			continue
		}
		v, err := xattr(sfd, n)
		if err != nil {
			return err
		}
		if err := unix.Fsetxattr(dfd, n, v, 0); err != nil {
			return &os.PathError{Op: "setxattr " + n, Path: ".", Err: err}
		}
	}
	return nil
}

func xattrNames(fd int) ([]string, error) {
	for n := 1024; ; n *= 4 {
		buf := make([]byte, n)
		k, err := unix.Flistxattr(fd, buf)
		if errors.Is(err, unix.ERANGE) && n < 1<<20 {
			continue
		}
		if errors.Is(err, unix.ENOTSUP) {
			return nil, nil
		}
		if err != nil {
			return nil, &os.PathError{Op: "listxattr", Path: ".", Err: err}
		}
		var out []string
		for _, s := range strings.Split(string(buf[:k]), "\x00") {
			if s != "" {
				out = append(out, s)
			}
		}
		return out, nil
	}
}

func xattr(fd int, name string) ([]byte, error) {
	for n := 256; ; n *= 4 {
		buf := make([]byte, n)
		k, err := unix.Fgetxattr(fd, name, buf)
		if errors.Is(err, unix.ERANGE) && n < 1<<20 {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "getxattr " + name, Path: ".", Err: err}
		}
		return buf[:k], nil
	}
}

func setTimes(dfd int, name string, ss *unix.Stat_t) error {
	ts := []unix.Timespec{ss.Atim, ss.Mtim}
	if err := unix.UtimesNanoAt(dfd, name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &os.PathError{Op: "utimes", Path: name, Err: err}
	}
	return nil
}

// placeEntry puts the non-directory name of sfd (ss its stat) into dfd,
// where nothing is: a hard link to it, or, when the file system refuses
// one more link to the inode, a copy.
func placeEntry(dfd, sfd int, name string, ss *unix.Stat_t) error {
	err := unix.Linkat(sfd, name, dfd, name, 0)
	if err == nil || !errors.Is(err, unix.EMLINK) {
		if err != nil {
			return &os.PathError{Op: "link", Path: name, Err: err}
		}
		return nil
	}
	switch ss.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		err = copyFile(dfd, sfd, name, ss)
	case unix.S_IFLNK:
		var target string
		if target, err = beneath.ReadlinkAt(sfd, name); err == nil {
			err = unix.Symlinkat(target, dfd, name)
		}
	default: // a whiteout, a device, a fifo, a socket
		err = unix.Mknodat(dfd, name, ss.Mode, int(ss.Rdev))
	}
	if err != nil {
		return &os.PathError{Op: "copy", Path: name, Err: err}
	}
	if err := unix.Fchownat(dfd, name, int(ss.Uid), int(ss.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &os.PathError{Op: "chown", Path: name, Err: err}
	}
	return setTimes(dfd, name, ss)
}

// copyFile copies the regular file name of sfd into dfd, with its mode
// and extended attributes.
func copyFile(dfd, sfd int, name string, ss *unix.Stat_t) error {
	in, err := openat2(sfd, name, unix.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	src := os.NewFile(uintptr(in), name)
	defer src.Close()
	out, err := openat2(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, ss.Mode&0o7777)
	if err != nil {
		return err
	}
	dst := os.NewFile(uintptr(out), name)
	defer dst.Close()
	if _, err := io.Copy(dst, src); err != nil {
		return err
	}
	if err := unix.Fchmod(out, ss.Mode&0o7777); err != nil {
		return err
	}
	return copyXattrs(out, in)
}
