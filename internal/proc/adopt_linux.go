package proc

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// In group mode dshd is the child subreaper of its jobs' descendants: a
// process whose parent exits (`setsid -f`, a double fork) becomes dshd's
// child and can no longer be tied to its job. Shutdown kills every such
// process (killAdopted); after a crash their parent is gone and nothing
// would. So while jobs run, dshd records the processes it adopted, by pid
// and start time, in the running index (<home>/jobs/running/adopted), and
// the next start stops those that still run with the recorded start time,
// with everything below them.

// AdoptedFile is the record of adopted processes in the running index; its
// name has no .json suffix, so it is never read as a job.
const AdoptedFile = "adopted"

// adoptPoll is how often the adopted processes are listed. Adoption sends
// no signal: a process adopted less than this before a crash is missed.
const adoptPoll = 100 * time.Millisecond

// procRef names one process across a restart: a recycled pid has another
// start time.
type procRef struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// adoptQuiet is how long the adopted processes are still listed after the
// runner was last seen with a process: an adoption can follow the end of
// the job that caused it.
const adoptQuiet = 2 * time.Second

// WatchAdopted keeps the adopted file up to date until stop is closed, and
// closes done when it returns. It lists dshd's children while any process
// of the runner runs or lingers, for adoptQuiet after, and while any
// adopted process is left; an idle server reads nothing.
func (r *Runner) WatchAdopted(path string, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(adoptPoll)
	defer t.Stop()
	var (
		last       []procRef
		launches   int
		lastActive time.Time
	)
	for {
		var now time.Time
		select {
		case <-stop:
			return
		case now = <-t.C:
		}
		busy, n := r.Activity()
		if busy || n != launches {
			launches, lastActive = n, now
		}
		if len(last) == 0 && now.Sub(lastActive) > adoptQuiet {
			continue
		}
		cur := adoptedChildren()
		if slices.Equal(cur, last) {
			continue
		}
		if err := writeAdopted(path, cur); err != nil {
			r.log.Warn("record adopted processes", "err", err)
			continue
		}
		last = cur
	}
}

// adoptedChildren lists dshd's live children that are not the leader of a
// job or hook (the processes it adopted), sorted by pid. It holds the
// reaper's lock, so no spawn is between its fork and its registration.
func adoptedChildren() []procRef {
	r := &reaperOf
	r.mu.Lock()
	defer r.mu.Unlock()
	self := os.Getpid()
	var out []procRef
	for _, pid := range childrenOf(self) {
		if r.isLeader(pid) {
			continue
		}
		if st, ok := readStat(pid); ok && st.ppid == self && st.state != 'Z' {
			out = append(out, procRef{PID: pid, Start: st.start})
		}
	}
	slices.SortFunc(out, func(a, b procRef) int { return a.PID - b.PID })
	return out
}

// childrenOf lists the children of pid from /proc/<pid>/task/*/children
// (a few small reads), or, where the kernel lacks those files, from a scan
// of every process.
func childrenOf(pid int) []int {
	if out, ok := taskChildren(pid); ok {
		return out
	}
	var out []int
	for _, st := range ScanProcs() {
		if st.ppid == pid {
			out = append(out, st.pid)
		}
	}
	return out
}

// taskChildren reads /proc/<pid>/task/*/children; false if it cannot.
func taskChildren(pid int) ([]int, bool) {
	base := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(base)
	if err != nil {
		return nil, false
	}
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile(filepath.Join(base, t.Name(), "children"))
		if errors.Is(err, fs.ErrNotExist) && len(out) > 0 {
			continue // the thread exited since the listing
		}
		if err != nil {
			return nil, false
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out, true
}

// writeAdopted replaces the file at path with refs (removes it when there
// are none), through a temporary name.
func writeAdopted(path string, refs []procRef) error {
	if len(refs) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	b, err := json.Marshal(refs)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// KillRecordedAdopted SIGKILLs the processes an earlier run recorded as
// adopted that still run with the recorded start time, and everything
// below them (from procs), adds them to killed, and removes the record.
func KillRecordedAdopted(dir string, procs []Stat, killed map[int]struct{}) error {
	path := filepath.Join(dir, AdoptedFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	_ = os.Remove(path + ".tmp")
	var refs []procRef
	if err := json.Unmarshal(b, &refs); err != nil {
		_ = os.Remove(path)
		return err // cut short by the crash: nothing to trust in it
	}
	children := make(map[int][]Stat)
	for _, st := range procs {
		children[st.ppid] = append(children[st.ppid], st)
	}
	var queue []Stat
	for _, ref := range refs {
		if st, ok := readStat(ref.PID); ok && ref.Start != 0 && st.start == ref.Start && st.state != 'Z' {
			queue = append(queue, st)
		}
	}
	for len(queue) > 0 {
		st := queue[0]
		queue = queue[1:]
		if _, done := killed[st.pid]; !done && syscall.Kill(st.pid, syscall.SIGKILL) == nil {
			killed[st.pid] = struct{}{}
		}
		queue = append(queue, children[st.pid]...)
	}
	return os.Remove(path)
}

// ForgetAdopted removes the record of adopted processes at path: at
// shutdown every adopted process was killed, and a next start has nothing
// to stop.
func ForgetAdopted(path string) error { return writeAdopted(path, nil) }
