package proc

import (
	"errors"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Waiting without a thread per job. os.Process.Wait parks an OS thread in a
// blocking waitid for as long as the job runs; thousands of background jobs
// would mean thousands of threads. Instead each leader is spawned with a
// pidfd (clone3 CLONE_PIDFD), which becomes readable when the process
// exits. The pidfd is non-blocking and in the runtime's poller, so the
// waiting goroutine is parked in the netpoller like a socket read; once it
// is readable, waitid(P_PIDFD, WNOHANG) reaps the leader.

// exitWork bounds how many waiters do the file work of a job's end at once
// (cgroup files, rmdir, the running index). When thousands of jobs end
// together on a loaded machine each of those system calls blocks, and the
// runtime gives every blocked one an OS thread of its own; waiting for a
// slot here takes none. It is per process because OS threads are.
var exitWork = make(chan struct{}, 8)

// parkedHook, when set (by tests), is called once by each waiter that finds
// its leader still running and parks in the poller.
var parkedHook func()

// siginfoChld is the kernel's siginfo_t as filled for a child's exit
// (64-bit layout: three ints and padding, then si_pid, si_uid, si_status).
type siginfoChld struct {
	Signo  int32
	Errno  int32
	Code   int32
	_      int32
	Pid    int32
	UID    uint32
	Status int32
	_      [100]byte
}

// Codes of siginfo_t.si_code for SIGCHLD.
const (
	cldExited = 1
	cldKilled = 2
	cldDumped = 3
)

// withPidfd asks the spawn for a pidfd in *fd (-1 until the spawn sets it).
func withPidfd(attr *syscall.SysProcAttr, fd *int) {
	*fd = -1
	attr.PidFD = fd
}

// waitLeader reaps the leader: through pidfd when the spawn gave one,
// else (a kernel without pidfds) with a blocking Wait. It returns the
// wait status and the rusage of the leader and the descendants it waited
// for. The pidfd is closed.
func waitLeader(leader *os.Process, pidfd int) (syscall.WaitStatus, *syscall.Rusage, error) {
	if pidfd < 0 {
		st, err := leader.Wait()
		if st == nil {
			return 0, nil, err
		}
		ws, _ := st.Sys().(syscall.WaitStatus)
		ru, _ := st.SysUsage().(*syscall.Rusage)
		return ws, ru, nil
	}
	if err := syscall.SetNonblock(pidfd, true); err != nil {
		syscall.Close(pidfd)
		return 0, nil, os.NewSyscallError("setnonblock pidfd", err)
	}
	f := os.NewFile(uintptr(pidfd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, nil, err
	}
	var (
		info   siginfoChld
		ru     syscall.Rusage
		werr   error
		parked bool
	)
	err = rc.Read(func(fd uintptr) bool {
		for {
			_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, unix.P_PIDFD, fd,
				uintptr(unsafe.Pointer(&info)), syscall.WEXITED|syscall.WNOHANG, uintptr(unsafe.Pointer(&ru)), 0)
			switch {
			case errno == syscall.EINTR:
				continue
			case errno == syscall.EAGAIN:
				return false
			case errno != 0:
				werr = os.NewSyscallError("waitid", errno)
				return true
			}
			if info.Pid == 0 { // not exited yet: wait for readability
				if parkedHook != nil && !parked {
					parked = true
					parkedHook()
				}
				return false
			}
			return true
		}
	})
	if err == nil {
		err = werr
	}
	if err != nil {
		return 0, nil, err
	}
	var ws syscall.WaitStatus
	switch info.Code {
	case cldExited:
		ws = syscall.WaitStatus(info.Status&0xff) << 8
	case cldKilled:
		ws = syscall.WaitStatus(info.Status & 0x7f)
	case cldDumped:
		ws = syscall.WaitStatus(info.Status&0x7f) | 0x80
	default:
		return 0, &ru, errors.New("waitid: unexpected si_code")
	}
	return ws, &ru, nil
}
