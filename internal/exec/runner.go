package exec

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

// runner runs processes: `bash -c` in its own process group, with the
// policy environment, through the one spawn path and the one kill path
// (proc). Jobs and helper processes such as hooks alike go through launch.
// It knows nothing of jobs: the job table (Executor) decides what runs, the
// runner runs it and keeps the set of live process groups so that shutdown
// can stop every one of them.
type runner struct {
	log     *slog.Logger
	bash    string
	base    *baseEnv
	ttyBase *baseEnv // base for terminal jobs: TERM from Options.Term, no NO_COLOR
	devNull *os.File
	pipes   *readyPipes // output pipes made ahead
	grace   time.Duration
	m       *metrics
	cont    *container // how jobs are contained: cgroups or process groups

	mu        sync.Mutex
	closed    bool
	live      map[*proc]struct{} // spawning or running processes, jobs and hooks alike
	lingering map[*proc]struct{} // finished, but processes outlived their leader
	sweeping  bool               // watchLingering runs
	launches  int                // launch calls so far
}

// newRunner resolves bash on the server's PATH, computes the inherited part
// of every child's environment once, sets up containment and opens the
// /dev/null every child without stdin reads.
func newRunner(log *slog.Logger, opts Options, m *metrics) (*runner, error) {
	bash, err := osexec.LookPath("bash")
	if err != nil {
		return nil, fmt.Errorf("find bash: %w", err)
	}
	if bash, err = filepath.Abs(bash); err != nil {
		return nil, fmt.Errorf("find bash: %w", err)
	}
	r := &runner{
		log:       log,
		bash:      bash,
		base:      newBaseEnv(opts.Policy, opts.Environ, TerminalEnv()),
		ttyBase:   newBaseEnv(opts.Policy, opts.Environ, TTYEnv(opts.Term)),
		grace:     opts.Grace,
		m:         m,
		pipes:     newReadyPipes(log),
		live:      make(map[*proc]struct{}),
		lingering: make(map[*proc]struct{}),
	}
	if r.cont, err = newContainer(opts.Containment, opts.Home, bash, log); err != nil {
		return nil, err
	}
	r.cont.openV1(opts.Home, opts.NoCgroupV1)
	// One /dev/null for every child's stdin instead of an open per spawn.
	if r.devNull, err = os.Open(os.DevNull); err != nil {
		return nil, fmt.Errorf("open %s: %w", os.DevNull, err)
	}
	return r, nil
}

// newProc returns a process for launch, with the runner's grace.
func (r *runner) newProc() *proc { return newProc(r.grace) }

// launch spawns s as p, with the runner's bash and /dev/null, and keeps p
// live until it exits; s.onExit runs before the runner forgets it. On error
// (ErrClosed after close, ErrInvalidCwd, a spawn error) nothing runs, p's
// done is closed and onExit is not called.
func (r *runner) launch(p *proc, s *spawnSpec) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		p.failed(ErrClosed)
		return ErrClosed
	}
	r.live[p] = struct{}{}
	r.launches++
	r.mu.Unlock()

	s.bash, s.devNull, s.pipes = r.bash, r.devNull, r.pipes
	onExit := s.onExit
	s.onExit = func(ws syscall.WaitStatus, err error) {
		onExit(ws, err)
		r.exited(p)
	}
	t0 := time.Now()
	err := p.start(s)
	r.m.spawn.Observe(time.Since(t0).Seconds())
	r.pipes.refill()
	if err != nil {
		r.mu.Lock()
		delete(r.live, p)
		r.mu.Unlock()
	}
	return err
}

// failed marks p as never started, as start does when the spawn fails.
func (p *proc) failed(err error) {
	p.mu.Lock()
	p.startErr = err
	p.exited = true
	p.mu.Unlock()
	close(p.done)
}

// exited forgets p, remembering it if processes outlived the leader; those
// are counted every remainderPoll until none is left (watchLingering).
func (r *runner) exited(p *proc) {
	r.mu.Lock()
	delete(r.live, p)
	if p.lingering() {
		r.lingering[p] = struct{}{}
		if !r.sweeping {
			r.sweeping = true
			go r.watchLingering()
		}
	}
	r.mu.Unlock()
}

// activity reports whether any process of the runner is live or
// lingering, and how many launches there were so far.
func (r *runner) activity() (busy bool, launches int) {
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
func (r *runner) watchLingering() {
	t := time.NewTicker(remainderPoll)
	defer t.Stop()
	for range t.C {
		if !r.sweepLingering(true) {
			return
		}
	}
}

// sweepLingering counts what is left of each finished process whose
// descendants outlived it, and forgets those with none left (removing their
// cgroups and running their onRemainder), so close does not signal a pgid
// that may by then belong to someone else. It reports whether any is left;
// from the watch (watch), an empty set ends it.
func (r *runner) sweepLingering(watch bool) bool {
	r.mu.Lock()
	procs := make([]*proc, 0, len(r.lingering))
	for p := range r.lingering {
		procs = append(procs, p)
	}
	r.mu.Unlock()
	var scan []procStat // one scan of /proc for every group-mode count
	var gone []*proc
	now := time.Now()
	for _, p := range procs {
		if !p.jobAlive() && p.releaseGroup() {
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

// stopAll refuses new launches, stops every live process through the kill
// path and waits for them, the grace-period SIGKILL of their groups
// included. If ctx ends first, every remaining group is sent SIGKILL at
// once (forceKill) and the error says so.
func (r *runner) stopAll(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	procs := make([]*proc, 0, len(r.live))
	for p := range r.live {
		procs = append(procs, p)
	}
	r.mu.Unlock()
	for _, p := range procs {
		p.stopForShutdown()
	}
	for _, p := range procs {
		if !p.waitKilled(ctx.Done()) {
			return r.forceKill(procs, ctx.Err())
		}
	}
	return nil
}

// forceKillWait bounds how long Close waits for SIGKILLed leaders to be
// reaped and their output drained once its context has ended.
const forceKillWait = 5 * time.Second

// forceKill cuts the grace short for every proc that is not finished: it
// SIGKILLs each group and waits for the leaders, bounded by forceKillWait.
// cause is why the grace was cut; the error returned says what happened.
func (r *runner) forceKill(procs []*proc, cause error) error {
	n := 0
	for _, p := range procs {
		if p.kill9() {
			n++
		}
	}
	r.log.Warn("shutdown budget ended before the grace: killed the remaining process groups", "groups", n, "err", cause)
	deadline := time.NewTimer(forceKillWait)
	defer deadline.Stop()
	for _, p := range procs {
		select {
		case <-p.done:
		case <-deadline.C:
			return fmt.Errorf("close executor: %w; killed %d process groups, some leaders not reaped within %s", cause, n, forceKillWait)
		}
	}
	return fmt.Errorf("close executor: %w; grace cut short: killed %d process groups", cause, n)
}

// close SIGKILLs what is left of finished processes whose descendants
// outlived the leader (killLingering, until ctx ends), releases containment
// and closes /dev/null. Call it after stopAll.
func (r *runner) close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	lingering := make([]*proc, 0, len(r.lingering))
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
