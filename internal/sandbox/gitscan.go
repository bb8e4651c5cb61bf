package sandbox

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultGitScanMaxEntries is how many directory entries the writable roots
// of one command may hold before the command is refused
// (Config.GitScanMaxEntries): their .git directories could not all be
// found in bounded time.
const DefaultGitScanMaxEntries = 200_000

// racyWindow: a directory changed this recently before it was read may
// change again within the same tick of the kernel's coarse clock without
// its ctime moving, so its listing is read again next time rather than
// trusted (git's "racily clean" rule).
const racyWindow = time.Second

// maxScannedRoots bounds how many roots' listings a gitScanner keeps.
const maxScannedRoots = 256

// gitScanner finds every .git entry in a writable root at any depth. The
// first search of a root reads every directory; later ones stat each
// directory and read again only those whose inode or ctime changed (a
// directory's ctime moves whenever an entry is created, removed or renamed
// in it, and no unprivileged process can set it), so a command's cost grows
// with the number of directories, not entries. The zero value is ready.
type gitScanner struct {
	mu    sync.Mutex
	roots map[string]map[string]*scannedDir
	now   func() time.Time // time.Now; tests move it
	reads int              // directories read, for tests
}

// scannedDir is one directory's listing as last read.
type scannedDir struct {
	dev, ino uint64
	ctime    unix.Timespec
	racy     bool     // changed within racyWindow of being read: read again
	entries  int      // entries, . and .. aside
	git      string   // its .git entry, "" if none
	subdirs  []string // paths of its subdirectories but .git
}

// scan returns root's .git entries (directories, or the files of worktrees
// and submodules) and those of every repository nested in it, sorted, so
// root's own comes first. It does not descend into .git directories or
// follow symbolic links. Each entry of each directory counts against
// *budget; when the budget runs out the search fails (ErrUnavailable,
// naming limit): a .git left writable would let a command plant a hook that
// runs outside the sandbox at the user's next git command.
func (g *gitScanner) scan(root string, budget *int, limit int) ([]string, error) {
	g.mu.Lock()
	old := g.roots[root]
	now := time.Now
	if g.now != nil {
		now = g.now
	}
	g.mu.Unlock()
	started := now()
	cur := make(map[string]*scannedDir, len(old))
	var out []string
	var buf []byte
	reads := 0
	stack := []string{root}
	for len(stack) > 0 {
		dir := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		var st unix.Stat_t
		stat := unix.Lstat
		if dir == root {
			stat = unix.Stat // the harness's root may be a link
		}
		if err := stat(dir, &st); err != nil {
			if dir == root || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
				continue // root vanished, or an entry removed meanwhile
			}
			return nil, fmt.Errorf("%w: cannot search %s for .git directories to protect: %v", ErrUnavailable, dir, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue // replaced by a file or a link meanwhile: not followed
		}
		d := old[dir]
		if d == nil || d.racy || d.dev != st.Dev || d.ino != st.Ino || d.ctime != st.Ctim {
			if buf == nil {
				buf = make([]byte, 64<<10)
			}
			var err error
			if d, err = readDir(dir, dir == root, buf); err != nil {
				return nil, err
			}
			reads++
			d.dev, d.ino, d.ctime = st.Dev, st.Ino, st.Ctim
			d.racy = time.Unix(st.Ctim.Unix()).After(started.Add(-racyWindow))
		}
		cur[dir] = d
		if *budget -= d.entries; *budget < 0 {
			return nil, fmt.Errorf("%w: the writable roots hold more than %d entries to search for .git directories to protect (sandbox.gitScanMaxEntries); %s is one", ErrUnavailable, limit, root)
		}
		if d.git != "" {
			out = append(out, d.git)
		}
		stack = append(stack, d.subdirs...)
	}
	g.mu.Lock()
	if g.roots == nil {
		g.roots = make(map[string]map[string]*scannedDir)
	}
	if _, ok := g.roots[root]; !ok && len(g.roots) >= maxScannedRoots {
		for r := range g.roots { // forget one at random
			delete(g.roots, r)
			break
		}
	}
	g.roots[root] = cur
	g.reads += reads
	g.mu.Unlock()
	slices.Sort(out) // root's own first: "/.git" sorts before any "/name/"
	return out, nil
}

// readDir lists dir with buf.
func readDir(dir string, isRoot bool, buf []byte) (*scannedDir, error) {
	flags := unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC
	if !isRoot {
		flags |= unix.O_NOFOLLOW
	}
	fd, err := unix.Open(dir, flags, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: cannot search %s for .git directories to protect: %v", ErrUnavailable, dir, err)
	}
	defer unix.Close(fd)
	d := &scannedDir{}
	err = eachDirent(fd, buf, func(name string, typ byte) {
		d.entries++
		p := dir + "/" + name
		if name == ".git" {
			d.git = p
			return
		}
		if typ == unix.DT_UNKNOWN {
			var st unix.Stat_t
			if unix.Lstat(p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
				typ = unix.DT_DIR
			}
		}
		if typ == unix.DT_DIR {
			d.subdirs = append(d.subdirs, p)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("%w: cannot search %s for .git directories to protect: %v", ErrUnavailable, dir, err)
	}
	return d, nil
}

// eachDirent calls f with the name and type (unix.DT_*) of every entry of
// the open directory fd but . and .., reading with buf. It reads the
// kernel's records itself: os.ReadDir allocates and sorts an entry for
// each, several times the cost.
func eachDirent(fd int, buf []byte, f func(name string, typ byte)) error {
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			return err
		}
		if n <= 0 {
			return nil
		}
		for b := buf[:n]; len(b) >= direntNameOff; {
			// struct linux_dirent64: d_ino u64, d_off s64, d_reclen u16,
			// d_type u8, d_name NUL-terminated.
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen <= direntNameOff || reclen > len(b) {
				return errors.New("malformed directory record")
			}
			name := b[direntNameOff:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			if s := string(name); s != "." && s != ".." {
				f(s, b[18])
			}
			b = b[reclen:]
		}
	}
}

// direntNameOff is where d_name starts in a struct linux_dirent64.
const direntNameOff = 19
