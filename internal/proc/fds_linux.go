package proc

import (
	"math"
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// Descriptors a process inherited without close-on-exec (a shell's
// `dshd 11>>harness.log`) would be inherited in turn by every job and
// hook dshd starts, and so be writable from inside any sandbox. Every
// descriptor Go opens is close-on-exec, and os.StartProcess hands a child only
// its 0-2 (and the descriptors the sandbox passes bubblewrap); so marking every
// descriptor from 3 up close-on-exec once, before the first spawn, leaves
// each child exactly the descriptors dshd means it to have.

var inheritedOnce sync.Once

// CloseInheritedOnExec marks every descriptor from 3 up close-on-exec, once
// per process. dshd calls it first thing; New calls it too, so no spawn
// of an Executor can run before it.
func CloseInheritedOnExec() {
	inheritedOnce.Do(func() { _ = markCloexecFrom(3) })
}

// markCloexecFrom marks every descriptor from first up close-on-exec:
// close_range(CLOSE_RANGE_CLOEXEC) (Linux 5.11), else one fcntl per
// descriptor listed in /proc/self/fd.
func markCloexecFrom(first int) error {
	if err := unix.CloseRange(uint(first), math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC); err == nil {
		return nil
	}
	return markCloexecListed(first)
}

// markCloexecListed is markCloexecFrom for kernels without close_range.
func markCloexecListed(first int) error {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return err
	}
	for _, n := range names {
		fd, err := strconv.Atoi(n)
		if err != nil || fd < first {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 {
			continue // closed since the listing (the listing's own), or done
		}
		_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFD, flags|unix.FD_CLOEXEC)
	}
	return nil
}
