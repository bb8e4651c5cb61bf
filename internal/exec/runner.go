package exec

import (
	"github.com/dshd/dshd/internal/limits"
	"github.com/dshd/dshd/internal/proc"
)

// The job table shows parts of the process runner (package proc) in its own
// API: what a job used and how its limits are enforced, how this host
// contains jobs, and the runner's errors. They are the runner's, under the
// names the job table has always given them.

// Limits are a job's resource limits.
type Limits = limits.Limits

// Usage is what a job used (proc.Usage).
type Usage = proc.Usage

// LimitEnforcement says how each limit of a job is enforced (Enforced*).
type LimitEnforcement = proc.LimitEnforcement

// ContainmentInfo says how the executor contains jobs on this host.
type ContainmentInfo = proc.ContainmentInfo

// Containment modes (Options.Containment).
const (
	ContainmentAuto   = proc.ContainmentAuto
	ContainmentCgroup = proc.ContainmentCgroup
	ContainmentGroup  = proc.ContainmentGroup
)

// How a limit is enforced (LimitEnforcement).
const (
	EnforcedCgroup   = proc.EnforcedCgroup
	EnforcedCgroupV1 = proc.EnforcedCgroupV1
	EnforcedWatcher  = proc.EnforcedWatcher
	EnforcedRlimit   = proc.EnforcedRlimit
	EnforcedNone     = proc.EnforcedNone
)

// Why a job was killed (Snapshot.KilledBy).
const (
	KilledByTimeout   = proc.KilledByTimeout
	KilledByCancel    = proc.KilledByCancel
	KilledByShutdown  = proc.KilledByShutdown
	KilledByOOM       = proc.KilledByOOM
	KilledByPidsLimit = proc.KilledByPidsLimit
)

// MaxArgBytes is the longest single argument or environment entry execve
// accepts (proc.MaxArgBytes).
const MaxArgBytes = proc.MaxArgBytes

// LimitWatchInterval is how often the watcher checks limits the kernel does
// not enforce here (proc.LimitWatchInterval).
const LimitWatchInterval = proc.LimitWatchInterval

// CgroupName is the name of the cgroup subtree of the dshd using home.
func CgroupName(home string) string { return proc.CgroupName(home) }

// CloseInheritedOnExec marks every descriptor dshd inherited close-on-exec
// (proc.CloseInheritedOnExec).
func CloseInheritedOnExec() { proc.CloseInheritedOnExec() }

// Containment reports how jobs are contained.
func (e *Executor) Containment() ContainmentInfo { return e.run.Containment() }
