package proc

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dshd/dshd/internal/cgroup"
	"github.com/dshd/dshd/internal/limits"
)

// Limits bound what one job may use (see package limits). They are set by
// the server's configuration and by the harness (per agent, per
// execution); never by a model.
//
// Enforcement, best first: the cgroup controllers delegated to dshd
// (pids.max, memory.max, cpu.max); on a hybrid host, the cgroup v1
// controllers cgroup2 lacks (pids.max, memory.limit_in_bytes,
// cpu.cfs_quota_us in v1 groups the job is born in); where the kernel
// refuses a fork at the pids limit or OOM-kills a process at the memory
// limit, dshd then ends the whole job (KilledByPidsLimit, KilledByOOM).
// In cgroup mode without a controller,
// dshd itself watches the job's group every LimitWatchInterval and kills it
// on a breach (pids: the count of its processes; memory: the sum of their
// resident memory) and freezes it (cgroup.freeze) while it is past its CPU
// share; in group mode, RLIMIT_AS on the leader for memory, inherited by
// what it starts (a per-process bound: an allocation past it fails instead
// of the job being killed), and nothing for pids and CPU.
// Snapshot.Enforcement says which applied to a job.
type Limits = limits.Limits

// How a limit is enforced (LimitEnforcement).
const (
	// EnforcedCgroup: by the kernel, through the job cgroup's controller
	// (pids.max, memory.max with swap off, cpu.max).
	EnforcedCgroup = "cgroup"
	// EnforcedCgroupV1: by the kernel, through a cgroup v1 controller
	// (hybrid hosts, where cgroup2 lacks it): the job is born in a v1
	// group with pids.max, memory.limit_in_bytes (and memsw at the same
	// bound), cpu.cfs_quota_us.
	EnforcedCgroupV1 = "cgroup_v1"
	// EnforcedWatcher: by dshd, which checks the job's cgroup every
	// LimitWatchInterval and kills the whole job past its pids or memory
	// limit, and freezes it while it is past its CPU share.
	EnforcedWatcher = "watcher"
	// EnforcedRlimit: by RLIMIT_AS on every process of the job (group
	// mode): an allocation past it fails; the job is not killed.
	EnforcedRlimit = "rlimit"
	// EnforcedNone: not enforced on this host.
	EnforcedNone = "none"
)

// LimitEnforcement says how each limit of a job is enforced (Enforced*);
// "" for a limit that is not set.
type LimitEnforcement struct {
	Pids, MemoryBytes, CPU string
}

// enforcement says how c enforces l.
func (c *container) enforcement(l Limits) LimitEnforcement {
	var e LimitEnforcement
	if l.Pids > 0 {
		switch {
		case c.kernelHas("pids"):
			e.Pids = c.kernelKind("pids")
		case c.mgr != nil:
			e.Pids = EnforcedWatcher
		default:
			e.Pids = EnforcedNone
		}
	}
	if l.MemoryBytes > 0 {
		switch {
		case c.kernelHas("memory"):
			e.MemoryBytes = c.kernelKind("memory")
		case c.mgr != nil:
			e.MemoryBytes = EnforcedWatcher
		default:
			e.MemoryBytes = EnforcedRlimit
		}
	}
	if l.CPU > 0 {
		switch {
		case c.kernelHas("cpu"):
			e.CPU = c.kernelKind("cpu")
		case c.mgr != nil && c.canFreeze:
			e.CPU = EnforcedWatcher
		default:
			e.CPU = EnforcedNone
		}
	}
	return e
}

func cgroupLimits(l Limits) cgroup.Limits {
	return cgroup.Limits{Pids: l.Pids, MemoryBytes: l.MemoryBytes, CPU: l.CPU}
}

// Why a job was killed (Snapshot.KilledBy).
const (
	KilledByTimeout   = "timeout"    // its timeout expired
	KilledByCancel    = "cancelled"  // Cancel (DELETE /jobs/{id}, job_kill)
	KilledByShutdown  = "shutdown"   // the server shut down
	KilledByOOM       = "oom"        // it went past its memory limit
	KilledByPidsLimit = "pids_limit" // it went past its process limit
)

// Usage is what a job used.
type Usage struct {
	// CPUTime is user plus system time: of the whole cgroup in cgroup mode,
	// else of the leader and the descendants it waited for.
	CPUTime time.Duration
	// PeakMemoryBytes is the cgroup's memory.peak where the memory
	// controller is delegated, or the v1 memory group's peak where the job
	// has one, else the largest resident set of the leader and the
	// descendants it waited for; 0 when unknown.
	PeakMemoryBytes int64
	// PeakPids is the most tasks of the job at once where the kernel
	// counts them (pids.peak of its pids group); 0 when unknown.
	PeakPids int64
}

// LimitWatchInterval is how often dshd checks the limits it enforces itself.
const LimitWatchInterval = 50 * time.Millisecond

// cpuBurstPeriod is the CPU credit a throttled job may bank, in wall time
// at its share: cpu.max's default period.
const cpuBurstPeriod = 100 * time.Millisecond

// limitWatch enforces, in cgroup mode, the limits whose controller is not
// delegated: it kills a job past its pids or memory limit, and freezes a job
// past its CPU share until its share has caught up. One goroutine serves
// every watched job and runs only while there is one.
type limitWatch struct {
	mu      sync.Mutex
	procs   map[*Process]*watched
	running bool
	// maxGap is the longest time seen between two rounds (the interval,
	// or more when the machine is loaded): a throttled job can overrun
	// its share by that much CPU time before a round freezes it.
	maxGap time.Duration
}

// longestGap returns the longest time seen between two rounds so far.
func (w *limitWatch) longestGap() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.maxGap
}

// watched is one job under the watch.
type watched struct {
	l   Limits       // the limits dshd enforces itself
	cpu *cpuThrottle // nil: no CPU limit to enforce here
	// kernel: a pids or memory limit is enforced by the kernel; the job
	// is ended once it refused a fork or OOM-killed a process.
	kernel bool
}

func (w *limitWatch) add(p *Process, l Limits, throttleCPU, kernel bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.procs == nil {
		w.procs = make(map[*Process]*watched)
	}
	ws := &watched{l: l, kernel: kernel}
	if throttleCPU {
		ws.cpu = newCPUThrottle(l.CPU, time.Now())
	}
	w.procs[p] = ws
	if !w.running {
		w.running = true
		go w.loop()
	}
}

func (w *limitWatch) remove(p *Process) {
	w.mu.Lock()
	delete(w.procs, p)
	w.mu.Unlock()
}

func (w *limitWatch) loop() {
	t := time.NewTicker(LimitWatchInterval)
	defer t.Stop()
	last := time.Now()
	for now := range t.C {
		w.mu.Lock()
		w.maxGap = max(w.maxGap, now.Sub(last))
		last = now
		if len(w.procs) == 0 {
			w.running = false
			w.mu.Unlock()
			return
		}
		type item struct {
			p *Process
			w *watched
		}
		items := make([]item, 0, len(w.procs))
		for p, ws := range w.procs {
			items = append(items, item{p, ws})
		}
		w.mu.Unlock()
		for _, it := range items {
			reason := ""
			if it.w.kernel {
				reason = it.p.kernelBreach()
			}
			if reason == "" {
				reason = breach(it.p.cg, it.w.l)
			}
			if reason != "" {
				it.p.limitKill(reason)
				w.remove(it.p)
			} else if it.p.isExited() && !it.p.cg.Populated() {
				// Watched until its last process is gone: a leader may
				// exit and leave a fork bomb behind.
				w.remove(it.p)
			} else if it.w.cpu != nil {
				it.p.throttle(it.w.cpu.step(time.Now(), it.p.cg.CPUTime()))
			}
		}
	}
}

// cpuThrottle decides when a job past its CPU share is frozen: a token
// bucket that earns share×elapsed of CPU time, spends what the job's group
// used, and banks at most share×cpuBurstPeriod. The job is frozen while the
// bucket is in debt. Over any stretch of time the job gets its share, give
// or take one LimitWatchInterval of CPU time per CPU it can use at once.
type cpuThrottle struct {
	share  float64
	burst  time.Duration
	last   time.Time
	used   time.Duration // the group's CPU time at last
	credit time.Duration
}

func newCPUThrottle(share float64, now time.Time) *cpuThrottle {
	burst := time.Duration(share * float64(cpuBurstPeriod))
	return &cpuThrottle{share: share, burst: burst, last: now, credit: burst}
}

// step takes the time now and the group's CPU time so far, and reports
// whether the group should be frozen.
func (c *cpuThrottle) step(now time.Time, used time.Duration) bool {
	if used < c.used {
		used = c.used // cpu.stat unreadable (0): spend nothing
	}
	earned := time.Duration(float64(now.Sub(c.last)) * c.share)
	c.credit = min(c.credit+earned-(used-c.used), c.burst)
	c.last, c.used = now, used
	return c.credit < 0
}

// throttle freezes or thaws p's group; never freezes a job that is being
// stopped or has exited, so the SIGTERM of the kill path is handled at
// once. Under p.mu, so a stop cannot slip between the check and the write.
func (p *Process) throttle(freeze bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopping || p.exited {
		freeze = false
	}
	if p.frozen == freeze || p.cg == nil {
		return
	}
	if err := p.cg.Freeze(freeze); err != nil {
		return // the group is gone; nothing to throttle
	}
	p.frozen = freeze
}

// breach returns why g is past l, or "".
func breach(g *cgroup.Group, l Limits) string {
	pids := g.Procs()
	if l.Pids > 0 && int64(len(pids)) > l.Pids {
		return KilledByPidsLimit
	}
	if l.MemoryBytes > 0 {
		var rss int64
		for _, pid := range pids {
			rss += rssBytes(pid)
		}
		if rss > l.MemoryBytes {
			return KilledByOOM
		}
	}
	return ""
}

var pageSize = int64(os.Getpagesize())

// rssBytes is the resident set of pid (/proc/<pid>/statm, second field).
func rssBytes(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.ParseInt(f[1], 10, 64)
	return n * pageSize
}

func (p *Process) isExited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited
}

// limitKill kills the whole job at once for going past a limit: no grace,
// a breach is not a request to finish.
func (p *Process) limitKill(reason string) {
	p.mu.Lock()
	if p.killedBy == "" {
		p.killedBy = reason
	}
	p.mu.Unlock()
	p.signalJob(syscall.SIGKILL)
}

// applyLimits enforces l on the started leader pid in cgroup mode: a
// cgroup whose controllers lack some limit is watched. (The cgroup's own
// limits were set before the leader was born in it; in group mode the
// memory limit is set by the command line itself, see commandLine.)
func (p *Process) applyLimits(cs ContainSpec, pid int) {
	l := cs.limits
	if l == (Limits{}) || cs.c == nil || p.cg == nil {
		return
	}
	c := cs.c
	throttleCPU := l.CPU > 0 && !c.kernelHas("cpu") && c.canFreeze
	own := c.watchedLimits(l)
	kernel := c.kernelWatched(l)
	if own.Pids > 0 || own.MemoryBytes > 0 || throttleCPU || kernel {
		p.watch = &c.watch
		p.watch.add(p, own, throttleCPU, kernel)
	}
}

// rlimitShim sets RLIMIT_AS (soft and hard) to $1 KiB and execs `bash -c
// $2` with the argv[0] every job's shell has. It runs in POSIX mode, so it
// reads no startup file ($BASH_ENV is read once, by the shell it execs). A
// hard limit already lower stays (ulimit fails; the tighter bound holds).
const rlimitShim = `ulimit -HSv "$1" 2>/dev/null; shift; exec -a bash "$BASH" -c "$1"`

// commandLine returns the argv of the shell that runs command: `bash -c
// command`. In group mode a memory limit is RLIMIT_AS, which is per
// process and inherited: no thread of dshd can carry it into the fork
// (rlimits are shared by all of dshd's threads), and a prlimit after the
// spawn leaves a window in which the command and what it starts run
// unlimited. So a bash in POSIX mode sets it first and execs the same
// `bash -c command` in place (the same pid): the limit holds from the
// command's first instruction. RLIMIT_AS counts whole pages, so the KiB
// that ulimit takes lose nothing.
func (s ContainSpec) commandLine(command string) []string {
	if s.mgr != nil || s.c == nil || s.limits.MemoryBytes <= 0 {
		return []string{"bash", "-c", command}
	}
	kib := max(s.limits.MemoryBytes>>10, 1)
	return []string{"bash", "--posix", "-c", rlimitShim, "bash", strconv.FormatInt(kib, 10), command}
}

// stopForShutdown stops p through the kill path, recording the shutdown
// as the reason.
func (p *Process) stopForShutdown() {
	p.mu.Lock()
	if !p.exited && !p.stopping && p.killedBy == "" {
		p.killedBy = KilledByShutdown
	}
	p.mu.Unlock()
	p.Stop(StopCancel)
}

// ended records, once the leader is reaped, what the job used and, for a
// job the kernel OOM-killed, why it died.
func (p *Process) ended(ru *syscall.Rusage) {
	// The groups may outlive the leader (bubblewrap's init is still
	// leaving, or the job is still being killed): what they measured so
	// far counts now, not only what the leader waited for.
	p.measureLive()
	p.measureV1(false)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.used = usageOf(ru, p.usage)
	if p.usage.OOMKills > 0 && p.killedBy == "" {
		p.killedBy = KilledByOOM
	}
}

// Outcome returns what the job used and why it was killed ("" if it was
// not).
func (p *Process) Outcome() (Usage, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.used, p.killedBy
}

// killedByFor maps a stop reason to Snapshot.KilledBy.
func killedByFor(reason StopReason) string {
	switch reason {
	case StopTimeout:
		return KilledByTimeout
	case StopCancel:
		return KilledByCancel
	}
	return ""
}

// usageOf combines the leader's rusage with the cgroup's figures.
func usageOf(ru *syscall.Rusage, cg cgroup.Usage) Usage {
	var u Usage
	if ru != nil {
		u.CPUTime = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		u.PeakMemoryBytes = ru.Maxrss * 1024
	}
	u.CPUTime = max(u.CPUTime, cg.CPU)
	if cg.PeakMemoryBytes > 0 {
		u.PeakMemoryBytes = cg.PeakMemoryBytes
	}
	if cg.PidsPeak > 0 {
		u.PeakPids = cg.PidsPeak
	}
	return u
}
