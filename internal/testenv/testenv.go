// Package testenv holds the suite's one rule for "in CI": the rule every
// test follows before it skips.
//
// Outside CI a test whose requirement is missing (root, a Debian package, an
// npm package, a kernel feature) skips and says how to get it. In CI, where
// `make deps` installed everything and the machine runs as root, the same
// test fails instead: a skip there would hide what it stopped checking.
package testenv

import (
	"os"
	"strings"
	"testing"
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
