package sandbox

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"slices"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Every confined command runs under a seccomp filter that denies the kernel
// surface no command needs. A denied call fails with EPERM (the process is
// not killed), so a program that probes for a feature gets a clean error.
// Most of these calls already fail for want of a capability; the filter
// keeps the command from reaching the kernel code behind them at all, and
// covers what needs none. The filter allows everything else: it is a
// denylist on top of the namespaces, the dropped capabilities and Landlock,
// not the sandbox itself.

// deniedCalls are denied on every architecture (each must exist in the
// architecture's table, or the filter is not built and confined policies
// are unavailable). Grouped by why:
var deniedCalls = []string{
	// Kernel programs, profiling and fault handling in user space: bpf
	// and perf_event_open reach large, often-exploited subsystems and
	// read kernel state; userfaultfd is the usual tool for stretching a
	// kernel race; io_uring is a second system-call interface with its
	// own long list of kernel bugs (libuv and others fall back to plain
	// calls when it is refused).
	"bpf", "perf_event_open", "userfaultfd",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	// The kernel keyrings are per uid, not per sandbox: a command running
	// as dshd's uid would share the host user's keys.
	"keyctl", "add_key", "request_key",
	// Loading code into the kernel, replacing it, or stopping it.
	"init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot",
	// Opening a file by handle bypasses every path-based view (the
	// classic container escape). Its counterpart name_to_handle_at stays
	// allowed: it only encodes a path the command can already reach, and
	// some tools use it to identify mounts.
	"open_by_handle_at",
	// New namespaces: a new user namespace hands its creator every
	// capability over namespaces of its own, the main way unprivileged
	// code reaches mount, netfilter and other privileged kernel code.
	// clone with a CLONE_NEW* flag is denied below; clone3's flags are in
	// memory, out of a filter's reach (see cloneFilter).
	"unshare", "setns",
	// Mounts, old and new interface: the view is built before the command
	// starts and never changes.
	"mount", "umount2", "pivot_root", "move_mount", "open_tree",
	"fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
	// Host-wide settings: swap, process accounting, the clock, names,
	// quotas, and the kernel log (which holds kernel addresses and other
	// processes' messages).
	"swapon", "swapoff", "acct", "settimeofday", "clock_settime", "clock_adjtime",
	"sethostname", "setdomainname", "quotactl", "quotactl_fd", "syslog",
}

// deniedIfPresent are denied where the architecture has them: direct
// port I/O (x86), and loading a.out libraries.
var deniedIfPresent = []string{"iopl", "ioperm", "uselib"}

// cloneNewFlags are the namespace flags clone accepts (CLONE_NEWTIME is
// unshare's and clone3's only, and its bit is the exit signal's in clone).
const cloneNewFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

// ptrace stays allowed: Landlock (namespaces) and the pid namespace
// (bubblewrap) already keep a command from tracing anything but its own
// processes, and the kernel checks the filter again after a tracer changes
// a call, so tracing gets nothing past it. strace and gdb keep working.

// cloneFilter says what the filter does with clone3.
type cloneFilter int

const (
	// clone3Allowed: under namespaces, the filter is installed on the
	// spawning thread, and Go starts the command with clone3 (to place
	// it in its cgroup as it is born), so clone3 must pass. A program that
	// calls clone3 itself can still create a user namespace; it cannot
	// mount, unshare or setns in it.
	clone3Allowed cloneFilter = iota
	// clone3NoSys: under bubblewrap, the filter applies from the
	// command's execve on; clone3 fails with ENOSYS, as on a kernel
	// without it, so the C library falls back to clone, whose flags the
	// filter checks.
	clone3NoSys
)

// filterArch is the architecture the filter is built for: "" is the one
// running (a test names another to see the host fail closed).
var filterArch = ""

// syscallFilter is a compiled filter (a struct sock_filter array).
type syscallFilter struct {
	prog []unix.SockFilter
	desc string // for GET /healthz
}

// newSyscallFilter compiles the filter for the running architecture. It
// fails where the library has no system-call table for it.
func newSyscallFilter(c cloneFilter) (*syscallFilter, error) {
	info, err := arch.GetInfo(filterArch)
	if err != nil {
		return nil, fmt.Errorf("seccomp filter for %s: %w", cmp.Or(filterArch, runtime.GOARCH), err)
	}
	// The library assembles for the running architecture; its table must
	// name every call denied (a missing one is an error, never a hole).
	for _, n := range slices.Concat(deniedCalls, []string{"clone", "clone3"}) {
		if _, ok := info.SyscallNames[n]; !ok {
			return nil, fmt.Errorf("seccomp filter for %s: no system call %s in its table", info.Name, n)
		}
	}
	names := append([]string(nil), deniedCalls...)
	for _, n := range deniedIfPresent {
		if _, ok := info.SyscallNames[n]; ok {
			names = append(names, n)
		}
	}
	groups := []seccomp.SyscallGroup{{
		Names:  names,
		Action: seccomp.ActionErrno, // EPERM
		NamesWithCondtions: []seccomp.NameWithConditions{{
			Name:       "clone",
			Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.BitsSet, Value: cloneNewFlags}},
		}},
	}}
	if c == clone3NoSys {
		groups = append(groups, seccomp.SyscallGroup{Names: []string{"clone3"}, Action: seccomp.ActionErrno | seccomp.Action(unix.ENOSYS)})
	}
	p := seccomp.Policy{DefaultAction: seccomp.ActionAllow, Syscalls: groups}
	insts, err := p.Assemble()
	if err != nil {
		return nil, fmt.Errorf("seccomp filter for %s: %w", info.Name, err)
	}
	// The library lets calls of another architecture through (it checks
	// the native table only): on amd64, int 0x80 reaches the i386 table,
	// where none of the above is denied. Refuse them all, as a kernel
	// without that compatibility layer would.
	guard := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)},
	}
	raw, err := bpf.Assemble(append(guard, insts...))
	if err != nil {
		return nil, fmt.Errorf("seccomp filter: %w", err)
	}
	f := &syscallFilter{prog: make([]unix.SockFilter, len(raw)), desc: fmt.Sprintf("%s: %d calls denied", info.Name, len(names)+1)}
	if c == clone3NoSys {
		f.desc += ", clone3 ENOSYS"
	}
	for i, r := range raw {
		f.prog[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return f, nil
}

// load installs f on the calling thread only (which must have
// no_new_privs set); processes it starts afterwards inherit it.
func (f *syscallFilter) load() error {
	prog := unix.SockFprog{Len: uint16(len(f.prog)), Filter: &f.prog[0]}
	// Flags 0: this thread only, never dshd's others.
	_, _, e := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&prog)))
	runtime.KeepAlive(f)
	if e != 0 {
		return fmt.Errorf("seccomp: %w", e)
	}
	return nil
}

// file returns the read end of a pipe holding f as bytes, for bubblewrap's
// --seccomp: the caller passes it to the child and closes it.
func (f *syscallFilter) file() (*os.File, error) {
	b := make([]byte, 0, 8*len(f.prog))
	for _, s := range f.prog {
		b = binary.NativeEndian.AppendUint16(b, s.Code)
		b = append(b, s.Jt, s.Jf)
		b = binary.NativeEndian.AppendUint32(b, s.K)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	// A few hundred bytes: far below a pipe's buffer, so this never blocks.
	_, err = w.Write(b)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("seccomp filter pipe: %w", err)
	}
	return r, nil
}
