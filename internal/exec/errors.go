package exec

import (
	"errors"
	"fmt"
	"time"

	"github.com/dshd/dshd/internal/proc"
)

var (
	// ErrJobNotFound is returned by Executor.Job and Executor.Cancel when no
	// job with the given id is recorded (never started, or already removed
	// by retention).
	ErrJobNotFound = errors.New("job not found")

	// ErrTooManyJobs is returned by Executor.Start when the global cap on
	// running jobs or the per-agent cap on running background jobs is
	// reached. It is always wrapped in a *TooManyJobsError.
	ErrTooManyJobs = errors.New("too many jobs")

	// ErrInvalidCwd is returned by Executor.Start and Executor.RunProcess
	// when the working directory does not exist or is not a directory.
	ErrInvalidCwd = proc.ErrInvalidCwd

	// ErrManagedKeyInEnv is returned by Executor.Start when the explicit
	// environment names a variable in the managed namespace (DSH_*): only
	// dshd decides managed values.
	ErrManagedKeyInEnv = errors.New("managed key in env")

	// ErrInvalidInput is returned by Executor.Start and Executor.RunProcess
	// for malformed input: NUL bytes in the command, cwd, environment names
	// or values, malformed environment names, a negative timeout, a
	// duplicate job id, or an empty command.
	ErrInvalidInput = errors.New("invalid input")

	// ErrTooLarge is returned by Executor.Reserve, Reservation.Start and
	// Executor.RunProcess when the command, an environment entry, or the
	// command with its whole environment exceed what the kernel's execve
	// accepts (MaxArgBytes per string; the argument space, usually 2 MiB,
	// for all of them). Nothing is spawned.
	ErrTooLarge = proc.ErrTooLarge

	// ErrTimeoutTooLong is returned by Executor.Reserve for a foreground
	// job whose timeout exceeds Options.MaxTimeout. dshd never shortens a
	// timeout silently.
	ErrTimeoutTooLong = errors.New("timeout too long")

	// ErrClosed is returned by Executor.Start and Executor.RunProcess after
	// Executor.Close has been called.
	ErrClosed = proc.ErrClosed

	// ErrIdempotencyKeyReused is returned by Executor.Reserve when the
	// idempotency key was used, within its window, for a different request.
	ErrIdempotencyKeyReused = errors.New("idempotency key reused for a different request")

	// ErrIdempotencyKeyInUse is returned by Executor.Reserve when the first
	// request with the idempotency key is still being started.
	ErrIdempotencyKeyInUse = errors.New("idempotency key in use")

	// ErrIdempotencyJobGone is returned by Executor.Reserve when the job
	// started with the idempotency key is no longer recorded (retention, or
	// a restart): the command is not run again.
	ErrIdempotencyJobGone = errors.New("job of the idempotency key is no longer recorded")

	// ErrInputNotOpen is returned by Executor.WriteInput when the running
	// job has no input held open (it was started neither with a terminal
	// nor with OpenStdin, or its input was closed). A job that has ended
	// is ErrJobEnded instead.
	ErrInputNotOpen = errors.New("job input not open")

	// ErrNotTerminal is returned by Executor.Resize for a running job that
	// does not run in a terminal. A job that has ended is ErrJobEnded
	// instead.
	ErrNotTerminal = errors.New("job has no terminal")

	// ErrJobEnded is returned by Executor.WriteInput, Resize and Signal
	// when the job's leader has already exited, whatever the job's kind:
	// it comes before ErrInputNotOpen and ErrNotTerminal.
	ErrJobEnded = errors.New("job is not running")

	// ErrInputBlocked is returned by Executor.WriteInput when the program
	// did not take the bytes before the deadline (it is not reading, and
	// the pipe or terminal buffer is full). The error says how many of the
	// bytes were taken; those cannot be taken back.
	ErrInputBlocked = proc.ErrInputBlocked

	// ErrSignalNotAllowed is returned by Executor.Signal for a signal
	// outside AllowedSignals.
	ErrSignalNotAllowed = errors.New("signal not allowed")

	// ErrInvalidOptions is returned by New when Options are inconsistent
	// (an unknown inherit policy, a malformed Set name, a relative Home).
	ErrInvalidOptions = proc.ErrInvalidOptions
)

// TooManyJobsError reports a refused start and when trying again makes sense.
// errors.Is(err, ErrTooManyJobs) holds for it.
type TooManyJobsError struct {
	// Limit names the cap that was hit: "global" or "agent".
	Limit string
	// Max is the value of that cap.
	Max int
	// RetryAfter is a hint for clients (HTTP Retry-After).
	RetryAfter time.Duration
}

// Error implements error.
func (e *TooManyJobsError) Error() string {
	return fmt.Sprintf("too many jobs: %s limit of %d running jobs reached; retry after %s", e.Limit, e.Max, e.RetryAfter)
}

// Unwrap makes errors.Is(err, ErrTooManyJobs) true.
func (e *TooManyJobsError) Unwrap() error { return ErrTooManyJobs }
