// Package faults lets the crash tests kill dshd at a named point of a write
// made of several steps, as kill -9 or a power cut would, to prove that
// each point leaves something the next start completes or rolls back.
//
// Points are inert unless the environment variable DSHD_CRASH_AT names one
// when the process starts: "name" kills the process the first time the
// point is reached, "name:N" the Nth time. Only whoever sets dshd's own
// environment (the operator, a test) can arm one; nothing a request or a
// command sends reaches it.
//
// Floor 0 of the layout (docs/design.md#floors): it imports no other package of dshd.
package faults

import (
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// Env is the variable that arms a point.
const Env = "DSHD_CRASH_AT"

var (
	armed string // the point's name; "" when none is armed
	nth   int64  = 1
	hits  atomic.Int64
)

func init() {
	armed = os.Getenv(Env)
	if name, n, ok := strings.Cut(armed, ":"); ok {
		if k, err := strconv.ParseInt(n, 10, 64); err == nil && k > 0 {
			armed, nth = name, k
		}
	}
}

// Point kills the process with SIGKILL when it is the armed point and has
// been reached as often as asked; otherwise it does nothing (one string
// comparison).
func Point(name string) {
	if armed == "" || name != armed {
		return
	}
	if hits.Add(1) < nth {
		return
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // SIGKILL is not delivered synchronously
}
