package exec

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/dshd/dshd/internal/proc"
	"github.com/dshd/dshd/internal/sandbox"
)

// ProcessCaptureBytes is how much of each stream RunProcess keeps; the rest
// is discarded.
const ProcessCaptureBytes = 1 << 20

// ProcessSpec describes a helper process such as a hook script.
type ProcessSpec struct {
	// Command is run as `bash -c Command`.
	Command string
	// Cwd is the working directory; empty means Options.DefaultCwd.
	Cwd string
	// Stdin is the process's standard input (nil: empty).
	Stdin []byte
	// ExtraEnv is added after the policy environment; managed (DSH_*) names
	// are dropped.
	ExtraEnv map[string]string
	// Timeout: 0 means Options.DefaultTimeout.
	Timeout time.Duration
	// View, if set, is mounted at its target in the process's own mount
	// namespace (an agent's snapshot workspace: its hooks see its view).
	View *sandbox.View
}

// ProcessResult is how a helper process ended.
type ProcessResult struct {
	// Stdout and Stderr hold up to ProcessCaptureBytes of each stream.
	Stdout, Stderr []byte
	// ExitCode is nil on signal death.
	ExitCode *int
	// Signal names the signal that killed the process ("SIGTERM"), or "".
	Signal string
	// TimedOut is true when the kill path ran because of the timeout.
	TimedOut bool
	Duration time.Duration
}

// RunProcess runs p to completion with the policy environment (no managed
// values) plus p.ExtraEnv, in its own process group, through the same spawn
// and kill path as jobs. It is not recorded as a job. A non-zero exit, a
// signal or a timeout is reported in the result, not as an error. If ctx
// ends first the process is stopped through the kill path and RunProcess
// returns the result together with ctx's error.
//
// Errors: ErrInvalidInput (NUL bytes, malformed env names, empty command,
// negative timeout), ErrInvalidCwd, ErrClosed, or a spawn error.
func (e *Executor) RunProcess(ctx context.Context, p ProcessSpec) (ProcessResult, error) {
	if p.Command == "" || hasNUL(p.Command) || hasNUL(p.Cwd) || p.Timeout < 0 {
		return ProcessResult{}, fmt.Errorf("run process: %w: empty command, NUL byte or negative timeout", ErrInvalidInput)
	}
	for k, v := range p.ExtraEnv {
		if !validEnvName(k) || hasNUL(v) {
			return ProcessResult{}, fmt.Errorf("run process: %w: env %q: malformed name or NUL in value", ErrInvalidInput, k)
		}
	}
	timeout := p.Timeout
	if timeout == 0 {
		timeout = e.opts.DefaultTimeout
	}
	pr := e.run.NewProcess()
	var (
		stdout, stderr limitedBuffer
		ws             syscall.WaitStatus
		waitErr        error
	)
	timer := time.AfterFunc(timeout, func() { pr.Stop(proc.StopTimeout) })
	defer timer.Stop()
	start := time.Now()
	err := e.run.Launch(pr, &proc.Spec{
		Command:  p.Command,
		Dir:      e.ResolveCwd(p.Cwd),
		Env:      e.base.with(p.ExtraEnv, nil),
		Stdin:    p.Stdin,
		HasStdin: len(p.Stdin) > 0,
		Stdout:   stdout.write,
		Stderr:   stderr.write,
		OnExit:   func(s syscall.WaitStatus, err error) { ws, waitErr = s, err },
		Contain:  e.run.ForJob(e.ids.New("proc_"), e.opts.Limits),
		Sandbox:  viewOnly(p.View),
	})
	if err != nil {
		if errors.Is(err, ErrClosed) {
			return ProcessResult{}, ErrClosed
		}
		return ProcessResult{}, fmt.Errorf("run process: %w", err)
	}
	var ctxErr error
	select {
	case <-pr.Done():
	case <-ctx.Done():
		ctxErr = ctx.Err()
		pr.Stop(proc.StopCancel)
		<-pr.Done()
	}
	res := ProcessResult{
		Stdout:   stdout.buf,
		Stderr:   stderr.buf,
		Duration: time.Since(start),
	}
	if r, ok := pr.StopReason(); ok && r == proc.StopTimeout {
		res.TimedOut = true
	}
	if waitErr != nil {
		return res, fmt.Errorf("run process: wait: %w", waitErr)
	}
	res.ExitCode, res.Signal = proc.ExitOf(ws)
	return res, ctxErr
}

// limitedBuffer keeps the first ProcessCaptureBytes written to it. It is
// written by one reader goroutine and read after the process is done.
type limitedBuffer struct{ buf []byte }

func (b *limitedBuffer) write(p []byte) {
	if room := ProcessCaptureBytes - len(b.buf); room > 0 {
		b.buf = append(b.buf, p[:min(len(p), room)]...)
	}
}

// viewOnly starts an unconfined command seeing v (nil: no view, nil).
func viewOnly(v *sandbox.View) func(path string, args []string, start sandbox.StartFunc) error {
	if v == nil {
		return nil
	}
	return func(path string, args []string, start sandbox.StartFunc) error {
		_, err := (*sandbox.Host)(nil).StartIn(v, sandbox.Default, "", nil, path, args, start)
		return err
	}
}
