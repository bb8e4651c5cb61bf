package sandbox

import (
	"context"
	"os"
	osexec "os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dshd/dshd/internal/benchkit"
	"github.com/dshd/dshd/internal/testenv"
)

// BenchmarkNamespaces measures what the namespaces mechanism adds to
// starting and reaping `bash -c true`, with no HTTP and no job around it,
// beside the kernel's floor taken in the same run, interleaved: bash
// cloned directly with the same CLONE_NEW* flags, and a locked thread that
// enters a fresh mount namespace and a network namespace made ahead (as
// dshd does) and starts bash with nothing of dshd's view built. The
// policies run on a Host with a home, skills and a token file, as a
// server's, in a directory with nothing in it.
func BenchmarkNamespaces(b *testing.B) {
	testenv.NeedRoot(b, "the namespaces mechanism needs CAP_SYS_ADMIN")
	l := newLayout(b)
	h := NewHost(context.Background(), Config{Mechanism: MechanismNamespaces, Home: l.home, TokenFile: l.token})
	if h.Mechanism() != MechanismNamespaces {
		b.Skipf("namespaces unavailable: %s", h.Support().Reason)
	}
	cwd := b.TempDir()
	bash := func() *osexec.Cmd {
		c := osexec.Command("/bin/bash", "-c", "true")
		c.Dir = cwd
		return c
	}
	wait := func(c *osexec.Cmd) {
		if err := c.Wait(); err != nil {
			b.Fatal(err)
		}
	}
	policy := func(p Policy) func() {
		return func() {
			var c *osexec.Cmd
			if _, err := h.Start(p, cwd, []string{cwd}, "/bin/bash", []string{"bash", "-c", "true"}, func(path string, args []string, _ []*os.File) error {
				c = bash()
				return c.Start()
			}); err != nil {
				b.Fatal(err)
			}
			wait(c)
		}
	}
	cloned := func(flags uintptr) func() {
		return func() {
			c := bash()
			c.SysProcAttr = &syscall.SysProcAttr{Cloneflags: flags}
			if err := c.Run(); err != nil {
				b.Fatal(err)
			}
		}
	}
	thread := func() {
		c := bash()
		errc := make(chan error, 1)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread dies
			if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_FS); err != nil {
				errc <- err
				return
			}
			if !netNamespaces.join() {
				if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
					errc <- err
					return
				}
			}
			errc <- c.Start()
		}()
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
		wait(c)
	}
	ops := []struct {
		name string
		op   func()
	}{
		{"direct", cloned(0)},
		{"kernel-newns", cloned(syscall.CLONE_NEWNS)},
		{"kernel-newns-newnet", cloned(syscall.CLONE_NEWNS | syscall.CLONE_NEWNET)},
		{"thread-newns-netahead", thread},
		{"unrestricted-off", policy(Policy{FS: Unrestricted, Network: NetworkOff})},
		{"workspace-write-on", policy(Policy{FS: WorkspaceWrite, Network: NetworkOn})},
		{"workspace-write-off", policy(Policy{FS: WorkspaceWrite, Network: NetworkOff})},
	}
	// Each op's CPU in this process (every thread, those ended too; not
	// bash's, not the kernel's workers'): what dshd spends per command,
	// steadier than wall time on a loaded machine.
	cpu := make([]time.Duration, len(ops))
	fs := make([]func(), len(ops))
	for i, o := range ops {
		fs[i] = func() {
			t0 := selfCPU(b)
			o.op()
			cpu[i] += selfCPU(b) - t0
		}
	}
	for range 10 { // warm up every path
		for _, f := range fs {
			f()
		}
	}
	clear(cpu)
	b.ResetTimer()
	times := benchkit.Interleave(b.N, fs...)
	b.StopTimer()
	base := benchkit.Median(times[0])
	for i, o := range ops {
		m := benchkit.Median(times[i])
		b.ReportMetric(benchkit.Us(m), o.name+"-median-µs")
		if i > 0 {
			b.ReportMetric(benchkit.Us(m-base), o.name+"-added-µs")
		}
		b.ReportMetric(benchkit.Us(cpu[i])/float64(b.N), o.name+"-cpu-µs")
	}
	b.ReportMetric(benchkit.Load1(), "load1")
	b.Logf("load average %s", benchkit.LoadAvg())
}

// selfCPU is the user and system CPU this process has used.
func selfCPU(tb testing.TB) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
