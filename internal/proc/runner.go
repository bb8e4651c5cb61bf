package proc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	osexec "os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Runner runs processes: `bash -c` in its own process group, with the
// environment it is given, through the one spawn path and the one kill path
// (Process). Jobs and helper processes such as hooks alike go through
// Launch. It knows nothing of jobs: the job table (package exec) decides
// what runs, the runner runs it and keeps the set of live process groups so that shutdown
// can stop every one of them.
type Runner struct {
	log     *slog.Logger
	bash    string
	devNull *os.File
	pipes   *readyPipes // output pipes made ahead
	grace   time.Duration
	spawned func(time.Duration) // observes each spawn's duration; nil: none
	cont    *container          // how processes are contained: cgroups or process groups

	mu        sync.Mutex
	closed    bool
	live      map[*Process]struct{} // spawning or running processes, jobs and hooks alike
	lingering map[*Process]struct{} // finished, but processes outlived their leader
	sweeping  bool                  // watchLingering runs
	launches  int                   // launch calls so far
}

// Config is how a Runner runs processes.
type Config struct {
	// Logger receives the runner's warnings; nil discards them.
	Logger *slog.Logger
	// Grace is how long the kill path waits between SIGTERM and SIGKILL.
	Grace time.Duration
	// Containment is ContainmentAuto, ContainmentCgroup or
	// ContainmentGroup ("" is auto).
	Containment string
	// Home names the cgroup subtree of this dshd (CgroupName) and the v1
	// groups on hybrid hosts; "" gives an anonymous one.
	Home string
	// NoCgroupV1 turns off the cgroup v1 controllers of hybrid hosts.
	NoCgroupV1 bool
	// Spawned, if set, observes how long each spawn took.
	Spawned func(time.Duration)
}

// NewRunner resolves bash on the server's PATH, sets up containment and
// opens the /dev/null every child without stdin reads. It returns
// ErrInvalidOptions for a containment mode that is unknown or that the host
// cannot give.
func NewRunner(cfg Config) (*Runner, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	bash, err := osexec.LookPath("bash")
	if err != nil {
		return nil, fmt.Errorf("find bash: %w", err)
	}
	if bash, err = filepath.Abs(bash); err != nil {
		return nil, fmt.Errorf("find bash: %w", err)
	}
	r := &Runner{
		log:       log,
		bash:      bash,
		grace:     cfg.Grace,
		spawned:   cfg.Spawned,
		pipes:     newReadyPipes(log),
		live:      make(map[*Process]struct{}),
		lingering: make(map[*Process]struct{}),
	}
	if r.cont, err = newContainer(cfg.Containment, cfg.Home, bash, log); err != nil {
		return nil, err
	}
	r.cont.openV1(cfg.Home, cfg.NoCgroupV1)
	// One /dev/null for every child's stdin instead of an open per spawn.
	if r.devNull, err = os.Open(os.DevNull); err != nil {
		return nil, fmt.Errorf("open %s: %w", os.DevNull, err)
	}
	return r, nil
}

// NewProcess returns a process for Launch, with the runner's grace.
func (r *Runner) NewProcess() *Process { return newProc(r.grace) }

// Launch spawns s as p, with the runner's bash and /dev/null, and keeps p
// live until it exits; s.OnExit runs before the runner forgets it. On error
// (ErrClosed after close, ErrInvalidCwd, a spawn error) nothing runs, p's
// done is closed and onExit is not called.
func (r *Runner) Launch(p *Process, s *Spec) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		p.Failed(ErrClosed)
		return ErrClosed
	}
	r.live[p] = struct{}{}
	r.launches++
	r.mu.Unlock()

	s.bash, s.devNull, s.pipes = r.bash, r.devNull, r.pipes
	onExit := s.OnExit
	s.OnExit = func(ws syscall.WaitStatus, err error) {
		onExit(ws, err)
		r.exited(p)
	}
	t0 := time.Now()
	err := p.start(s)
	if r.spawned != nil {
		r.spawned(time.Since(t0))
	}
	r.pipes.refill()
	if err != nil {
		r.mu.Lock()
		delete(r.live, p)
		r.mu.Unlock()
	}
	return err
}

// Failed marks p as never started, as start does when the spawn fails.
func (p *Process) Failed(err error) {
	p.mu.Lock()
	p.startErr = err
	p.exited = true
	p.mu.Unlock()
	close(p.done)
}

// exited forgets p, remembering it if processes outlived the leader; those
// are counted every remainderPoll until none is left (watchLingering).
func (r *Runner) exited(p *Process) {
	r.mu.Lock()
	delete(r.live, p)
	if p.Lingering() {
		r.lingering[p] = struct{}{}
		if !r.sweeping {
			r.sweeping = true
			go r.watchLingering()
		}
	}
	r.mu.Unlock()
}

// Activity reports whether any process of the runner is live or
// lingering, and how many launches there were so far.
func (r *Runner) Activity() (busy bool, launches int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.live)+len(r.lingering) > 0, r.launches
}

// remainderPoll is how often dshd checks whether anything is left of
// finished processes, and counts it in cgroup mode. Nothing can wait for
// processes that are not dshd's children.
const remainderPoll = 200 * time.Millisecond

// groupRecount is how often what is left is counted in group mode, where a
// count reads every process's stat (the check in between is one kill(2)).
const groupRecount = time.Second

// watchLingering sweeps the lingering processes every remainderPoll while
// there are any.
func (r *Runner) watchLingering() {
	t := time.NewTicker(remainderPoll)
	defer t.Stop()
	for range t.C {
		if !r.SweepLingering(true) {
			return
		}
	}
}

// SweepLingering counts what is left of each finished process whose
// descendants outlived it, and forgets those with none left (removing their
// cgroups and running their onRemainder), so close does not signal a pgid
// that may by then belong to someone else. It reports whether any is left;
// from the watch (watch), an empty set ends it.
func (r *Runner) SweepLingering(watch bool) bool {
	r.mu.Lock()
	procs := make([]*Process, 0, len(r.lingering))
	for p := range r.lingering {
		procs = append(procs, p)
	}
	r.mu.Unlock()
	var scan []Stat // one scan of /proc for every group-mode count
	var gone []*Process
	now := time.Now()
	for _, p := range procs {
		if !p.JobAlive() && p.releaseGroup() {
			gone = append(gone, p)
		} else if p.recount(now) {
			p.setRemaining(max(p.countRemaining(&scan), 1))
		}
	}
	r.mu.Lock()
	for _, p := range gone {
		delete(r.lingering, p)
	}
	left := len(r.lingering) > 0
	if watch && !left {
		r.sweeping = false
	}
	r.mu.Unlock()
	for _, p := range gone {
		p.remainderGone()
	}
	return left
}

// StopAll refuses new launches, stops every live process through the kill
// path and waits for them, the grace-period SIGKILL of their groups
// included. If ctx ends first, every remaining group is sent SIGKILL at
// once (forceKill) and the error says so.
func (r *Runner) StopAll(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	procs := make([]*Process, 0, len(r.live))
	for p := range r.live {
		procs = append(procs, p)
	}
	r.mu.Unlock()
	for _, p := range procs {
		p.stopForShutdown()
	}
	for _, p := range procs {
		if !p.WaitKilled(ctx.Done()) {
			return r.forceKill(procs, ctx.Err())
		}
	}
	return nil
}

// ForceKillWait bounds how long Close waits for SIGKILLed leaders to be
// reaped and their output drained once its context has ended.
const ForceKillWait = 5 * time.Second

// forceKill cuts the grace short for every proc that is not finished: it
// SIGKILLs each group and waits for the leaders, bounded by ForceKillWait.
// cause is why the grace was cut; the error returned says what happened.
func (r *Runner) forceKill(procs []*Process, cause error) error {
	n := 0
	for _, p := range procs {
		if p.kill9() {
			n++
		}
	}
	r.log.Warn("shutdown budget ended before the grace: killed the remaining process groups", "groups", n, "err", cause)
	deadline := time.NewTimer(ForceKillWait)
	defer deadline.Stop()
	for _, p := range procs {
		select {
		case <-p.done:
		case <-deadline.C:
			return fmt.Errorf("close executor: %w; killed %d process groups, some leaders not reaped within %s", cause, n, ForceKillWait)
		}
	}
	return fmt.Errorf("close executor: %w; grace cut short: killed %d process groups", cause, n)
}

// Close SIGKILLs what is left of finished processes whose descendants
// outlived the leader (killLingering, until ctx ends), releases containment
// and closes /dev/null. Call it after stopAll.
func (r *Runner) Close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	lingering := make([]*Process, 0, len(r.lingering))
	for p := range r.lingering {
		lingering = append(lingering, p)
	}
	clear(r.lingering)
	r.mu.Unlock()
	r.killLingering(ctx, lingering)
	r.pipes.close()
	if err := r.devNull.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
		return err
	}
	return nil
}
