//go:build !linux

// Sandboxes are built from Linux's namespaces, mount API, Landlock and
// seccomp (or bubblewrap, which uses the same). On any other system the
// build stops at this import, whose path is the message.
package sandbox

import _ "dshd/is-Linux-only"
