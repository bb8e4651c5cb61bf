//go:build !linux

// An agent's files are resolved with Linux's openat2. On any other system
// the build stops at this import, whose path is the message.
package files

import _ "dshd/is-Linux-only"
