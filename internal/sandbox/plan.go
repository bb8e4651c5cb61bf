package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
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
}

// planFor computes the sandbox of p for a command in cwd with the agent's
// workspace roots. It looks at the file system: paths that do not exist
// are left out (a missing cwd fails later, as without a sandbox).
func (h *Host) planFor(p Policy, cwd string, roots []string) plan {
	pl := plan{newNet: p.Network == NetworkOff, readOnlyRoot: p.FS != Unrestricted}
	switch p.FS {
	case ReadOnly:
		for _, r := range append([]string{cwd}, roots...) {
			if r != "" && !slices.Contains(pl.visible, r) && within(r, "/tmp") && isDir(r) {
				pl.visible = append(pl.visible, r)
			}
		}
	case WorkspaceWrite:
		for _, r := range append(append([]string{cwd}, roots...), h.cfg.WritableRoots...) {
			if r != "" && !slices.Contains(pl.writable, r) && isDir(r) {
				pl.writable = append(pl.writable, r)
			}
		}
		for _, r := range pl.writable {
			for _, g := range gitDirs(r) {
				if !slices.Contains(pl.protected, g) {
					pl.protected = append(pl.protected, g)
				}
			}
		}
		for _, pr := range h.cfg.Protected {
			if exists(pr) && !slices.Contains(pl.protected, pr) {
				pl.protected = append(pl.protected, pr)
			}
		}
	}
	if h.cfg.Home != "" && isDir(h.cfg.Home) {
		pl.home = h.cfg.Home
		if h.cfg.Skills != "" && isDir(h.cfg.Skills) && within(h.cfg.Skills, h.cfg.Home) {
			pl.skills = h.cfg.Skills
		}
	}
	if tf := h.cfg.TokenFile; tf != "" && exists(tf) && (pl.home == "" || !within(tf, pl.home)) {
		pl.token = tf
	}
	for _, p := range h.cfg.Hidden {
		// Through links (/var/run is one to /run): the mount goes on the
		// target, where the kernel would put it anyway.
		r, err := filepath.EvalSymlinks(p)
		if err != nil || (pl.home != "" && within(r, pl.home)) || slices.Contains(pl.hidden, r) {
			continue
		}
		pl.hidden = append(pl.hidden, r)
	}
	return pl
}

// gitDirMaxDepth bounds how deep below a writable root nested repositories
// are looked for; gitDirMaxEntries bounds how many directory entries the
// search reads, so a huge workspace costs a bounded time per command.
const (
	gitDirMaxDepth   = 3
	gitDirMaxEntries = 4096
)

// gitDirs returns the .git entries (directories, or the files of worktrees
// and submodules) of root and of repositories nested in it, down to
// gitDirMaxDepth levels, root's own first. It does not descend into .git
// directories, symbolic links, or node_modules.
func gitDirs(root string) []string {
	var out []string
	budget := gitDirMaxEntries
	var walk func(dir string, depth int)
	walk = func(dir string, depth int) {
		if budget <= 0 {
			return
		}
		g := filepath.Join(dir, ".git")
		if exists(g) {
			out = append(out, g)
		}
		if depth == gitDirMaxDepth {
			return
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			return
		}
		budget -= len(ents)
		for _, e := range ents {
			if budget <= 0 {
				return
			}
			if !e.IsDir() || e.Name() == ".git" || e.Name() == "node_modules" {
				continue
			}
			walk(filepath.Join(dir, e.Name()), depth+1)
		}
	}
	walk(root, 0)
	return out
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// within reports whether p is dir or below it (lexically).
func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
