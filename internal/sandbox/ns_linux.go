package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	osexec "os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/dshd/dshd/internal/netallow"
)

// The namespaces mechanism confines one OS thread of dshd and starts the
// command from it: the child inherits the thread's mount and network
// namespaces, its (empty) capabilities, no_new_privs and Landlock domain.
// The thread is never given back to the Go scheduler: its goroutine ends
// locked to it, so the runtime terminates it.

func init() {
	// Keep the main goroutine on the main thread, so a goroutine that
	// confines its thread can never be scheduled there (the runtime
	// cannot terminate the main thread; it would only park it, still the
	// thread group leader, with a sandbox's credentials).
	runtime.LockOSThread()
}

// landlockMinABI is the first Landlock ABI with scopes (signals, abstract
// unix sockets): without them a confined command could signal dshd, or
// read another process's /proc entries of the same user.
const landlockMinABI = 6

// landlockABI returns the kernel's Landlock ABI version, or an error when
// Landlock is missing or disabled.
func landlockABI() (int, error) {
	r, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if e != 0 {
		return 0, fmt.Errorf("landlock: %w", e)
	}
	return int(r), nil
}

// probeNamespaces checks that this process may build the strictest plan
// (read-only root, private /tmp and /dev, its own network) and start shell
// in it under filter f (nil: none).
func probeNamespaces(ctx context.Context, shell string, f *syscallFilter) error {
	abi, err := landlockABI()
	if err != nil {
		return err
	}
	if abi < landlockMinABI {
		return fmt.Errorf("landlock ABI %d, need %d (scoped signals)", abi, landlockMinABI)
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	cmd := osexec.CommandContext(ctx, shell, "-c", ":")
	cmd.Dir = "/"
	pl := plan{readOnlyRoot: true, newNet: true}
	if _, err := startInNamespaces(pl, f, cmd.Start); err != nil {
		return err
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("%s -c : in the sandbox: %w", shell, err)
	}
	return nil
}

// startInNamespaces builds pl on a fresh locked thread, installs the
// system-call filter f there (nil: none) and calls start there. With
// pl.proxy it returns the proxy's listener inside the new network
// namespace; the caller serves or closes it.
func startInNamespaces(pl plan, f *syscallFilter, start func() error) (net.Listener, error) {
	type result struct {
		ln  net.Listener
		err error
	}
	res := make(chan result, 1)
	go func() {
		var ln net.Listener
		errc := make(chan error, 1)
		defer func() {
			err := <-errc
			if err != nil && ln != nil {
				ln.Close()
				ln = nil
			}
			res <- result{ln, err}
		}()
		// Never unlocked: the thread dies with this goroutine.
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// Untouched: give it back, or its goroutine's exit would
			// wedge the main thread for good.
			runtime.UnlockOSThread()
			errc <- errors.New("sandbox: refusing to confine the main thread")
			return
		}
		var err error
		if ln, err = pl.enter(); err != nil {
			errc <- fmt.Errorf("sandbox: %w", err)
			return
		}
		// Last, with no_new_privs set: the filter denies calls that
		// building the view made. Go's fork and exec of the command
		// (clone3, dup3, setpgid, ioctl, execve) make none it denies.
		if f != nil {
			if err := f.load(); err != nil {
				errc <- fmt.Errorf("sandbox: %w", err)
				return
			}
		}
		errc <- start()
	}()
	r := <-res
	return r.ln, r.err
}

// startInNetNS calls start on a fresh locked thread in a new network
// namespace, loopback up, and returns the proxy's listener there (for
// bubblewrap, which then needs no namespace of its own for the network).
// The thread dies with its goroutine.
func startInNetNS(start func() error) (net.Listener, error) {
	type result struct {
		ln  net.Listener
		err error
	}
	res := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			runtime.UnlockOSThread() // untouched (see startInNamespaces)
			res <- result{nil, errors.New("sandbox: refusing to move the main thread")}
			return
		}
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			res <- result{nil, fmt.Errorf("sandbox: unshare network: %w", err)}
			return
		}
		if err := loopbackUp(); err != nil {
			res <- result{nil, fmt.Errorf("sandbox: %w", err)}
			return
		}
		ln, err := proxyListen()
		if err == nil {
			if err = start(); err != nil {
				ln.Close()
				ln = nil
			}
		}
		res <- result{ln, err}
	}()
	r := <-res
	return r.ln, r.err
}

// proxyListen opens the proxy's listener in the calling thread's network
// namespace.
func proxyListen() (net.Listener, error) {
	ln, err := net.Listen("tcp4", "127.0.0.1:"+strconv.Itoa(netallow.Port))
	if err != nil {
		return nil, fmt.Errorf("sandbox: the network proxy's listener: %w", err)
	}
	return ln, nil
}

// devNodes are the device nodes of the private /dev (bubblewrap's --dev
// set), with their numbers, fixed by the kernel's ABI.
var devNodes = []struct {
	name         string
	major, minor uint32
}{{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}}

// graft is a detached copy of a mount tree, taken before what hides its
// place is mounted, and attached at its path afterwards.
type graft struct {
	fd       int
	at       string
	readOnly bool
}

// enter confines the calling thread, which is locked to its goroutine and
// is not the main thread, to pl; with pl.proxy it returns the proxy's
// listener in the new network namespace.
func (pl *plan) enter() (ln net.Listener, err error) {
	defer func() {
		if err != nil && ln != nil {
			ln.Close()
			ln = nil
		}
	}()
	return ln, pl.build(&ln)
}

// build is enter's work, in the order the view must be built: the
// namespaces (*ln gets the proxy's listener), the agent's view, the trees
// to keep taken before anything hides them, the read-only base, the trees
// grafted back, the home and the token hidden, the hidden paths covered,
// and the privileges dropped last.
func (pl *plan) build(ln *net.Listener) error {
	if err := pl.unshare(ln); err != nil {
		return err
	}
	if pl.view != nil {
		if err := pl.view.attach(); err != nil {
			return err
		}
		if pl.viewOnly {
			return nil
		}
	}
	var gs grafts
	defer func() { gs.close() }() // the trees taken by then
	if err := pl.takeTrees(&gs); err != nil {
		return err
	}
	if pl.readOnlyRoot {
		if err := readOnlyBase(); err != nil {
			return err
		}
	}
	// The home's tmpfs goes on last but skills: the writable roots first.
	for i := range gs {
		if g := &gs[i]; g.at != pl.skills {
			if err := g.attach(); err != nil {
				return err
			}
		}
	}
	for _, r := range pl.protected {
		if err := gs.take(r, r, true); err != nil {
			return err
		}
		if err := gs[len(gs)-1].attach(); err != nil {
			return err
		}
	}
	if err := pl.hideHome(gs); err != nil {
		return err
	}
	if err := pl.hidePaths(); err != nil {
		return err
	}
	return dropPrivileges()
}

// unshare gives the thread a mount namespace of its own, slave to the
// host's so nothing mounted in it reaches the host, and the network
// namespace of the plan: one made ahead or now, its loopback up, and the
// proxy's listener in it (*ln).
func (pl *plan) unshare(ln *net.Listener) error {
	flags := unix.CLONE_NEWNS | unix.CLONE_FS
	// A fresh network namespace made ahead (netpool_linux.go), or one
	// made now.
	ownNet := pl.newNet && !netNamespaces.join()
	if ownNet {
		flags |= unix.CLONE_NEWNET
	}
	if err := unix.Unshare(flags); err != nil {
		return fmt.Errorf("unshare: %w", err)
	}
	if ownNet {
		if err := loopbackUp(); err != nil {
			return err
		}
	}
	if pl.proxy {
		l, err := proxyListen()
		if err != nil {
			return err
		}
		*ln = l
	}
	// Nothing mounted here may reach the host's namespace.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("make / a slave: %w", err)
	}
	return nil
}

// grafts are the trees taken to be grafted back.
type grafts []graft

// take clones the mount tree at path, to be attached at at.
func (gs *grafts) take(path, at string, readOnly bool) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("open_tree %s: %w", path, err)
	}
	*gs = append(*gs, graft{fd: fd, at: at, readOnly: readOnly})
	return nil
}

// close closes the trees not attached.
func (gs grafts) close() {
	for _, g := range gs {
		if g.fd >= 0 {
			unix.Close(g.fd)
		}
	}
}

// takeTrees takes, before anything hides their places, the trees the view
// shows again: under a read-only root the writable roots and the visible
// paths; and the skills.
func (pl *plan) takeTrees(gs *grafts) error {
	if pl.readOnlyRoot {
		for _, r := range pl.writable {
			if err := gs.take(r, r, false); err != nil {
				return err
			}
		}
		for _, r := range pl.visible {
			if err := gs.take(r, r, true); err != nil {
				return err
			}
		}
	}
	if pl.skills != "" {
		if err := gs.take(pl.skills, pl.skills, true); err != nil {
			return err
		}
	}
	return nil
}

// readOnlyBase makes the whole file system read-only, with a private /tmp
// and a minimal /dev.
func readOnlyBase() error {
	if err := setReadOnly(unix.AT_FDCWD, "/", 0); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil {
		return fmt.Errorf("tmpfs /tmp: %w", err)
	}
	return minimalDev()
}

// hideHome hides the dshd home under a read-only tmpfs, with the skills of
// gs grafted back into it, and covers the token file.
func (pl *plan) hideHome(gs grafts) error {
	if pl.home != "" && !exists(pl.home) && pl.skills != "" {
		// Hidden already (under the private /tmp): still show skills.
		_ = os.MkdirAll(pl.home, 0o755)
	}
	if pl.home != "" && exists(pl.home) {
		if err := unix.Mount("tmpfs", pl.home, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
			return fmt.Errorf("tmpfs over the home: %w", err)
		}
		for i := range gs {
			if g := &gs[i]; g.at == pl.skills && g.fd >= 0 {
				if err := g.attach(); err != nil {
					return err
				}
			}
		}
		if err := setReadOnly(unix.AT_FDCWD, pl.home, 0); err != nil {
			return err
		}
	}
	if pl.token != "" && exists(pl.token) {
		if err := unix.Mount(os.DevNull, pl.token, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("cover the token file: %w", err)
		}
	}
	return nil
}

// hidePaths covers the hidden paths present in the view: a directory with
// an empty read-only tmpfs, anything else with /dev/null.
func (pl *plan) hidePaths() error {
	for _, p := range pl.hidden {
		fi, err := os.Stat(p)
		switch {
		case err != nil:
			continue // not in this view (under the private /tmp, say)
		case fi.IsDir():
			if err := unix.Mount("tmpfs", p, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_RDONLY, "mode=0755"); err != nil {
				return fmt.Errorf("hide %s: %w", p, err)
			}
		default:
			if err := unix.Mount(os.DevNull, p, "", unix.MS_BIND, ""); err != nil {
				return fmt.Errorf("hide %s: %w", p, err)
			}
		}
	}
	return nil
}

// attach mounts a clone of the view at its target.
func (v *View) attach() error {
	c, err := unix.OpenTree(v.FD, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return fmt.Errorf("clone the workspace view: %w", err)
	}
	defer unix.Close(c)
	if err := unix.MoveMount(c, "", unix.AT_FDCWD, v.Target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mount the workspace view at %s: %w", v.Target, err)
	}
	return nil
}

// attach mounts g at its path (creating the mount point inside a tmpfs).
func (g *graft) attach() error {
	if g.readOnly {
		if err := setReadOnly(g.fd, "", unix.AT_EMPTY_PATH); err != nil {
			return err
		}
	}
	if !exists(g.at) {
		var err error
		if fi, serr := os.Stat(filepath.Dir(g.at)); serr == nil && fi.IsDir() {
			err = mountPoint(g.fd, g.at)
		} else if err = os.MkdirAll(filepath.Dir(g.at), 0o755); err == nil {
			err = mountPoint(g.fd, g.at)
		}
		if err != nil {
			return fmt.Errorf("mount point %s: %w", g.at, err)
		}
	}
	if err := unix.MoveMount(g.fd, "", unix.AT_FDCWD, g.at, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount %s: %w", g.at, err)
	}
	unix.Close(g.fd)
	g.fd = -1
	return nil
}

// mountPoint creates at as a directory or an empty file, like the tree in
// fd.
func mountPoint(fd int, at string) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return os.Mkdir(at, 0o755)
	}
	f, err := unix.Open(at, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	return unix.Close(f)
}

// setReadOnly makes the mount tree at dirfd/path read-only, every mount
// below it too.
func setReadOnly(dirfd int, path string, flags uint) error {
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
	if err := unix.MountSetattr(dirfd, path, flags|unix.AT_RECURSIVE, &attr); err != nil {
		return fmt.Errorf("read-only %s: %w", path, err)
	}
	return nil
}

// minimalDev replaces /dev with a tmpfs holding what commands expect: the
// host's /dev holds disks that uid 0 may write without any capability.
func minimalDev() error {
	// The host's /dev, for the nodes that cannot be made (below).
	host, err := unix.Open("/dev", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open /dev: %w", err)
	}
	defer unix.Close(host)
	if err := unix.Mount("tmpfs", "/dev", "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755"); err != nil {
		return fmt.Errorf("tmpfs /dev: %w", err)
	}
	for _, n := range devNodes {
		if err := devNode(host, n.name, n.major, n.minor); err != nil {
			return err
		}
	}
	for _, d := range []string{"/dev/pts", "/dev/shm"} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod("/dev/shm", 0o1777); err != nil {
		return err
	}
	if err := unix.Mount("devpts", "/dev/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620"); err != nil {
		return fmt.Errorf("devpts: %w", err)
	}
	for name, target := range map[string]string{
		"ptmx": "pts/ptmx", "fd": "/proc/self/fd", "stdin": "/proc/self/fd/0",
		"stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2", "core": "/proc/kcore",
	} {
		if err := os.Symlink(target, "/dev/"+name); err != nil {
			return err
		}
	}
	return nil
}

// devNode makes the device node name of the private /dev, read-write for
// all as on the host: a node of its own, in the sandbox's tmpfs, so that
// nothing a command does to it (chmod, say) reaches the host's. Where
// dshd may not make device nodes (a device cgroup), it binds the host's
// node from the directory host instead.
func devNode(host int, name string, major, minor uint32) error {
	at := "/dev/" + name
	err := mknod(at, unix.S_IFCHR|0o666, int(unix.Mkdev(major, minor)))
	if err == nil {
		// Past the umask.
		if err := unix.Fchmodat(unix.AT_FDCWD, at, 0o666, 0); err != nil {
			return fmt.Errorf("chmod %s: %w", at, err)
		}
		return nil
	}
	fd, terr := unix.OpenTree(host, name, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if terr != nil {
		return fmt.Errorf("mknod %s: %v; open_tree of the host's: %w", at, err, terr)
	}
	g := graft{fd: fd, at: at}
	if err := g.attach(); err != nil {
		unix.Close(fd)
		return err
	}
	return nil
}

// mknod is unix.Mknod; a test makes it fail.
var mknod = unix.Mknod

// loopbackUp brings lo up in the thread's new network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback up: %w", err)
	}
	return nil
}

// dropPrivileges leaves the thread (and so the command) no capability and
// no way to gain one, and scopes it with Landlock: it may signal, and
// connect to abstract unix sockets of, only processes it started; Landlock
// also keeps it from tracing (and reading the /proc entries of) any
// process outside its domain.
func dropPrivileges() error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	for c := 0; ; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			if errors.Is(err, unix.EINVAL) && c > 0 {
				break // past the last capability
			}
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	rs, err := landlockScopes()
	if err != nil {
		return err
	}
	// Flags 0: the calling thread only.
	if _, _, e := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(rs), 0, 0); e != 0 {
		return fmt.Errorf("landlock restrict: %w", e)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

// landlockScopes returns the Landlock ruleset every confined command is
// restricted by (scoped signals and abstract unix sockets, no rule): made
// once, kept open (close-on-exec) and applied by each confined thread.
var landlockScopes = sync.OnceValues(func() (int, error) {
	attr := unix.LandlockRulesetAttr{Scoped: unix.LANDLOCK_SCOPE_SIGNAL | unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET}
	rs, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
	if e != 0 {
		return -1, fmt.Errorf("landlock ruleset: %w", e)
	}
	return int(rs), nil
})
