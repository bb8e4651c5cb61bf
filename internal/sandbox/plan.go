package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/dshd/dshd/internal/beneath"
)

// plan is what one confined command's sandbox is made of, computed from its
// policy, cwd and roots and the host's configuration. Both mechanisms build
// the same plan; only how they build it differs.
type plan struct {
	// readOnlyRoot: / (every mount) read-only, a private /tmp and a
	// minimal /dev (null, zero, full, random, urandom, tty, pts, shm).
	readOnlyRoot bool
	// writable are bound back read-write over the read-only root, in
	// order; under /tmp they are bound into the private /tmp.
	writable []string
	// visible are shown read-only inside the private /tmp (the read-only
	// policy's cwd and roots that live under /tmp).
	visible []string
	// protected are made read-only again after the writable roots are in
	// place: each writable root's .git, and the configured protected paths.
	protected []string
	// home is hidden under an empty read-only tmpfs, skills (if set)
	// bound back read-only inside it.
	home, skills string
	// token is covered with /dev/null (a token file outside the home).
	token string
	// hidden are hidden: directories under an empty read-only tmpfs,
	// anything else under /dev/null.
	hidden []string
	// newNet: a network namespace of its own, loopback up.
	newNet bool
	// proxy: in that namespace, a listener on 127.0.0.1:netallow.Port
	// whose connections dshd's proxy serves (the allowlist).
	proxy bool
	// view, if set, is mounted at its target first of all; with viewOnly
	// nothing else is done (an unconfined command, or bubblewrap's
	// starting point): no capability is dropped.
	view     *View
	viewOnly bool
}

// planFor computes the sandbox of p for a command whose writable (or, under
// read-only, visible) roots are roots: the directories the harness chose
// (its cwd, the agent's workspace), never one a model named. The command's
// own working directory is not among them unless the harness put it there:
// a model's workdir moves only inside the view. It looks at the file
// system: roots that do not exist are left out (a missing cwd fails later,
// as without a sandbox), and so are roots on the kernel's file systems
// (/proc, /sys, /dev), which are never writable inside a sandbox.
//
// It fails, and nothing may run, when a protection cannot be applied in
// full: a writable root too large to search for its .git directories.
//
// With a view, what lies under its target is looked at in the view (as
// the command will see it), not in the host's directory it covers.
func (h *Host) planFor(p Policy, roots []string, view *View) (plan, error) {
	pl := plan{newNet: p.Network != NetworkOn, proxy: p.Network == NetworkAllowlist, readOnlyRoot: p.FS != Unrestricted}
	// seen maps a path of the command's view to where dshd sees it.
	seen := func(q string) string {
		if view != nil && beneath.Within(q, view.Target) {
			rel, _ := filepath.Rel(view.Target, q)
			return filepath.Join(view.path(), rel)
		}
		return q
	}
	switch p.FS {
	case ReadOnly:
		for _, r := range roots {
			if r != "" && !slices.Contains(pl.visible, r) && beneath.Within(r, "/tmp") && isDir(seen(r)) {
				pl.visible = append(pl.visible, r)
			}
		}
	case WorkspaceWrite:
		for _, r := range append(slices.Clip(roots), h.cfg.WritableRoots...) {
			if r != "" && !slices.Contains(pl.writable, r) && !kernelFS(r) && isDir(seen(r)) {
				pl.writable = append(pl.writable, r)
			}
		}
		limit := h.cfg.GitScanMaxEntries
		if limit <= 0 {
			limit = DefaultGitScanMaxEntries
		}
		budget := limit
		for _, r := range pl.writable {
			gits, err := h.git.scan(seen(r), &budget, limit)
			if err != nil {
				return plan{}, err
			}
			for _, g := range gits {
				if s := seen(r); s != r {
					rel, _ := filepath.Rel(s, g)
					g = filepath.Join(r, rel)
				}
				if !slices.Contains(pl.protected, g) {
					pl.protected = append(pl.protected, g)
				}
			}
		}
		for _, pr := range h.cfg.Protected {
			if exists(seen(pr)) && !slices.Contains(pl.protected, pr) {
				pl.protected = append(pl.protected, pr)
			}
		}
	}
	if h.cfg.Home != "" && isDir(h.cfg.Home) {
		pl.home = h.cfg.Home
		if h.cfg.Skills != "" && isDir(h.cfg.Skills) && beneath.Within(h.cfg.Skills, h.cfg.Home) {
			pl.skills = h.cfg.Skills
		}
	}
	if tf := h.cfg.TokenFile; tf != "" && exists(tf) && (pl.home == "" || !beneath.Within(tf, pl.home)) {
		pl.token = tf
	}
	for _, p := range h.cfg.Hidden {
		// Most are absent (no container runtime, no systemd): one stat
		// says so, for a fifth of resolving the path.
		var st unix.Stat_t
		if err := unix.Stat(p, &st); errors.Is(err, unix.ENOENT) {
			continue
		}
		// Through links (/var/run is one to /run): the mount goes on the
		// target, where the kernel would put it anyway.
		r, err := filepath.EvalSymlinks(p)
		if err != nil || (pl.home != "" && beneath.Within(r, pl.home)) || slices.Contains(pl.hidden, r) {
			continue
		}
		pl.hidden = append(pl.hidden, r)
	}
	return pl, nil
}

// path is where dshd itself sees the view (through its descriptor).
func (v *View) path() string { return "/proc/self/fd/" + strconv.Itoa(v.FD) }

// kernelFS reports whether p is on one of the kernel's own file systems,
// where a writable root would let a command change the host (a sysctl, a
// cgroup's members, a device): /proc, /sys and /dev, also through links.
func kernelFS(p string) bool {
	for _, q := range []string{p, evalOr(p)} {
		for _, k := range []string{"/proc", "/sys", "/dev"} {
			if beneath.Within(q, k) {
				return true
			}
		}
	}
	return false
}

// evalOr returns p with its links resolved, or p when that fails.
func evalOr(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
