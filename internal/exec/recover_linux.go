package exec

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/dshd/dshd/internal/cgroup"
)

// The running index: one small JSON file per running job under
// <home>/jobs/running, written right after the spawn and removed when the
// job ends. After a crash it tells the next start which processes to stop
// and which jobs to report as lost. A file per job keeps each write and
// removal independent, and a file cut short by the crash loses only its own
// pid (the job is still reported lost, and in cgroup mode its group is
// found and killed anyway).

// indexEntry is one running job in the index.
type indexEntry struct {
	ID         string    `json:"id"`
	AgentID    string    `json:"agentId,omitempty"`
	Command    string    `json:"command"`
	Cwd        string    `json:"cwd"`
	Background bool      `json:"background"`
	CreatedAt  time.Time `json:"createdAt"`
	StartedAt  time.Time `json:"startedAt"`
	// PID is the leader's pid, which is also the job's pgid.
	PID int `json:"pid"`
	// LeaderStart is the leader's start time (clock ticks since boot, from
	// /proc/<pid>/stat): a pid recycled since is never signalled.
	LeaderStart uint64 `json:"leaderStart"`
	// Cgroup is the job's cgroup directory in cgroup mode.
	Cgroup string `json:"cgroup,omitempty"`
}

func (e *Executor) indexDir() string {
	if e.jobsDir == "" {
		return ""
	}
	return filepath.Join(e.jobsDir, "running")
}

// indexAdd records j, whose leader is pid, as running. Errors are logged:
// the job runs whether or not it could be indexed.
func (e *Executor) indexAdd(j *Job, pid int) {
	dir := e.indexDir()
	if dir == "" {
		return
	}
	ent := indexEntry{
		ID: j.id, AgentID: j.agentID, Command: j.command, Cwd: j.cwd, Background: j.background,
		CreatedAt: j.createdAt, StartedAt: j.startedAt, PID: pid,
	}
	if st, ok := readStat(pid); ok {
		ent.LeaderStart = st.start
	}
	if j.proc.cg != nil {
		ent.Cgroup = j.proc.cg.Path()
	}
	b, err := json.Marshal(ent)
	if err == nil {
		err = writeSmall(filepath.Join(dir, j.id+".json"), b)
	}
	if err != nil {
		e.log.Warn("index running job", "job_id", j.id, "err", err)
	}
}

// indexRemove forgets j once it has ended.
func (e *Executor) indexRemove(j *Job) {
	dir := e.indexDir()
	if dir == "" {
		return
	}
	if err := syscall.Unlink(filepath.Join(dir, j.id+".json")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		e.log.Warn("unindex job", "job_id", j.id, "err", err)
	}
}

// recoverLost runs once in New, before any job starts. It stops every
// process an earlier run left: the groups under dshd's cgroup subtree, the
// process groups of indexed jobs whose leader still has the recorded
// start time, and the processes it had adopted (group mode; see
// watchAdopted) that still have theirs. It records the indexed jobs as StateLost, so they stay
// answerable until retention drops them, and empties the index.
func (e *Executor) recoverLost() error {
	dir := e.indexDir()
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	des, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var ents []indexEntry
	for _, de := range des {
		id, ok := strings.CutSuffix(de.Name(), ".json")
		if !ok || !de.Type().IsRegular() {
			continue
		}
		path := filepath.Join(dir, de.Name())
		ent := indexEntry{ID: id}
		if b, err := os.ReadFile(path); err == nil {
			if json.Unmarshal(b, &ent) != nil || ent.ID != id {
				ent = indexEntry{ID: id} // cut short by the crash: the id is all we know
			}
		}
		ents = append(ents, ent)
		if err := os.Remove(path); err != nil {
			e.log.Warn("remove index entry", "path", path, "err", err)
		}
	}

	// Kill everything first (one pass over /proc, cgroup.kill per group),
	// count and clean up after: the leftovers must stop at once.
	killed := make(map[int]struct{})
	var gs []*cgroup.Group
	if e.run.cont.mgr != nil {
		if gs, err = e.run.cont.mgr.Leftovers(); err != nil {
			e.log.Warn("list leftover cgroups", "err", err)
		}
		for _, g := range gs {
			for _, pid := range g.Procs() {
				killed[pid] = struct{}{}
			}
			if err := g.Kill(); err != nil {
				e.log.Warn("kill leftover cgroup", "cgroup", g.Path(), "err", err)
			}
		}
	}
	// The v1 groups of the lost jobs (hybrid hosts): their processes are
	// in the cgroup2 groups killed above too; any that are not die here.
	var v1s []*cgroup.V1Group
	if e.run.cont.v1 != nil {
		v1s = e.run.cont.v1.Leftovers()
		for _, g := range v1s {
			for _, pid := range g.Procs() {
				if syscall.Kill(pid, syscall.SIGKILL) == nil {
					killed[pid] = struct{}{}
				}
			}
		}
	}
	procs := scanProcs()
	for _, ent := range ents {
		killIndexed(ent, procs, killed)
	}
	if err := killRecordedAdopted(dir, procs, killed); err != nil {
		e.log.Warn("stop processes adopted by a previous run", "err", err)
	}
	if len(gs) > 0 || len(v1s) > 0 {
		// Removing a group waits for its processes to be gone; nothing
		// new is placed in these groups, so that need not hold up the start.
		go func() {
			for _, g := range gs {
				g.WaitEmpty(10 * time.Second)
				if err := g.Remove(); err != nil {
					e.log.Warn("remove leftover cgroup", "err", err)
				}
			}
			for _, g := range v1s {
				for deadline := time.Now().Add(10 * time.Second); len(g.Procs()) > 0 && time.Now().Before(deadline); {
					time.Sleep(5 * time.Millisecond)
				}
				if err := g.Remove(); err != nil {
					e.log.Warn("remove leftover cgroup v1 groups", "err", err)
				}
			}
		}()
	}
	if len(ents) == 0 && len(killed) == 0 {
		return nil
	}
	now := e.now()
	e.mu.Lock()
	for _, ent := range ents {
		j := lostJob(e, ent, now)
		e.jobs[j.id] = j
		e.finished = append(e.finished, finishedJob{job: j, at: now})
	}
	e.mu.Unlock()
	e.log.Warn("stopped what a previous run left", "lost_jobs", len(ents), "processes", len(killed))
	return nil
}

// killIndexed SIGKILLs the process group of ent if its leader is the process
// that was indexed, and adds the group's members (from procs) to killed. A
// leader that exited leaves a group dshd can no longer prove is the job's:
// it is left alone (in cgroup mode the job's group caught it).
func killIndexed(ent indexEntry, procs []procStat, killed map[int]struct{}) {
	if ent.PID <= 0 || ent.LeaderStart == 0 {
		return
	}
	st, ok := readStat(ent.PID)
	if !ok || st.start != ent.LeaderStart || st.pgid != ent.PID {
		return
	}
	_ = syscall.Kill(-ent.PID, syscall.SIGKILL)
	for _, p := range procs {
		if p.pgid == ent.PID && p.state != 'Z' {
			killed[p.pid] = struct{}{}
		}
	}
}

// lostJob is the record of a job that an earlier run left running.
func lostJob(e *Executor, ent indexEntry, now time.Time) *Job {
	p := newProc(0)
	p.pid = ent.PID
	p.exited = true
	close(p.done)
	j := &Job{
		e: e, proc: p, id: ent.ID, command: ent.Command, agentID: ent.AgentID, cwd: ent.Cwd,
		background: ent.Background, createdAt: ent.CreatedAt,
		state: StateLost, startedAt: ent.StartedAt, endedAt: now,
	}
	if j.createdAt.IsZero() {
		j.createdAt = now
	}
	if j.startedAt.IsZero() {
		j.startedAt = j.createdAt
	}
	j.stdout.init(e.opts.CaptureBytes, 0, "", ent.ID, ".stdout")
	j.stderr.init(e.opts.CaptureBytes, 0, "", ent.ID, ".stderr")
	j.stdout.eof, j.stderr.eof = true, true
	return j
}

// writeSmall creates path (0600) with b, in one write: plain system calls,
// where os.WriteFile would also set the file up for the runtime's poller.
func writeSmall(path string, b []byte) error {
	fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_TRUNC|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	for len(b) > 0 {
		n, err := syscall.Write(fd, b)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			syscall.Close(fd)
			return &os.PathError{Op: "write", Path: path, Err: err}
		}
		b = b[n:]
	}
	if err := syscall.Close(fd); err != nil {
		return &os.PathError{Op: "close", Path: path, Err: err}
	}
	return nil
}
