package cgroup

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// V1 places jobs in cgroup v1 groups too, for the limit controllers that a
// hybrid host binds to v1 hierarchies (/sys/fs/cgroup/pids, .../memory,
// .../cpu) and so withholds from cgroup2. The groups are made and read
// through github.com/containerd/cgroups/v3/cgroup1; each job's group sits
// at <dshd's own v1 group>/<name>/<job> in every hierarchy, so a limit on
// dshd's own group (a container's, a service's) still applies above it.
//
// There is no clone-into for v1, so V1Group.Spawn puts the spawning thread
// (not the process: dshd's other threads stay where they are) in the job's
// groups, forks there, and moves the thread back: the child is born in them
// and runs no instruction outside them, and no process is added to the
// chain.
type V1 struct {
	name        string
	controllers []string
	subs        []cgroup1.Subsystem
	own         map[cgroup1.Name]string // dshd's own group in each hierarchy
	ownGroup    cgroup1.Cgroup          // where a spawning thread goes back
	memsw       bool                    // memory.memsw.* exists (swap accounting)
}

// v1Names are the v1 controllers V1 may use, each for the limit controller
// of the same name; cpuacct comes with cpu (it measures what cpu limits).
var v1Names = map[string][]cgroup1.Name{
	"pids":   {cgroup1.Pids},
	"memory": {cgroup1.Memory},
	"cpu":    {cgroup1.Cpu, cgroup1.Cpuacct},
}

// OpenV1 finds, among want (some of "cpu", "memory", "pids"), the
// controllers mounted as cgroup v1 hierarchies that hold dshd, creates the
// subtree name under dshd's own group in each, and checks that a thread can
// be moved into a group there and back. It returns nil and no error when
// none of want is on v1; an error says why the v1 groups cannot be used.
func OpenV1(name string, want []string) (*V1, error) {
	if name == "" || strings.ContainsRune(name, '/') || name == "." || name == ".." {
		return nil, fmt.Errorf("cgroup v1: bad group name %q", name)
	}
	all, err := cgroup1.Default()
	if err != nil {
		if errors.Is(err, cgroup1.ErrMountPointNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("cgroup v1: %w", err)
	}
	own, err := cgroup1.ParseCgroupFile("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("cgroup v1: %w", err)
	}
	v := &V1{name: name, own: make(map[cgroup1.Name]string)}
	var names []cgroup1.Name
	for _, c := range []string{"cpu", "memory", "pids"} {
		if !slices.Contains(want, c) {
			continue
		}
		ok := true
		for _, n := range v1Names[c] {
			if _, in := own[string(n)]; !in || !slices.ContainsFunc(all, func(s cgroup1.Subsystem) bool { return s.Name() == n }) {
				ok = false
			}
		}
		if ok {
			v.controllers = append(v.controllers, c)
			names = append(names, v1Names[c]...)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	nested := cgroup1.NestedPath("")
	for _, s := range all {
		if !slices.Contains(names, s.Name()) {
			continue
		}
		p, err := nested(s.Name())
		if err != nil {
			return nil, fmt.Errorf("cgroup v1 %s: %w", s.Name(), err)
		}
		v.subs = append(v.subs, s)
		v.own[s.Name()] = p
	}
	hier := func() ([]cgroup1.Subsystem, error) { return v.subs, nil }
	v.ownGroup, err = cgroup1.Load(v.path(""), cgroup1.WithHierarchy(hier))
	if err != nil {
		return nil, fmt.Errorf("cgroup v1: dshd's own groups: %w", err)
	}
	if _, err := cgroup1.New(v.path(name), &specs.LinuxResources{}, cgroup1.WithHierarchy(hier)); err != nil {
		return nil, fmt.Errorf("cgroup v1: create the subtree %s: %w", name, err)
	}
	if slices.Contains(v.controllers, "memory") {
		_, err := os.Stat(filepath.Join(v.Dir(cgroup1.Memory), "memory.memsw.limit_in_bytes"))
		v.memsw = err == nil
	}
	// A group in every hierarchy, and a thread moved in and back.
	probe, err := v.Create(fmt.Sprintf("probe-%d", os.Getpid()), Limits{Pids: 2, MemoryBytes: 1 << 30, CPU: 1})
	if err != nil {
		return nil, err
	}
	defer probe.Remove()
	if err := OnOwnThread(func() error { return probe.Spawn(func() error { return nil }) }); err != nil {
		return nil, err
	}
	return v, nil
}

// path is the Path of the group rel below dshd's own (rel "" is its own).
func (v *V1) path(rel string) cgroup1.Path {
	return func(n cgroup1.Name) (string, error) {
		p, ok := v.own[n]
		if !ok {
			return "", cgroup1.ErrControllerNotActive
		}
		return filepath.Join(p, rel), nil
	}
}

func (v *V1) hierarchy() ([]cgroup1.Subsystem, error) { return v.subs, nil }

// Controllers returns the limit controllers ("cpu", "memory", "pids") that
// the v1 groups provide.
func (v *V1) Controllers() []string {
	if v == nil {
		return nil
	}
	return slices.Clone(v.controllers)
}

// Has reports whether controller c is provided by the v1 groups.
func (v *V1) Has(c string) bool { return v != nil && slices.Contains(v.controllers, c) }

// ownDir returns dshd's own group's directory in hierarchy n.
func (v *V1) ownDir(n cgroup1.Name) string {
	for _, s := range v.subs {
		if s.Name() == n {
			if p, ok := s.(interface{ Path(string) string }); ok {
				return p.Path(v.own[n])
			}
		}
	}
	return ""
}

// Dir returns the subtree's directory in hierarchy n ("" when n is not
// used).
func (v *V1) Dir(n cgroup1.Name) string {
	for _, s := range v.subs {
		if s.Name() == n {
			if p, ok := s.(interface{ Path(string) string }); ok {
				return p.Path(filepath.Join(v.own[n], v.name))
			}
		}
	}
	return ""
}

// Create makes the job's group name in the hierarchies of the limits of
// lim that are on v1 (moving a thread costs the kernel a few tens of
// microseconds per hierarchy, each way), with those limits applied. Pids
// gets one more slot than lim.Pids until Spawn is done: the spawning
// thread counts while it is in the group.
func (v *V1) Create(name string, lim Limits) (*V1Group, error) {
	return v.create(name, lim, false)
}

// CreateMeasured is Create, and puts the group in the memory hierarchy
// even without a memory limit, to measure the job's peak of memory (with
// its tmpfs pages) where cgroup2 cannot.
func (v *V1) CreateMeasured(name string, lim Limits) (*V1Group, error) {
	return v.create(name, lim, v.Has("memory"))
}

func (v *V1) create(name string, lim Limits, memory bool) (*V1Group, error) {
	if name == "" || strings.ContainsRune(name, '/') || strings.HasPrefix(name, ".") {
		return nil, fmt.Errorf("create cgroup v1: bad name %q", name)
	}
	res := &specs.LinuxResources{}
	var names []cgroup1.Name
	if lim.Pids > 0 && v.Has("pids") {
		names = append(names, v1Names["pids"]...)
		res.Pids = &specs.LinuxPids{Limit: ptr(lim.Pids + 1)}
	}
	if lim.MemoryBytes > 0 && v.Has("memory") {
		names = append(names, v1Names["memory"]...)
		res.Memory = &specs.LinuxMemory{Limit: ptr(lim.MemoryBytes)}
		if v.memsw {
			// Memory plus swap at the same bound: a hog meets the OOM
			// killer instead of swapping.
			res.Memory.Swap = ptr(lim.MemoryBytes)
		}
	} else if memory {
		names = append(names, v1Names["memory"]...)
	}
	if lim.CPU > 0 && v.Has("cpu") {
		names = append(names, v1Names["cpu"]...)
		quota := max(int64(lim.CPU*cpuPeriod), 1000)
		res.CPU = &specs.LinuxCPU{Quota: &quota, Period: ptr(uint64(cpuPeriod))}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("create cgroup v1 %s: no limit on v1", name)
	}
	var subs []cgroup1.Subsystem
	for _, s := range v.subs {
		if slices.Contains(names, s.Name()) {
			subs = append(subs, s)
		}
	}
	rel := filepath.Join(v.name, name)
	g := &V1Group{v: v, rel: rel, names: names, pids: lim.Pids}
	cg, err := cgroup1.New(v.path(rel), res, cgroup1.WithHierarchy(func() ([]cgroup1.Subsystem, error) { return subs, nil }))
	if err != nil {
		_ = g.Remove()
		return nil, fmt.Errorf("create cgroup v1 %s: %w", rel, err)
	}
	g.cg = cg
	return g, nil
}

// Leftovers returns the job groups under the subtree, which a previous run
// of dshd on the same home left.
func (v *V1) Leftovers() []*V1Group {
	seen := make(map[string]bool)
	var gs []*V1Group
	for _, s := range v.subs {
		des, err := os.ReadDir(v.Dir(s.Name()))
		if err != nil {
			continue
		}
		for _, de := range des {
			if !de.IsDir() || seen[de.Name()] {
				continue
			}
			seen[de.Name()] = true
			rel := filepath.Join(v.name, de.Name())
			g := &V1Group{v: v, rel: rel}
			if cg, err := cgroup1.Load(v.path(rel), cgroup1.WithHierarchy(v.hierarchy)); err == nil {
				g.cg = cg
			}
			gs = append(gs, g)
		}
	}
	return gs
}

// Close removes the subtree in every hierarchy if it is empty (best
// effort).
func (v *V1) Close() {
	if v == nil {
		return
	}
	for _, s := range v.subs {
		_ = unix.Rmdir(v.Dir(s.Name()))
	}
}

// V1Group is one job's group in each v1 hierarchy.
type V1Group struct {
	v     *V1
	rel   string
	names []cgroup1.Name // the hierarchies it is in; nil for a leftover
	cg    cgroup1.Cgroup // nil for a leftover that could not be loaded
	pids  int64          // the job's pids limit, set once the spawn is done
	// peakWithThread is pids.peak read just before the spawning thread
	// left, while it still counted; 0 if unknown.
	peakWithThread int64
}

// Name returns the group's name (the job id it was created for).
func (g *V1Group) Name() string { return filepath.Base(g.rel) }

// dir is the group's directory in hierarchy n.
func (g *V1Group) dir(n cgroup1.Name) string {
	return filepath.Join(g.v.Dir(n), g.Name())
}

// Spawn runs start with the calling goroutine locked to its thread and that
// thread in g's groups, so every process start forks is born in them; then
// sets the pids limit to the job's own (the thread held a slot while it was
// there) and moves the thread back to dshd's own groups.
//
// The calling thread may be confined (a sandbox's Landlock domain) and
// unable to open cgroup files: another goroutine opens the files the way
// back needs and moves the thread in. The way back is written by the
// thread itself through those descriptors, right after start returns: the
// command is running by then, and the sooner the limit is the job's own
// the less of it the thread holds.
//
// If the thread cannot be moved back it stays locked, so it ends with its
// goroutine: call Spawn from a goroutine that ends after it, or from one
// whose thread is never reused.
func (g *V1Group) Spawn(start func() error) error {
	if g.cg == nil {
		return fmt.Errorf("cgroup v1 %s: not loaded", g.rel)
	}
	runtime.LockOSThread()
	tid := unix.Gettid()
	var out *wayBack
	if err := elsewhere(func() (err error) {
		if out, err = g.openWayBack(); err != nil {
			return err
		}
		return g.cg.AddTask(cgroup1.Process{Pid: tid})
	}); err != nil {
		out.close()
		if elsewhere(func() error { return g.v.ownGroup.AddTask(cgroup1.Process{Pid: tid}, g.names...) }) == nil {
			runtime.UnlockOSThread()
		}
		return fmt.Errorf("join cgroup v1 %s: %w", g.rel, err)
	}
	err := start()
	back := out.leave(tid, g)
	out.close()
	if back != nil {
		// Once more by path, from a thread that can open files.
		back = elsewhere(func() error {
			var lerr error
			if g.pids > 0 && slices.Contains(g.names, cgroup1.Pids) {
				lerr = writeFile(filepath.Join(g.dir(cgroup1.Pids), "pids.max"), strconv.FormatInt(g.pids, 10))
			}
			return errors.Join(lerr, g.v.ownGroup.AddTask(cgroup1.Process{Pid: tid}, g.names...))
		})
	}
	if back == nil {
		runtime.UnlockOSThread()
	}
	if err == nil && back != nil {
		err = fmt.Errorf("leave cgroup v1 %s: %w", g.rel, back)
	}
	return err
}

// wayBack are the files a spawning thread writes to leave a job's groups.
type wayBack struct {
	pidsMax  *os.File   // the job's pids.max; nil without a pids limit
	pidsPeak *os.File   // the job's pids.peak; nil without one
	tasks    []*os.File // dshd's own group's tasks in each hierarchy
}

func (g *V1Group) openWayBack() (*wayBack, error) {
	w := &wayBack{}
	if g.pids > 0 && slices.Contains(g.names, cgroup1.Pids) {
		f, err := os.OpenFile(filepath.Join(g.dir(cgroup1.Pids), "pids.max"), os.O_WRONLY, 0)
		if err != nil {
			return w, err
		}
		w.pidsMax = f
		if f, err := os.Open(filepath.Join(g.dir(cgroup1.Pids), "pids.peak")); err == nil {
			w.pidsPeak = f
		}
	}
	for _, n := range g.names {
		f, err := os.OpenFile(filepath.Join(g.v.ownDir(n), "tasks"), os.O_WRONLY, 0)
		if err != nil {
			return w, err
		}
		w.tasks = append(w.tasks, f)
	}
	return w, nil
}

// leave lowers pids.max to the job's limit, notes pids.peak while the
// thread still counts in it (see PidsPeak), and moves thread tid back.
func (w *wayBack) leave(tid int, g *V1Group) error {
	if w.pidsMax != nil {
		if _, err := w.pidsMax.WriteString(strconv.FormatInt(g.pids, 10)); err != nil {
			return err
		}
	}
	if w.pidsPeak != nil {
		var b [32]byte
		if n, err := w.pidsPeak.ReadAt(b[:], 0); n > 0 && (err == nil || errors.Is(err, io.EOF)) {
			g.peakWithThread, _ = strconv.ParseInt(strings.TrimSpace(string(b[:n])), 10, 64)
		}
	}
	for _, f := range w.tasks {
		if _, err := f.WriteString(strconv.Itoa(tid)); err != nil {
			return err
		}
	}
	return nil
}

func (w *wayBack) close() {
	if w == nil {
		return
	}
	for _, f := range append([]*os.File{w.pidsMax, w.pidsPeak}, w.tasks...) {
		if f != nil {
			f.Close()
		}
	}
}

// elsewhere runs f on another goroutine (so another thread) and waits.
func elsewhere(f func() error) error {
	errc := make(chan error, 1)
	go func() { errc <- f() }()
	return <-errc
}

// OnOwnThread runs f on a new goroutine and waits for it: a thread that
// Spawn could not move back then ends with that goroutine.
func OnOwnThread(f func() error) error { return elsewhere(f) }

// Procs returns the pids in the group in any of its hierarchies.
func (g *V1Group) Procs() []int {
	var pids []int
	for _, s := range g.v.subs {
		b, err := os.ReadFile(filepath.Join(g.dir(s.Name()), "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && !slices.Contains(pids, pid) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// Events returns the kernel's counts so far of OOM kills in the memory
// group and of forks refused by pids.max; cheap enough to poll.
func (g *V1Group) Events() (oomKills, pidsMax int64) {
	if g.v.Has("memory") {
		if b, err := os.ReadFile(filepath.Join(g.dir(cgroup1.Memory), "memory.oom_control")); err == nil {
			oomKills = keyed(b)["oom_kill"]
		}
	}
	if g.v.Has("pids") {
		if b, err := os.ReadFile(filepath.Join(g.dir(cgroup1.Pids), "pids.events")); err == nil {
			pidsMax = keyed(b)["max"]
		}
	}
	return oomKills, pidsMax
}

// PidsPeak returns the most tasks of the job the pids group held at once
// (pids.peak, Linux 6.13 or later), -1 when unknown. While Spawn's thread
// was in the group it held a slot the job did not have: a peak reached then
// (pids.peak no higher than when the thread left) counts one less. The
// kernel keeps one peak, so a job that reaches, after the thread left,
// exactly the count it had with the thread reads one less than it held.
func (g *V1Group) PidsPeak() int64 {
	if !slices.Contains(g.names, cgroup1.Pids) {
		return -1
	}
	s := readString(filepath.Join(g.dir(cgroup1.Pids), "pids.peak"))
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return -1
	}
	if g.peakWithThread > 0 && n <= g.peakWithThread {
		return g.peakWithThread - 1
	}
	return n
}

// Usage reads what the group used so far: CPU time from cpuacct.usage,
// the peak of memory (with the page cache and tmpfs pages charged to it)
// from memory.max_usage_in_bytes, the events, pids.peak. It reads those
// files alone: the library's Stat parses every statistic of every
// hierarchy, several times the cost at the end of each job.
func (g *V1Group) Usage() Usage {
	u := Usage{PidsPeak: g.PidsPeak()}
	if slices.Contains(g.names, cgroup1.Cpuacct) {
		if n, err := strconv.ParseInt(readString(filepath.Join(g.dir(cgroup1.Cpuacct), "cpuacct.usage")), 10, 64); err == nil {
			u.CPU = time.Duration(n)
		}
	}
	if slices.Contains(g.names, cgroup1.Memory) {
		u.PeakMemoryBytes, _ = strconv.ParseInt(readString(filepath.Join(g.dir(cgroup1.Memory), "memory.max_usage_in_bytes")), 10, 64)
	}
	u.OOMKills, u.PidsMaxHits = g.Events()
	return u
}

// Remove deletes the group in every hierarchy; its processes must be gone.
// A group already gone is not an error.
func (g *V1Group) Remove() error {
	var errs []error
	for _, s := range g.v.subs {
		d := g.dir(s.Name())
		var err error
		for range 100 {
			err = unix.Rmdir(d)
			if err == nil || errors.Is(err, fs.ErrNotExist) {
				err = nil
				break
			}
			if !errors.Is(err, unix.EBUSY) {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("remove cgroup v1 %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

func ptr[T any](v T) *T { return &v }
