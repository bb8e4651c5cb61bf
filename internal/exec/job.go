package exec

import (
	"context"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"

	"github.com/dshd/dshd/internal/cgroup"
	"github.com/dshd/dshd/internal/netallow"
	"github.com/dshd/dshd/internal/proc"
	"github.com/dshd/dshd/internal/sandbox"
	"github.com/dshd/dshd/internal/shellenv"
)

// State is a job's lifecycle state.
type State string

// Job states. Every state but StateRunning is final.
const (
	StateRunning   State = "running"
	StateExited    State = "exited"    // the leader exited on its own (any code or signal)
	StateTimedOut  State = "timed_out" // stopped by the kill path after its timeout
	StateCancelled State = "cancelled" // stopped by Cancel or Close
	StateLost      State = "lost"      // left running by a server that died; stopped at the next start
)

// Stream selects a job's output stream.
type Stream int

// Output streams.
const (
	Stdout Stream = iota
	Stderr
)

// String returns "stdout" or "stderr".
func (s Stream) String() string {
	switch s {
	case Stdout:
		return "stdout"
	case Stderr:
		return "stderr"
	}
	return fmt.Sprintf("Stream(%d)", int(s))
}

// Output is one stream as reported in a Snapshot.
type Output struct {
	// Text is the stream when it fits in Options.CaptureBytes; otherwise its
	// head and tail around a line "…[N bytes elided]…", cut at rune
	// boundaries.
	Text string
	// TotalBytes counts every byte the process wrote to the stream.
	TotalBytes int64
	// Truncated is true when Text is not the whole stream.
	Truncated bool
	// ElidedFrom and ElidedTo are, when Truncated, the stream's bytes
	// [ElidedFrom, ElidedTo) that the elision line stands for.
	ElidedFrom, ElidedTo int64
	// Dropped counts bytes that are not readable through ReadOutput because
	// the stream's spool reached Options.SpoolMaxBytes, the spools of all
	// jobs reached Options.SpoolTotalBytes, or the spool could not be
	// written (a full disk).
	Dropped int64
	// DropReason says why the first dropped bytes were dropped (one of the
	// Drop* constants); "" when Dropped is 0.
	DropReason string
}

// Snapshot is a point-in-time copy of a job. Managed must not be modified.
type Snapshot struct {
	ID, Command, AgentID, Cwd string
	State                     State
	Background                bool
	PID                       int
	// ExitCode is the leader's exit code; nil while running and on signal death.
	ExitCode *int
	// Signal names the signal that killed the leader ("SIGKILL"), or "".
	Signal         string
	Stdout, Stderr Output
	// Managed is the overlay the process got, as collected.
	Managed shellenv.Overlay
	// Timeout is the effective timeout; 0 means none.
	Timeout              time.Duration
	CreatedAt, StartedAt time.Time
	// EndedAt is nil while running.
	EndedAt *time.Time
	// Duration is EndedAt-StartedAt, or the time running so far.
	Duration time.Duration
	// Usage is what the job used; zero while running.
	Usage Usage
	// KilledBy says why dshd killed the job (KilledBy*), "" if it did not.
	KilledBy string
	// Sandbox is the sandbox policy the job ran under.
	Sandbox sandbox.Policy
	// Network is what the job's commands reached and were refused through
	// the network allowlist's proxy; nil unless the job runs under it.
	Network *netallow.Record
	// Limits are the limits in effect for the job: Spec.Limits completed
	// by Options.Limits.
	Limits Limits
	// Enforcement says how each of Limits is enforced on this host.
	Enforcement LimitEnforcement
	// Terminal is the job's pseudo-terminal; nil for a job with pipes.
	// A terminal job's output is all in Stdout.
	Terminal *Terminal
	// Input records writes to the job's input; nil for a job whose input
	// is not held open (neither a terminal nor OpenStdin).
	Input *InputRecord
	// Remaining is what is left of a finished job whose leader exited
	// while other processes of it ran on; nil once none is left (and for
	// a running job).
	Remaining *Remainder
}

// Remainder is the processes of a job that outlived its leader. They stay
// in the job's cgroup (or process group), under its limits, and count as
// one running background job of its agent until the last is gone; Cancel
// kills them, as shutdown does.
type Remainder struct {
	// Processes is how many are left, as counted every remainderPoll.
	Processes int
	// Since is when the leader exited (the job's EndedAt).
	Since time.Time
}

// Job is one recorded execution. Its methods are safe for concurrent use.
type Job struct {
	e          *Executor
	proc       *proc.Process
	spare      *cgroup.Group // the group made ahead for this job until it starts (proc.Runner.TakeSpare); guarded by e.mu
	id         string
	command    string
	agentID    string
	cwd        string
	background bool
	mayOutlive bool // see Spec.MayOutlive
	managed    shellenv.Overlay
	timeout    time.Duration
	idemKey    string
	idemFP     string         // the request's fingerprint, with idemKey
	sandbox    sandbox.Policy // complete: the policy the job runs under
	limits     Limits         // in effect: the spec's, completed by the defaults
	enforce    LimitEnforcement
	roots      []string      // the roots the harness chose (Spec.WritableRoots, and the cwd with CwdIsRoot)
	view       *sandbox.View // the agent's snapshot workspace (Spec.View), or nil
	createdAt  time.Time
	timer      *time.Timer
	spoolBytes int64         // granted from the executor's spool budget; under e.mu
	heldAsBg   bool          // a foreground job's remainder counts as a background job; under e.mu
	started    chan struct{} // only for idempotent starts: closed after the spawn attempt
	existing   *Job          // set by register on an idempotency hit

	mu        sync.Mutex
	state     State
	startedAt time.Time
	endedAt   time.Time
	exitCode  *int
	signal    string
	usage     Usage
	killedBy  string
	stdout    capture
	stderr    capture
	changed   chan struct{} // closed on the next output or the end; nil until asked
	removed   bool
	terminal  *Terminal   // nil without a pty; replaced (never changed in place) by Resize
	openInput bool        // started with a terminal or OpenStdin
	input     InputRecord // writes through WriteInput
	// net is the job's session of the allowlist proxy (nil unless its
	// policy is the allowlist); closed when the job finishes.
	net *netallow.Session
}

// ID returns the job id ("job_…").
func (j *Job) ID() string { return j.id }

// Background reports whether the job was started as a background job.
func (j *Job) Background() bool { return j.background }

// countsAgainstAgent reports whether j holds one of its agent's background
// slots while it runs (Options.MaxBackgroundPerAgent): a background job, a
// foreground one that may outlive its call, or one whose leader left
// processes behind (heldAsBg). Call it under e.mu.
func (j *Job) countsAgainstAgent() bool {
	return (j.background || j.mayOutlive || j.heldAsBg) && j.agentID != ""
}

// Done returns a channel closed when the job is finished: its leader exited
// and its output is drained.
func (j *Job) Done() <-chan struct{} { return j.proc.Done() }

// DoneAt is when Done was closed while a benchmark times stages (package
// stages); zero otherwise, or before Done is closed.
func (j *Job) DoneAt() time.Time {
	select {
	case <-j.proc.Done():
		return j.proc.DoneAt()
	default:
		return time.Time{}
	}
}

// Lingers reports whether processes of the finished job outlived its
// leader, counted now (Snapshot's Remaining is as last polled, every
// remainderPoll): false for a running job, or once they are gone. A job
// that ended less than settle ago and still has processes is looked at
// again until then: a sandbox's processes (bubblewrap's) are gone a moment
// after its leader.
func (j *Job) Lingers(settle time.Duration) bool {
	if !j.proc.Lingering() {
		return false
	}
	var end time.Time
	j.mu.Lock()
	end = j.endedAt
	j.mu.Unlock()
	for {
		if !j.proc.JobAlive() {
			return false
		}
		if j.e.now().Sub(end) >= settle {
			return true
		}
		time.Sleep(proc.GroupPollInterval / 2)
	}
}

// Snapshot returns the job's current state.
func (j *Job) Snapshot() Snapshot {
	j.mu.Lock()
	defer j.mu.Unlock()
	s := Snapshot{
		ID:          j.id,
		Command:     j.command,
		AgentID:     j.agentID,
		Cwd:         j.cwd,
		State:       j.state,
		Background:  j.background,
		PID:         j.proc.PID(),
		ExitCode:    j.exitCode,
		Signal:      j.signal,
		Stdout:      j.stdout.output(),
		Stderr:      j.stderr.output(),
		Managed:     j.managed,
		Timeout:     j.timeout,
		CreatedAt:   j.createdAt,
		StartedAt:   j.startedAt,
		Usage:       j.usage,
		KilledBy:    j.killedBy,
		Sandbox:     j.sandbox,
		Limits:      j.limits,
		Enforcement: j.enforce,
		Terminal:    j.terminal,
	}
	if j.net != nil {
		r := j.net.Record()
		s.Network = &r
	}
	if j.openInput {
		in := j.input
		in.Open = j.proc.InputOpen()
		s.Input = &in
	}
	if j.exitCode != nil {
		c := *j.exitCode
		s.ExitCode = &c
	}
	if j.state != StateRunning {
		end := j.endedAt
		s.EndedAt = &end
		s.Duration = end.Sub(j.startedAt)
		if n := j.proc.Remainder(); n > 0 {
			s.Remaining = &Remainder{Processes: n, Since: end}
		}
	} else if !j.startedAt.IsZero() {
		s.Duration = j.e.now().Sub(j.startedAt)
	}
	return s
}

// Wait waits until the job is finished or ctx is done, and returns the
// latest snapshot; with ctx done first, also ctx's error. Waiting does not
// affect the job.
func (j *Job) Wait(ctx context.Context) (Snapshot, error) {
	select {
	case <-j.proc.Done():
		return j.Snapshot(), nil
	case <-ctx.Done():
		return j.Snapshot(), ctx.Err()
	}
}

// ReadOutput reads bytes of stream s from absolute offset off into p. It
// returns io.EOF when the job is finished and off is at (or past) the end
// of the readable stream, and (0, nil) when no bytes past off exist yet.
// Bytes counted in Output.Dropped are not readable. It returns
// ErrInvalidInput for a negative offset or unknown stream, and
// ErrJobNotFound once the job was removed by retention.
func (j *Job) ReadOutput(s Stream, off int64, p []byte) (int, error) {
	if off < 0 || (s != Stdout && s != Stderr) {
		return 0, fmt.Errorf("read output of %s: %w", j.id, ErrInvalidInput)
	}
	if len(p) == 0 {
		return 0, nil
	}
	j.mu.Lock()
	if j.removed {
		j.mu.Unlock()
		return 0, fmt.Errorf("read output of %s: %w", j.id, ErrJobNotFound)
	}
	c := &j.stdout
	if s == Stderr {
		c = &j.stderr
	}
	n, f, fileLen, err := c.readAt(off, p)
	j.mu.Unlock()
	if f == nil {
		return n, err
	}
	n, err = f.ReadAt(p[:fileLen], off)
	if err == io.EOF && n > 0 {
		err = nil
	}
	if err != nil {
		return n, fmt.Errorf("read output of %s: %w", j.id, err)
	}
	return n, nil
}

// OpenOutput returns the bytes of stream s from absolute offset off up to
// what is readable now, and how many there are; later output is not part
// of it. Bytes in the spool come from a descriptor of their own, so the
// reader may be handed to sendfile, and stays valid if the job is removed
// while it is read. The caller closes it. It returns ErrInvalidInput for a
// negative offset or unknown stream, and ErrJobNotFound once the job was
// removed by retention.
func (j *Job) OpenOutput(s Stream, off int64) (io.ReadCloser, int64, error) {
	if off < 0 || (s != Stdout && s != Stderr) {
		return nil, 0, fmt.Errorf("open output of %s: %w", j.id, ErrInvalidInput)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.removed {
		return nil, 0, fmt.Errorf("open output of %s: %w", j.id, ErrJobNotFound)
	}
	c := &j.stdout
	if s == Stderr {
		c = &j.stderr
	}
	r, n, err := c.open(off)
	if err != nil {
		return nil, 0, fmt.Errorf("open output of %s: %w", j.id, err)
	}
	return r, n, nil
}

// OutputChanged returns a channel that is closed when more output arrives
// or the job finishes. A finished job returns a closed channel.
func (j *Job) OutputChanged() <-chan struct{} {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.state != StateRunning {
		return j.proc.Done()
	}
	if j.changed == nil {
		j.changed = make(chan struct{})
	}
	return j.changed
}

// notifyLocked wakes OutputChanged waiters. Caller holds j.mu.
func (j *Job) notifyLocked() {
	if j.changed != nil {
		close(j.changed)
		j.changed = nil
	}
}

// sink returns the function the stream's reader goroutine feeds.
func (j *Job) sink(c *capture, name string) func([]byte) {
	return func(b []byte) {
		if c.fitsInMemory(len(b)) {
			j.mu.Lock()
			c.appendMem(b)
			j.notifyLocked()
			j.mu.Unlock()
			return
		}
		// File I/O outside the lock; only this goroutine touches the file
		// position, mem and spooled (see capture).
		spooled := c.spooled
		first := !c.spilled
		var (
			err    error
			n      int
			reason string
		)
		if first {
			n, reason, err = c.spoolWrite(c.mem, spooled)
			spooled += int64(n)
		}
		if err == nil && spooled == c.total {
			n, reason, err = c.spoolWrite(b, spooled)
			spooled += int64(n)
		}
		if err != nil {
			j.e.log.Warn("output spool failed; further output is dropped", "job_id", j.id, "stream", name, "reason", reason, "err", err)
		}
		j.mu.Lock()
		before := c.dropped
		if first {
			c.spill(b, spooled)
		} else {
			c.appendSpilled(b, spooled)
		}
		if c.reason == "" && c.dropped > 0 {
			c.reason = reason
		}
		lost, why := c.dropped-before, c.reason
		j.notifyLocked()
		j.mu.Unlock()
		if lost > 0 {
			j.e.m.droppedBytes(why, lost)
		}
	}
}

// finish records the exit. It runs in the waiter goroutine after the
// streams are drained, before done is closed.
func (j *Job) finish(ws syscall.WaitStatus, waitErr error) {
	if j.timer != nil {
		j.timer.Stop()
	}
	state := StateExited
	if r, ok := j.proc.StopReason(); ok {
		state = State(r)
	}
	usage, killedBy := j.proc.Outcome()
	j.mu.Lock()
	j.state = state
	j.endedAt = j.e.now()
	j.usage, j.killedBy = usage, killedBy
	if waitErr == nil {
		j.exitCode, j.signal = proc.ExitOf(ws)
	}
	j.stdout.eof = true
	j.stderr.eof = true
	net := j.net
	j.mu.Unlock()
	if net != nil {
		// The way out closes with the job: what the leader left behind
		// runs on without it.
		net.Close()
	}
	j.mu.Lock()
	j.notifyLocked()
	j.mu.Unlock()
	if waitErr != nil {
		j.e.log.Error("wait for job", "job_id", j.id, "err", waitErr)
	}
	j.e.jobFinished(j, state)
}

// remove drops the spool files; the job reads as not found afterwards.
func (j *Job) remove() {
	j.mu.Lock()
	j.removed = true
	j.mu.Unlock()
	// Writers are done (the job is finished) and readers check removed
	// under the lock before touching the files, except those already in
	// ReadAt, which then get os.ErrClosed.
	for _, c := range []*capture{&j.stdout, &j.stderr} {
		if err := c.remove(); err != nil {
			j.e.log.Warn("remove spool file", "job_id", j.id, "stream", c.suffix, "err", err)
		}
	}
}

// sandboxed returns how the job's command line is started in its
// sandbox and workspace view: nil when its policy confines nothing and it
// has no view.
func (j *Job) sandboxed() func(path string, args []string, start sandbox.StartFunc) error {
	if !j.sandbox.Confined() && j.view == nil {
		return nil
	}
	h := j.e.opts.Sandbox
	return func(path string, args []string, start sandbox.StartFunc) error {
		sess, err := h.StartIn(j.view, j.sandbox, j.cwd, j.roots, path, args, start)
		if sess != nil {
			j.mu.Lock()
			j.net = sess
			j.mu.Unlock()
		}
		return err
	}
}

// Sandbox returns the sandbox policy the job runs under.
func (j *Job) Sandbox() sandbox.Policy { return j.sandbox }

// Network returns what the job reached and was refused through the
// allowlist's proxy so far; nil unless it runs under the allowlist.
func (j *Job) Network() *netallow.Record {
	j.mu.Lock()
	n := j.net
	j.mu.Unlock()
	if n == nil {
		return nil
	}
	r := n.Record()
	return &r
}

// winsize is the size the job's terminal starts with; nil without one.
func (j *Job) winsize() *proc.Winsize {
	if j.terminal == nil {
		return nil
	}
	return &proc.Winsize{Cols: uint16(j.terminal.Cols), Rows: uint16(j.terminal.Rows)}
}
