// sysprobe makes each system call named on its command line once, with
// arguments that change nothing (invalid, or a read), and prints one line
// per call: its name and OK or the errno's name. The sandbox tests run it
// with and without the seccomp filter. "loop" prints the nanoseconds one
// allowed call (getppid) takes.
package main

import (
	"fmt"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

type call struct {
	nr   uintptr
	args [6]uintptr
}

var calls = map[string]call{
	"bpf":               {nr: unix.SYS_BPF, args: [6]uintptr{1000}},            // no such command: EINVAL
	"perf_event_open":   {nr: unix.SYS_PERF_EVENT_OPEN},                        // NULL attr: EFAULT
	"userfaultfd":       {nr: unix.SYS_USERFAULTFD, args: [6]uintptr{1 << 30}}, // bad flags: EINVAL
	"io_uring_setup":    {nr: unix.SYS_IO_URING_SETUP},                         // NULL params: EFAULT
	"io_uring_enter":    {nr: unix.SYS_IO_URING_ENTER, args: [6]uintptr{^uintptr(0)}},
	"io_uring_register": {nr: unix.SYS_IO_URING_REGISTER, args: [6]uintptr{^uintptr(0)}},
	// KEYCTL_GET_KEYRING_ID of the session keyring, not created: a read.
	"keyctl":            {nr: unix.SYS_KEYCTL, args: [6]uintptr{unix.KEYCTL_GET_KEYRING_ID, uintptr(0xfffffffd)}},
	"add_key":           {nr: unix.SYS_ADD_KEY},     // NULL type: EFAULT
	"request_key":       {nr: unix.SYS_REQUEST_KEY}, // NULL type: EFAULT
	"init_module":       {nr: unix.SYS_INIT_MODULE},
	"finit_module":      {nr: unix.SYS_FINIT_MODULE, args: [6]uintptr{^uintptr(0)}},
	"delete_module":     {nr: unix.SYS_DELETE_MODULE},
	"kexec_load":        {nr: unix.SYS_KEXEC_LOAD, args: [6]uintptr{0, 0, 0, 0xffff0000}},
	"kexec_file_load":   {nr: unix.SYS_KEXEC_FILE_LOAD, args: [6]uintptr{^uintptr(0), ^uintptr(0), 0, 0, 0xffff0000}},
	"reboot":            {nr: unix.SYS_REBOOT}, // wrong magic: EINVAL
	"open_by_handle_at": {nr: unix.SYS_OPEN_BY_HANDLE_AT, args: [6]uintptr{^uintptr(0)}},
	"unshare":           {nr: unix.SYS_UNSHARE}, // no flags: succeeds, changes nothing
	"setns":             {nr: unix.SYS_SETNS, args: [6]uintptr{^uintptr(0)}},
	// A new user namespace sharing the file-system context is refused
	// after the filter (EINVAL): no process is created.
	"clone":         {nr: unix.SYS_CLONE, args: [6]uintptr{unix.CLONE_NEWUSER | unix.CLONE_FS}},
	"clone3":        {nr: unix.SYS_CLONE3}, // size 0: EINVAL
	"mount":         {nr: unix.SYS_MOUNT},
	"umount2":       {nr: unix.SYS_UMOUNT2},
	"pivot_root":    {nr: unix.SYS_PIVOT_ROOT},
	"move_mount":    {nr: unix.SYS_MOVE_MOUNT, args: [6]uintptr{^uintptr(0), 0, ^uintptr(0), 0, 1 << 30}},
	"open_tree":     {nr: unix.SYS_OPEN_TREE, args: [6]uintptr{^uintptr(0), 0, 1 << 30}},
	"fsopen":        {nr: unix.SYS_FSOPEN},
	"fsconfig":      {nr: unix.SYS_FSCONFIG, args: [6]uintptr{^uintptr(0)}},
	"fsmount":       {nr: unix.SYS_FSMOUNT, args: [6]uintptr{^uintptr(0)}},
	"fspick":        {nr: unix.SYS_FSPICK, args: [6]uintptr{^uintptr(0), 0, 1 << 30}},
	"mount_setattr": {nr: unix.SYS_MOUNT_SETATTR, args: [6]uintptr{^uintptr(0), 0, 1 << 30}},
	"swapon":        {nr: unix.SYS_SWAPON},
	"swapoff":       {nr: unix.SYS_SWAPOFF},
	"acct":          {nr: unix.SYS_ACCT, args: [6]uintptr{1}}, // bad pointer: EFAULT (NULL would turn accounting off)
	"settimeofday":  {nr: unix.SYS_SETTIMEOFDAY},              // both NULL: succeeds, changes nothing
	"clock_settime": {nr: unix.SYS_CLOCK_SETTIME, args: [6]uintptr{1000}},
	"clock_adjtime": {nr: unix.SYS_CLOCK_ADJTIME, args: [6]uintptr{1000}},
	"sethostname":   {nr: unix.SYS_SETHOSTNAME, args: [6]uintptr{0, 1 << 20}}, // too long: EINVAL
	"setdomainname": {nr: unix.SYS_SETDOMAINNAME, args: [6]uintptr{0, 1 << 20}},
	"quotactl":      {nr: unix.SYS_QUOTACTL},
	"quotactl_fd":   {nr: unix.SYS_QUOTACTL_FD, args: [6]uintptr{^uintptr(0)}},
	"syslog":        {nr: unix.SYS_SYSLOG, args: [6]uintptr{10}}, // SYSLOG_ACTION_SIZE_BUFFER: a read
	// Allowed: the calls the filter must let through.
	"name_to_handle_at": {nr: unix.SYS_NAME_TO_HANDLE_AT, args: [6]uintptr{^uintptr(0)}},
	"getpid":            {nr: unix.SYS_GETPID},
}

func main() {
	addArchCalls(calls)
	for _, name := range os.Args[1:] {
		var r string
		switch {
		case name == "loop":
			// The cost of one allowed call: 10^6 getppid, ns per call.
			const n = 1000000
			t0 := time.Now()
			for range n {
				unix.RawSyscall(unix.SYS_GETPPID, 0, 0, 0)
			}
			r = fmt.Sprintf("%.1f", float64(time.Since(t0).Nanoseconds())/n)
		case name == "name_to_handle_at":
			// A real path, so the kernel gets past the argument checks.
			root := []byte("/\x00")
			var h [128 + 8]byte
			var mnt int32
			*(*uint32)(unsafe.Pointer(&h[0])) = 128
			_, _, e := unix.Syscall6(unix.SYS_NAME_TO_HANDLE_AT, atFDCWD(), uintptr(unsafe.Pointer(&root[0])),
				uintptr(unsafe.Pointer(&h[0])), uintptr(unsafe.Pointer(&mnt)), 0, 0)
			r = result(e)
		case archCall(name, &r):
		default:
			c, ok := calls[name]
			if !ok {
				fmt.Fprintf(os.Stderr, "sysprobe: unknown call %s\n", name)
				os.Exit(2)
			}
			_, _, e := unix.RawSyscall6(c.nr, c.args[0], c.args[1], c.args[2], c.args[3], c.args[4], c.args[5])
			r = result(e)
		}
		fmt.Println(name, r)
	}
}

func result(e unix.Errno) string {
	if e == 0 {
		return "OK"
	}
	return unix.ErrnoName(e)
}

func atFDCWD() uintptr {
	fd := unix.AT_FDCWD
	return uintptr(fd)
}
