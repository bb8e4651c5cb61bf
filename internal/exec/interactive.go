package exec

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/dshd/dshd/internal/proc"
)

// Terminal sizes Spec and Resize accept, in character cells.
const (
	DefaultCols     = 80
	DefaultRows     = 24
	MaxTerminalSize = 1000
	// DefaultTerm is TERM for terminal jobs unless Options.Term says
	// otherwise.
	DefaultTerm = "xterm-256color"
	// DefaultInputWait is how long WriteInput waits for the program to take
	// the bytes when its ctx has no deadline.
	DefaultInputWait = 5 * time.Second
)

// Terminal describes a terminal job's pseudo-terminal.
type Terminal struct {
	Cols, Rows int
	// Term is the TERM the job got.
	Term string
}

// InputRecord is what was written to a job's input through WriteInput:
// sizes and times, and the bytes themselves only with Options.RecordInput.
type InputRecord struct {
	// Open is true while writes are taken: the job runs and, for a pipe,
	// its input was not closed.
	Open bool
	// Bytes and Writes count what the program took.
	Bytes  int64
	Writes int64
	// LastWriteAt is the time of the last write; zero before the first.
	LastWriteAt time.Time
	// Closed is true once CloseInput closed a pipe (or sent ^D to a
	// terminal at least once).
	Closed bool
	// Text is the first Options.CaptureBytes bytes written, only with
	// Options.RecordInput; Truncated says whether more were written.
	Text      string
	Truncated bool
}

// signals is the allowlist of Signal, by the names jobs report.
var signals = map[string]syscall.Signal{
	"SIGHUP":   syscall.SIGHUP,
	"SIGINT":   syscall.SIGINT,
	"SIGQUIT":  syscall.SIGQUIT,
	"SIGKILL":  syscall.SIGKILL,
	"SIGUSR1":  syscall.SIGUSR1,
	"SIGUSR2":  syscall.SIGUSR2,
	"SIGTERM":  syscall.SIGTERM,
	"SIGCONT":  syscall.SIGCONT,
	"SIGSTOP":  syscall.SIGSTOP,
	"SIGTSTP":  syscall.SIGTSTP,
	"SIGWINCH": syscall.SIGWINCH,
}

// AllowedSignals returns the names Signal accepts, sorted: the signals a
// person at a terminal can send (^C, ^\, ^Z, a hang-up, a resize), the two
// user signals, and TERM, KILL, STOP and CONT.
func AllowedSignals() []string {
	names := make([]string, 0, len(signals))
	for n := range signals {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// inputDeadline is ctx's deadline, or DefaultInputWait from now.
func inputDeadline(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(DefaultInputWait)
}

// WriteInput writes data to the input of the running job id, then closes
// it if closeInput is set, and returns the job as it stands. The write
// waits, until ctx's deadline (DefaultInputWait without one), for the
// program to take the bytes. Closing a pipe gives the program end-of-file
// once it has read what was written; a terminal cannot be closed, so for a
// terminal job closing writes ^D, its end-of-file character. What was
// written is recorded on the job (Snapshot.Input).
//
// Errors: ErrJobNotFound; ErrJobEnded (the leader has exited, whatever
// the job's input was); ErrInputNotOpen (a running job with no input held
// open, or whose input was closed); ErrInputBlocked (the program did
// not take every byte in time; the error says how many it took, and they
// are recorded).
func (e *Executor) WriteInput(ctx context.Context, id string, data []byte, closeInput bool) (Snapshot, error) {
	j, err := e.Job(id)
	if err != nil {
		return Snapshot{}, err
	}
	deadline := inputDeadline(ctx)
	if len(data) > 0 || !closeInput {
		n, werr := j.proc.WriteInput(data, deadline)
		j.recordInput(data[:n], false)
		if werr != nil {
			if errors.Is(werr, ErrInputBlocked) {
				return j.Snapshot(), fmt.Errorf("write to job %s: %w (%d of %d bytes were taken)", id, ErrInputBlocked, n, len(data))
			}
			return j.Snapshot(), j.inputError("write to", werr)
		}
	}
	if closeInput {
		if err := j.proc.CloseInput(deadline); err != nil {
			return j.Snapshot(), j.inputError("close input of", err)
		}
		j.recordInput(nil, true)
	}
	return j.Snapshot(), nil
}

// inputError wraps an error of the proc's input in the exported sentinels.
func (j *Job) inputError(op string, err error) error {
	switch {
	case errors.Is(err, proc.ErrNoInput) && op == "resize":
		return fmt.Errorf("resize job %s: %w", j.id, ErrNotTerminal)
	case errors.Is(err, proc.ErrNoInput):
		return fmt.Errorf("%s job %s: %w (a job takes input when started with tty or openStdin, until its input is closed)", op, j.id, ErrInputNotOpen)
	case errors.Is(err, proc.ErrEnded):
		return fmt.Errorf("%s job %s: %w", op, j.id, ErrJobEnded)
	}
	return fmt.Errorf("%s job %s: %w", op, j.id, err)
}

// recordInput counts b (a write the program took) and, with closed, the
// input's closing.
func (j *Job) recordInput(b []byte, closed bool) {
	if len(b) == 0 && !closed {
		return
	}
	now := j.e.now()
	j.mu.Lock()
	defer j.mu.Unlock()
	in := &j.input
	if closed {
		in.Closed = true
	}
	if len(b) == 0 {
		return
	}
	in.Bytes += int64(len(b))
	in.Writes++
	in.LastWriteAt = now
	if j.e.opts.RecordInput {
		room := j.e.opts.CaptureBytes - len(in.Text)
		if room < len(b) {
			in.Truncated = true
		}
		if room > 0 {
			in.Text += string(b[:min(room, len(b))])
		}
	}
}

// Resize sets the size of the running terminal job id, in character cells
// (1 to MaxTerminalSize each); the program gets SIGWINCH.
//
// Errors: ErrJobNotFound; ErrInvalidInput (a size out of range);
// ErrJobEnded (the leader has exited, terminal or not); ErrNotTerminal (a
// running job without a terminal).
func (e *Executor) Resize(id string, cols, rows int) (Snapshot, error) {
	if !validSize(cols) || !validSize(rows) {
		return Snapshot{}, fmt.Errorf("resize job %s: %w: cols and rows must be within 1 and %d", id, ErrInvalidInput, MaxTerminalSize)
	}
	j, err := e.Job(id)
	if err != nil {
		return Snapshot{}, err
	}
	// proc.resize says which comes first: a job that has ended is not
	// running, terminal or not.
	if err := j.proc.Resize(proc.Winsize{Cols: uint16(cols), Rows: uint16(rows)}); err != nil {
		return j.Snapshot(), j.inputError("resize", err)
	}
	j.mu.Lock()
	j.terminal = &Terminal{Cols: cols, Rows: rows, Term: j.terminal.Term}
	j.mu.Unlock()
	return j.Snapshot(), nil
}

func validSize(n int) bool { return n >= 1 && n <= MaxTerminalSize }

// Signal sends the signal named name (one of AllowedSignals, "SIGINT") to
// the process group of the running job id, as a terminal sends ^C to its
// foreground group. Processes that left the group (setsid) do not get it;
// Cancel stops the whole job.
//
// Errors: ErrJobNotFound; ErrSignalNotAllowed; ErrJobEnded.
func (e *Executor) Signal(id, name string) (Snapshot, error) {
	sig, ok := signals[name]
	if !ok {
		return Snapshot{}, fmt.Errorf("signal job %s: %w: %q (allowed: %v)", id, ErrSignalNotAllowed, name, AllowedSignals())
	}
	j, err := e.Job(id)
	if err != nil {
		return Snapshot{}, err
	}
	if err := j.proc.SignalGroupNow(sig); err != nil {
		return j.Snapshot(), j.inputError("signal", err)
	}
	return j.Snapshot(), nil
}
