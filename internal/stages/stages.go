// Package stages times the stages of one execution, from the request to
// its response, for the benchmarks that break its cost down (make bench).
// Without a hook (always, in a running server) a stage costs one atomic
// load at its start and one at its end.
//
// Floor 0 of the layout (docs/design.md#floors): it imports no other package of dshd.
package stages

import (
	"sync/atomic"
	"time"
)

// Stage is one step of a foreground execution.
type Stage uint8

// The stages, in the order one execution meets them.
const (
	Decode   Stage = iota // HTTP: route, authenticate, validate and decode the request
	Validate              // the pipeline's checks of the request (run)
	Reserve               // the job table: validation, sandbox check, id, caps
	Overlay               // collecting the managed environment
	Env                   // building the child's environment, checking its size
	Contain               // creating the job's cgroup (v2, and v1 groups)
	Streams               // the pipes: taken from those made ahead, or made
	Spawn                 // clone and exec of bash, the sandbox decision included
	Index                 // recording the job in the running index
	Wait                  // from the spawn's return to the leader reaped
	Release               // the cgroup's usage read and the group removed
	Drain                 // the output drained and the pipes closed
	Record                // the job's end recorded, the index entry removed
	Resume                // from the job's done signalled to its request running again
	Respond               // HTTP: from the job's end to the response written
	// Stages of a model's tool call (the tool route and MCP) beside those
	// of its command.
	Commit // one transcript event written and made durable (a call has at least two)
	Hooks  // one event's hooks run (PreToolUse, PostToolUse), none configured included
	Render // the command's result rendered as the model reads it
	N      // the number of stages
)

var names = [N]string{"decode", "validate", "reserve", "overlay", "env", "contain", "streams", "spawn", "index", "wait", "release", "drain", "record", "resume", "respond", "commit", "hooks", "render"}

func (s Stage) String() string {
	if s < N {
		return names[s]
	}
	return "stage?"
}

// Hook receives each timed stage.
type Hook func(s Stage, d time.Duration)

var hook atomic.Pointer[Hook]

// SetHook installs h (nil: none) and returns the one it replaces. Only
// benchmarks set one.
func SetHook(h Hook) Hook {
	var p *Hook
	if h != nil {
		p = &h
	}
	if old := hook.Swap(p); old != nil {
		return *old
	}
	return nil
}

// Start returns the start of a stage: the zero time when no hook is set.
func Start() time.Time {
	if hook.Load() == nil {
		return time.Time{}
	}
	return time.Now()
}

// Done reports stage s, started at t0 (Start), and returns now for the next
// stage (the zero time when no hook is set).
func Done(s Stage, t0 time.Time) time.Time {
	h := hook.Load()
	if h == nil || t0.IsZero() {
		return time.Time{}
	}
	now := time.Now()
	(*h)(s, now.Sub(t0))
	return now
}
