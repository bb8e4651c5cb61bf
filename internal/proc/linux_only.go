//go:build !linux

// dshd runs only on Linux: its process runner relies on Linux-only calls
// (pipe2, F_SETPIPE_SZ, and process groups, pidfds and cgroups of the
// kernel). On any other system the build stops at this import, whose path is
// the message.
package proc

import _ "dshd/is-Linux-only"
