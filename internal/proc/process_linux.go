//go:build linux

package proc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dshd/dshd/internal/cgroup"
	"github.com/dshd/dshd/internal/sandbox"
	"github.com/dshd/dshd/internal/stages"
)

// drainTimeout bounds how long output is still read after the leader has
// been reaped. Descendants that escaped into the background may hold the
// pipes open forever; what they wrote before the leader exited is already in
// the pipe buffer and is read well within this time.
const drainTimeout = 50 * time.Millisecond

// GroupPollInterval is how often the kill path checks whether the group is
// empty after the leader exited, during the grace period. There is no way to
// wait for processes that are not our children (grandchildren are reparented
// to init or a subreaper), so we poll, bounded by the grace.
const GroupPollInterval = 10 * time.Millisecond

// Process is one process group led by `bash -c`. It owns the one goroutine
// that reaps the leader and the kill path shared by timeout, cancel and
// shutdown.
type Process struct {
	grace  time.Duration
	done   chan struct{} // closed after the leader is reaped, output drained and onExit ran
	doneAt time.Time     // when done was closed, while stages are timed (zero otherwise); read after done

	mu         sync.Mutex
	pid        int    // 0 until started
	startedAt  uint64 // the leader's start time (/proc stat field 22) if the spawn knew it; 0 if not
	startErr   error  // set if the spawn failed
	stopping   bool
	reason     StopReason // why stop was requested
	exited     bool
	killDone   chan struct{} // non-nil once the kill path runs; closed when it ends
	groupAlive bool          // members of the group outlived the leader
	cg         *cgroup.Group // the job's cgroup; nil in group mode
	tree       *tree         // descendants traced in group mode; nil otherwise
	usage      cgroup.Usage  // read from cg when it is removed
	used       Usage         // set when the leader is reaped
	killedBy   string        // why the job was killed (KilledBy*), "" if it was not
	watch      *limitWatch   // enforcing limits the cgroup lacks; nil if none
	frozen     bool          // cg is frozen by the CPU throttle
	released   bool          // releaseGroup ran: cg is removed, usage recorded

	// The remainder: processes of the job that outlived the leader
	// (groupAlive), counted when the leader is reaped and then by the
	// runner's sweep until none is left.
	remaining   int
	remainStop  bool // stopRemainder started the kill path for them
	remainGone  bool // remainderGone ran
	countedAt   time.Time
	onRemainder func() // runs once, when the last of them is gone; nil if none

	// v1 is the job's cgroup v1 groups (hybrid hosts, jobs with limits;
	// see cgroupv1_linux.go); nil if none.
	v1 *cgroup.V1Group

	// Interactive input (see input_linux.go): the pty master of a terminal
	// job, or the write end of a stdin pipe held open. nil for jobs whose
	// stdin is /dev/null or given whole at start.
	in       *os.File
	inTTY    bool          // in is a pty master
	inClosed bool          // CloseInput ran (pipes), or the job ended
	inSem    chan struct{} // one writer at a time; nil without in
}

func newProc(grace time.Duration) *Process {
	return &Process{grace: grace, done: make(chan struct{})}
}

// Spec is what Runner.Launch needs. Stdout and Stderr receive every chunk
// read from the child's streams, each from its own goroutine.
type Spec struct {
	bash     string
	Command  string
	Dir      string
	Env      []string
	devNull  *os.File
	pipes    *readyPipes // output pipes made ahead; nil: none
	Stdin    []byte
	HasStdin bool
	// OpenStdin keeps the stdin pipe open after Stdin is written, for
	// WriteInput; ignored with TTY (a terminal's input is always open).
	OpenStdin bool
	// TTY, if set, runs the command in a new pseudo-terminal of that size:
	// its stdin, stdout and stderr are the terminal, which is the
	// controlling terminal of the command's own session. Its output is one
	// stream, fed to stdout; stderr gets nothing.
	TTY    *Winsize
	Stdout func([]byte)
	Stderr func([]byte)
	// OnExit runs in the waiter goroutine after the streams are drained and
	// before done is closed.
	OnExit func(ws syscall.WaitStatus, err error)
	// Contain says where the process goes: its own cgroup, or its process
	// group traced through /proc (group mode).
	Contain ContainSpec
	// OnStart, if set, runs once the process is started, before its waiter
	// can run onExit.
	OnStart func(pid int)
	// OnRemainder, if set, runs once when the last process that outlived
	// the leader is gone (never if none did, nor at shutdown).
	OnRemainder func()
	// Sandbox, if set, starts the command line (bash -c command) in the
	// job's sandbox: it calls start once, with the program to start (bash
	// itself on a confined thread, or bubblewrap with bash inside).
	Sandbox func(path string, args []string, start sandbox.StartFunc) error
}

// start spawns the process. On error nothing is left running, done is
// closed and onExit is not called.
func (p *Process) start(s *Spec) error {
	err := p.spawn(s)
	if err != nil {
		p.mu.Lock()
		p.startErr = err
		p.exited = true
		p.mu.Unlock()
		close(p.done)
	}
	return err
}

// spawn runs the stages of one spawn, each timed (stages): the process's
// groups, its streams, the fork, the record of the leader, then its input,
// output and waiter.
func (p *Process) spawn(s *Spec) error {
	t := stages.Start()
	cg, v1g, err := s.Contain.groups(s.Sandbox != nil)
	if err != nil {
		return err
	}
	t = stages.Done(stages.Contain, t)
	st, err := openStreams(s)
	if err != nil {
		removeGroup(cg)
		removeV1(v1g)
		return err
	}
	t = stages.Done(stages.Streams, t)
	leader, pidfd, clock, err := fork(s, st, cg, &v1g)
	// The child has its copies now (or never will): our copies of its ends
	// must go, or we would never see EOF.
	st.closeChildEnds(s.devNull)
	if err != nil {
		st.closeParentEnds()
		removeGroup(cg)
		removeV1(v1g)
		return spawnError(err, s.Dir, s.Sandbox != nil)
	}
	if cg != nil {
		cg.CloseFD()
	}
	t = stages.Done(stages.Spawn, t)

	interactive := p.started(s, st, leader.Pid, cg, v1g, clock)
	if s.OnStart != nil {
		s.OnStart(leader.Pid)
	}
	t = stages.Done(stages.Index, t)
	pid := leader.Pid
	if pidfd >= 0 {
		// os keeps a duplicate of the pidfd until Wait, which we never
		// call: one descriptor per job is enough.
		leader.Release()
	}
	p.feed(s, st, interactive)
	readers := new(streamReaders)
	readers.start(st.outR, s.Stdout)
	if st.errR != nil {
		readers.start(st.errR, s.Stderr)
	}
	go p.wait(s.Contain.c, leader, pid, pidfd, st, readers, s.OnExit, t)
	return nil
}

// groups makes the spawn's cgroup (nil in group mode) and its v1 groups
// (nil if none); on error neither is left.
func (s ContainSpec) groups(sandboxed bool) (*cgroup.Group, *cgroup.V1Group, error) {
	cg, err := s.group()
	if err != nil {
		return nil, nil, err
	}
	v1g, err := s.v1Group(sandboxed)
	if err != nil {
		removeGroup(cg)
		return nil, nil, err
	}
	return cg, v1g, nil
}

// fork starts the leader of s with the child's ends of st, born in cg (nil:
// its process group alone) and the v1 groups *v1g, through the sandbox if
// s has one. It returns the leader, its pidfd (-1 without one) and its
// start time read from the clock around the fork (0 if unknown). The
// leader is registered with the reaper before any reaper pass can see it.
func fork(s *Spec, st *streams, cg *cgroup.Group, v1g **cgroup.V1Group) (leader *os.Process, pidfd int, clock uint64, err error) {
	// os.StartProcess rather than os/exec: the environment is already
	// one entry per name, and the path absolute, so Cmd's copy of the
	// environment into a map and its look-ups would be work per command
	// for nothing; its descriptors are ours, so it would start no
	// goroutine either.
	// Own process group, so the whole tree is signalled as -pgid.
	sys := &syscall.SysProcAttr{Setpgid: true}
	if s.TTY != nil {
		// A session of its own (so also a process group led by the
		// leader: -pgid still reaches the tree) whose controlling
		// terminal is the new pty, child fd 0.
		sys = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	}
	withPidfd(sys, &pidfd)
	if cg != nil {
		// Born in the job's cgroup (clone3 CLONE_INTO_CGROUP): no process
		// of the job ever runs outside it.
		sys.UseCgroupFD = true
		sys.CgroupFD = cg.FD()
	}
	var before, after uint64 // the clock around the fork (starttime_linux.go)
	startCmd := s.Contain.startInV1(v1g, s.bash, func(path string, args []string, extra []*os.File) error {
		files := append([]*os.File{st.childIn, st.childOut, st.childErr}, extra...)
		var err error
		before = bootTicks()
		leader, err = os.StartProcess(path, args, &os.ProcAttr{Dir: s.Dir, Env: s.Env, Files: files, Sys: sys})
		after = bootTicks()
		return err
	})
	registered := reaperOf.spawning()
	argv := s.Contain.commandLine(s.Command)
	err = s.Contain.runForV1(*v1g, s.Sandbox != nil, func() error {
		if s.Sandbox != nil {
			return s.Sandbox(s.bash, argv, startCmd)
		}
		return startCmd(s.bash, argv, nil)
	})
	if err != nil {
		registered(0)
		if pidfd >= 0 {
			syscall.Close(pidfd)
		}
		return nil, -1, 0, err
	}
	registered(leader.Pid)
	return leader, pidfd, startBetween(before, after), nil
}

// started records the leader pid of p, spawned in cg and v1g with start
// time clock: its limits applied, its descendants traced (group mode), its
// input held (interactive, as returned), and its kill path started if Stop
// came during the spawn.
func (p *Process) started(s *Spec, st *streams, pid int, cg *cgroup.Group, v1g *cgroup.V1Group, clock uint64) (interactive bool) {
	p.mu.Lock()
	p.cg = cg
	p.onRemainder = s.OnRemainder
	p.v1 = v1g
	p.startedAt = clock
	if s.Contain.track {
		p.tree = newTree(pid, p.startedAt)
	}
	p.pid = pid
	p.applyLimits(s.Contain, p.pid)
	stop := p.stopping
	if stop {
		p.killDone = make(chan struct{})
	}
	interactive = st.inW != nil && (s.TTY != nil || s.OpenStdin)
	if interactive {
		p.in, p.inTTY = st.inW, s.TTY != nil
		p.inSem = make(chan struct{}, 1)
	}
	p.mu.Unlock()
	if stop {
		go p.kill()
	}
	return interactive
}

// feed writes s.Stdin to the child's input: held open for WriteInput
// (interactive), or closed once written.
func (p *Process) feed(s *Spec, st *streams, interactive bool) {
	switch {
	case interactive && len(s.Stdin) > 0:
		// The first bytes go in before any WriteInput: it waits for the
		// semaphore this writer holds.
		p.inSem <- struct{}{}
		go func() {
			defer func() { <-p.inSem }()
			st.inW.Write(s.Stdin)
		}()
	case !interactive && st.inW != nil:
		go writeStdin(st.inW, s.Stdin)
	}
}

// streams are the descriptors of one spawn: the child's ends, handed to
// os/exec, and the parent's. With a terminal, outR and inW are the same
// pty master and errR is nil.
type streams struct {
	childIn, childOut, childErr *os.File
	outR, errR, inW             *os.File
	tty                         bool
}

// openStreams opens the pipes (or the pty) of s: the output pipes made
// ahead (pipes_linux.go) or, without any ready, its own. They are ours,
// handed to the child as *os.File values; the child ends are blocking (as
// children expect), our ends are in the runtime poller so reads honour
// deadlines.
func openStreams(s *Spec) (*streams, error) {
	if s.TTY != nil {
		master, slave, err := openPTY(*s.TTY)
		if err != nil {
			return nil, err
		}
		return &streams{childIn: slave, childOut: slave, childErr: slave, outR: master, inW: master, tty: true}, nil
	}
	st := &streams{childIn: s.devNull}
	p, ok := s.pipes.take()
	if !ok {
		var err error
		if p, err = newOutPipes(); err != nil {
			return nil, err
		}
	}
	st.outR, st.childOut, st.errR, st.childErr = p.outR, p.outW, p.errR, p.errW
	if s.HasStdin || s.OpenStdin {
		var err error
		if st.childIn, st.inW, err = pipe(false); err != nil {
			p.close()
			return nil, err
		}
	}
	return st, nil
}

// closeChildEnds closes our copies of the child's descriptors (never the
// shared /dev/null).
func (st *streams) closeChildEnds(devNull *os.File) {
	if st.tty {
		st.childIn.Close()
		return
	}
	st.childOut.Close()
	st.childErr.Close()
	if st.childIn != devNull {
		st.childIn.Close()
	}
}

// closeParentEnds closes our ends after a failed spawn.
func (st *streams) closeParentEnds() {
	st.outR.Close()
	if st.errR != nil {
		st.errR.Close()
	}
	if st.inW != nil && !st.tty {
		st.inW.Close()
	}
}

// wait is the one goroutine that reaps the leader (waitLeader).
// t is when the spawn returned (stages).
func (p *Process) wait(c *container, leader *os.Process, pid, pidfd int, st *streams, readers *streamReaders, onExit func(syscall.WaitStatus, error), t time.Time) {
	ws, ru, err := waitLeader(leader, pidfd)
	t = stages.Done(stages.Wait, t)
	reaperOf.reaped(pid)
	// The leader is reaped, but its pid stays reserved as our pgid while any
	// group member lives, so the probe cannot hit an unrelated process.
	exitWork <- struct{}{}
	// later: the last work below (the pipes' closes, the empty group's
	// removal) may wait until the job's end is signalled; not once the
	// container's close has begun, which waits for what was let wait.
	later := c != nil && c.deferEnd()
	alive := p.JobAlive()
	remaining := 0
	var empty *cgroup.Group // removed once the end is recorded
	if alive {
		remaining = max(p.countRemaining(nil), 1)
	} else if empty = p.releaseLater(); empty != nil && !later {
		_ = empty.Remove()
		empty = nil
	}
	p.ended(ru)
	<-exitWork
	t = stages.Done(stages.Release, t)
	p.mu.Lock()
	p.exited = true
	p.groupAlive = alive
	p.remaining, p.countedAt = remaining, time.Now()
	p.inClosed = true
	p.mu.Unlock()

	if st.inW != nil {
		// Unblock a stdin writer stuck on a pipe (or terminal) nobody reads
		// any more.
		st.inW.SetWriteDeadline(time.Now())
	}
	if readers.left.Load() > 0 {
		// Usually both have read their stream's end already, woken by
		// the same exit as this goroutine.
		deadline := time.Now().Add(drainTimeout)
		st.outR.SetReadDeadline(deadline)
		if st.errR != nil {
			st.errR.SetReadDeadline(deadline)
		}
	}
	readers.wg.Wait()
	if st.tty {
		st.outR.Close() // the terminal's master, also its input: closed before the end is recorded
	}
	if p.in != nil && !st.tty {
		p.in.Close() // a held-open pipe; the terminal is outR
	}
	t = stages.Done(stages.Drain, t)
	exitWork <- struct{}{}
	onExit(ws, err)
	<-exitWork
	p.doneAt = stages.Done(stages.Record, t)
	close(p.done)
	// The goroutine waiting for done (a foreground request) was made ready
	// on this P, but would wait for the work below (the pipes' closes, an
	// rmdir of tens of microseconds) before it ran: let it go first.
	runtime.Gosched()
	if !st.tty {
		// Read to their end: closing them can wait until the request has
		// its answer.
		st.outR.Close()
		if st.errR != nil {
			st.errR.Close()
		}
	}
	if empty != nil {
		_ = empty.Remove()
	}
	if later {
		c.endDone()
	}
}

// Stop starts the kill path once: SIGTERM to the group, the grace, SIGKILL
// to the group. reason is recorded for the job's final state. A stop before
// the spawn completes takes effect right after it.
func (p *Process) Stop(reason StopReason) {
	p.mu.Lock()
	if p.exited || p.stopping {
		p.mu.Unlock()
		return
	}
	p.stopping = true
	p.reason = reason
	if p.killedBy == "" {
		p.killedBy = killedByFor(reason)
	}
	started := p.pid != 0
	if started {
		p.killDone = make(chan struct{})
	}
	p.mu.Unlock()
	if started {
		go p.kill()
	}
}

func (p *Process) kill() {
	defer close(p.killDone)
	p.throttle(false) // a frozen job would not see its SIGTERM
	p.signalJob(syscall.SIGTERM)
	grace := time.NewTimer(p.grace)
	defer grace.Stop()
	select {
	case <-grace.C:
		p.signalJob(syscall.SIGKILL)
		return
	case <-p.done:
	}
	// The leader is gone; other members got the same SIGTERM and the rest of
	// the grace to leave before they are killed.
	tick := time.NewTicker(GroupPollInterval)
	defer tick.Stop()
	for p.JobAlive() {
		select {
		case <-grace.C:
			p.signalJob(syscall.SIGKILL)
			return
		case <-tick.C:
		}
	}
}

// kill9 SIGKILLs the job at once, whatever the kill path is doing, and
// reports whether it had any process left to signal. The stop
// reason stays what stop recorded (Close stops every proc first).
func (p *Process) kill9() bool {
	p.mu.Lock()
	pid := p.pid
	p.mu.Unlock()
	if pid == 0 || !p.JobAlive() {
		return false
	}
	// The whole job, as the kill path's own SIGKILL: the group, and the
	// cgroup or the traced descendants that left it.
	p.signalJob(syscall.SIGKILL)
	return true
}

// LeaderStart returns the leader's start time (clock ticks since boot, as
// /proc/<pid>/stat gives it), read from /proc when the spawn did not
// know it; 0 if the leader is gone.
func (p *Process) LeaderStart() uint64 {
	p.mu.Lock()
	start, pid := p.startedAt, p.pid
	p.mu.Unlock()
	if start != 0 || pid == 0 {
		return start
	}
	if st, ok := readStat(pid); ok {
		return st.start
	}
	return 0
}

// stopping reports the reason for a requested stop, if any.
func (p *Process) StopReason() (StopReason, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reason, p.stopping
}

// WaitKilled waits for done and for a running kill path to finish.
func (p *Process) WaitKilled(cancel <-chan struct{}) bool {
	select {
	case <-p.done:
	case <-cancel:
		return false
	}
	p.mu.Lock()
	kd := p.killDone
	p.mu.Unlock()
	if kd == nil {
		return true
	}
	select {
	case <-kd:
		return true
	case <-cancel:
		return false
	}
}

// Lingering reports whether processes of the job outlived the leader.
func (p *Process) Lingering() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited && p.groupAlive && p.pid != 0
}

// Remainder returns how many processes of the job outlived the leader and
// are still there, as last counted; 0 once they are all gone.
func (p *Process) Remainder() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.exited || !p.groupAlive {
		return 0
	}
	return p.remaining
}

// recount reports whether the remainder is due for a count at now: at
// every sweep in cgroup mode, every groupRecount in group mode.
func (p *Process) recount(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cg == nil && now.Sub(p.countedAt) < groupRecount {
		return false
	}
	p.countedAt = now
	return true
}

// setRemaining records a new count of the remainder.
func (p *Process) setRemaining(n int) {
	p.mu.Lock()
	p.remaining = n
	p.mu.Unlock()
}

// remainderGone records that no process of the job is left and runs
// onRemainder, once.
// The record says none is left only once onRemainder has released what
// the job held: a caller that sees the remainder gone finds its slot free.
func (p *Process) remainderGone() {
	p.mu.Lock()
	if !p.groupAlive || p.remainGone {
		p.mu.Unlock()
		return
	}
	p.remainGone = true
	f := p.onRemainder
	p.mu.Unlock()
	if f != nil {
		f()
	}
	p.mu.Lock()
	p.groupAlive, p.remaining = false, 0
	p.mu.Unlock()
}

// StopRemainder starts the kill path (SIGTERM, the grace, SIGKILL) for the
// processes of a finished job that outlived its leader, once, and reports
// whether there were any.
func (p *Process) StopRemainder() bool {
	p.mu.Lock()
	if !p.exited || !p.groupAlive || p.pid == 0 {
		p.mu.Unlock()
		return false
	}
	if p.remainStop {
		p.mu.Unlock()
		return true
	}
	p.remainStop = true
	p.killDone = make(chan struct{})
	p.mu.Unlock()
	go p.kill()
	return true
}

// streamReaders are the goroutines reading one spawn's output streams.
type streamReaders struct {
	wg   sync.WaitGroup
	left atomic.Int32 // readers that have not yet reached their stream's end
}

// start reads f into sink on a goroutine of its own, until its end.
func (r *streamReaders) start(f *os.File, sink func([]byte)) {
	r.left.Add(1)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer r.left.Add(-1)
		readStream(f, sink)
	}()
}

func readStream(f *os.File, sink func([]byte)) {
	bp := getBuf(false)
	for {
		n, err := f.Read(*bp)
		if n > 0 {
			sink((*bp)[:n])
			if n == len(*bp) && len(*bp) == smallBuf {
				// A busy stream: move to the large buffer, and let the
				// pipe hold more, so it takes fewer reads and fewer
				// context switches. Only busy streams pay for either.
				putBuf(bp)
				bp = getBuf(true)
				growPipe(f)
			}
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				drainBuffered(f, *bp, sink)
			}
			break
		}
	}
	putBuf(bp)
}

// busyPipeSize is the capacity asked for a busy output pipe. The kernel
// grants less, or nothing, past the user's pipe page limits; that is fine.
const busyPipeSize = 1 << 20

// growPipe raises a pipe's capacity to busyPipeSize, best effort.
func growPipe(f *os.File) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_, _, _ = syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_SETPIPE_SZ, busyPipeSize)
	})
}

// maxFinalDrain bounds drainBuffered, so a descendant that keeps writing
// into an inherited pipe cannot keep the job from finishing.
const maxFinalDrain = 4 << 20

// drainBuffered reads what is already in the pipe after the drain deadline
// has passed. Once a deadline has expired the poller refuses to read at all,
// even bytes already buffered, so a reader scheduled late would lose output
// the leader wrote before it exited; raw non-blocking reads on the
// descriptor take them.
func drainBuffered(f *os.File, buf []byte, sink func([]byte)) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		for total := 0; total < maxFinalDrain; {
			n, err := syscall.Read(int(fd), buf)
			if n <= 0 || err != nil {
				return // EAGAIN: empty; 0: every writer closed
			}
			sink(buf[:n])
			total += n
		}
	})
}

func writeStdin(w *os.File, data []byte) {
	// Errors are expected and harmless: the child may exit or close stdin
	// without reading it all (EPIPE; Go ignores SIGPIPE on non-std fds), or
	// the waiter sets a deadline after the leader exits.
	w.Write(data)
	w.Close()
}

// pipe returns a pipe whose parent end is in the runtime poller. With
// parentReads the read end is the parent's; otherwise the write end is.
// The child's end stays blocking and never enters the poller: os.Pipe would
// register both ends and os/exec would then switch the child end back.
func pipe(parentReads bool) (r, w *os.File, err error) {
	var fds [2]int
	if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC); err != nil {
		return nil, nil, os.NewSyscallError("pipe2", err)
	}
	parent := fds[1]
	if parentReads {
		parent = fds[0]
	}
	if err := syscall.SetNonblock(parent, true); err != nil {
		syscall.Close(fds[0])
		syscall.Close(fds[1])
		return nil, nil, os.NewSyscallError("setnonblock", err)
	}
	// os.NewFile puts a non-blocking descriptor in the poller.
	return os.NewFile(uintptr(fds[0]), "|0"), os.NewFile(uintptr(fds[1]), "|1"), nil
}

// spawnError maps start failures to sentinels. The child's chdir failure
// comes back from fork/exec as a bare errno (ENOENT, ENOTDIR, EACCES) that
// cannot be told from a problem with bash itself, so on this error path only
// (the hot path does no extra stat) we look at the directory. In a sandbox
// (sandboxed) the directory is looked up in the sandbox's view, where bash
// always is: such an errno means the directory is not there (a workdir
// under the host's /tmp, say, which the sandbox replaces with its own).
func spawnError(err error, dir string, sandboxed bool) error {
	if errors.Is(err, syscall.E2BIG) {
		// CheckArgSize predicts this; the kernel has the last word.
		return fmt.Errorf("%w: %w", ErrTooLarge, err)
	}
	var pe *fs.PathError
	if sandboxed && errors.As(err, &pe) && (pe.Op == "chdir" || pe.Op == "fork/exec") &&
		(errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EACCES)) {
		return fmt.Errorf("%w: %s is not a directory inside the sandbox (the sandbox shows the harness's roots and a read-only rest of the file system, with a private /tmp): %w", ErrInvalidCwd, dir, pe.Err)
	}
	if errors.As(err, &pe) && pe.Op == "chdir" {
		return errors.Join(ErrInvalidCwd, err)
	}
	if fi, serr := os.Stat(dir); serr != nil || !fi.IsDir() {
		return fmt.Errorf("%w: %s: not an existing directory", ErrInvalidCwd, dir)
	}
	return err
}

// signalGroup signals every process in the group. ESRCH (group gone) is the
// expected outcome of a race with exit and is ignored.
func signalGroup(pgid int, sig syscall.Signal) {
	if pgid <= 0 {
		return
	}
	_ = syscall.Kill(-pgid, sig)
}

// groupExists reports whether any process is in the group. EPERM means a
// member exists that we may not signal (it changed credentials).
func groupExists(pgid int) bool {
	if pgid <= 0 {
		return false
	}
	err := syscall.Kill(-pgid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// ExitOf turns a wait status into the exit code or signal name reported by
// jobs: a signal death has a name and a nil code.
func ExitOf(ws syscall.WaitStatus) (code *int, signal string) {
	if ws.Signaled() {
		return nil, signalName(ws.Signal())
	}
	c := ws.ExitStatus()
	return &c, ""
}

// signalName returns the conventional name ("SIGKILL") of s.
func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	case syscall.SIGILL:
		return "SIGILL"
	case syscall.SIGTRAP:
		return "SIGTRAP"
	case syscall.SIGABRT:
		return "SIGABRT"
	case syscall.SIGBUS:
		return "SIGBUS"
	case syscall.SIGFPE:
		return "SIGFPE"
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGUSR1:
		return "SIGUSR1"
	case syscall.SIGSEGV:
		return "SIGSEGV"
	case syscall.SIGUSR2:
		return "SIGUSR2"
	case syscall.SIGPIPE:
		return "SIGPIPE"
	case syscall.SIGALRM:
		return "SIGALRM"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGCHLD:
		return "SIGCHLD"
	case syscall.SIGCONT:
		return "SIGCONT"
	case syscall.SIGSTOP:
		return "SIGSTOP"
	case syscall.SIGTSTP:
		return "SIGTSTP"
	case syscall.SIGTTIN:
		return "SIGTTIN"
	case syscall.SIGTTOU:
		return "SIGTTOU"
	case syscall.SIGURG:
		return "SIGURG"
	case syscall.SIGXCPU:
		return "SIGXCPU"
	case syscall.SIGXFSZ:
		return "SIGXFSZ"
	case syscall.SIGVTALRM:
		return "SIGVTALRM"
	case syscall.SIGPROF:
		return "SIGPROF"
	case syscall.SIGWINCH:
		return "SIGWINCH"
	case syscall.SIGSYS:
		return "SIGSYS"
	}
	return "SIG" + strconv.Itoa(int(s))
}

// pidNow returns the leader's pid, 0 before the spawn.
func (p *Process) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid
}

const sigKill = syscall.SIGKILL

// Ended returns the record of a process that is not dshd's to run: one an
// earlier run of dshd left running, with leader pid (0 if unknown). It is
// done and exited from the start; nothing in it can be signalled.
func Ended(pid int) *Process {
	p := newProc(0)
	p.pid = pid
	p.exited = true
	close(p.done)
	return p
}

// Done is closed once the leader is reaped, its output drained and the
// spec's OnExit has run, or once a spawn failed.
func (p *Process) Done() <-chan struct{} { return p.done }

// DoneAt is when Done was closed, while stages are timed (stages.Start);
// the zero time otherwise. Read it after Done is closed.
func (p *Process) DoneAt() time.Time { return p.doneAt }

// StartErr is the error of a failed spawn (or of Failed); nil while the
// process runs or after it ran.
func (p *Process) StartErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.startErr
}

// InputOpen reports whether the process's input is still open: the leader
// has not exited and CloseInput has not run.
func (p *Process) InputOpen() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.exited && !p.inClosed
}

// Group is the process's cgroup; nil in group mode or before the spawn.
func (p *Process) Group() *cgroup.Group {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cg
}
