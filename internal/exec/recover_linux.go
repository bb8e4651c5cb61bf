package exec

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/dshd/dshd/internal/proc"
)

// The running index: an append-only log, <home>/jobs/running/index.log,
// of one JSON line per job started (its entry, right after the spawn) and
// one per job ended ({"end": id}). Each line is one write(2) to a
// descriptor held open, so a job costs two writes and no file created or
// removed; a crash of dshd cannot cut a write short (the kernel finishes
// it), and a line torn by a crash of the machine is skipped (its processes
// died with the machine). When the log has grown past indexCompactAt it is
// rewritten with the running jobs alone. After a crash it tells the next
// start which processes to stop and which jobs to report as lost. Index
// files of one JSON file per job, which earlier versions wrote, are still
// read.

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

// appendJSON appends the entry as json.Marshal encodes it, with a quarter
// of its work (no reflection); json.Marshal still encodes a command or
// directory that is not valid UTF-8, replacing what is not.
func (ent *indexEntry) appendJSON(b []byte) ([]byte, error) {
	start := len(b)
	str := func(name, v string) bool {
		b = append(b, name...)
		var err error
		b, err = jsontext.AppendQuote(b, v)
		return err == nil
	}
	when := func(name string, t time.Time) bool {
		if y := t.Year(); y < 0 || y > 9999 {
			return false
		}
		b = append(append(b, name...), '"')
		b = append(t.AppendFormat(b, time.RFC3339Nano), '"')
		return true
	}
	ok := str(`{"id":`, ent.ID)
	if ok && ent.AgentID != "" {
		ok = str(`,"agentId":`, ent.AgentID)
	}
	ok = ok && str(`,"command":`, ent.Command) && str(`,"cwd":`, ent.Cwd)
	if ok {
		b = strconv.AppendBool(append(b, `,"background":`...), ent.Background)
		ok = when(`,"createdAt":`, ent.CreatedAt) && when(`,"startedAt":`, ent.StartedAt)
	}
	if ok {
		b = strconv.AppendInt(append(b, `,"pid":`...), int64(ent.PID), 10)
		b = strconv.AppendUint(append(b, `,"leaderStart":`...), ent.LeaderStart, 10)
		if ent.Cgroup != "" {
			ok = str(`,"cgroup":`, ent.Cgroup)
		}
	}
	if !ok {
		m, err := json.Marshal(ent)
		return append(b[:start], m...), err
	}
	return append(b, '}'), nil
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
	ent.LeaderStart = j.proc.LeaderStart()
	if g := j.proc.Group(); g != nil {
		ent.Cgroup = g.Path()
	}
	b, err := ent.appendJSON(make([]byte, 0, 256))
	if err == nil {
		err = e.index.add(dir, j.id, append(b, '\n'))
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
	if err := e.index.remove(j.id); err != nil {
		e.log.Warn("unindex job", "job_id", j.id, "err", err)
	}
}

// indexLogName is the running index's log in the index directory.
const indexLogName = "index.log"

// indexCompactAt is the size past which the log is rewritten with the
// running jobs alone.
const indexCompactAt = 1 << 20

// runIndex is the running index's log, opened at the first job.
type runIndex struct {
	mu   sync.Mutex
	path string
	f    *os.File
	size int64
	live map[string][]byte // running job id -> its entry's line
}

// indexEnd is the line that ends a job's entry.
type indexEnd struct {
	End string `json:"end"`
}

// add appends the entry line of job id (JSON and a newline), opening the
// log in dir on first use.
func (x *runIndex) add(dir, id string, line []byte) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.f == nil {
		x.path = filepath.Join(dir, indexLogName)
		f, err := os.OpenFile(x.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		x.f, x.size, x.live = f, 0, make(map[string][]byte)
	}
	if _, err := x.f.Write(line); err != nil {
		return err
	}
	x.size += int64(len(line))
	x.live[id] = line
	return nil
}

// remove appends the end of job id's entry, and compacts the log once it
// has grown past indexCompactAt.
func (x *runIndex) remove(id string) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.f == nil {
		return nil
	}
	if _, ok := x.live[id]; !ok {
		return nil // never indexed (its write failed)
	}
	line, _ := json.Marshal(indexEnd{End: id})
	line = append(line, '\n')
	if _, err := x.f.Write(line); err != nil {
		return err
	}
	delete(x.live, id)
	x.size += int64(len(line))
	if x.size < indexCompactAt {
		return nil
	}
	return x.compactLocked()
}

// compactLocked rewrites the log with the running jobs' entries alone: a
// new file renamed over the old one, so a crash leaves either.
func (x *runIndex) compactLocked() error {
	tmp := x.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	var buf []byte
	for _, line := range x.live {
		buf = append(buf, line...)
	}
	if _, err := f.Write(buf); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, x.path); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	x.f.Close()
	x.f, x.size = f, int64(len(buf))
	return nil
}

// close closes the log and, when no job is left in it, removes it.
func (x *runIndex) close() {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.f == nil {
		return
	}
	x.f.Close()
	x.f = nil
	if len(x.live) == 0 {
		os.Remove(x.path)
	}
}

// readIndexLog returns the entries of the jobs the log at path says are
// running, in the order they started. A line that does not parse (torn by
// a crash of the machine) is skipped.
func readIndexLog(path string) ([]indexEntry, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var order []string
	live := make(map[string]indexEntry)
	for line := range strings.SplitSeq(string(b), "\n") {
		var rec struct {
			indexEntry
			End string `json:"end"`
		}
		if line == "" || json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		switch {
		case rec.End != "":
			delete(live, rec.End)
		case rec.ID != "":
			if _, ok := live[rec.ID]; !ok {
				order = append(order, rec.ID)
			}
			live[rec.ID] = rec.indexEntry
		}
	}
	var ents []indexEntry
	for _, id := range order {
		if ent, ok := live[id]; ok {
			ents = append(ents, ent)
			delete(live, id)
		}
	}
	return ents, nil
}

// recoverLost runs once in New, before any job starts. It stops every
// process an earlier run left: the groups under dshd's cgroup subtree, the
// process groups of indexed jobs whose leader still has the recorded
// start time, and the processes it had adopted (group mode; see
// proc.Runner.WatchAdopted) that still have theirs. It records the indexed
// jobs as StateLost, so they stay answerable until retention drops them,
// and empties the index.
func (e *Executor) recoverLost() error {
	dir := e.indexDir()
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ents, err := e.takeRunningIndex(dir)
	if err != nil {
		return err
	}

	// Kill everything first (one pass over /proc, cgroup.kill per group),
	// count and clean up after: the leftovers must stop at once.
	killed := make(map[int]struct{})
	left := e.run.KillLeftovers(killed)
	procs := proc.ScanProcs()
	for _, ent := range ents {
		proc.KillGroup(ent.PID, ent.LeaderStart, procs, killed)
	}
	if err := proc.KillRecordedAdopted(dir, procs, killed); err != nil {
		e.log.Warn("stop processes adopted by a previous run", "err", err)
	}
	left.RemoveLater()
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

// takeRunningIndex reads the running index in dir, the log and the
// entries of one file each (one cut short by a crash gives its id alone),
// and removes them.
func (e *Executor) takeRunningIndex(dir string) ([]indexEntry, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, indexLogName)
	ents, err := readIndexLog(logPath)
	if err != nil {
		e.log.Warn("read the running index", "path", logPath, "err", err)
	}
	if err := os.Remove(logPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		e.log.Warn("remove the running index", "path", logPath, "err", err)
	}
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
	return ents, nil
}

// lostJob is the record of a job that an earlier run left running.
func lostJob(e *Executor, ent indexEntry, now time.Time) *Job {
	p := proc.Ended(ent.PID)
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
