// Package cgroup gives each dshd job its own cgroup v2 group under a subtree
// the host lets dshd write: it finds dshd's own cgroup from /proc/self/cgroup
// and the cgroup2 mount (also on hybrid hosts, where cgroup2 is mounted
// beside the v1 hierarchies), creates a parent group per dshd home, and
// creates, limits, measures, kills and removes one child group per job.
//
// Processes are put into a group at clone time (clone3 with
// CLONE_INTO_CGROUP, exposed by Go as SysProcAttr.UseCgroupFD), so no
// process of a job runs outside its group even for an instant; Group.Kill
// writes cgroup.kill, which the kernel applies to every member, including
// those forked while it runs.
//
// Floor 0 of the layout (docs/design.md#floors): it imports no other package of dshd.
package cgroup

import (
	"errors"
	"time"
)

// ErrUnavailable is returned by Open when the host gives dshd no usable
// cgroup v2 subtree; the wrapped message says why.
var ErrUnavailable = errors.New("no usable cgroup v2 subtree")

// Limits are per-group resource limits. A zero field means no limit. A limit
// is applied only if its controller is enabled for the subtree (see
// Manager.Controllers); the others are left to the caller.
type Limits struct {
	// Pids is pids.max: the most tasks (processes and threads) in the group.
	Pids int64
	// MemoryBytes is memory.max.
	MemoryBytes int64
	// CPU is the share of one CPU the group may use (cpu.max), e.g. 0.5 for
	// half a CPU, 2 for two CPUs.
	CPU float64
}

// Usage is what a group used, read before it is removed. Fields are zero
// when the kernel does not report them (controller not enabled).
type Usage struct {
	// CPU is user plus system CPU time of every task that ran in the group.
	CPU time.Duration
	// PeakMemoryBytes is memory.peak, 0 without the memory controller or on
	// kernels before 5.19.
	PeakMemoryBytes int64
	// OOMKills counts tasks killed by the OOM killer inside the group
	// (memory.events oom_kill).
	OOMKills int64
	// PidsMaxHits counts forks refused by pids.max (pids.events max).
	PidsMaxHits int64
	// PidsPeak is the most tasks the group held at once (pids.peak, Linux
	// 6.13 or later, v1 groups); -1 when unknown.
	PidsPeak int64
}
