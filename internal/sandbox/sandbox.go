// Package sandbox confines what a job's command may touch: which parts of
// the file system it may write, whether it sees the dshd home, and whether
// it has a network. The harness chooses a Policy (server default, per agent,
// per execution); the model never can. Policies are enforced by bubblewrap
// (bwrap): a mount namespace with the whole file system bound read-only, the
// writable roots bound back read-write, .git and protected paths read-only
// again inside them, the dshd home hidden under an empty tmpfs (skills bound
// back read-only), the token file covered, a private /tmp, and a network
// namespace of its own when the network is off.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// FS is a file-system policy.
type FS string

// The file-system policies, loosest first.
const (
	// Unrestricted is no confinement: the command has every power of the
	// server's user.
	Unrestricted FS = "unrestricted"
	// WorkspaceWrite makes the file system readable (the dshd home hidden)
	// and writable only in the execution's cwd, the agent's workspace, a
	// private /tmp and configured extra roots; .git and protected paths stay
	// read-only inside them.
	WorkspaceWrite FS = "workspace-write"
	// ReadOnly makes the file system readable (the dshd home hidden) and
	// writable only in a private /tmp.
	ReadOnly FS = "read-only"
)

// Network is a network policy.
type Network string

// The network policies, loosest first.
const (
	NetworkOn  Network = "on"
	NetworkOff Network = "off" // a network namespace of its own: loopback only, nobody listening
)

// Errors.
var (
	// ErrInvalid: a policy name that does not exist.
	ErrInvalid = errors.New("invalid sandbox policy")
	// ErrLooser: a policy looser than the one it must stay within (a child
	// agent's, or an execution's, against its agent's).
	ErrLooser = errors.New("sandbox policy looser than allowed")
	// ErrUnavailable: this host cannot enforce the policy.
	ErrUnavailable = errors.New("sandbox policy cannot be enforced on this host")
)

// Policy is a complete or partial sandbox policy; an empty field means "not
// given" and is filled by Or.
type Policy struct {
	FS      FS      `json:"policy,omitempty"`
	Network Network `json:"network,omitempty"`
}

// Default is today's behaviour, the server default when config sets none.
var Default = Policy{FS: Unrestricted, Network: NetworkOn}

func fsRank(f FS) int {
	switch f {
	case Unrestricted:
		return 0
	case WorkspaceWrite:
		return 1
	case ReadOnly:
		return 2
	}
	return -1
}

func netRank(n Network) int {
	switch n {
	case NetworkOn:
		return 0
	case NetworkOff:
		return 1
	}
	return -1
}

// Validate checks the names given (empty fields are allowed).
func (p Policy) Validate() error {
	if p.FS != "" && fsRank(p.FS) < 0 {
		return fmt.Errorf("%w: policy %q (want unrestricted, workspace-write or read-only)", ErrInvalid, p.FS)
	}
	if p.Network != "" && netRank(p.Network) < 0 {
		return fmt.Errorf("%w: network %q (want on or off)", ErrInvalid, p.Network)
	}
	return nil
}

// Or fills the fields p leaves empty from def.
func (p Policy) Or(def Policy) Policy {
	if p.FS == "" {
		p.FS = def.FS
	}
	if p.Network == "" {
		p.Network = def.Network
	}
	return p
}

// Confined reports whether p needs a sandbox at all.
func (p Policy) Confined() bool { return p.FS != Unrestricted || p.Network == NetworkOff }

// Within reports whether p is at least as tight as outer on both axes.
func (p Policy) Within(outer Policy) bool {
	return fsRank(p.FS) >= fsRank(outer.FS) && netRank(p.Network) >= netRank(outer.Network)
}

// CheckWithin returns ErrLooser, naming both, when p is not Within outer.
// what names outer ("agent agt_x").
func (p Policy) CheckWithin(outer Policy, what string) error {
	if p.Within(outer) {
		return nil
	}
	return fmt.Errorf("%w: %s allows at most %s, requested %s", ErrLooser, what, outer, p)
}

func (p Policy) String() string { return fmt.Sprintf("%s, network %s", p.FS, p.Network) }

// Sentence says in one short sentence what a command may do under p, for
// the model (the bash tool's description ends with it).
func (p Policy) Sentence() string {
	var fs string
	switch p.FS {
	case Unrestricted:
		fs = "Sandbox: none, full file access"
	case WorkspaceWrite:
		fs = "Sandbox " + string(p.FS) + ": write only in workdir, workspace, /tmp; .git read-only"
	case ReadOnly:
		fs = "Sandbox " + string(p.FS) + ": write only in /tmp"
	}
	return fs + "; network " + string(p.Network) + "."
}

// Config is what a Host needs to build sandboxes.
type Config struct {
	// Bwrap is the bubblewrap binary: a path, or a name looked up on PATH;
	// "" means "bwrap".
	Bwrap string
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
	// every writable root's .git).
	Protected []string
}

// Host builds sandboxed command lines for the policies this host can
// enforce.
type Host struct {
	cfg    Config
	bwrap  string // absolute path; "" when unavailable
	why    string // why confined policies are unavailable
	net    bool   // network namespaces work
	netWhy string
}

// probeTimeout bounds each startup probe of bubblewrap.
const probeTimeout = 10 * time.Second

// NewHost finds bubblewrap and probes once that it can build a sandbox (a
// mount namespace, and a network namespace) on this host. A host where it
// cannot still works: only unrestricted policies are enforceable then.
func NewHost(ctx context.Context, cfg Config) *Host {
	h := &Host{cfg: cfg}
	if h.cfg.Skills == "" && cfg.Home != "" {
		h.cfg.Skills = filepath.Join(cfg.Home, "skills")
	}
	name := cfg.Bwrap
	if name == "" {
		name = "bwrap"
	}
	path, err := osexec.LookPath(name)
	if err != nil {
		h.why = fmt.Sprintf("bubblewrap not found (%s): %v", name, err)
		h.netWhy = h.why
		return h
	}
	if path, err = filepath.Abs(path); err != nil {
		h.why = fmt.Sprintf("bubblewrap %s: %v", name, err)
		h.netWhy = h.why
		return h
	}
	probe := func(extra ...string) error {
		ctx, cancel := context.WithTimeout(ctx, probeTimeout)
		defer cancel()
		args := append([]string{"--cap-drop", "ALL", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid"}, extra...)
		args = append(args, "--", "true")
		out, err := osexec.CommandContext(ctx, path, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %v: %s", path, err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	if err := probe(); err != nil {
		h.why = "bubblewrap cannot create a sandbox here: " + err.Error()
		h.netWhy = h.why
		return h
	}
	h.bwrap = path
	if err := probe("--unshare-net"); err != nil {
		h.netWhy = "bubblewrap cannot create a network namespace here: " + err.Error()
		return h
	}
	h.net = true
	return h
}

// Check returns nil when this host can enforce p, else ErrUnavailable
// saying why.
func (h *Host) Check(p Policy) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if !p.Confined() {
		return nil
	}
	if h == nil {
		return fmt.Errorf("%w: %s: no sandbox configured", ErrUnavailable, p)
	}
	if h.bwrap == "" {
		return fmt.Errorf("%w: %s: %s", ErrUnavailable, p, h.why)
	}
	if p.Network == NetworkOff && !h.net {
		return fmt.Errorf("%w: %s: %s", ErrUnavailable, p, h.netWhy)
	}
	return nil
}

// Support is what a host can enforce, for GET /healthz.
type Support struct {
	// Policies are the file-system policies enforceable here.
	Policies []FS
	// Networks are the network policies enforceable here.
	Networks []Network
	// Mechanism names the tool ("bubblewrap /usr/bin/bwrap"), "" if none.
	Mechanism string
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
	if h.bwrap == "" {
		s.Reason = h.why
		return s
	}
	s.Mechanism = "bubblewrap " + h.bwrap
	s.Policies = append(s.Policies, WorkspaceWrite, ReadOnly)
	if h.net {
		s.Networks = append(s.Networks, NetworkOff)
	} else {
		s.Reason = h.netWhy
	}
	return s
}

// Command returns the program and arguments that run argv (argv[0] an
// absolute path) under p in cwd, with roots (the agent's workspace) also
// writable under workspace-write. For an unconfined p it returns argv as
// is. Call Check first: Command assumes p is enforceable.
func (h *Host) Command(p Policy, cwd string, roots []string, argv []string) (string, []string) {
	if !p.Confined() {
		return argv[0], argv
	}
	a := make([]string, 0, 48)
	// No capabilities inside: root in the sandbox could otherwise remount
	// / read-write or unmount what hides the dshd home.
	a = append(a, "bwrap", "--cap-drop", "ALL", "--unshare-pid")
	if p.Network == NetworkOff {
		a = append(a, "--unshare-net")
	}
	if p.FS == Unrestricted {
		a = append(a, "--bind", "/", "/", "--dev-bind", "/dev", "/dev", "--proc", "/proc")
	} else {
		a = append(a, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp")
		if p.FS == ReadOnly {
			// Visible (read-only) even where the private /tmp covers them.
			for _, r := range append([]string{cwd}, roots...) {
				if r != "" && isDir(r) && within(r, "/tmp") {
					a = append(a, "--ro-bind", r, r)
				}
			}
		}
		if p.FS == WorkspaceWrite {
			var writable []string
			for _, r := range append(append([]string{cwd}, roots...), h.cfg.WritableRoots...) {
				if r != "" && !slices.Contains(writable, r) && isDir(r) {
					writable = append(writable, r)
				}
			}
			for _, r := range writable {
				a = append(a, "--bind", r, r)
			}
			for _, r := range writable {
				if g := filepath.Join(r, ".git"); exists(g) {
					a = append(a, "--ro-bind", g, g)
				}
			}
			for _, pr := range h.cfg.Protected {
				if exists(pr) {
					a = append(a, "--ro-bind", pr, pr)
				}
			}
		}
	}
	if h.cfg.Home != "" && isDir(h.cfg.Home) {
		a = append(a, "--tmpfs", h.cfg.Home)
		if h.cfg.Skills != "" && isDir(h.cfg.Skills) && within(h.cfg.Skills, h.cfg.Home) {
			a = append(a, "--ro-bind", h.cfg.Skills, h.cfg.Skills)
		}
	}
	if tf := h.cfg.TokenFile; tf != "" && exists(tf) && (h.cfg.Home == "" || !within(tf, h.cfg.Home)) {
		a = append(a, "--ro-bind", os.DevNull, tf)
	}

	a = append(a, "--chdir", cwd, "--")
	a = append(a, argv...)
	return h.bwrap, a
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
