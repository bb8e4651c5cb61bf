package proc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dshd/dshd/internal/cgroup"
)

// Containment modes (Options.Containment).
const (
	// ContainmentAuto uses a cgroup per job where the host delegates a
	// writable cgroup v2 subtree, and falls back to ContainmentGroup.
	ContainmentAuto = "auto"
	// ContainmentCgroup requires a cgroup per job; New fails without one.
	ContainmentCgroup = "cgroup"
	// ContainmentGroup keeps each job in its own process group, with dshd
	// as child subreaper of the descendants that leave it.
	ContainmentGroup = "group"
)

// ContainmentInfo says how the executor contains jobs on this host.
type ContainmentInfo struct {
	// Requested is the configured mode: auto, cgroup or group.
	Requested string
	// Mode is the mode in effect: cgroup or group.
	Mode string
	// Reason says why cgroups are not used; "" in cgroup mode.
	Reason string
	// CgroupDir is the parent of the jobs' groups in cgroup mode.
	CgroupDir string
	// Controllers are the limit controllers delegated to the jobs' groups.
	Controllers []string
	// V1Controllers are the limit controllers that cgroup2 lacks here and
	// cgroup v1 provides: a job with limits is born in v1 groups too.
	V1Controllers []string
	// Subreaper is true when dshd adopts the descendants that leave their
	// job (group mode).
	Subreaper bool
	// Limits says how each limit a job may have is enforced here.
	Limits LimitEnforcement
}

// container is the executor's containment: a cgroup manager, or nothing
// but the subreaper.
type container struct {
	info   ContainmentInfo
	mgr    *cgroup.Manager // nil in group mode
	spares *spares         // job groups made ahead; nil in group mode
	v1     *cgroup.V1      // the v1 groups of a hybrid host; nil if none
	log    *slog.Logger
	watch  limitWatch
	// canFreeze: the groups have cgroup.freeze, so CPU limits can be
	// enforced by freezing without the cpu controller.
	canFreeze bool
	// The waiters' last work (closing a job's pipes, removing its empty
	// group), done after their job's end is signalled (proc.wait): close
	// waits for it, and once close has begun it is done before.
	remMu   sync.Mutex
	pending int
	closing bool
	drained chan struct{} // closed when pending drops to 0 while closing
}

// deferEnd reports whether a waiter's last work may wait until its job's
// end is signalled (then endDone must follow), or must be done before
// (close has begun).
func (c *container) deferEnd() bool {
	c.remMu.Lock()
	defer c.remMu.Unlock()
	if c.closing {
		return false
	}
	c.pending++
	return true
}

// endDone ends last work that deferEnd allowed.
func (c *container) endDone() {
	c.remMu.Lock()
	defer c.remMu.Unlock()
	c.pending--
	if c.pending == 0 && c.drained != nil {
		close(c.drained)
		c.drained = nil
	}
}

// newContainer sets up containment for mode. home names the cgroup subtree,
// so a restart on the same home finds what an earlier run left.
func newContainer(mode, home, bash string, log *slog.Logger) (*container, error) {
	if mode == "" {
		mode = ContainmentAuto
	}
	c := &container{info: ContainmentInfo{Requested: mode}, log: log}
	switch mode {
	case ContainmentAuto, ContainmentCgroup:
		// The probe is a child of dshd that its own Wait4 reaps: it is
		// spawned under the reaper's read lock, so that no pass of the
		// reaper (running once any executor of the process has made it a
		// subreaper) takes its zombie first.
		release := reaperOf.spawning()
		mgr, err := cgroup.Open(cgroupName(home), []string{bash, "-c", ":"})
		release(0)
		if err == nil {
			c.mgr = mgr
			c.canFreeze = mgr.CanFreeze()
			c.info.Mode = ContainmentCgroup
			c.info.CgroupDir = mgr.Dir()
			c.info.Controllers = mgr.Controllers()
			if moved, err := mgr.Moved(); moved {
				log.Info("containment: dshd moved into a leaf of its own cgroup, so that cgroup can pass controllers to the jobs' groups", "leaf", cgroup.ServerLeaf)
			} else if err != nil {
				log.Warn("containment: dshd could not leave its own cgroup for a leaf; it cannot pass controllers to the jobs' groups", "err", err)
			}
			log.Info("containment: a cgroup per job", "cgroup", mgr.Dir(), "controllers", strings.Join(c.info.Controllers, ","))
			return c, nil
		}
		if mode == ContainmentCgroup {
			return nil, fmt.Errorf("%w: jobs.containment is cgroup: %v", ErrInvalidOptions, err)
		}
		c.info.Reason = err.Error()
	case ContainmentGroup:
		c.info.Reason = "jobs.containment is group"
	default:
		return nil, fmt.Errorf("%w: containment %q (want auto, cgroup or group)", ErrInvalidOptions, mode)
	}
	c.info.Mode = ContainmentGroup
	if err := startSubreaper(); err != nil {
		log.Warn("containment: cannot become child subreaper; descendants that leave their process group are not tracked", "err", err)
	} else {
		c.info.Subreaper = true
	}
	log.Warn("containment: process groups only; descendants that leave their group die with their job when still traceable to it, else at shutdown",
		"reason", c.info.Reason, "subreaper", c.info.Subreaper)
	return c, nil
}

// cgroupName is the name of the subtree of the dshd using home.
func cgroupName(home string) string {
	if home == "" {
		// Nothing to recover without a home: a name of this executor alone.
		return fmt.Sprintf("dshd-pid%d-%d", os.Getpid(), anonGroups.Add(1))
	}
	sum := sha256.Sum256([]byte(home))
	return "dshd-" + hex.EncodeToString(sum[:6])
}

// CgroupName is the name of the cgroup subtree of the dshd using home,
// below its own group in cgroup v2 and in each v1 hierarchy it uses.
func CgroupName(home string) string { return cgroupName(home) }

// anonGroups numbers the subtrees of executors without a home.
var anonGroups atomic.Int64

// Containment reports how jobs are contained.
func (r *Runner) Containment() ContainmentInfo {
	c := r.cont
	info := c.info
	info.Limits = c.enforcement(Limits{Pids: 1, MemoryBytes: 1, CPU: 1})
	info.Controllers = append([]string(nil), info.Controllers...)
	info.V1Controllers = append([]string(nil), info.V1Controllers...)
	return info
}

// ContainSpec is the containment of one spawn.
type ContainSpec struct {
	c      *container
	mgr    *cgroup.Manager // create a cgroup named name; nil in group mode
	name   string
	spare  *cgroup.Group // the group named name, made ahead (spares_linux.go); nil if none
	track  bool          // trace descendants through /proc (group mode)
	limits Limits
}

// forJob returns the containment of the job or process named name, with
// limits lim.
func (c *container) forJob(name string, lim Limits) ContainSpec {
	return ContainSpec{c: c, mgr: c.mgr, name: name, track: c.info.Subreaper, limits: lim}
}

// group creates the spawn's cgroup; nil in group mode.
func (s ContainSpec) group() (*cgroup.Group, error) {
	if s.mgr == nil {
		return nil, nil
	}
	if g := s.spare; g != nil {
		if lim := cgroupLimits(s.limits); lim != (cgroup.Limits{}) {
			if err := g.Limit(lim); err != nil {
				_ = g.Remove()
				return nil, fmt.Errorf("job cgroup: %w", err)
			}
		}
		return g, nil
	}
	g, err := s.mgr.Create(s.name, cgroupLimits(s.limits))
	if err != nil {
		return nil, fmt.Errorf("job cgroup: %w", err)
	}
	return g, nil
}

// close removes the subtree if it is empty (best effort: an earlier crash
// may have left groups a later start cleans).
func (c *container) close() {
	c.spares.close()
	c.remMu.Lock()
	c.closing = true
	var wait chan struct{}
	if c.pending > 0 {
		wait = make(chan struct{})
		c.drained = wait
	}
	c.remMu.Unlock()
	if wait != nil {
		<-wait
	}
	if c.mgr != nil {
		_ = syscall.Rmdir(c.mgr.Dir())
	}
	c.v1.Close()
}

// signalJob sends sig to every process of p that can be found, once each:
// its process group, and the members of its cgroup or, in group mode, the
// descendants traced from the leader, that are outside the group. SIGKILL
// ends with cgroup.kill, which nothing in the group escapes.
func (p *Process) signalJob(sig syscall.Signal) {
	switch {
	case p.tree != nil:
		// Trace before any signal: once a parent dies its children are
		// adopted by dshd and no longer lead back to the job.
		p.tree.signal(p.pid, sig)
	case p.cg != nil && sig == syscall.SIGKILL:
		signalGroup(p.pid, sig)
		_ = p.cg.Kill()
	case p.cg != nil:
		signalOnce(p.pid, sig, p.cg.Procs)
	default:
		signalGroup(p.pid, sig)
	}
}

// signalOnce sends sig to the process group pgid and to each process
// members lists that is outside it, so that every process gets it once (a
// trap would run twice for a second SIGTERM). Members are read, with their
// group, before the group is signalled: one that leaves the group after it
// was signalled is not signalled again. They are read once more after, for
// the processes started outside the group in between. A pid is signalled
// only while it has the start time it was listed with.
func signalOnce(pgid int, sig syscall.Signal, members func() []int) {
	before := make(map[int]Stat)
	for _, pid := range members() {
		if st, ok := readStat(pid); ok {
			before[pid] = st
		}
	}
	signalGroup(pgid, sig)
	for pid, st := range before {
		if st.pgid == pgid || st.state == 'Z' {
			continue
		}
		if now, ok := readStat(pid); ok && now.start == st.start {
			_ = syscall.Kill(pid, sig)
		}
	}
	for _, pid := range members() {
		if _, seen := before[pid]; seen {
			continue
		}
		if st, ok := readStat(pid); ok && st.pgid != pgid && st.state != 'Z' {
			_ = syscall.Kill(pid, sig)
		}
	}
}

// JobAlive reports whether any process of p is left.
func (p *Process) JobAlive() bool {
	if p.cg != nil {
		return p.cg.Populated()
	}
	return groupExists(p.pid) || (p.tree != nil && p.tree.alive())
}

// removeGroup removes the cgroup of a spawn that failed.
func removeGroup(g *cgroup.Group) {
	if g != nil {
		_ = g.Remove()
	}
}

// releaseGroup records the usage of p's cgroup and removes it, once empty.
// It reports false if the group is still populated.
func (p *Process) releaseGroup() bool { return p.releaseEmpty(false) }

// releaseLater is releaseEmpty(true) for the waiter, which has just seen
// the group empty: it records the group's usage and returns the group to
// remove once the job's end is recorded (nil if none), so the rmdir, which
// the kernel may refuse for a moment after the last exit, is not between
// the job's end and its response. An empty group holds nothing: a crash
// before the removal leaves one that the next start removes (Leftovers).
func (p *Process) releaseLater() *cgroup.Group {
	if p.cg == nil {
		return nil
	}
	p.mu.Lock()
	if p.released {
		p.mu.Unlock()
		return nil
	}
	p.usage = p.cg.Usage()
	p.released = true
	g := p.cg
	p.mu.Unlock()
	// Not under p.mu: measureV1 takes it.
	p.releaseV1()
	return g
}

// releaseEmpty is releaseGroup; empty says the caller has just seen the
// group empty, which spares reading it again.
func (p *Process) releaseEmpty(empty bool) bool {
	if p.cg == nil {
		return true
	}
	p.mu.Lock()
	if p.released {
		p.mu.Unlock()
		return true
	}
	if !empty && p.cg.Populated() {
		p.mu.Unlock()
		return false
	}
	p.usage = p.cg.Usage()
	p.released = true
	_ = p.cg.Remove()
	p.mu.Unlock()
	// Not under p.mu: measureV1 takes it.
	p.releaseV1()
	return true
}

// countRemaining counts the live processes of p: the members of its cgroup,
// or, in group mode, of its process group and its traced descendants
// outside it. procs is a scan of /proc shared by the counts of one sweep,
// taken on first use; nil to scan alone.
func (p *Process) countRemaining(procs *[]Stat) int {
	if p.cg != nil {
		return len(p.cg.Procs())
	}
	if procs == nil {
		procs = new([]Stat)
	}
	if *procs == nil {
		*procs = ScanProcs()
	}
	n := 0
	for _, st := range *procs {
		if st.pgid == p.pid && st.state != 'Z' {
			n++
		}
	}
	if p.tree != nil {
		p.tree.mu.Lock()
		for _, pid := range p.tree.live() {
			if st, ok := readStat(pid); ok && st.pgid != p.pid {
				n++
			}
		}
		p.tree.mu.Unlock()
	}
	return n
}

// tree traces, in group mode, the processes descended from a job's leader,
// including those that left its process group, by their parent links in
// /proc. A process is known by pid and start time, so a recycled pid is
// never signalled. Descendants whose parent exited before they were traced
// were adopted by dshd (the subreaper) and cannot be told apart from other
// jobs' any more: they are killed at shutdown.
type tree struct {
	mu    sync.Mutex
	known map[int]uint64 // pid -> start time (clock ticks since boot)
}

func newTree(leader int, start uint64) *tree {
	t := &tree{known: make(map[int]uint64)}
	if start != 0 {
		t.known[leader] = start
	} else if st, ok := readStat(leader); ok {
		t.known[leader] = st.start
	}
	return t
}

// trace adds every live descendant of a known process. Caller holds t.mu.
func (t *tree) trace() {
	children := make(map[int][]Stat)
	for _, st := range ScanProcs() {
		children[st.ppid] = append(children[st.ppid], st)
	}
	var queue []int
	for pid, start := range t.known {
		if st, ok := readStat(pid); ok && st.start == start {
			queue = append(queue, pid)
		}
	}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			if _, ok := t.known[c.pid]; !ok {
				t.known[c.pid] = c.start
				queue = append(queue, c.pid)
			}
		}
	}
}

// signal traces, then sends sig to the process group pgid and to every
// known process outside it that still runs, once each (signalOnce).
func (t *tree) signal(pgid int, sig syscall.Signal) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.trace()
	signalOnce(pgid, sig, t.live)
}

// live returns the known processes that still run. Caller holds t.mu.
func (t *tree) live() []int {
	var pids []int
	for pid, start := range t.known {
		if st, ok := readStat(pid); ok && st.start == start && st.state != 'Z' {
			pids = append(pids, pid)
		}
	}
	return pids
}

// alive reports whether a known process other than a zombie still runs.
func (t *tree) alive() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for pid, start := range t.known {
		if st, ok := readStat(pid); ok && st.start == start && st.state != 'Z' {
			return true
		}
	}
	return false
}

// Stat is what dshd reads from /proc/<pid>/stat.
type Stat struct {
	pid, ppid, pgid int
	state           byte
	start           uint64
}

// PID is the process's id.
func (s Stat) PID() int { return s.pid }

// PPID is its parent's.
func (s Stat) PPID() int { return s.ppid }

// PGID is its process group's.
func (s Stat) PGID() int { return s.pgid }

// State is its state letter ('R', 'S', 'Z', …).
func (s Stat) State() byte { return s.state }

// Start is its start time in clock ticks since boot (field 22).
func (s Stat) Start() uint64 { return s.start }

// ReadStat reads /proc/<pid>/stat; false if the process is gone.
func ReadStat(pid int) (Stat, bool) { return readStat(pid) }

// readStat reads /proc/<pid>/stat.
func readStat(pid int) (Stat, bool) {
	b, err := cgroup.ReadSmall("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, false
	}
	return parseStat(pid, string(b))
}

// parseStat parses "pid (comm) state ppid pgrp session tty tpgid flags
// minflt cminflt majflt cmajflt utime stime cutime cstime priority nice
// num_threads itrealvalue starttime ..."; comm may hold spaces and ")".
func parseStat(pid int, s string) (Stat, bool) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return Stat{}, false
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 20 {
		return Stat{}, false
	}
	st := Stat{pid: pid, state: f[0][0]}
	var err1, err2, err3 error
	st.ppid, err1 = strconv.Atoi(f[1])
	st.pgid, err2 = strconv.Atoi(f[2])
	st.start, err3 = strconv.ParseUint(f[19], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return Stat{}, false
	}
	return st, true
}

// ScanProcs reads the stat of every process.
func ScanProcs() []Stat {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	out := make([]Stat, 0, len(names))
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		if st, ok := readStat(pid); ok {
			out = append(out, st)
		}
	}
	return out
}

// killAdopted SIGKILLs the processes dshd adopted as subreaper (its
// children that are not the leader of a running job) and everything below
// them, and returns how many it signalled.
func killAdopted() int {
	self := os.Getpid()
	all := ScanProcs()
	children := make(map[int][]int)
	for _, st := range all {
		children[st.ppid] = append(children[st.ppid], st.pid)
	}
	var queue []int
	for _, pid := range children[self] {
		if !reaperOf.isLeader(pid) {
			queue = append(queue, pid)
		}
	}
	n := 0
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			n++
		}
		queue = append(queue, children[pid]...)
	}
	return n
}

// removeGroups kills and removes the groups of gs, waiting up to d for each
// to empty, and returns how many processes they held.
func removeGroups(gs []*cgroup.Group, d time.Duration) (procs int) {
	for _, g := range gs {
		procs += len(g.Procs())
		_ = g.Kill()
	}
	deadline := time.Now().Add(d)
	for _, g := range gs {
		g.WaitEmpty(time.Until(deadline))
		_ = g.Remove()
	}
	return procs
}

// killLingering SIGKILLs what is left of finished jobs and, in group mode,
// every process dshd adopted; it waits (until ctx ends) for them to go,
// and removes the cgroups and the subtree.
func (r *Runner) killLingering(ctx context.Context, ps []*Process) {
	for _, p := range ps {
		p.signalJob(syscall.SIGKILL)
	}
	if r.cont.info.Subreaper {
		if n := killAdopted(); n > 0 {
			r.log.Info("killed processes that had left their jobs", "count", n)
		}
	}
	tick := time.NewTicker(GroupPollInterval)
	defer tick.Stop()
	for _, p := range ps {
		for p.JobAlive() {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
		p.releaseGroup()
	}
	r.cont.close()
}

// ForJob returns the containment of the job or process named name, with
// limits lim, for Spec.Contain.
func (r *Runner) ForJob(name string, lim Limits) ContainSpec { return r.cont.forJob(name, lim) }

// WithSpare returns s spawning into g, the group named s's name made ahead
// (Runner.TakeSpare), instead of a group made for it.
func (s ContainSpec) WithSpare(g *cgroup.Group) ContainSpec {
	s.spare = g
	return s
}

// Enforcement says how each limit of l is enforced on this host.
func (r *Runner) Enforcement(l Limits) LimitEnforcement { return r.cont.enforcement(l) }

// Subreaper reports whether dshd adopts the descendants that leave their
// process group (group mode).
func (r *Runner) Subreaper() bool { return r.cont.info.Subreaper }

// StartSpares starts keeping a few empty job groups made ahead, each named
// by newID (cgroup mode; nothing in group mode). Call it after the
// leftovers of an earlier run are stopped, so that none is taken for one.
func (r *Runner) StartSpares(newID func() string) {
	r.cont.spares = newSpares(r.cont.mgr, newID, r.log)
}

// TakeSpare returns a group made ahead and the id it is named by, one made
// after last (the id a job got before); "", nil if none is ready.
func (r *Runner) TakeSpare(last string) (string, *cgroup.Group) { return r.cont.spares.take(last) }

// RefillSpares makes groups ahead again, in the background, up to the
// number kept.
func (r *Runner) RefillSpares() { r.cont.spares.refill() }

// Leftovers are the groups an earlier run of dshd left under this dshd's
// subtree, killed by KillLeftovers.
type Leftovers struct {
	log *slog.Logger
	gs  []*cgroup.Group   // cgroup v2; none in group mode
	v1s []*cgroup.V1Group // the v1 groups of a hybrid host
}

// KillLeftovers kills every process in the groups an earlier run of dshd
// left (cgroup.kill in cgroup v2; SIGKILL to each process of the v1 groups,
// which the v2 groups hold too), adding their pids to killed.
func (r *Runner) KillLeftovers(killed map[int]struct{}) *Leftovers {
	l := &Leftovers{log: r.log}
	if r.cont.mgr != nil {
		var err error
		if l.gs, err = r.cont.mgr.Leftovers(); err != nil {
			r.log.Warn("list leftover cgroups", "err", err)
		}
		for _, g := range l.gs {
			for _, pid := range g.Procs() {
				killed[pid] = struct{}{}
			}
			if err := g.Kill(); err != nil {
				r.log.Warn("kill leftover cgroup", "cgroup", g.Path(), "err", err)
			}
		}
	}
	// The v1 groups of the lost jobs (hybrid hosts): their processes are
	// in the cgroup2 groups killed above too; any that are not die here.
	if r.cont.v1 != nil {
		l.v1s = r.cont.v1.Leftovers()
		for _, g := range l.v1s {
			for _, pid := range g.Procs() {
				if syscall.Kill(pid, syscall.SIGKILL) == nil {
					killed[pid] = struct{}{}
				}
			}
		}
	}
	return l
}

// RemoveLater removes the groups once their processes are gone, in the
// background: nothing new is placed in them, so that need not hold up the
// start.
func (l *Leftovers) RemoveLater() {
	if len(l.gs) == 0 && len(l.v1s) == 0 {
		return
	}
	go func() {
		for _, g := range l.gs {
			g.WaitEmpty(10 * time.Second)
			if err := g.Remove(); err != nil {
				l.log.Warn("remove leftover cgroup", "err", err)
			}
		}
		for _, g := range l.v1s {
			for deadline := time.Now().Add(10 * time.Second); len(g.Procs()) > 0 && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond)
			}
			if err := g.Remove(); err != nil {
				l.log.Warn("remove leftover cgroup v1 groups", "err", err)
			}
		}
	}()
}

// KillGroup SIGKILLs the process group led by pid if its leader is still
// the process that started at leaderStart (a recycled pid has another
// start time), and adds the group's members (from procs, ScanProcs) to
// killed. A leader that exited leaves a group dshd can no longer prove is
// the one it started: it is left alone (in cgroup mode the group caught it).
func KillGroup(pid int, leaderStart uint64, procs []Stat, killed map[int]struct{}) {
	if pid <= 0 || leaderStart == 0 {
		return
	}
	st, ok := readStat(pid)
	if !ok || st.start != leaderStart || st.pgid != pid {
		return
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	for _, p := range procs {
		if p.pgid == pid && p.state != 'Z' {
			killed[p.pid] = struct{}{}
		}
	}
}
