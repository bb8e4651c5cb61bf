//go:build linux

package proc

import (
	"os"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1"
)

// What the tests of the job table (package exec), which run jobs through an
// Executor, read and steer of the runner that no API needs to show: the
// pipes and job groups made ahead, the reaper, the limit watcher, the
// leader's start time as the clock gave it. Nothing but tests calls these.

// PipesWanted is how many output pipe pairs the runner keeps made ahead.
const PipesWanted = pipesWanted

// SparesWanted is how many job groups the runner keeps made ahead, and
// SpareMaxAge the age past which one is removed rather than taken.
const (
	SparesWanted = sparesWanted
	SpareMaxAge  = spareMaxAge
)

// ReadyPipes returns the output pipe pairs made ahead and not taken, each
// as its stdout read and write ends, then stderr's.
func (r *Runner) ReadyPipes() [][4]*os.File {
	a := &r.pipes.ahead
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([][4]*os.File, 0, len(a.ready))
	for _, p := range a.ready {
		out = append(out, [4]*os.File{p.outR, p.outW, p.errR, p.errW})
	}
	return out
}

// ReadySpares returns how many job groups made ahead are ready (0 in group
// mode).
func (r *Runner) ReadySpares() int {
	s := r.cont.spares
	if s == nil {
		return 0
	}
	s.ahead.mu.Lock()
	defer s.ahead.mu.Unlock()
	return len(s.ahead.ready)
}

// AgeSpares makes every ready spare as old as SpareMaxAge and returns
// their ids.
func (r *Runner) AgeSpares() []string {
	s := r.cont.spares
	if s == nil {
		return nil
	}
	s.ahead.mu.Lock()
	defer s.ahead.mu.Unlock()
	var ids []string
	for i := range s.ahead.ready {
		s.ahead.ready[i].made = time.Now().Add(-spareMaxAge)
		ids = append(ids, s.ahead.ready[i].id)
	}
	return ids
}

// CanFreeze reports whether CPU limits can be enforced by freezing the
// job's group (cgroup.freeze) where the cpu controller is missing.
func (r *Runner) CanFreeze() bool { return r.cont.canFreeze }

// LongestWatchGap is the longest time the limit watcher went between two
// checks so far.
func (r *Runner) LongestWatchGap() time.Duration { return r.cont.watch.longestGap() }

// V1Dir is the directory of the v1 hierarchy of controller n in which the
// jobs' v1 groups are made; V1Has reports whether jobs get v1 groups of
// that controller.
func (r *Runner) V1Dir(n cgroup1.Name) string { return r.cont.v1.Dir(n) }

// V1Has reports whether jobs get v1 groups of controller c.
func (r *Runner) V1Has(c string) bool { return r.cont.v1.Has(c) }

// ClockStart is the leader's start time as the spawn read it from the
// clock; 0 when a tick boundary fell inside the spawn (LeaderStart then
// reads /proc).
func (p *Process) ClockStart() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.startedAt
}

// ClockTicks is USER_HZ, 0 if the auxiliary vector does not give it.
func ClockTicks() uint64 { return clockTicks() }

// ParseStat parses the line of /proc/<pid>/stat.
func ParseStat(pid int, line string) (Stat, bool) { return parseStat(pid, line) }

// StartSubreaper makes the process a child subreaper, as the first
// Executor in group mode does.
func StartSubreaper() error { return startSubreaper() }

// ReapAdopted runs one pass of the reaper.
func ReapAdopted() { reaperOf.reapAdopted() }

// RegisterChild is held around the start of a child the caller waits for
// itself, as the runner's spawns are: the reaper leaves it alone. Call the
// function it returns with the child's pid (0 if the start failed), and
// ChildReaped once the child is waited for.
func RegisterChild() func(pid int) { return reaperOf.spawning() }

// ChildReaped forgets a child registered with RegisterChild.
func ChildReaped(pid int) { reaperOf.reaped(pid) }

// SetParkedHook sets a function each waiter calls when it finds its leader
// running and parks in the poller; nil removes it. Not safe while
// processes run.
func SetParkedHook(f func()) { parkedHook = f }
