//go:build !linux

// The suite's checks of what the host offers (Landlock, user namespaces,
// cgroups) are Linux's, as dshd is. On any other system the build stops at
// this import, whose path is the message.
package testenv

import _ "dshd/is-Linux-only"
