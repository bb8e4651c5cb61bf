//go:build !linux

// The nats-server processes these tests start die with the test process
// through Linux's parent-death signal, and dshd, which they test, is Linux
// only. On any other system the build stops at this import, whose path is
// the message.
package natstest

import _ "dshd/is-Linux-only"
