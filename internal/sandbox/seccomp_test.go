package sandbox

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/dshd/dshd/internal/testenv"
)

// startWith starts cmd as Host.Start's callback does in dshd.
func startWith(cmd *osexec.Cmd) StartFunc {
	return func(path string, args []string, extra []*os.File) error {
		cmd.Path, cmd.Args, cmd.ExtraFiles = path, args, extra
		return cmd.Start()
	}
}

// runIn runs path with args under p on h in dir (a root, as a harness's cwd
// is) and returns its combined
// output.
func runIn(t *testing.T, h *Host, p Policy, dir, path string, args ...string) (string, error) {
	t.Helper()
	cmd := &osexec.Cmd{Dir: dir}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	_, err := h.Start(p, dir, []string{dir}, path, append([]string{filepath.Base(path)}, args...), startWith(cmd))
	if err == nil {
		err = cmd.Wait()
	}
	return out.String(), err
}

// buildProbe builds testdata/sysprobe into dir.
func buildProbe(t *testing.T, dir string) string {
	t.Helper()
	probe := filepath.Join(dir, "sysprobe")
	if out, err := osexec.Command("go", "build", "-o", probe, "./testdata/sysprobe").CombinedOutput(); err != nil {
		t.Fatalf("build sysprobe: %v\n%s", err, out)
	}
	return probe
}

// probeResults parses sysprobe's "name RESULT" lines.
func probeResults(t *testing.T, out string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		name, r, ok := strings.Cut(line, " ")
		if !ok {
			t.Fatalf("sysprobe output %q", out)
		}
		m[name] = r
	}
	return m
}

// TestSyscallFilter makes each denied call, with harmless arguments, under
// every confined policy and both mechanisms: each fails with EPERM from
// the filter, while the same call unconfined gets past seccomp (it
// succeeds, or fails with another errno). clone3 is ENOSYS under
// bubblewrap only; calls of another architecture (int 0x80 on amd64) are
// ENOSYS; what the filter allows still works.
func TestSyscallFilter(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	dir := t.TempDir()
	probe := buildProbe(t, dir)
	denied := append(slices.Clone(deniedCalls), "clone")
	for _, n := range deniedIfPresent {
		if runtime.GOARCH == "amd64" {
			denied = append(denied, n)
		}
	}
	names := append(slices.Clone(denied), "clone3", "name_to_handle_at", "getpid")
	if runtime.GOARCH == "amd64" {
		names = append(names, "i386_getpid", "i386_unshare")
	}
	out, err := osexec.Command(probe, names...).CombinedOutput()
	if err != nil {
		t.Fatalf("sysprobe unconfined: %v\n%s", err, out)
	}
	base := probeResults(t, string(out))
	for _, n := range names {
		if r := base[n]; r == "" || r == "EPERM" {
			t.Errorf("unconfined %s: %q; want a result that is not EPERM, to tell the filter's apart", n, r)
		}
	}
	for _, mech := range []Mechanism{MechanismNamespaces, MechanismBubblewrap} {
		t.Run(string(mech), func(t *testing.T) {
			testenv.SkipMechanism(t, string(mech))
			h := NewHost(ctx, Config{Mechanism: mech})
			if h.Mechanism() != mech {
				t.Fatalf("mechanism %q unavailable: %s", mech, h.Support().Reason)
			}
			for _, p := range []Policy{{FS: WorkspaceWrite, Network: NetworkOff}, {FS: ReadOnly, Network: NetworkOn}, {FS: Unrestricted, Network: NetworkOff}} {
				t.Run(p.String(), func(t *testing.T) {
					out, err := runIn(t, h, p, dir, probe, names...)
					if err != nil {
						t.Fatalf("sysprobe: %v\n%s", err, out)
					}
					got := probeResults(t, out)
					for _, n := range denied {
						if got[n] != "EPERM" {
							t.Errorf("%s: %s, want EPERM (unconfined: %s)", n, got[n], base[n])
						}
					}
					want3 := base["clone3"]
					if mech == MechanismBubblewrap {
						want3 = "ENOSYS"
					}
					if got["clone3"] != want3 {
						t.Errorf("clone3: %s, want %s (unconfined: %s)", got["clone3"], want3, base["clone3"])
					}
					for _, n := range []string{"i386_getpid", "i386_unshare"} {
						if slices.Contains(names, n) && got[n] != "ENOSYS" {
							t.Errorf("%s through int 0x80: %s, want ENOSYS (unconfined: %s)", n, got[n], base[n])
						}
					}
					for _, n := range []string{"name_to_handle_at", "getpid"} {
						if got[n] == "EPERM" {
							t.Errorf("%s: EPERM, want it allowed (unconfined: %s)", n, base[n])
						}
					}
				})
			}
			// Without the filter (Config.NoSeccomp), the same sandbox lets
			// unshare(0) and keyctl through: the EPERMs above are the
			// filter's, not the dropped capabilities'.
			off := NewHost(ctx, Config{Mechanism: mech, NoSeccomp: true})
			out, err := runIn(t, off, Policy{FS: WorkspaceWrite, Network: NetworkOff}, dir, probe, "unshare", "keyctl")
			if err != nil {
				t.Fatalf("sysprobe without the filter: %v\n%s", err, out)
			}
			if got := probeResults(t, out); got["unshare"] != "OK" || got["keyctl"] == "EPERM" {
				t.Errorf("without the filter: %v; want unshare OK and keyctl not EPERM", got)
			}
		})
	}
}

// TestSyscallFilterCommands: ordinary work runs under the filter with
// both mechanisms: git, python3 and node with child processes and
// threads, bash job control, and strace (ptrace of its own child).
func TestSyscallFilterCommands(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	script := `set -e
git init -q r && cd r && git -c user.name=t -c user.email=t@t commit -q --allow-empty -m x && test "$(git log --oneline | wc -l)" = 1 && cd ..
sleep 0.1 & wait %1
(exit 3) & set +e; wait $!; test $? = 3 || exit 1; set -e
echo job-control-ok
if command -v python3 >/dev/null; then python3 -c 'import subprocess, threading; t = threading.Thread(target=lambda: None); t.start(); t.join(); assert subprocess.run(["true"]).returncode == 0; print("python-ok")'; fi
if command -v node >/dev/null; then node -e 'const fs = require("fs"); require("child_process").execFileSync("true"); fs.promises.readFile("/etc/hostname").then(() => console.log("node-ok"))'; fi
if command -v strace >/dev/null; then strace -f -o /dev/null sh -c true && echo strace-ok; fi
! unshare -U true 2>/dev/null
`
	for _, mech := range []Mechanism{MechanismNamespaces, MechanismBubblewrap} {
		t.Run(string(mech), func(t *testing.T) {
			testenv.SkipMechanism(t, string(mech))
			h := NewHost(ctx, Config{Mechanism: mech})
			if h.Mechanism() != mech {
				t.Fatalf("mechanism %q unavailable: %s", mech, h.Support().Reason)
			}
			dir := t.TempDir()
			out, err := runIn(t, h, Policy{FS: WorkspaceWrite, Network: NetworkOff}, dir, "/bin/bash", "-c", script)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			want := []string{"job-control-ok"}
			for cmd, line := range map[string]string{"python3": "python-ok", "node": "node-ok", "strace": "strace-ok"} {
				if _, err := osexec.LookPath(cmd); err == nil {
					want = append(want, line)
				}
			}
			for _, w := range want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// TestSyscallFilterFailsClosed: where the filter cannot be built (here, an
// architecture the library has no table for), confined policies are
// unavailable with the reason, and nothing starts.
func TestSyscallFilterFailsClosed(t *testing.T) {
	filterArch = "ppc64"
	defer func() { filterArch = "" }()
	for _, mech := range []Mechanism{MechanismNamespaces, MechanismBubblewrap} {
		h := NewHost(context.Background(), Config{Mechanism: mech})
		s := h.Support()
		if h.Mechanism() != "" || !strings.Contains(s.Reason, "seccomp filter for") || len(s.Policies) != 1 {
			t.Errorf("%s: support %+v (mechanism %q), want only unrestricted and the filter's error", mech, s, h.Mechanism())
		}
		called := false
		_, err := h.Start(Policy{FS: WorkspaceWrite, Network: NetworkOff}, "/", nil, "/bin/true", []string{"true"}, func(string, []string, []*os.File) error { called = true; return nil })
		if !errors.Is(err, ErrUnavailable) || called {
			t.Errorf("%s: Start = %v, started %v; want ErrUnavailable and nothing started", mech, err, called)
		}
	}
}

// TestSyscallFilterArches: the filter can be built on both supported
// architectures (a denied call missing from one table would make confined
// policies unavailable there).
func TestSyscallFilterArches(t *testing.T) {
	for _, a := range []*arch.Info{arch.X86_64, arch.AARCH64} {
		for _, n := range slices.Concat(deniedCalls, []string{"clone", "clone3"}) {
			if _, ok := a.SyscallNames[n]; !ok {
				t.Errorf("%s has no %s", a.Name, n)
			}
		}
	}
	if _, ok := arch.X86_64.SyscallNames["iopl"]; !ok {
		t.Error("x86_64 has no iopl: deniedIfPresent would deny nothing there")
	}
}

// TestBwrapSeccompArg: bubblewrap reads the filter from the descriptor
// named after --seccomp, before the command.
func TestBwrapSeccompArg(t *testing.T) {
	a := bwrapArgs("/usr/bin/bwrap", plan{}, 3, "/", "/bin/true", []string{"true"})
	i := slices.Index(a, "--seccomp")
	if i < 0 || a[i+1] != "3" || i > slices.Index(a, "--") {
		t.Errorf("bwrap argv %q: want --seccomp 3 before --", a)
	}
	if a := bwrapArgs("/usr/bin/bwrap", plan{}, -1, "/", "/bin/true", []string{"true"}); slices.Contains(a, "--seccomp") {
		t.Errorf("bwrap argv %q without a filter names one", a)
	}
}

// BenchmarkSyscallFilter measures what the filter adds to every allowed
// system call (getppid, a call near the end of no list): a command under
// workspace-write with the network off makes 10^6 of them, with and
// without the filter, each mechanism; the metric is ns per call (median of
// the runs).
func BenchmarkSyscallFilter(b *testing.B) {
	if os.Getuid() != 0 {
		b.Skip("the namespaces mechanism needs root")
	}
	ctx := context.Background()
	dir := b.TempDir()
	probe := filepath.Join(dir, "sysprobe")
	if out, err := osexec.Command("go", "build", "-o", probe, "./testdata/sysprobe").CombinedOutput(); err != nil {
		b.Fatalf("build sysprobe: %v\n%s", err, out)
	}
	type row struct {
		name string
		h    *Host
		ns   []float64
	}
	var rows []*row
	for _, mech := range []Mechanism{MechanismNamespaces, MechanismBubblewrap} {
		if why := testenv.NamespacesMissing(); mech == MechanismNamespaces && why != "" {
			b.Logf("no namespaces rows: %s", why)
			continue
		}
		for _, off := range []bool{false, true} {
			h := NewHost(ctx, Config{Mechanism: mech, NoSeccomp: off})
			if h.Mechanism() != mech {
				b.Fatalf("mechanism %q unavailable: %s", mech, h.Support().Reason)
			}
			name := string(mech)
			if off {
				name += "-noseccomp"
			}
			rows = append(rows, &row{name: name, h: h})
		}
	}
	b.ResetTimer()
	for range b.N {
		for _, r := range rows {
			cmd := &osexec.Cmd{Dir: dir}
			var out strings.Builder
			cmd.Stdout = &out
			_, err := r.h.Start(Policy{FS: WorkspaceWrite, Network: NetworkOff}, dir, []string{dir}, probe, []string{"sysprobe", "loop"}, startWith(cmd))
			if err == nil {
				err = cmd.Wait()
			}
			var v float64
			if _, serr := fmt.Sscanf(out.String(), "loop %g", &v); err != nil || serr != nil {
				b.Fatalf("%s: %v %v: %q", r.name, err, serr, out.String())
			}
			r.ns = append(r.ns, v)
		}
	}
	b.StopTimer()
	for _, r := range rows {
		slices.Sort(r.ns)
		b.ReportMetric(r.ns[len(r.ns)/2], r.name+"-ns/call")
	}
}

// TestFilterProgramLikeLibrary: the filter's binary search answers every
// call number of every architecture as the library's filter (one
// comparison per call, in a row) does, x32 numbers and clone's flags
// included, for both of clone3's treatments. The library assembles for
// the running architecture only.
func TestFilterProgramLikeLibrary(t *testing.T) {
	a, err := arch.GetInfo("")
	if err != nil {
		t.Skip(err)
	}
	for _, c := range []cloneFilter{clone3Allowed, clone3NoSys} {
		names := slices.Clone(deniedCalls)
		for _, n := range deniedIfPresent {
			if _, ok := a.SyscallNames[n]; ok {
				names = append(names, n)
			}
		}
		rules := map[uint32]ruleKind{uint32(a.SyscallNames["clone"]): ruleClone}
		for _, n := range names {
			rules[uint32(a.SyscallNames[n])] = ruleDeny
		}
		groups := []seccomp.SyscallGroup{{
			Names:  names,
			Action: seccomp.ActionErrno,
			NamesWithCondtions: []seccomp.NameWithConditions{{
				Name:       "clone",
				Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.BitsSet, Value: cloneNewFlags}},
			}},
		}}
		if c == clone3NoSys {
			rules[uint32(a.SyscallNames["clone3"])] = ruleNoSys
			groups = append(groups, seccomp.SyscallGroup{Names: []string{"clone3"}, Action: seccomp.ActionErrno | seccomp.Action(unix.ENOSYS)})
		}
		pol := seccomp.Policy{DefaultAction: seccomp.ActionAllow, Syscalls: groups}
		lib, err := pol.Assemble()
		if err != nil {
			t.Fatal(err)
		}
		// The library's filter lets other architectures through; ours
		// refuses them before it.
		lib = append([]bpf.Instruction{
			bpf.LoadAbsolute{Off: 4, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(a.ID), SkipTrue: 1},
			bpf.RetConstant{Val: retNoSys},
		}, lib...)
		tree, err := filterProgram(a, rules)
		if err != nil {
			t.Fatal(err)
		}
		vm := func(prog []bpf.Instruction) *bpf.VM {
			v, err := bpf.NewVM(prog)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		want, got := vm(lib), vm(tree)
		// struct seccomp_data as the VM loads it (big-endian words):
		// nr, arch, ip, then each argument low half first, as on the
		// little-endian machines this test is about.
		data := func(nr, archID, flags uint32) []byte {
			b := make([]byte, 64)
			binary.BigEndian.PutUint32(b[0:], nr)
			binary.BigEndian.PutUint32(b[4:], archID)
			binary.BigEndian.PutUint32(b[16:], flags)
			return b
		}
		checked := 0
		for _, archID := range []uint32{uint32(a.ID), uint32(arch.I386.ID), uint32(arch.ARM.ID)} {
			for _, base := range []uint32{0, uint32(arch.X32.SeccompMask)} {
				for nr := range uint32(1024) {
					for _, flags := range []uint32{0, unix.CLONE_VM | unix.CLONE_VFORK, unix.CLONE_NEWUSER, unix.CLONE_NEWNET | unix.CLONE_FILES} {
						d := data(base+nr, archID, flags)
						w, werr := want.Run(d)
						g, gerr := got.Run(d)
						if werr != nil || gerr != nil || w != g {
							t.Fatalf("%s, clone3 %d: call %#x of arch %#x, flags %#x: %#x (%v), the library's %#x (%v)", a.Name, c, base+nr, archID, flags, g, gerr, w, werr)
						}
						checked++
					}
				}
			}
		}
		t.Logf("%s, clone3 %d: %d cases alike; %d instructions, the library's %d", a.Name, c, checked, len(tree), len(lib))
	}
}
