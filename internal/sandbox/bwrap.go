package sandbox

import (
	"os"
	"strconv"
)

// bwrapArgs renders pl as bubblewrap's command line running path with args
// (args[0] is replaced by path, which bubblewrap executes) in cwd, under
// the seccomp filter bubblewrap reads from descriptor seccompFD (none if
// negative).
func bwrapArgs(bwrap string, pl plan, seccompFD int, cwd, path string, args []string) []string {
	a := make([]string, 0, 48)
	// No capabilities inside: root in the sandbox could otherwise remount
	// / read-write or unmount what hides the dshd home. A pid namespace of
	// its own: the command cannot signal or trace anything outside.
	a = append(a, bwrap, "--cap-drop", "ALL", "--unshare-pid")
	if seccompFD >= 0 {
		a = append(a, "--seccomp", strconv.Itoa(seccompFD))
	}
	if pl.newNet && !pl.proxy {
		// With the proxy, dshd made the namespace (startInNetNS).
		a = append(a, "--unshare-net")
	}
	if !pl.readOnlyRoot {
		a = append(a, "--bind", "/", "/", "--dev-bind", "/dev", "/dev", "--proc", "/proc")
	} else {
		// The new /proc read-only too: uid 0 needs no capability to write
		// most sysctls (kernel.core_pattern would run a program as root
		// outside the sandbox).
		a = append(a, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--remount-ro", "/proc", "--tmpfs", "/tmp")
		for _, r := range pl.visible {
			a = append(a, "--ro-bind", r, r)
		}
		for _, r := range pl.writable {
			a = append(a, "--bind", r, r)
		}
		for _, r := range pl.protected {
			a = append(a, "--ro-bind", r, r)
		}
	}
	if pl.home != "" {
		a = append(a, "--tmpfs", pl.home)
		if pl.skills != "" {
			a = append(a, "--ro-bind", pl.skills, pl.skills)
		}
		a = append(a, "--remount-ro", pl.home)
	}
	if pl.token != "" {
		a = append(a, "--ro-bind", os.DevNull, pl.token)
	}
	for _, p := range pl.hidden {
		if isDir(p) {
			a = append(a, "--tmpfs", p, "--remount-ro", p)
		} else {
			a = append(a, "--ro-bind", os.DevNull, p)
		}
	}
	a = append(a, "--chdir", cwd, "--", path)
	return append(a, args[1:]...)
}
