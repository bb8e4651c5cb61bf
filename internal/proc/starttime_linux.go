package proc

import (
	"encoding/binary"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// A process's start time, as /proc/<pid>/stat gives it (field 22), is the
// CLOCK_BOOTTIME at its fork in clock ticks (USER_HZ). Reading it back from
// /proc costs an open, a read of a line the kernel builds from the whole
// task, and a close: tens of microseconds for every job. The spawn reads
// the clock itself just before and just after the fork instead: when both
// readings fall in the same tick, that tick is the start time. Only when a
// tick boundary fell inside the spawn is /proc read.

// clockTicks is USER_HZ, from the auxiliary vector the kernel gave this
// process (AT_CLKTCK); 0 if it cannot be read, and then /proc is always
// read.
var clockTicks = sync.OnceValue(func() uint64 {
	b, err := os.ReadFile("/proc/self/auxv")
	if err != nil {
		return 0
	}
	const atClkTck = 17
	for ; len(b) >= 16; b = b[16:] {
		key, val := binary.NativeEndian.Uint64(b), binary.NativeEndian.Uint64(b[8:])
		if key == atClkTck {
			return val
		}
		if key == 0 {
			break
		}
	}
	return 0
})

// bootTicks returns CLOCK_BOOTTIME in clock ticks, 0 if it cannot.
func bootTicks() uint64 {
	hz := clockTicks()
	if hz == 0 {
		return 0
	}
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		return 0
	}
	return uint64(ts.Nano()) / (1_000_000_000 / hz)
}

// startBetween is the start time of a process forked between two bootTicks
// readings, 0 if they differ (or are unknown).
func startBetween(before, after uint64) uint64 {
	if before == 0 || before != after {
		return 0
	}
	return before
}
