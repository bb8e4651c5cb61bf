package exec

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/dshd/dshd/internal/atomicfile"
	"github.com/dshd/dshd/internal/homefs"
)

// Idempotency keys (the IETF httpapi Idempotency-Key draft).
//
// A key is scoped to the agent that sends it ("" for harness calls without
// an agent): the same key from two agents names two executions. Each key is
// remembered with the id of the job it started and the fingerprint of the
// request (a hash of the fields that define the execution) for
// Options.IdempotencyWindow after that job was started, whether or not the
// job itself is still recorded, and across restarts: the records live in
// <home>/jobs/idempotency.jsonl, an append-only file of JSON lines (one
// "put" when a job is about to spawn, one "del" when that spawn failed),
// compacted when dshd starts and when it has grown to twice what is live.
// A put is synced to disk before the command runs, so no crash can make a
// key run its command twice.
//
// Within the window, a request with a known key and
//   - another fingerprint is refused (ErrIdempotencyKeyReused);
//   - the same fingerprint, while the first request is still being
//     started, is refused (ErrIdempotencyKeyInUse): the client retries;
//   - the same fingerprint gets the recorded job, or, when retention (or a
//     restart) has dropped that job, ErrIdempotencyJobGone: the command
//     never runs again.

// idemFileName is the key file under <home>/jobs.
const idemFileName = "idempotency.jsonl"

// idemScope is a key as the job table knows it: the agent and the key.
type idemScope struct{ agent, key string }

// idemEntry is what a key stands for.
type idemEntry struct {
	jobID       string
	fingerprint string
	at          time.Time // when the key was first used
	job         *Job      // nil once the job is forgotten, or from an earlier run
	persisted   bool      // a put is in the file
}

// idemRecord is one line of the key file.
type idemRecord struct {
	Op          string    `json:"op"` // "put" or "del"
	AgentID     string    `json:"agentId,omitempty"`
	Key         string    `json:"key"`
	JobID       string    `json:"jobId"`
	Fingerprint string    `json:"fingerprint,omitempty"`
	At          time.Time `json:"at,omitzero"`
}

// idemLog is the open key file. Its methods are called with Executor.idemMu
// held, never with Executor.mu.
type idemLog struct {
	path  string
	f     *os.File
	lines int // lines in the file since it was last compacted
}

// idemLookup decides what a request with j's key gets. It is called with
// e.mu held. It returns nil to go on (a new key, or one whose window has
// passed: the entry is dropped), errIdempotentHit with j.existing set, or
// one of the idempotency errors.
func (e *Executor) idemLookupLocked(j *Job, now time.Time) error {
	sc := idemScope{j.agentID, j.idemKey}
	ent, ok := e.idem[sc]
	if !ok {
		return nil
	}
	if now.Sub(ent.at) >= e.opts.IdempotencyWindow {
		delete(e.idem, sc)
		return nil
	}
	if ent.fingerprint != j.idemFP {
		return fmt.Errorf("%w: key %q was first used with job %s for a different request", ErrIdempotencyKeyReused, j.idemKey, ent.jobID)
	}
	prev := ent.job
	if prev == nil {
		prev = e.jobs[ent.jobID] // a job an earlier run left running is recorded as lost
	}
	if prev == nil {
		return fmt.Errorf("%w: key %q started job %s, which is no longer recorded; the command is not run again", ErrIdempotencyJobGone, j.idemKey, ent.jobID)
	}
	if prev.started != nil {
		select {
		case <-prev.started:
		default:
			return fmt.Errorf("%w: key %q: job %s is still being started; retry", ErrIdempotencyKeyInUse, j.idemKey, ent.jobID)
		}
	}
	j.existing = prev
	return errIdempotentHit
}

// idemPut records j's key durably before j spawns.
func (e *Executor) idemPut(j *Job) error {
	e.mu.Lock()
	ent, ok := e.idem[idemScope{j.agentID, j.idemKey}]
	if !ok || ent.job != j {
		e.mu.Unlock()
		return nil
	}
	at := ent.at
	e.mu.Unlock()
	e.idemMu.Lock()
	defer e.idemMu.Unlock()
	if e.idemLog == nil {
		return nil
	}
	err := e.idemLog.append(idemRecord{Op: "put", AgentID: j.agentID, Key: j.idemKey, JobID: j.id, Fingerprint: j.idemFP, At: at})
	if err != nil {
		return fmt.Errorf("record idempotency key: %w", err)
	}
	e.mu.Lock()
	ent.persisted = true
	e.mu.Unlock()
	return nil
}

// idemDel forgets the key of j, whose spawn failed or which was released.
// It is called without e.mu; the entry is already gone from e.idem.
func (e *Executor) idemDel(j *Job, persisted bool) {
	if !persisted {
		return
	}
	e.idemMu.Lock()
	defer e.idemMu.Unlock()
	if e.idemLog == nil {
		return
	}
	if err := e.idemLog.append(idemRecord{Op: "del", AgentID: j.agentID, Key: j.idemKey, JobID: j.id}); err != nil {
		// The key stays in the file: after a restart it answers
		// ErrIdempotencyJobGone instead of running the command. Safe.
		e.log.Warn("forget idempotency key", "job_id", j.id, "err", err)
	}
}

// idemPruneLocked drops keys whose window has passed. e.mu is held.
func (e *Executor) idemPruneLocked(now time.Time) {
	for sc, ent := range e.idem {
		if ent.job == nil && now.Sub(ent.at) >= e.opts.IdempotencyWindow {
			delete(e.idem, sc)
		}
	}
}

// idemMaybeCompact rewrites the key file when it holds more than twice the
// live keys (and at least 1024 lines).
func (e *Executor) idemMaybeCompact() {
	e.idemMu.Lock()
	defer e.idemMu.Unlock()
	if e.idemLog == nil {
		return
	}
	e.mu.Lock()
	live := len(e.idem)
	e.mu.Unlock()
	if e.idemLog.lines < 1024 || e.idemLog.lines <= 2*live {
		return
	}
	if err := e.idemCompactLocked(); err != nil {
		e.log.Warn("compact idempotency keys", "err", err)
	}
}

// idemCompactLocked rewrites the key file with the live, persisted keys.
// e.idemMu is held.
func (e *Executor) idemCompactLocked() error {
	e.mu.Lock()
	var buf bytes.Buffer
	n := 0
	enc := json.NewEncoder(&buf)
	for sc, ent := range e.idem {
		if !ent.persisted {
			continue
		}
		_ = enc.Encode(idemRecord{Op: "put", AgentID: sc.agent, Key: sc.key, JobID: ent.jobID, Fingerprint: ent.fingerprint, At: ent.at})
		n++
	}
	e.mu.Unlock()
	return e.idemLog.rewrite(buf.Bytes(), n)
}

// openIdem loads the key file of an earlier run (keys whose window has
// passed are dropped), compacts it and opens it for appending.
func (e *Executor) openIdem() error {
	if e.jobsDir == "" {
		return nil
	}
	path := filepath.Join(e.jobsDir, idemFileName)
	now := e.now()
	if err := e.loadIdem(path, now); err != nil {
		return err
	}
	e.idemLog = &idemLog{path: path}
	e.idemMu.Lock()
	defer e.idemMu.Unlock()
	return e.idemCompactLocked()
}

func (e *Executor) loadIdem(path string, now time.Time) error {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open idempotency keys: %w", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: %s is not a regular file", ErrInvalidOptions, path)
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	bad := 0
	for sc.Scan() {
		var r idemRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil || r.Key == "" || r.JobID == "" {
			bad++ // a line cut short by a crash: its spawn had not begun
			continue
		}
		key := idemScope{r.AgentID, r.Key}
		switch r.Op {
		case "put":
			if now.Sub(r.At) < e.opts.IdempotencyWindow {
				e.idem[key] = &idemEntry{jobID: r.JobID, fingerprint: r.Fingerprint, at: r.At, persisted: true}
			}
		case "del":
			if ent, ok := e.idem[key]; ok && ent.jobID == r.JobID {
				delete(e.idem, key)
			}
		default:
			bad++
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read idempotency keys: %w", err)
	}
	if bad > 0 {
		e.log.Warn("idempotency keys: skipped unreadable lines", "path", path, "lines", bad)
	}
	return nil
}

// append writes r as one line and syncs it.
func (l *idemLog) append(r idemRecord) error {
	if l.f == nil {
		f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW, homefs.FileMode)
		if err != nil {
			return err
		}
		l.f = f
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if _, err := l.f.Write(append(b, '\n')); err != nil {
		return err
	}
	l.lines++
	return l.f.Sync()
}

// rewrite replaces the file with data (n lines) atomically and reopens it.
func (l *idemLog) rewrite(data []byte, n int) error {
	if err := atomicfile.Write(l.path, data, atomicfile.Options{Perm: homefs.FileMode}); err != nil {
		return err
	}
	l.close()
	l.lines = n
	return nil
}

func (l *idemLog) close() {
	if l.f != nil {
		_ = l.f.Close()
		l.f = nil
	}
}
