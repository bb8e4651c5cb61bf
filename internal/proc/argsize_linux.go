package proc

import (
	"fmt"
	"syscall"
)

// The kernel refuses an execve whose arguments or environment are too big
// (E2BIG). dshd checks the same limits before it spawns, so an oversized
// request is a clear ErrTooLarge, never a failed spawn.
const (
	// MaxArgBytes is the longest single argument or environment entry
	// ("NAME=value") execve accepts: MAX_ARG_STRLEN, 32 pages of 4 KiB,
	// less the terminating NUL. The command is one argument of bash -c.
	MaxArgBytes = 32*4096 - 1

	// stackLimitCap is the kernel's cap on the argument space whatever the
	// stack limit: three quarters of _STK_LIM (8 MiB), see fs/exec.c.
	stackLimitCap = 6 << 20
	// minArgSpace is the kernel's floor on the argument space (ARG_MAX).
	minArgSpace = 128 << 10
)

// argSpace is the number of bytes execve allows for the argument and
// environment strings together with their pointers: a quarter of the stack
// limit, capped at 6 MiB and at least 128 KiB (fs/exec.c).
func argSpace() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_STACK, &rl); err != nil || rl.Cur == ^uint64(0) {
		return stackLimitCap
	}
	return max(min(int(rl.Cur/4), stackLimitCap), minArgSpace)
}

// CheckArgSize returns an error wrapping ErrTooLarge when bash -c command
// with the environment env would exceed what execve accepts.
func CheckArgSize(command string, env []string) error {
	if len(command) > MaxArgBytes {
		return fmt.Errorf("%w: the command is %d bytes; at most %d are allowed", ErrTooLarge, len(command), MaxArgBytes)
	}
	const ptr = 8 // each string also takes a pointer in the new stack
	total := len("bash") + 1 + len("-c") + 1 + len(command) + 1 + 3*ptr
	for _, kv := range env {
		if len(kv) > MaxArgBytes {
			return fmt.Errorf("%w: environment entry %.40q… is %d bytes; at most %d are allowed", ErrTooLarge, kv, len(kv), MaxArgBytes)
		}
		total += len(kv) + 1 + ptr
	}
	if limit := argSpace(); total > limit {
		return fmt.Errorf("%w: the command and its environment take %d bytes; at most %d are allowed", ErrTooLarge, total, limit)
	}
	return nil
}
