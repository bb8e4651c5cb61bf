//go:build !linux

// Workspaces are overlayfs layers mounted with Linux's mount API in each
// job's mount namespace. On any other system the build stops at this import,
// whose path is the message.
package workspace

import _ "dshd/is-Linux-only"
