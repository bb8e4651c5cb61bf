// Package testenv holds the suite's one rule for "in CI": the rule every
// test follows before it skips.
//
// Outside CI a test whose requirement is missing (root, a Debian package, an
// npm package, a kernel feature) skips and says how to get it. In CI, where
// `make deps` installed everything and the machine runs as root, the same
// test fails instead: a skip there would hide what it stopped checking.
package testenv

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// InCI reports whether the tests run in CI: the CI variable is set to
// anything but "", "0" or "false" (CI=true and CI=1 alike).
func InCI() bool {
	switch strings.ToLower(strings.TrimSpace(os.Getenv("CI"))) {
	case "", "0", "false":
		return false
	}
	return true
}

// Need stops tb because a requirement is missing: a skip naming it outside
// CI, a failure in CI.
func Need(tb testing.TB, format string, args ...any) {
	tb.Helper()
	if InCI() {
		tb.Fatalf("missing in CI: "+format, args...)
	}
	tb.Skipf(format, args...)
}

// NeedRoot calls Need unless the tests run as root.
func NeedRoot(tb testing.TB, why string) {
	tb.Helper()
	if os.Geteuid() != 0 {
		Need(tb, "needs root: %s", why)
	}
}

// landlockMinABI is the Landlock ABI dshd's namespaces mechanism needs
// (scoped signals and abstract sockets; see package sandbox).
const landlockMinABI = 6

// NamespacesMissing says why this host cannot run dshd's namespaces
// mechanism (not root, or a kernel without Landlock ABI 6, Linux 6.12),
// or "" when it can. Such a host is still tested: with bubblewrap, which
// `make deps` installs and which every sandbox suite runs as well.
func NamespacesMissing() string {
	if os.Geteuid() != 0 {
		return "the namespaces mechanism needs root (CAP_SYS_ADMIN)"
	}
	abi, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if e != 0 {
		return fmt.Sprintf("the namespaces mechanism needs Landlock, which this kernel lacks (%v)", e)
	}
	if abi < landlockMinABI {
		return fmt.Sprintf("the namespaces mechanism needs Landlock ABI %d (Linux 6.12); this kernel has %d", landlockMinABI, abi)
	}
	return ""
}

// SkipMechanism skips tb when mechanism is "namespaces" and this host
// cannot run it (NamespacesMissing), in CI too: the host lacks it, and the
// bubblewrap runs of the same suite test the sandbox here.
func SkipMechanism(tb testing.TB, mechanism string) {
	tb.Helper()
	if mechanism != "namespaces" {
		return
	}
	if why := NamespacesMissing(); why != "" {
		tb.Skipf("%s; the bubblewrap runs of this suite cover this host", why)
	}
}
