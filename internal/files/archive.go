package files

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dshd/dshd/internal/beneath"
)

// TarOut writes the target as a tar stream to w: a file as one entry of its
// base name; a directory as its entries relative to it (directories,
// regular files and symbolic links, with their modes and times; links
// stored, never followed; other kinds and hidden paths left out).
func (s *Scope) TarOut(w io.Writer, t *Target) error {
	tw := tar.NewWriter(w)
	if !t.IsDir() {
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: path.Base(t.Path), Size: t.Info.Size(), Mode: int64(t.Info.Mode().Perm()), ModTime: t.Info.ModTime(), Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.Copy(tw, io.LimitReader(t.File, hdr.Size)); err != nil {
			return err
		}
		return tw.Close()
	}
	err := s.walk(t, 0, func(rel string, dfd int, st *unix.Stat_t) error {
		hdr := &tar.Header{Name: rel, Mode: int64(st.Mode & 0o7777), ModTime: time.Unix(st.Mtim.Unix()), Format: tar.FormatPAX}
		base := path.Base(rel)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			hdr.Typeflag, hdr.Name = tar.TypeDir, rel+"/"
			return tw.WriteHeader(hdr)
		case unix.S_IFLNK:
			target, err := beneath.ReadlinkAt(dfd, base)
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
			return tw.WriteHeader(hdr)
		case unix.S_IFREG:
			fd, err := unix.Openat(dfd, base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) {
				return nil // gone, or swapped for a link, since the listing
			}
			if err != nil {
				return &fs.PathError{Op: "open", Path: rel, Err: err}
			}
			f := os.NewFile(uintptr(fd), rel)
			defer f.Close()
			var now unix.Stat_t
			if err := unix.Fstat(fd, &now); err != nil {
				return err
			}
			if now.Mode&unix.S_IFMT != unix.S_IFREG {
				return nil
			}
			hdr.Typeflag, hdr.Size = tar.TypeReg, now.Size
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			// A file that grows while it is read is cut at the size
			// announced; one that shrinks is padded with zeros.
			n, err := io.Copy(tw, io.LimitReader(f, now.Size))
			if err != nil {
				return err
			}
			if n < now.Size {
				_, err = io.CopyN(tw, zeros{}, now.Size-n)
			}
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// Unpacked is what TarIn wrote.
type Unpacked struct {
	Path    string
	Entries int
	Bytes   int64
}

// TarIn unpacks the tar stream r into the directory p (made, with the
// missing ones on the way, when parents is set). The stream is first
// spooled to a file in spool (a directory of dshd's), where every entry is
// checked before anything is written: a name with .. or absolute, a .git
// component while the policy protects them, a symbolic link whose target
// is absolute or leads out of p, a hard link to a name outside, a device,
// a FIFO: ErrInvalidArchive (ErrProtected for .git), and nothing is
// written. Then each entry is written by descriptor below p, no link on
// the way followed (ErrThroughLink: a link already in the tree, or one
// the archive itself made, on an entry's way), each file written beside
// its name and renamed over it; a write refused there stops the unpacking
// with the entries before it in place. Directory modes and times are set
// at the end.
func (s *Scope) TarIn(p string, r io.Reader, parents bool, spool string) (Unpacked, error) {
	abs, err := s.Abs(p)
	if err != nil {
		return Unpacked{}, err
	}
	root, relp, err := s.writable(abs)
	if err != nil {
		return Unpacked{}, err
	}
	defer unix.Close(root)
	tmp, err := spoolChecked(r, spool, s.protects())
	if err != nil {
		return Unpacked{}, err
	}
	defer tmp.Close()
	dir, err := dirs(root, relp, parents)
	if err != nil {
		return Unpacked{}, mapErr("unpack", abs, err)
	}
	defer unix.Close(dir)
	out := Unpacked{Path: abs}
	var dirModes []dirMode
	last := &lastDir{fd: -1}
	defer last.close()
	err = eachEntry(tmp, func(hdr *tar.Header, tr *tar.Reader) error {
		name := path.Clean(hdr.Name)
		if name == "." {
			if hdr.Typeflag == tar.TypeDir {
				dirModes = append(dirModes, dirMode{".", uint32(hdr.Mode & 0o1777), hdr.ModTime})
			}
			return nil
		}
		if err := unpack(dir, last, name, hdr, tr, &out); err != nil {
			return mapErr("unpack", path.Join(abs, name), err)
		}
		if hdr.Typeflag == tar.TypeDir {
			dirModes = append(dirModes, dirMode{name, uint32(hdr.Mode & 0o1777), hdr.ModTime})
		}
		out.Entries++
		return nil
	})
	if err != nil {
		return out, err
	}
	return out, setDirModes(dir, abs, dirModes)
}

// eachEntry calls f with each entry of the tar stream r, in order, and the
// reader its contents are read from; it stops at f's first error. A
// malformed stream is ErrInvalidArchive.
func eachEntry(r io.Reader, f func(hdr *tar.Header, tr *tar.Reader) error) error {
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidArchive, err)
		}
		if err := f(hdr, tr); err != nil {
			return err
		}
	}
}

// spoolChecked copies the tar stream r to a file in spool (unlinked at
// once) and checks every entry with checkEntry before anything is written:
// the file it returns, read from its start, holds only entries that
// passed. The caller closes it.
func spoolChecked(r io.Reader, spool string, protect bool) (*os.File, error) {
	tmp, err := os.CreateTemp(spool, "archive-*.tar")
	if err != nil {
		return nil, err
	}
	os.Remove(tmp.Name())
	if err := checkSpooled(tmp, r, protect); err != nil {
		tmp.Close()
		return nil, err
	}
	return tmp, nil
}

func checkSpooled(tmp *os.File, r io.Reader, protect bool) error {
	if _, err := io.Copy(tmp, r); err != nil {
		return err
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return err
	}
	err := eachEntry(tmp, func(hdr *tar.Header, _ *tar.Reader) error { return checkEntry(hdr, protect) })
	if err != nil {
		return err
	}
	_, err = tmp.Seek(0, io.SeekStart)
	return err
}

// dirMode is a directory's mode and time from its entry, set once every
// entry is written.
type dirMode struct {
	name  string
	mode  uint32
	mtime time.Time
}

// setDirModes sets the modes and times of the directories unpacked below
// dir (abs names it in errors), innermost first, so that a read-only
// directory is made so last.
func setDirModes(dir int, abs string, dirModes []dirMode) error {
	for i := len(dirModes) - 1; i >= 0; i-- {
		d := dirModes[i]
		fd, err := beneath.Openat2(dir, d.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, resolveBeneath)
		if err != nil {
			return mapErr("unpack", path.Join(abs, d.name), err)
		}
		err = unix.Fchmod(fd, d.mode)
		if err == nil && !d.mtime.IsZero() {
			ts := []unix.Timespec{unix.NsecToTimespec(d.mtime.UnixNano()), unix.NsecToTimespec(d.mtime.UnixNano())}
			err = unix.UtimesNanoAt(fd, "", ts, unix.AT_EMPTY_PATH)
		}
		unix.Close(fd)
		if err != nil {
			return mapErr("unpack", path.Join(abs, d.name), err)
		}
	}
	return nil
}

// protects reports whether the agent's policy keeps .git read-only.
func (s *Scope) protects() bool { return s.FS == "workspace-write" }

// checkEntry refuses an entry that would write anywhere but below the
// directory unpacked into, or a kind of file it does not unpack.
func checkEntry(hdr *tar.Header, protect bool) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: entry %q: %s", ErrInvalidArchive, hdr.Name, why)
	}
	if strings.ContainsRune(hdr.Name, 0) || strings.ContainsRune(hdr.Linkname, 0) {
		return bad("a NUL byte")
	}
	if path.IsAbs(hdr.Name) {
		return bad("an absolute name")
	}
	for _, part := range strings.Split(hdr.Name, "/") {
		if part == ".." {
			return bad("a .. component")
		}
		if part == ".git" && protect {
			return fmt.Errorf("%w: entry %q: a .git directory is read-only", ErrProtected, hdr.Name)
		}
	}
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeRegA, tar.TypeDir:
	case tar.TypeSymlink:
		if hdr.Linkname == "" || path.IsAbs(hdr.Linkname) {
			return bad("a symbolic link to an absolute path")
		}
		if t := path.Join(path.Dir(path.Clean(hdr.Name)), hdr.Linkname); t == ".." || strings.HasPrefix(t, "../") {
			return bad("a symbolic link leading out")
		}
	case tar.TypeLink:
		t := path.Clean(hdr.Linkname)
		if path.IsAbs(t) || t == ".." || strings.HasPrefix(t, "../") || t == "." {
			return bad("a hard link to a name outside")
		}
		// A second name for a file of .git would be a way to write it
		// that the read-only .git does not cover.
		if protect && slices.Contains(strings.Split(t, "/"), ".git") {
			return fmt.Errorf("%w: entry %q: a hard link into a .git directory", ErrProtected, hdr.Name)
		}
	default:
		return bad(fmt.Sprintf("type %q is not unpacked (only files, directories and links)", hdr.Typeflag))
	}
	if path.Clean(hdr.Name) == "." && hdr.Typeflag != tar.TypeDir {
		return bad("an empty name")
	}
	return nil
}

// lastDir keeps the directory the last entry went into open: the entries
// of one directory come one after the other.
type lastDir struct {
	rel string
	fd  int
}

func (l *lastDir) close() {
	if l.fd >= 0 {
		unix.Close(l.fd)
		l.fd = -1
	}
}

// unpack writes one checked entry below dir.
func unpack(dir int, last *lastDir, name string, hdr *tar.Header, r io.Reader, out *Unpacked) error {
	if hdr.Typeflag == tar.TypeSymlink || hdr.Typeflag == tar.TypeDir {
		// A link or a directory may replace what the kept descriptor's
		// path named: resolve again after it.
		defer last.close()
	}
	if last.fd < 0 || last.rel != path.Dir(name) {
		last.close()
		fd, err := dirs(dir, path.Dir(name), true)
		if err != nil {
			return err
		}
		last.rel, last.fd = path.Dir(name), fd
	}
	pdir := last.fd
	base := path.Base(name)
	mtime := hdr.ModTime
	switch hdr.Typeflag {
	case tar.TypeDir:
		err := unix.Mkdirat(pdir, base, 0o755)
		if errors.Is(err, unix.EEXIST) {
			fd, oerr := beneath.Openat2(pdir, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, resolveBeneath)
			if oerr != nil {
				return oerr
			}
			unix.Close(fd)
			return nil
		}
		return err
	case tar.TypeReg, tar.TypeRegA:
		var st unix.Stat_t
		if unix.Fstatat(pdir, base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return unix.EISDIR
		}
		n, err := writeFile(pdir, base, r, fs.FileMode(hdr.Mode&0o1777))
		out.Bytes += n
		if err != nil {
			return err
		}
	case tar.TypeSymlink:
		tmp := tempName()
		if err := unix.Symlinkat(hdr.Linkname, pdir, tmp); err != nil {
			return err
		}
		if err := unix.Renameat(pdir, tmp, pdir, base); err != nil {
			_ = unix.Unlinkat(pdir, tmp, 0)
			return err
		}
	case tar.TypeLink:
		src := path.Clean(hdr.Linkname)
		sdir, err := dirs(dir, path.Dir(src), false)
		if err != nil {
			return err
		}
		defer unix.Close(sdir)
		tmp := tempName()
		if err := unix.Linkat(sdir, path.Base(src), pdir, tmp, 0); err != nil {
			return err
		}
		if err := unix.Renameat(pdir, tmp, pdir, base); err != nil {
			_ = unix.Unlinkat(pdir, tmp, 0)
			return err
		}
		return nil
	}
	if !mtime.IsZero() {
		ts := []unix.Timespec{unix.NsecToTimespec(mtime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}
		if err := unix.UtimesNanoAt(pdir, base, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
	}
	return nil
}
