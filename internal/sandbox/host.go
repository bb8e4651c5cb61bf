package sandbox

import (
	"context"
	"fmt"
	"net"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/dshd/dshd/internal/netallow"
)

// Mechanism is how confined policies are enforced.
type Mechanism string

const (
	// MechanismAuto uses namespaces where dshd may create them (it runs
	// with CAP_SYS_ADMIN and the kernel has Landlock ABI 6 or later), and
	// bubblewrap elsewhere.
	MechanismAuto Mechanism = "auto"
	// MechanismNamespaces: the spawning thread itself enters a new mount
	// (and network) namespace, builds the file-system view, drops every
	// capability and scopes signals and ptrace with Landlock, then starts
	// the command: no extra process, the command is the job's leader.
	MechanismNamespaces Mechanism = "namespaces"
	// MechanismBubblewrap runs the command under bubblewrap (bwrap), which
	// also gives it a pid namespace of its own. Works without privileges
	// where the kernel allows unprivileged user namespaces.
	MechanismBubblewrap Mechanism = "bubblewrap"
)

// Config is what a Host needs to build sandboxes.
type Config struct {
	// Mechanism is the one requested; "" means MechanismAuto.
	Mechanism Mechanism
	// Bwrap is the bubblewrap binary: a path, or a name looked up on PATH;
	// "" means "bwrap".
	Bwrap string
	// Shell runs the startup probes (shell -c :); "" means "bash".
	Shell string
	// Home is the dshd home, hidden inside every sandbox except Skills.
	Home string
	// Skills is the directory bound back read-only inside the hidden home;
	// "" means <Home>/skills.
	Skills string
	// TokenFile is covered inside every sandbox (also when outside Home).
	TokenFile string
	// WritableRoots are extra directories writable under workspace-write.
	WritableRoots []string
	// Protected are paths kept read-only inside writable roots (besides
	// the .git of every writable root and of repositories nested in it).
	Protected []string
	// Hidden are hidden inside every sandbox: a directory under an empty
	// read-only tmpfs, anything else under /dev/null. nil means
	// DefaultHidden.
	Hidden []string
	// GitScanMaxEntries bounds how many directory entries the search for
	// the .git directories of a command's writable roots may read; a
	// command whose roots hold more is refused (ErrUnavailable) rather
	// than run with a .git left writable. 0 means DefaultGitScanMaxEntries.
	GitScanMaxEntries int
	// Proxy serves the network allowlist's connections; nil: the
	// allowlist policy is unavailable.
	Proxy *netallow.Proxy
	// NoSeccomp turns the system-call filter (see seccomp.go) off, to
	// measure what it costs; confined commands otherwise always run under
	// it, or not at all.
	NoSeccomp bool
}

// DefaultHidden are the sockets of services that run commands for whoever
// connects as the right user, outside any sandbox: a container runtime,
// systemd, the system bus. A confined command keeps dshd's uid (0 when dshd
// runs as root), so it must not see them. Paths that do not exist are
// skipped.
var DefaultHidden = []string{
	"/run/docker.sock", "/var/run/docker.sock",
	"/run/containerd/containerd.sock", "/run/podman/podman.sock",
	"/run/systemd/private", "/run/dbus/system_bus_socket",
}

// Host builds sandboxes for the policies this host can enforce.
type Host struct {
	cfg   Config
	mech  Mechanism // namespaces or bubblewrap; "" when none works
	bwrap string    // absolute path, with MechanismBubblewrap
	why   string    // why confined policies are unavailable, or why auto fell back
	net   bool      // network namespaces work
	// netWhy says why the network cannot be turned off.
	netWhy string
	// allow: the allowlist works (a proxy, and a network namespace dshd
	// makes itself and listens in); allowWhy says why not.
	allow    bool
	allowWhy string
	// nsWhy says why auto did not use namespaces; "" if it did, or was
	// not asked to.
	nsWhy string
	// git finds the .git directories of writable roots.
	git gitScanner
	// nsFilter and bwrapFilter are the system-call filters of each
	// mechanism; nil with Config.NoSeccomp.
	nsFilter, bwrapFilter *syscallFilter
}

// probeTimeout bounds each startup probe.
const probeTimeout = 10 * time.Second

// ValidMechanism reports whether m names a mechanism ("" is auto).
func ValidMechanism(m Mechanism) bool {
	switch m {
	case "", MechanismAuto, MechanismNamespaces, MechanismBubblewrap:
		return true
	}
	return false
}

// NewHost chooses the mechanism and probes once that it can build a
// sandbox (and one with a network namespace) on this host. A host where it
// cannot still works: only unrestricted policies are enforceable then.
func NewHost(ctx context.Context, cfg Config) *Host {
	h := &Host{cfg: cfg}
	if h.cfg.Skills == "" && cfg.Home != "" {
		h.cfg.Skills = filepath.Join(cfg.Home, "skills")
	}
	if h.cfg.Mechanism == "" {
		h.cfg.Mechanism = MechanismAuto
	}
	if h.cfg.Hidden == nil {
		h.cfg.Hidden = DefaultHidden
	}
	shell := cfg.Shell
	if shell == "" {
		shell = "bash"
	}
	if p, err := osexec.LookPath(shell); err == nil {
		shell, _ = filepath.Abs(p)
	}
	if !cfg.NoSeccomp {
		// No filter, no confinement: never run a confined command
		// without it.
		var err error
		if h.nsFilter, err = newSyscallFilter(clone3Allowed); err == nil {
			h.bwrapFilter, err = newSyscallFilter(clone3NoSys)
		}
		if err != nil {
			h.why, h.netWhy = err.Error(), err.Error()
			return h
		}
	}
	var nsWhy string
	if h.cfg.Mechanism != MechanismBubblewrap {
		err := probeNamespaces(ctx, shell, h.nsFilter)
		if err == nil {
			h.mech, h.net = MechanismNamespaces, true
			h.probeAllow(false)
			return h
		}
		nsWhy = "namespaces: " + err.Error()
		if h.cfg.Mechanism == MechanismNamespaces {
			h.why, h.netWhy = nsWhy, nsWhy
			return h
		}
	}
	h.probeBwrap(ctx)
	h.probeAllow(true)
	h.nsWhy = nsWhy
	if nsWhy != "" && h.mech == "" {
		h.why = nsWhy + "; " + h.why
		h.netWhy = nsWhy + "; " + h.netWhy
	}
	return h
}

// probeAllow decides whether the allowlist works: it needs the proxy and a
// working network namespace, and, under bubblewrap (ownNetNS), that dshd
// may make that namespace itself (it must listen in it before bubblewrap
// starts: CAP_SYS_ADMIN).
func (h *Host) probeAllow(ownNetNS bool) {
	switch {
	case h.cfg.Proxy == nil:
		h.allowWhy = "network allowlist: no proxy configured"
	case h.mech == "":
		h.allowWhy = h.why
	case !h.net:
		h.allowWhy = h.netWhy
	case ownNetNS:
		ln, err := startInNetNS(func() error { return nil })
		if err != nil {
			h.allowWhy = "network allowlist under bubblewrap needs dshd to create network namespaces itself: " + err.Error()
			return
		}
		ln.Close()
		h.allow = true
	default:
		h.allow = true
	}
}

// probeBwrap finds bubblewrap and checks it can build a sandbox here.
func (h *Host) probeBwrap(ctx context.Context) {
	name := h.cfg.Bwrap
	if name == "" {
		name = "bwrap"
	}
	path, err := osexec.LookPath(name)
	if err == nil {
		path, err = filepath.Abs(path)
	}
	if err != nil {
		h.why = fmt.Sprintf("bubblewrap not found (%s): %v", name, err)
		h.netWhy = h.why
		return
	}
	probe := func(net bool) error {
		ctx, cancel := context.WithTimeout(ctx, probeTimeout)
		defer cancel()
		extra, fd, err := h.bwrapFiles()
		if err != nil {
			return err
		}
		defer closeAll(extra)
		argv := bwrapArgs(path, plan{readOnlyRoot: true, newNet: net}, fd, "/", "/bin/true", []string{"true"})
		cmd := osexec.CommandContext(ctx, path, argv[1:]...)
		cmd.ExtraFiles = extra
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %v: %s", path, err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	if err := probe(false); err != nil {
		h.why = "bubblewrap cannot create a sandbox here: " + err.Error()
		h.netWhy = h.why
		return
	}
	h.mech, h.bwrap = MechanismBubblewrap, path
	if err := probe(true); err != nil {
		h.netWhy = "bubblewrap cannot create a network namespace here: " + err.Error()
		return
	}
	h.net = true
}

// Check returns nil when this host can enforce p, the policy in effect;
// ErrInvalid when p is not one (ValidateEffective), else ErrUnavailable
// saying why.
func (h *Host) Check(p Policy) error {
	if err := p.ValidateEffective(); err != nil {
		return err
	}
	if !p.Confined() {
		return nil
	}
	if h == nil {
		return fmt.Errorf("%w: %s: no sandbox configured", ErrUnavailable, p)
	}
	if h.mech == "" {
		return fmt.Errorf("%w: %s: %s", ErrUnavailable, p, h.why)
	}
	if p.Network == NetworkOff && !h.net {
		return fmt.Errorf("%w: %s: %s", ErrUnavailable, p, h.netWhy)
	}
	if p.Network == NetworkAllowlist && !h.allow {
		return fmt.Errorf("%w: %s: %s", ErrUnavailable, p, h.allowWhy)
	}
	return nil
}

// Support is what a host can enforce, for GET /healthz.
type Support struct {
	// Policies are the file-system policies enforceable here.
	Policies []FS
	// Networks are the network policies enforceable here.
	Networks []Network
	// Mechanism names how ("namespaces", "bubblewrap /usr/bin/bwrap"), ""
	// if none.
	Mechanism string
	// Seccomp describes the system-call filter confined commands run
	// under ("x86_64: 43 calls denied"); "" without one.
	Seccomp string
	// Reason says why something is not enforceable; "" when all is.
	Reason string
}

// Support reports what this host can enforce.
func (h *Host) Support() Support {
	s := Support{Policies: []FS{Unrestricted}, Networks: []Network{NetworkOn}}
	if h == nil {
		s.Reason = "no sandbox configured"
		return s
	}
	if h.mech == "" {
		s.Reason = h.why
		return s
	}
	s.Mechanism = string(h.mech)
	f := h.nsFilter
	if h.mech == MechanismBubblewrap {
		s.Mechanism += " " + h.bwrap
		f = h.bwrapFilter
	}
	if f != nil {
		s.Seccomp = f.desc
	}
	s.Policies = append(s.Policies, WorkspaceWrite, ReadOnly)
	if h.allow {
		s.Networks = append(s.Networks, NetworkAllowlist)
	}
	if h.net {
		s.Networks = append(s.Networks, NetworkOff)
	} else {
		s.Reason = h.netWhy
	}
	if !h.allow && s.Reason == "" {
		s.Reason = h.allowWhy
	}
	return s
}

// FellBack says why auto did not use namespaces ("" when it did, or when
// a mechanism was configured).
func (h *Host) FellBack() string {
	if h == nil {
		return ""
	}
	return h.nsWhy
}

// Mechanism returns the mechanism in use, "" when none works.
func (h *Host) Mechanism() Mechanism {
	if h == nil {
		return ""
	}
	return h.mech
}

// StartFunc starts the program path with args (args[0] its name), with
// extra open in it as descriptors 3, 4, … (os/exec's Cmd.ExtraFiles), on
// the calling goroutine (os/exec's Cmd.Start does), and returns. The
// caller of a StartFunc closes extra afterwards.
type StartFunc func(path string, args []string, extra []*os.File) error

// Start starts the program path with args (args[0] its name) under p in
// cwd, by calling start exactly once with the program to start, or not at
// all when building the sandbox fails. Under workspace-write the command
// may write in roots (and the configured writable roots) only; under
// read-only, roots under /tmp stay visible in the private /tmp. cwd is
// where the command starts and nothing more: it grants nothing, so a
// model's workdir can only move inside the view the harness's roots make
// (a cwd the view lacks fails to start). For an unconfined p it calls
// start(path, args, nil). Call Check first: Start assumes
// p is enforceable. A protection that cannot be applied in full fails with
// ErrUnavailable, and nothing starts.
//
// Under the network allowlist it returns the command's proxy session
// (nil otherwise): the caller closes it when the job ends, and reads what
// the command reached and was refused from it.
func (h *Host) Start(p Policy, cwd string, roots []string, path string, args []string, start StartFunc) (*netallow.Session, error) {
	return h.StartIn(nil, p, cwd, roots, path, args, start)
}

// View is a file-system view a command sees at a path of its own: a
// detached mount (an agent's snapshot workspace, see package workspace)
// that the command's mount namespace mounts at Target, over what is there.
type View struct {
	// Target is where the view is mounted (the workspace directory).
	Target string
	// FD is the detached mount (from fsmount or open_tree); cloned, never
	// consumed, so one descriptor serves every job.
	FD int
}

// StartIn is Start with the command seeing view (nil: none) at its
// target: the command gets a mount namespace of its own, with a clone of
// the view mounted there first, then the sandbox of p built on top (so
// workspace-write makes the view writable, read-only keeps it read-only),
// or nothing more for an unconfined p. A nil Host starts unconfined
// commands only.
func (h *Host) StartIn(view *View, p Policy, cwd string, roots []string, path string, args []string, start StartFunc) (*netallow.Session, error) {
	if !p.Confined() {
		if view != nil {
			_, err := startInNamespaces(plan{view: view, viewOnly: true}, nil, func() error { return start(path, args, nil) })
			return nil, err
		}
		return nil, start(path, args, nil)
	}
	if h == nil {
		return nil, fmt.Errorf("%w: %s: no sandbox configured", ErrUnavailable, p)
	}
	if p.Network == NetworkAllowlist && !h.allow {
		return nil, fmt.Errorf("%w: %s: the network allowlist is unavailable", ErrUnavailable, p)
	}
	pl, err := h.planFor(p, roots, view)
	if err != nil {
		return nil, err
	}
	var ln net.Listener
	switch h.mech {
	case MechanismNamespaces:
		pl.view = view
		ln, err = startInNamespaces(pl, h.nsFilter, func() error { return start(path, args, nil) })
	case MechanismBubblewrap:
		extra, fd, ferr := h.bwrapFiles()
		if ferr != nil {
			return nil, ferr
		}
		defer closeAll(extra)
		a := bwrapArgs(h.bwrap, pl, fd, cwd, path, args)
		run := func() error { return start(h.bwrap, append([]string{"bwrap"}, a[1:]...), extra) }
		switch {
		case view != nil:
			// bubblewrap builds its namespace from the one it starts in,
			// binding / recursively: the view mounted there is in it, and
			// under the allowlist so is the network namespace with the
			// proxy's listener.
			ln, err = startInNamespaces(plan{view: view, viewOnly: true, newNet: pl.proxy, proxy: pl.proxy}, nil, run)
		case pl.proxy:
			ln, err = startInNetNS(run)
		default:
			err = run()
		}
	default:
		return nil, fmt.Errorf("%w: %s: %s", ErrUnavailable, p, h.why)
	}
	if err != nil || ln == nil {
		return nil, err
	}
	return h.cfg.Proxy.Serve(ln, p.Allow.List()), nil
}

// bwrapFiles returns what bubblewrap's child gets besides its streams: the
// filter's pipe as descriptor 3 (fd), or nothing (fd -1) without a filter.
func (h *Host) bwrapFiles() (extra []*os.File, fd int, err error) {
	if h.bwrapFilter == nil {
		return nil, -1, nil
	}
	f, err := h.bwrapFilter.file()
	if err != nil {
		return nil, -1, fmt.Errorf("sandbox: %w", err)
	}
	return []*os.File{f}, 3, nil
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// Config is the configuration the host was made with (its paths: the home,
// the token, the writable, protected and hidden paths).
func (h *Host) Config() Config { return h.cfg }
