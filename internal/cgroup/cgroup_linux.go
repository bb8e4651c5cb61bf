package cgroup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// limitControllers are the controllers Limits use, in the order they are
// enabled.
var limitControllers = []string{"cpu", "memory", "pids"}

// Manager owns one parent group for one dshd home: <own cgroup>/<name>. The
// parent holds no process itself (the kernel's "no internal processes" rule
// then lets it enable controllers for its children).
type Manager struct {
	dir         string
	controllers []string
	// moved: dshd left its own group for ServerLeaf (see leaveOwnGroup);
	// moveErr: why it tried and could not.
	moved   bool
	moveErr error
}

// ServerLeaf is the group dshd moves itself into, below its own, when its
// own group must pass controllers down (see leaveOwnGroup).
const ServerLeaf = "dshd.server"

// Open finds dshd's own cgroup v2 directory, creates (or reuses) the
// subgroup name under it, enables the limit controllers the host delegates,
// and checks that a process can be spawned straight into a group and that
// cgroup.kill exists, by running probe (an argv such as {"/bin/bash", "-c",
// ":"}) in a temporary group. It returns an error wrapping ErrUnavailable
// that says why when any of this fails.
func Open(name string, probe []string) (*Manager, error) {
	own, err := OwnDir()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return openAt(own, name, probe)
}

func openAt(own, name string, probe []string) (*Manager, error) {
	if name == "" || strings.ContainsRune(name, '/') || name == "." || name == ".." {
		return nil, fmt.Errorf("%w: bad group name %q", ErrUnavailable, name)
	}
	dir := filepath.Join(own, name)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("%w: create %s: %v", ErrUnavailable, dir, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "cgroup.kill")); err != nil {
		return nil, fmt.Errorf("%w: %s has no cgroup.kill (needs Linux 5.14 or later): %v", ErrUnavailable, dir, err)
	}
	m := &Manager{dir: dir}
	if moved, err := leaveOwnGroup(own); err != nil {
		m.moveErr = err
	} else {
		m.moved = moved
	}
	m.controllers = enableControllers(own, dir)
	if err := m.probe(probe); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return m, nil
}

// leaveOwnGroup moves this process into the leaf <own>/ServerLeaf when own
// offers controllers, is not the hierarchy's root and holds this process
// alone: a systemd service with Delegate=yes, or a container whose cgroup
// namespace root is its own. The kernel's "no internal processes" rule lets
// a non-root group that holds a process pass no controller to its children,
// so without the move every limit of every job would fall to dshd's
// watcher. Another process in own (a supervisor, a shell, a test runner)
// is not dshd's to move, and then nothing moves. It reports whether this
// process moved.
func leaveOwnGroup(own string) (bool, error) {
	if len(fields(readString(filepath.Join(own, "cgroup.controllers")))) == 0 {
		return false, nil // nothing to pass down
	}
	if _, err := os.Stat(filepath.Join(own, "cgroup.type")); err != nil {
		return false, nil // the root has no cgroup.type, and no such rule
	}
	procs, err := ReadSmall(filepath.Join(own, "cgroup.procs"))
	if err != nil {
		return false, fmt.Errorf("read %s: %w", filepath.Join(own, "cgroup.procs"), err)
	}
	self := strconv.Itoa(os.Getpid())
	if f := fields(string(procs)); len(f) != 1 || f[0] != self {
		return false, nil
	}
	leaf := filepath.Join(own, ServerLeaf)
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return false, fmt.Errorf("create %s: %w", leaf, err)
	}
	// Writing the pid moves every thread of the process.
	if err := writeFile(filepath.Join(leaf, "cgroup.procs"), self); err != nil {
		_ = syscall.Rmdir(leaf)
		return false, fmt.Errorf("move dshd into %s: %w", leaf, err)
	}
	return true, nil
}

// Moved reports whether dshd moved itself into <own>/ServerLeaf so that its
// own group could pass controllers down, and, when it tried and could not,
// why.
func (m *Manager) Moved() (bool, error) { return m.moved, m.moveErr }

// enableControllers turns on, in own and then in dir, every limit
// controller that own offers, and returns those dir's children really get.
// Failures are expected and not errors: a controller bound to a v1
// hierarchy is not offered, and a non-root own cgroup that holds processes
// cannot pass controllers down (EBUSY).
func enableControllers(own, dir string) []string {
	avail := fields(readString(filepath.Join(own, "cgroup.controllers")))
	for _, c := range limitControllers {
		if !slices.Contains(avail, c) {
			continue
		}
		_ = writeFile(filepath.Join(own, "cgroup.subtree_control"), "+"+c)
		_ = writeFile(filepath.Join(dir, "cgroup.subtree_control"), "+"+c)
	}
	on := fields(readString(filepath.Join(dir, "cgroup.subtree_control")))
	var got []string
	for _, c := range limitControllers {
		if slices.Contains(on, c) {
			got = append(got, c)
		}
	}
	return got
}

// probe spawns argv into a fresh group, waits for it, and removes the group.
func (m *Manager) probe(argv []string) error {
	if len(argv) == 0 {
		return nil
	}
	g, err := m.create(fmt.Sprintf("probe-%d", os.Getpid()), Limits{})
	if err != nil {
		return err
	}
	defer g.Remove()
	defer g.CloseFD()
	attr := &syscall.ProcAttr{
		Sys: &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: g.FD()},
	}
	pid, err := syscall.ForkExec(argv[0], argv, attr)
	if err != nil {
		return fmt.Errorf("spawn into %s (clone3 with CLONE_INTO_CGROUP needs Linux 5.7 or later): %w", g.Path(), err)
	}
	var ws syscall.WaitStatus
	for {
		_, err = syscall.Wait4(pid, &ws, 0, nil)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("wait for probe: %w", err)
	}
	if !ws.Exited() || ws.ExitStatus() != 0 {
		return fmt.Errorf("probe %q in %s failed: %v", argv, g.Path(), ws)
	}
	return nil
}

// Dir returns the parent group's directory.
func (m *Manager) Dir() string { return m.dir }

// Controllers returns the limit controllers ("cpu", "memory", "pids") that
// the manager's groups get; Limits for the others are not applied.
func (m *Manager) Controllers() []string { return slices.Clone(m.controllers) }

// CanFreeze reports whether the groups have cgroup.freeze (Linux 5.2 or
// later), which Group.Freeze needs.
func (m *Manager) CanFreeze() bool {
	_, err := os.Stat(filepath.Join(m.dir, "cgroup.freeze"))
	return err == nil
}

// Has reports whether controller c is enabled for the groups.
func (m *Manager) Has(c string) bool { return slices.Contains(m.controllers, c) }

// Create makes the group name (a job id) with the given limits and opens it
// for spawning into. The caller closes the descriptor with CloseFD once the
// process is started, and removes the group with Remove once it is empty.
// A name that exists is an error: groups are never shared.
func (m *Manager) Create(name string, lim Limits) (*Group, error) {
	if name == "" || strings.ContainsRune(name, '/') || strings.HasPrefix(name, ".") {
		return nil, fmt.Errorf("create cgroup: bad name %q", name)
	}
	return m.create(name, lim)
}

func (m *Manager) create(name string, lim Limits) (*Group, error) {
	g := &Group{path: filepath.Join(m.dir, name), fd: -1, m: m}
	if err := os.Mkdir(g.path, 0o755); err != nil {
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	if err := m.apply(g.path, lim); err != nil {
		g.Remove()
		return nil, err
	}
	fd, err := syscall.Open(g.path, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		g.Remove()
		return nil, fmt.Errorf("open cgroup %s: %w", g.path, err)
	}
	g.fd = fd
	return g, nil
}

// Limit sets lim on g, a group made before its job's limits were known.
func (g *Group) Limit(lim Limits) error { return g.m.apply(g.path, lim) }

// cpuPeriod is the cpu.max period in microseconds (the kernel's default).
const cpuPeriod = 100000

func (m *Manager) apply(dir string, lim Limits) error {
	var errs []error
	set := func(ctrl, file, v string) {
		if !m.Has(ctrl) {
			return
		}
		if err := writeFile(filepath.Join(dir, file), v); err != nil {
			errs = append(errs, fmt.Errorf("set %s: %w", file, err))
		}
	}
	if lim.Pids > 0 {
		set("pids", "pids.max", strconv.FormatInt(lim.Pids, 10))
	}
	if lim.MemoryBytes > 0 {
		set("memory", "memory.max", strconv.FormatInt(lim.MemoryBytes, 10))
		// Without this a memory hog swaps instead of meeting the OOM killer.
		if _, err := os.Stat(filepath.Join(dir, "memory.swap.max")); err == nil {
			set("memory", "memory.swap.max", "0")
		}
	}
	if lim.CPU > 0 {
		quota := max(int64(lim.CPU*cpuPeriod), 1000)
		set("cpu", "cpu.max", fmt.Sprintf("%d %d", quota, cpuPeriod))
	}
	return errors.Join(errs...)
}

// Leftovers returns the groups under the parent, which a previous run of
// dshd on the same home left (a clean shutdown removes its groups). Probe
// groups of other runs are included; nothing runs in them for long.
func (m *Manager) Leftovers() ([]*Group, error) {
	entries, err := os.ReadDir(m.dir)
	if err != nil {
		return nil, fmt.Errorf("list cgroups: %w", err)
	}
	var gs []*Group
	for _, de := range entries {
		if de.IsDir() {
			gs = append(gs, &Group{path: filepath.Join(m.dir, de.Name()), fd: -1, m: m})
		}
	}
	return gs, nil
}

// Group is one job's cgroup.
type Group struct {
	path string
	fd   int
	m    *Manager // says which controllers' files the group has
	// stats holds cgroup.events and cpu.stat open once KeepStats ran; nil
	// before.
	stats *groupStats
}

// groupStats are descriptors of a group's cgroup.events and cpu.stat, read
// with pread: a job's end then costs one system call per file instead of
// an open (a walk of the group's path), a read and a close. mu keeps a
// read from racing with the close, which could hand the read a recycled
// descriptor.
type groupStats struct {
	mu          sync.RWMutex
	events, cpu int // -1 once closed
}

// MaxKeptStats bounds how many groups keep their files open at once (two
// descriptors each): a host running thousands of jobs at once has no
// descriptors to spare for them (each job already holds its pipes and
// pidfd). Groups past the bound read their files by path.
const MaxKeptStats = 256

// keptStats holds one token per group keeping its files open.
var keptStats = make(chan struct{}, MaxKeptStats)

// KeepStats opens the group's cgroup.events and cpu.stat, relative to its
// descriptor (before CloseFD), and keeps them open until Remove: Populated
// and Usage read them from then on. With MaxKeptStats groups keeping
// theirs already it keeps nothing, and they go on reading by path.
func (g *Group) KeepStats() error {
	if g.fd < 0 {
		return fmt.Errorf("cgroup %s: no descriptor to open its files from", g.path)
	}
	select {
	case keptStats <- struct{}{}:
	default:
		return nil
	}
	ev, err := openFileAt(g.fd, "cgroup.events")
	if err != nil {
		<-keptStats
		return fmt.Errorf("open %s/cgroup.events: %w", g.path, err)
	}
	cpu, err := openFileAt(g.fd, "cpu.stat")
	if err != nil {
		syscall.Close(ev)
		<-keptStats
		return fmt.Errorf("open %s/cpu.stat: %w", g.path, err)
	}
	g.stats = &groupStats{events: ev, cpu: cpu}
	return nil
}

func openFileAt(dir int, name string) (int, error) {
	for {
		fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// value returns key's value in the kernel's current text of the file
// events selects (cgroup.events, else cpu.stat), and reports false if the
// descriptors are closed or the read fails.
func (s *groupStats) value(events bool, key string) (int64, bool) {
	if s == nil {
		return 0, false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	fd := s.cpu
	if events {
		fd = s.events
	}
	if fd < 0 {
		return 0, false
	}
	var buf [1024]byte
	for {
		n, err := unix.Pread(fd, buf[:], 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == len(buf) {
			return 0, false // cut short: the caller reads the whole file by path
		}
		return keyedValue(buf[:n], key), true
	}
}

func (s *groupStats) close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.events < 0 {
		return // closed already
	}
	syscall.Close(s.events)
	syscall.Close(s.cpu)
	s.events, s.cpu = -1, -1
	<-keptStats
}

// Path returns the group's directory.
func (g *Group) Path() string { return g.path }

// Name returns the group's name (the job id it was created for).
func (g *Group) Name() string { return filepath.Base(g.path) }

// FD returns the descriptor to pass as SysProcAttr.CgroupFD, -1 after
// CloseFD.
func (g *Group) FD() int { return g.fd }

// CloseFD closes the descriptor used for spawning.
func (g *Group) CloseFD() {
	if g.fd >= 0 {
		syscall.Close(g.fd)
		g.fd = -1
	}
}

// Kill SIGKILLs every process in the group and in groups below it, through
// cgroup.kill; processes forked while the kill runs are killed too.
func (g *Group) Kill() error {
	if err := writeFile(filepath.Join(g.path, "cgroup.kill"), "1"); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed: nothing to kill
		}
		return fmt.Errorf("kill cgroup %s: %w", g.path, err)
	}
	return nil
}

// Signal sends sig to every process in the group, best effort; it returns
// how many were signalled. Unlike Kill it races with forks, which is fine
// for the SIGTERM that opens the grace period.
func (g *Group) Signal(sig syscall.Signal) int {
	n := 0
	for _, pid := range g.Procs() {
		if syscall.Kill(pid, sig) == nil {
			n++
		}
	}
	return n
}

// Procs returns the pids in the group (not in groups below it).
func (g *Group) Procs() []int {
	b, err := os.ReadFile(filepath.Join(g.path, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Populated reports whether any live process is in the group or below it.
// A group that no longer exists is not populated.
func (g *Group) Populated() bool {
	if v, ok := g.stats.value(true, "populated"); ok {
		return v > 0
	}
	b, err := ReadSmall(filepath.Join(g.path, "cgroup.events"))
	if err != nil {
		return false
	}
	return keyedValue(b, "populated") > 0
}

// WaitEmpty polls until the group is empty or d has passed, and reports
// whether it is empty.
func (g *Group) WaitEmpty(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for g.Populated() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// CPUTime reads the user plus system CPU time of every task that ran in
// the group (cpu.stat usage_usec, kept by the kernel with or without the
// cpu controller); 0 when it cannot be read.
func (g *Group) CPUTime() time.Duration {
	b, err := os.ReadFile(filepath.Join(g.path, "cpu.stat"))
	if err != nil {
		return 0
	}
	return time.Duration(keyed(b)["usage_usec"]) * time.Microsecond
}

// Freeze stops (true) or resumes (false) every process in the group and
// below it, through cgroup.freeze (Linux 5.2 or later; no controller
// needed). A frozen process still dies of SIGKILL and of cgroup.kill;
// other signals wait until it is thawed.
func (g *Group) Freeze(frozen bool) error {
	v := "0"
	if frozen {
		v = "1"
	}
	if err := writeFile(filepath.Join(g.path, "cgroup.freeze"), v); err != nil {
		if errors.Is(err, fs.ErrNotExist) && !frozen {
			return nil // removed: nothing to thaw
		}
		return fmt.Errorf("freeze cgroup %s: %w", g.path, err)
	}
	return nil
}

// Events returns the kernel's counts so far of OOM kills in the group
// (memory.events oom_kill) and of forks refused by pids.max (pids.events
// max); zero without the controller. Cheap enough to poll.
func (g *Group) Events() (oomKills, pidsMax int64) {
	if b, err := os.ReadFile(filepath.Join(g.path, "memory.events")); err == nil {
		oomKills = keyed(b)["oom_kill"]
	}
	if b, err := os.ReadFile(filepath.Join(g.path, "pids.events")); err == nil {
		pidsMax = keyed(b)["max"]
	}
	return oomKills, pidsMax
}

// Usage reads what the group used so far.
func (g *Group) Usage() Usage {
	u := Usage{PidsPeak: -1}
	// Only the files of the controllers the group has: each is an open
	// and a read at every job's end.
	pids, memory := g.has("pids"), g.has("memory")
	if pids {
		if s := readString(filepath.Join(g.path, "pids.peak")); s != "" {
			u.PidsPeak, _ = strconv.ParseInt(s, 10, 64)
		}
	}
	if v, ok := g.stats.value(false, "usage_usec"); ok {
		u.CPU = time.Duration(max(v, 0)) * time.Microsecond
	} else if b, err := ReadSmall(filepath.Join(g.path, "cpu.stat")); err == nil {
		u.CPU = time.Duration(max(keyedValue(b, "usage_usec"), 0)) * time.Microsecond
	}
	if memory {
		if s := readString(filepath.Join(g.path, "memory.peak")); s != "" {
			u.PeakMemoryBytes, _ = strconv.ParseInt(s, 10, 64)
		}
		if b, err := ReadSmall(filepath.Join(g.path, "memory.events")); err == nil {
			u.OOMKills = keyed(b)["oom_kill"]
		}
	}
	if pids {
		if b, err := ReadSmall(filepath.Join(g.path, "pids.events")); err == nil {
			u.PidsMaxHits = keyed(b)["max"]
		}
	}
	return u
}

// Remove deletes the group, which must be empty. The kernel may take a
// moment after the last process exits to let go of the group (EBUSY), so
// Remove retries briefly. A group already gone is not an error.
func (g *Group) Remove() error {
	g.stats.close()
	g.CloseFD()
	return removeTree(g.path)
}

// removeTree removes the group at path and every group below it, deepest
// first: a job may make groups of its own inside its group (a container,
// systemd-run, another dshd), and a group with a child cannot be removed.
// A group that still holds a process stays (EBUSY once the retries are
// spent).
func removeTree(path string) error {
	// Most groups are empty leaves: one rmdir, no listing.
	if err := syscall.Rmdir(path); err == nil || errors.Is(err, syscall.ENOENT) {
		return nil
	}
	ents, _ := os.ReadDir(path)
	for _, e := range ents {
		if e.IsDir() {
			_ = removeTree(filepath.Join(path, e.Name()))
		}
	}
	var err error
	for range 100 {
		err = syscall.Rmdir(path)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	return fmt.Errorf("remove cgroup %s: %w", path, err)
}

// OwnDir returns the directory of the calling process's cgroup v2 group: its
// path in /proc/self/cgroup ("0::/path") under the cgroup2 mount found in
// /proc/self/mountinfo, which on hybrid hosts sits beside the v1 mounts
// (for example /sys/fs/cgroup/unified).
func OwnDir() (string, error) {
	cg, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	return ownDir(cg, mi)
}

func ownDir(procCgroup, mountinfo []byte) (string, error) {
	var path string
	found := false
	for line := range strings.SplitSeq(string(procCgroup), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			path, found = p, true
			break
		}
	}
	if !found {
		return "", errors.New("no cgroup v2 entry (0::) in /proc/self/cgroup")
	}
	if strings.HasSuffix(path, " (deleted)") {
		return "", fmt.Errorf("own cgroup %q was deleted", path)
	}
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent maj:min root mountpoint opts [optional...] - fstype src superopts
		f := strings.Fields(sc.Text())
		sep := slices.Index(f, "-")
		if sep < 5 || sep+1 >= len(f) || f[sep+1] != "cgroup2" {
			continue
		}
		root, mnt := unescape(f[3]), unescape(f[4])
		rel, ok := within(path, root)
		if !ok {
			continue
		}
		return filepath.Join(mnt, rel), nil
	}
	return "", fmt.Errorf("no cgroup2 mount shows own cgroup %q (mount cgroup2, e.g. on /sys/fs/cgroup/unified)", path)
}

// within returns path relative to root if path is root or below it.
func within(path, root string) (string, bool) {
	if root == "/" {
		return path, true
	}
	if path == root {
		return "/", true
	}
	if rest, ok := strings.CutPrefix(path, root+"/"); ok {
		return "/" + rest, true
	}
	return "", false
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// has reports whether the group may have controller c's files: those of
// the manager's controllers; every controller for a group of no manager.
func (g *Group) has(c string) bool { return g.m == nil || g.m.Has(c) }

// ReadSmall reads a small kernel file (cgroupfs, procfs) with plain system
// calls: os.ReadFile would stat it and set it up for the runtime's poller,
// four more calls for every file read at a job's end.
func ReadSmall(path string) ([]byte, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	buf := make([]byte, 0, 512)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := syscall.Read(fd, buf[len(buf):cap(buf)])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

func readString(path string) string {
	b, err := ReadSmall(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func fields(s string) []string { return strings.Fields(s) }

// keyed parses "key value" lines (cgroup.events, cpu.stat, memory.events).
func keyed(b []byte) map[string]int64 {
	m := make(map[string]int64)
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
			m[k] = n
		}
	}
	return m
}

// keyedValue returns the value of key in "key value" lines (cgroup.events,
// cpu.stat), -1 if it is absent or not a number. Unlike keyed it allocates
// nothing.
func keyedValue(b []byte, key string) int64 {
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if len(line) > len(key) && line[len(key)] == ' ' && string(line[:len(key)]) == key {
			n, err := strconv.ParseInt(string(bytes.TrimSpace(line[len(key)+1:])), 10, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}

// writeFile writes v to a cgroup control file, which must exist.
func writeFile(path, v string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(v)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
