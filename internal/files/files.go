// Package files reads and writes an agent's files for the harness routes
// (GET, PUT and DELETE of /agents/{id}/files/…, and tar archives in and
// out), inside the agent's view and under its sandbox policy's rules:
// reads anywhere but the dshd home, the token and the hidden paths; writes
// only below a writable root (the agent's cwd and the configured roots under
// workspace-write, anywhere but those under unrestricted, nowhere under
// read-only), never into a .git directory or a protected path while
// workspace-write protects them.
//
// Every write is done by descriptor: each directory on the way is opened
// with beneath.Openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS) from the one before,
// so a link, one there from the start or one a model's bash plants between
// a check and the write, never leads a write out of its root; it is an
// error (ErrThroughLink). Reads follow links, and then look at where the
// descriptor they hold really is before they read from it.
//
// Floor 2 of the layout (docs/design.md#floors): it imports only packages on the floors below.
package files

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dshd/dshd/internal/beneath"
	"github.com/dshd/dshd/internal/sandbox"
)

// Errors the operations return (wrapped, with the path in the message).
var (
	// ErrInvalidPath: an empty component of .., a NUL byte, or a path an
	// operation cannot take (the root itself for a removal).
	ErrInvalidPath = errors.New("invalid path")
	// ErrNotFound: the path, or a directory on its way, does not exist.
	ErrNotFound = errors.New("no such file or directory")
	// ErrNotWritable: the agent's sandbox does not let it write there
	// (read-only, or outside every writable root).
	ErrNotWritable = errors.New("not writable under the agent's sandbox")
	// ErrProtected: a .git directory or a configured protected path.
	ErrProtected = errors.New("protected path")
	// ErrHidden: the dshd home, the token or a hidden path.
	ErrHidden = errors.New("hidden path")
	// ErrThroughLink: a write's path goes through a symbolic link, or a
	// read's link leads out of the view.
	ErrThroughLink = errors.New("path goes through a symbolic link")
	// ErrNotDir: a directory was expected (on the way, or to unpack into).
	ErrNotDir = errors.New("not a directory")
	// ErrIsDir: a file was expected.
	ErrIsDir = errors.New("is a directory")
	// ErrNotEmpty: a directory removed without recursive holds entries.
	ErrNotEmpty = errors.New("directory not empty")
	// ErrExists: a directory to make exists already (without parents).
	ErrExists = errors.New("already exists")
	// ErrNotRegular: neither a regular file nor a directory (a device, a
	// FIFO, a socket) is read.
	ErrNotRegular = errors.New("not a regular file or directory")
	// ErrInvalidArchive: a tar stream that does not parse, or an entry it
	// refuses (.., an absolute name, a link leading out, a device).
	ErrInvalidArchive = errors.New("invalid archive")
	// ErrCrossDevice: a move between two file systems, or of a directory
	// of a snapshot's lower layer (which overlayfs does not rename).
	ErrCrossDevice = errors.New("the two paths are on different file systems")
	// ErrWatchLimit: the host gives no more inotify instances (its
	// fs.inotify.max_user_instances, or dshd's descriptors, are used up):
	// a watch cannot start until others end.
	ErrWatchLimit = errors.New("the host cannot start another watch")
)

// Scope is what one agent may see and change: its cwd (and view), its
// sandbox policy's file system rule and the host's paths.
type Scope struct {
	// Cwd is the agent's working directory; a relative path is below it.
	Cwd string
	// ViewTarget and ViewFD: the agent's snapshot view, mounted (for its
	// commands) at ViewTarget and read by dshd through ViewFD; ViewFD -1
	// means the agent works in its real directory.
	ViewTarget string
	ViewFD     int
	// FS is the agent's sandbox policy's file system rule.
	FS sandbox.FS
	// Roots are the configured writable roots, beside Cwd.
	Roots []string
	// Protected are configured paths that stay read-only.
	Protected []string
	// Home, Token and Hidden are never read nor written.
	Home, Token string
	Hidden      []string

	hiddenReal []string // Hidden and their links' targets, made on first use
}

func (s *Scope) hasView() bool { return s.ViewFD >= 0 && s.ViewTarget != "" }

// Abs is the absolute, clean path p names for the agent: relative to its
// cwd, or absolute. A .. component, a NUL byte or an empty path that is not
// the cwd's are ErrInvalidPath.
func (s *Scope) Abs(p string) (string, error) {
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("%w: a NUL byte", ErrInvalidPath)
	}
	if slices.Contains(strings.Split(p, "/"), "..") {
		return "", fmt.Errorf("%w: %q has a .. component", ErrInvalidPath, p)
	}
	if len(p) > 4096 {
		return "", fmt.Errorf("%w: longer than 4096 bytes", ErrInvalidPath)
	}
	if !path.IsAbs(p) {
		p = path.Join(s.Cwd, p)
	}
	return path.Clean(p), nil
}

// hidden reports whether abs is /proc, the home, the token, a hidden path
// or below one of them.
func (s *Scope) hidden(abs string) bool {
	// dshd's /proc is not the agent's: a confined command has a /proc
	// of its own, and dshd's environment, memory and descriptors are
	// there.
	if within(abs, "/proc") {
		return true
	}
	if s.Home != "" && within(abs, s.Home) {
		return true
	}
	if s.Token != "" && (abs == s.Token || within(abs, s.Token)) {
		return true
	}
	if s.hiddenReal == nil {
		// The hidden paths as configured and where their links lead, once
		// per scope (a listing asks for every entry).
		s.hiddenReal = []string{}
		for _, h := range s.Hidden {
			s.hiddenReal = append(s.hiddenReal, h)
			if r, err := filepath.EvalSymlinks(h); err == nil && r != h {
				s.hiddenReal = append(s.hiddenReal, r)
			}
		}
	}
	for _, h := range s.hiddenReal {
		if within(abs, h) {
			return true
		}
	}
	return false
}

// within is beneath.Within, the one containment check of names.
func within(p, dir string) bool { return beneath.Within(p, dir) }

// rel is p below dir ("." for dir itself); p must be within dir.
func rel(p, dir string) string {
	if p == dir {
		return "."
	}
	if dir == "/" {
		return p[1:]
	}
	return p[len(dir)+1:]
}

// resolveBeneath resolves names below a directory descriptor, no link
// followed; resolveView follows the links that stay below it.
const (
	resolveBeneath = beneath.Resolve
	resolveView    = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS
)

// mapErr turns an errno met on the way to abs into the package's errors.
func mapErr(op, abs string, err error) error {
	var e error
	switch {
	case errors.Is(err, unix.ENOENT):
		e = ErrNotFound
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
		e = ErrThroughLink
	case errors.Is(err, unix.ENOTDIR):
		e = ErrNotDir
	case errors.Is(err, unix.EISDIR):
		e = ErrIsDir
	case errors.Is(err, unix.ENOTEMPTY):
		e = ErrNotEmpty
	case errors.Is(err, unix.EEXIST):
		e = ErrExists
	case errors.Is(err, unix.EROFS), errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		e = ErrNotWritable
	default:
		return &fs.PathError{Op: op, Path: abs, Err: err}
	}
	return fmt.Errorf("%s %s: %w", op, abs, e)
}

// Target is an open file or directory to read: File holds a descriptor
// opened for reading, Path is where it is for the agent.
type Target struct {
	File *os.File
	Info fs.FileInfo
	Path string
	// beneath, for a directory in the view: listings and archives of it
	// see the view, and stop at nothing (a view holds no hidden path).
	view bool
}

// Close closes the target's descriptor.
func (t *Target) Close() error { return t.File.Close() }

// IsDir reports whether the target is a directory.
func (t *Target) IsDir() bool { return t.Info.IsDir() }

// Open opens p (Abs) for reading: a regular file or a directory, links
// followed, but never into the home, the token or a hidden path
// (ErrHidden: decided by where the descriptor really is, not by the path
// asked for), nor out of the view through a link (ErrThroughLink).
func (s *Scope) Open(p string) (*Target, error) {
	abs, err := s.Abs(p)
	if err != nil {
		return nil, err
	}
	if s.hidden(abs) {
		return nil, fmt.Errorf("read %s: %w", abs, ErrHidden)
	}
	var fd int
	inView := s.hasView() && within(abs, s.ViewTarget)
	if inView {
		fd, err = beneath.Openat2(s.ViewFD, rel(abs, s.ViewTarget), unix.O_PATH, 0, resolveView)
		if err != nil {
			return nil, mapErr("read", abs, err)
		}
	} else {
		fd, err = beneath.Openat2(unix.AT_FDCWD, abs, unix.O_PATH, 0, unix.RESOLVE_NO_MAGICLINKS)
		if err != nil {
			return nil, mapErr("read", abs, err)
		}
		real, err := beneath.FdPath(fd)
		if err != nil {
			unix.Close(fd)
			return nil, err
		}
		if s.hidden(real) {
			unix.Close(fd)
			return nil, fmt.Errorf("read %s: %w (it leads to %s)", abs, ErrHidden, real)
		}
		if s.hasView() && within(real, s.ViewTarget) {
			// A link into the agent's directory: the agent sees its view there.
			unix.Close(fd)
			return s.Open(real)
		}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, err
	}
	mode := st.Mode & unix.S_IFMT
	if mode != unix.S_IFREG && mode != unix.S_IFDIR {
		unix.Close(fd)
		return nil, fmt.Errorf("read %s: %w", abs, ErrNotRegular)
	}
	// Reopen the very file the O_PATH descriptor holds, for reading.
	rfd, err := unix.Open(beneath.FdName(fd), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	unix.Close(fd)
	if err != nil {
		return nil, mapErr("read", abs, err)
	}
	f := os.NewFile(uintptr(rfd), abs)
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &Target{File: f, Info: fi, Path: abs, view: inView}, nil
}
