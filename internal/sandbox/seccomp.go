package sandbox

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"maps"
	"os"
	"runtime"
	"slices"
	"unsafe"

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
	// The library's table for the running architecture must name every
	// call denied (a missing one is an error, never a hole).
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
	rules := map[uint32]ruleKind{}
	for _, n := range names {
		rules[uint32(info.SyscallNames[n])] = ruleDeny
	}
	rules[uint32(info.SyscallNames["clone"])] = ruleClone
	if c == clone3NoSys {
		rules[uint32(info.SyscallNames["clone3"])] = ruleNoSys
	}
	prog, err := filterProgram(info, rules)
	if err != nil {
		return nil, fmt.Errorf("seccomp filter for %s: %w", info.Name, err)
	}
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, fmt.Errorf("seccomp filter for %s: %w", info.Name, err)
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

// ruleKind is what the filter does with one system call.
type ruleKind int

const (
	ruleDeny  ruleKind = iota // EPERM
	ruleClone                 // EPERM with a CLONE_NEW* flag, else allowed
	ruleNoSys                 // ENOSYS
)

// The filter's answers.
const (
	retAllow = unix.SECCOMP_RET_ALLOW
	retEPERM = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	retNoSys = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
)

// Offsets in struct seccomp_data.
const (
	dataNr   = 0
	dataArch = 4
	dataArg0 = 16
)

// filterProgram is the filter for info: a call of another architecture
// fails with ENOSYS (on amd64, int 0x80 reaches the i386 table, where
// nothing would be denied: refused all, as on a kernel without that
// compatibility layer), and so does an x32 call on x86_64; then the call's
// number is looked up in rules by a binary search, and what is not there
// is allowed.
//
// The search, rather than one comparison per call in a row, is for the
// kernel: loading a filter, it runs it for every call number of every
// architecture to find the calls it always allows (and then skips it for
// them), so a filter's load costs with the comparisons each number goes
// through: some 40 in a row, 6 or so in a search.
func filterProgram(info *arch.Info, rules map[uint32]ruleKind) ([]bpf.Instruction, error) {
	var p filterAsm
	p.add(bpf.LoadAbsolute{Off: dataArch, Size: 4})
	p.jump(bpf.JumpEqual, uint32(info.ID), p.next()+2, p.next()+1)
	p.add(bpf.RetConstant{Val: retNoSys})
	p.add(bpf.LoadAbsolute{Off: dataNr, Size: 4})
	if info.ID == arch.X86_64.ID {
		p.jump(bpf.JumpGreaterOrEqual, uint32(arch.X32.SeccompMask), labelNoSys, p.next()+1)
	}
	p.search(slices.Sorted(maps.Keys(rules)), rules)
	// The answers every comparison jumps to, forward.
	p.at[labelClone] = p.next()
	// clone's flags are its first argument; the namespace flags are in
	// its low 32 bits.
	off := uint32(dataArg0)
	if binary.NativeEndian.Uint16([]byte{0, 1}) == 1 {
		off += 4 // big-endian: the low half comes second
	}
	p.add(bpf.LoadAbsolute{Off: off, Size: 4})
	p.jump(bpf.JumpBitsSet, cloneNewFlags, labelDeny, labelAllow)
	p.at[labelAllow] = p.next()
	p.add(bpf.RetConstant{Val: retAllow})
	p.at[labelDeny] = p.next()
	p.add(bpf.RetConstant{Val: retEPERM})
	p.at[labelNoSys] = p.next()
	p.add(bpf.RetConstant{Val: retNoSys})
	return p.resolve()
}

// Labels of the filter's answers, as jump targets before they are placed.
const (
	labelAllow = -1 - iota
	labelDeny
	labelNoSys
	labelClone
)

// filterAsm assembles a filter whose jumps name their targets by index
// (or label) rather than by distance.
type filterAsm struct {
	prog  []bpf.Instruction
	jumps map[int][2]int // at an index: the targets if true and if false
	at    map[int]int    // a label's index
}

func (p *filterAsm) next() int { return len(p.prog) }

func (p *filterAsm) add(in bpf.Instruction) { p.prog = append(p.prog, in) }

func (p *filterAsm) jump(cond bpf.JumpTest, val uint32, ifTrue, ifFalse int) {
	if p.jumps == nil {
		p.jumps, p.at = map[int][2]int{}, map[int]int{}
	}
	p.jumps[p.next()] = [2]int{ifTrue, ifFalse}
	p.add(bpf.JumpIf{Cond: cond, Val: val})
}

// search looks the call number (in the accumulator) up among nrs, sorted,
// jumping to its rule's answer, or allowing it.
func (p *filterAsm) search(nrs []uint32, rules map[uint32]ruleKind) {
	if len(nrs) <= 3 {
		for i, nr := range nrs {
			ifFalse := p.next() + 1
			if i == len(nrs)-1 {
				ifFalse = labelAllow
			}
			p.jump(bpf.JumpEqual, nr, ruleLabel[rules[nr]], ifFalse)
		}
		if len(nrs) == 0 {
			p.jump(bpf.JumpEqual, 0, labelAllow, labelAllow)
		}
		return
	}
	mid := len(nrs) / 2
	split := p.next()
	p.jump(bpf.JumpGreaterOrEqual, nrs[mid], 0, split+1) // if true: set below
	p.search(nrs[:mid], rules)
	p.jumps[split] = [2]int{p.next(), split + 1}
	p.search(nrs[mid:], rules)
}

// ruleLabel is where each rule's calls jump.
var ruleLabel = map[ruleKind]int{ruleDeny: labelDeny, ruleClone: labelClone, ruleNoSys: labelNoSys}

// resolve turns each jump's targets into distances. A filter's jumps go
// forward, at most 255 instructions: this one has about two per rule.
func (p *filterAsm) resolve() ([]bpf.Instruction, error) {
	for i, t := range p.jumps {
		var skips [2]uint8
		for k, to := range t {
			if to < 0 {
				to = p.at[to]
			}
			d := to - i - 1
			if d < 0 || d > 255 {
				return nil, fmt.Errorf("a jump of %d instructions at %d", d, i)
			}
			skips[k] = uint8(d)
		}
		j := p.prog[i].(bpf.JumpIf)
		j.SkipTrue, j.SkipFalse = skips[0], skips[1]
		p.prog[i] = j
	}
	return p.prog, nil
}
