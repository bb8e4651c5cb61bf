package proc

import (
	"os"

	"github.com/dshd/dshd/internal/cgroup"
)

// On a hybrid host cgroup2 holds dshd's jobs but the limit controllers are
// bound to cgroup v1 hierarchies. A job with limits then also gets a group
// in the v1 pids, memory and cpu (with cpuacct) hierarchies that cgroup2
// lacks, joined before its first instruction (cgroup.V1Group.Spawn: the
// spawning thread forks from inside the groups), so the kernel enforces
// those limits and measures the job there. The watcher stays the fallback
// where neither cgroup2 nor v1 has the controller.

// openV1 opens the v1 groups for the limit controllers the job cgroups
// lack, in cgroup mode, unless off.
func (c *container) openV1(home string, off bool) {
	if c.mgr == nil || off {
		return
	}
	var want []string
	for _, ctrl := range []string{"cpu", "memory", "pids"} {
		if !c.mgr.Has(ctrl) {
			want = append(want, ctrl)
		}
	}
	if len(want) == 0 {
		return
	}
	v1, err := cgroup.OpenV1(cgroupName(home), want)
	if err != nil {
		c.log.Warn("containment: no cgroup v1 groups; the limits cgroup2 lacks fall to dshd's watcher", "err", err)
		return
	}
	if v1 == nil {
		return
	}
	c.v1 = v1
	c.info.V1Controllers = v1.Controllers()
	c.log.Info("containment: jobs with limits also get cgroup v1 groups", "controllers", v1.Controllers())
}

// kernelHas reports whether the kernel enforces controller ctrl for c's
// jobs: through their cgroup2 group or their v1 groups.
func (c *container) kernelHas(ctrl string) bool {
	return c.mgr != nil && (c.mgr.Has(ctrl) || c.v1.Has(ctrl))
}

// kernelKind is how the kernel enforces ctrl for c's jobs, "" if it does
// not.
func (c *container) kernelKind(ctrl string) string {
	switch {
	case c.mgr == nil:
		return ""
	case c.mgr.Has(ctrl):
		return EnforcedCgroup
	case c.v1.Has(ctrl):
		return EnforcedCgroupV1
	}
	return ""
}

// v1Group creates the spawn's v1 groups for a job with a limit that a v1
// controller enforces (a sandboxed one's in the memory hierarchy too, to
// measure it: see startInV1); nil otherwise.
func (s ContainSpec) v1Group(sandboxed bool) (*cgroup.V1Group, error) {
	v1 := s.c.v1
	if v1 == nil || s.mgr == nil {
		return nil, nil
	}
	l := s.limits
	if !(l.Pids > 0 && v1.Has("pids")) && !(l.MemoryBytes > 0 && v1.Has("memory")) && !(l.CPU > 0 && v1.Has("cpu")) {
		return nil, nil
	}
	if sandboxed {
		return v1.CreateMeasured(s.name, cgroupLimits(l))
	}
	return v1.Create(s.name, cgroupLimits(l))
}

// startInV1 wraps start so that what it forks is born in the job's v1
// groups, *g. A sandbox that starts a program other than bash (bubblewrap)
// gets a v1 memory group made here if the job has none: bubblewrap waits
// for nothing inside it, so its rusage says nothing of the command, and
// the memory group measures the job's peak (the namespaces mechanism
// starts bash itself, whose rusage covers what it waited for).
func (s ContainSpec) startInV1(g **cgroup.V1Group, bash string, start func(string, []string, []*os.File) error) func(string, []string, []*os.File) error {
	return func(path string, args []string, extra []*os.File) error {
		if *g == nil && path != bash && s.c.v1.Has("memory") && s.mgr != nil {
			ng, err := s.c.v1.CreateMeasured(s.name, cgroupLimits(s.limits))
			if err != nil {
				return err
			}
			*g = ng
		}
		if *g == nil {
			return start(path, args, extra)
		}
		return (*g).Spawn(func() error { return start(path, args, extra) })
	}
}

// runForV1 runs spawn on a goroutine of its own when the job has or may
// get v1 groups, so a thread that could not leave them ends with it.
func (s ContainSpec) runForV1(g *cgroup.V1Group, sandboxed bool, spawn func() error) error {
	if g == nil && !(sandboxed && s.c.v1 != nil) {
		return spawn()
	}
	return cgroup.OnOwnThread(spawn)
}

// removeV1 removes the v1 groups of a spawn that failed.
func removeV1(g *cgroup.V1Group) {
	if g != nil {
		_ = g.Remove()
	}
}

// releaseV1 merges what p's v1 groups measured into p.usage and removes
// them; the job's processes are gone (its cgroup2 group is empty).
func (p *Process) releaseV1() { p.measureV1(true) }

// measureV1 merges what p's v1 groups measured so far into p.usage (the
// kernel's figures where cgroup2 has none), and removes them if remove.
func (p *Process) measureV1(remove bool) {
	p.mu.Lock()
	g := p.v1
	if remove {
		p.v1 = nil
	}
	p.mu.Unlock()
	if g == nil {
		return
	}
	u := g.Usage()
	u.PidsPeak = g.PidsPeak()
	if remove {
		_ = g.Remove()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.usage.CPU = max(p.usage.CPU, u.CPU)
	p.usage.PeakMemoryBytes = max(p.usage.PeakMemoryBytes, u.PeakMemoryBytes)
	p.usage.OOMKills = max(p.usage.OOMKills, u.OOMKills)
	p.usage.PidsMaxHits = max(p.usage.PidsMaxHits, u.PidsMaxHits)
	p.usage.PidsPeak = max(p.usage.PidsPeak, u.PidsPeak)
}

// measureLive merges what p's cgroup2 group measured so far into p.usage
// while the group is not released yet.
func (p *Process) measureLive() {
	p.mu.Lock()
	g, released := p.cg, p.released
	p.mu.Unlock()
	if g == nil || released {
		return // released: p.usage has its figures
	}
	// Read whether or not the group is still populated: it may have emptied
	// since the waiter looked, and its figures are whole then. A group
	// removed meanwhile reads as zeros, which the maxima below ignore.
	u := g.Usage()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.usage.CPU = max(p.usage.CPU, u.CPU)
	p.usage.PeakMemoryBytes = max(p.usage.PeakMemoryBytes, u.PeakMemoryBytes)
	p.usage.OOMKills = max(p.usage.OOMKills, u.OOMKills)
	p.usage.PidsMaxHits = max(p.usage.PidsMaxHits, u.PidsMaxHits)
	p.usage.PidsPeak = max(p.usage.PidsPeak, u.PidsPeak)
}

// kernelBreach returns why the kernel stopped p at a limit so far: a
// process of the job OOM-killed in its memory group (KilledByOOM), or a
// fork refused at its pids limit (KilledByPidsLimit); "" if neither. The
// job is then ended as a whole, as the watcher ends one past its limit:
// the kernel kept it within the limit, dshd does not leave the rest
// spinning against it.
func (p *Process) kernelBreach() string {
	p.mu.Lock()
	g, v1 := p.cg, p.v1
	p.mu.Unlock()
	var oom, pids int64
	if v1 != nil {
		oom, pids = v1.Events()
	}
	if g != nil {
		o, n := g.Events()
		oom, pids = oom+o, pids+n
	}
	switch {
	case oom > 0:
		return KilledByOOM
	case pids > 0:
		return KilledByPidsLimit
	}
	return ""
}

// watchedLimits are the limits of l that dshd's watcher enforces itself:
// those without a kernel controller for c's jobs.
func (c *container) watchedLimits(l Limits) Limits {
	if c.kernelHas("pids") {
		l.Pids = 0
	}
	if c.kernelHas("memory") {
		l.MemoryBytes = 0
	}
	return l
}

// kernelWatched reports whether l has a limit the kernel enforces whose
// breach ends the job (pids, memory).
func (c *container) kernelWatched(l Limits) bool {
	return (l.Pids > 0 && c.kernelHas("pids")) || (l.MemoryBytes > 0 && c.kernelHas("memory"))
}
