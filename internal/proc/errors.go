package proc

import "errors"

// The runner's errors. Package exec returns the same values under the same
// names, so errors.Is holds on either side.
var (
	// ErrInvalidCwd is returned by Runner.Launch when the working directory
	// does not exist or is not a directory (inside the sandbox, for a
	// confined process).
	ErrInvalidCwd = errors.New("invalid cwd")

	// ErrTooLarge is returned by CheckArgSize and Runner.Launch when the
	// command, an environment entry, or the command with its whole
	// environment exceed what the kernel's execve accepts (MaxArgBytes per
	// string; the argument space, usually 2 MiB, for all of them).
	ErrTooLarge = errors.New("arguments too large")

	// ErrClosed is returned by Runner.Launch after Runner.StopAll or
	// Runner.Close.
	ErrClosed = errors.New("executor closed")

	// ErrInputBlocked is returned by Process.WriteInput and CloseInput when
	// the program did not take the bytes before the deadline (it is not
	// reading, and the pipe or terminal buffer is full).
	ErrInputBlocked = errors.New("job input blocked: the program is not reading")

	// ErrInvalidOptions is returned by NewRunner for a containment mode
	// that is unknown or that the host cannot give.
	ErrInvalidOptions = errors.New("invalid executor options")
)

// StopReason says why a process's kill path was started. Its values are
// the names of the job states they end in.
type StopReason string

// Stop reasons.
const (
	// StopTimeout: the process ran past its timeout.
	StopTimeout StopReason = "timed_out"
	// StopCancel: it was cancelled (a cancel, a limit it went past, or
	// shutdown).
	StopCancel StopReason = "cancelled"
)
