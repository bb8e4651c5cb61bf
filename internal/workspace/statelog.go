package workspace

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/dshd/dshd/internal/atomicfile"
	"github.com/dshd/dshd/internal/faults"
)

// The state is kept as a snapshot, state.json (every agent's record), and
// a log beside it, state.log. A checkpoint, which ends every tool call
// of a snapshot agent, does not rewrite the snapshot (all agents' records,
// each with up to workspaces.checkpointDepth checkpoints: work that grows,
// under the lock every job start takes): it appends one line to the
// log, a record of what that checkpoint changed, and leaves making it
// durable to a flush shared by the checkpoints made meanwhile.
//
// Every change written is numbered: the snapshot carries the generation of
// the last change it holds, each record of the log the next one. Every
// other change writes a snapshot, durably, then empties the log; a
// crash between the two leaves records the snapshot already holds, which
// their generations tell apart. A start reads the snapshot, applies the
// log's records whose generations follow on from it, one by one, and
// stops at the first that does not (a line a crash cut short, one whose
// checksum fails, a gap, a record that does not fit the agent's stack);
// then writes a snapshot of the result and empties the log, so that
// no record is ever appended after a torn one.

// logBound: past this many bytes of log, the flush writes a
// snapshot (and empties the log) rather than syncing it.
const logBound = 256 << 10

// logRecord is one change of the state, numbered Gen.
type logRecord struct {
	Gen   int64  `json:"gen"`
	Agent string `json:"agent"`
	// A checkpoint: the agent's upper frozen as Checkpoint.Layer on top of
	// its stack, Upper its fresh upper, Own its own layers since.
	Checkpoint *Checkpoint `json:"checkpoint,omitempty"`
	Upper      string      `json:"upper,omitempty"`
	Own        int         `json:"own,omitempty"`
	// Or the agent's whole record (a checkpoint that commits a compaction
	// with it): that one agent's, never the others'.
	State *agentState `json:"state,omitempty"`
}

func (m *Manager) logPath() string { return filepath.Join(m.dir, "state.log") }

// encodeRecord is rec as one log line: the CRC-32 of its JSON, in hex,
// a space, the JSON and a newline.
func encodeRecord(rec logRecord) ([]byte, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	line := make([]byte, 0, len(b)+10)
	line = fmt.Appendf(line, "%08x ", crc32.ChecksumIEEE(b))
	line = append(line, b...)
	return append(line, '\n'), nil
}

// decodeRecord is the record of one log line (its newline removed);
// false when the line is not one whole record.
func decodeRecord(line []byte) (logRecord, bool) {
	var rec logRecord
	sum, b, ok := bytes.Cut(line, []byte(" "))
	if !ok || len(sum) != 8 {
		return rec, false
	}
	want, err := strconv.ParseUint(string(sum), 16, 32)
	if err != nil || uint32(want) != crc32.ChecksumIEEE(b) {
		return rec, false
	}
	if json.Unmarshal(b, &rec) != nil {
		return rec, false
	}
	return rec, true
}

// applyRecord applies rec to agents; false (agents unchanged) when it does
// not fit them.
func applyRecord(agents map[string]*agentState, rec logRecord) bool {
	if rec.State != nil {
		agents[rec.Agent] = rec.State
		return true
	}
	a, c := agents[rec.Agent], rec.Checkpoint
	if a == nil || c == nil || rec.Upper == "" || a.Dropped || a.Shares != "" || a.Upper != c.Layer || c.Depth != len(a.Layers)+1 {
		return false
	}
	na := *a
	na.Layers = append(slices.Clone(a.Layers), c.Layer)
	na.Upper = rec.Upper
	na.Checkpoints = append(slices.Clone(a.Checkpoints), *c)
	na.Pending = nil
	na.Own = rec.Own
	agents[rec.Agent] = &na
	return true
}

// replayLog applies to agents, whose snapshot is of generation gen,
// the log's records that follow on from it; it returns the generation
// reached and whether the log held anything.
func replayLog(r io.Reader, agents map[string]*agentState, gen int64) (int64, bool) {
	br := bufio.NewReader(r)
	held := false
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			held = true
		}
		if err != nil {
			return gen, held // the end, or a line cut short
		}
		rec, ok := decodeRecord(line[:len(line)-1])
		switch {
		case !ok:
			return gen, held
		case rec.Gen <= gen:
			continue // the snapshot holds it
		case rec.Gen != gen+1 || !applyRecord(agents, rec):
			return gen, held
		}
		gen = rec.Gen
	}
}

// load reads the snapshot and the log (see above).
func (m *Manager) load() (logged bool, err error) {
	b, err := os.ReadFile(m.statePath())
	var st stateFile
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return false, fmt.Errorf("workspaces: %w", err)
	default:
		if err := json.Unmarshal(b, &st); err != nil {
			return false, fmt.Errorf("workspaces: %s: %w", m.statePath(), err)
		}
	}
	if st.Agents != nil {
		m.agents = st.Agents
	}
	m.gen = st.Generation
	f, err := os.Open(m.logPath())
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("workspaces: %w", err)
	}
	defer f.Close()
	m.gen, logged = replayLog(f, m.agents, m.gen)
	return logged, nil
}

// openLog opens the log to append to; when it held anything, the
// state as loaded is written as a snapshot first (which empties it).
func (m *Manager) openLog(logged bool) error {
	f, err := os.OpenFile(m.logPath(), os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("workspaces: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stateLog = f
	if fi, err := f.Stat(); err == nil {
		m.logSize = fi.Size()
	}
	// A checkpoint removes the work directory of the upper it froze: one
	// whose record was cut off is an upper again, and needs it back.
	for _, a := range m.agents {
		if !a.Dropped && a.Shares == "" && a.Upper != "" {
			if _, err := os.Stat(m.upperDir(a.Upper)); err == nil {
				_ = os.MkdirAll(m.workDir(a.Upper), 0o755)
			}
		}
	}
	if logged || m.logSize > 0 {
		return m.saveLocked()
	}
	return nil
}

// saveLocked records the state durably: a snapshot, then the log
// emptied.
func (m *Manager) saveLocked() error {
	b, err := json.Marshal(stateFile{Version: 1, Generation: m.gen + 1, Agents: m.agents})
	if err != nil {
		return err
	}
	if err := atomicfile.Write(m.statePath(), b, atomicfile.Options{}); err != nil {
		return fmt.Errorf("workspaces: save state: %w", err)
	}
	m.gen++
	if m.stateLog != nil && m.logSize > 0 {
		faults.Point("workspace.state.snapshot") // the log's records are older
		// Left as it is, its records are older than the snapshot and
		// skipped at the next start.
		if err := m.stateLog.Truncate(0); err != nil {
			m.log.Warn("empty the workspaces' log", "err", err)
		} else {
			m.logSize = 0
		}
	}
	return nil
}

// flushDelay is how soon after a checkpoint its record is made durable.
const flushDelay = 50 * time.Millisecond

// appendLocked records rec, one change of agent's record that m.agents
// already holds, by appending it to the log (a crash of dshd at any
// point leaves the log with or without it whole), and leaves making
// it durable to a flush flushDelay later, shared by the checkpoints made
// meanwhile: a tool call's answer does not wait for the disk. Only a power
// cut or a crash of the kernel in that window can lose it: the view is
// then as after the call, its changes pending again. Without a log
// (after Close) the state is saved whole.
func (m *Manager) appendLocked(rec logRecord) error {
	if m.stateLog == nil {
		return m.saveLocked()
	}
	rec.Gen = m.gen + 1
	line, err := encodeRecord(rec)
	if err != nil {
		return err
	}
	if n, err := m.stateLog.Write(line); err != nil {
		if n > 0 && m.stateLog.Truncate(m.logSize) != nil {
			// A torn record stays, and no record may follow it: the
			// state is saved whole from now on, this change with it.
			m.closeLogLocked()
			return m.saveLocked()
		}
		return fmt.Errorf("workspaces: log: %w", err)
	}
	m.gen++
	m.logSize += int64(len(line))
	if !m.flushing {
		m.flushing = true
		time.AfterFunc(flushDelay, m.flush)
	}
	return nil
}

// flush makes the log durable, with the lock released across the
// sync (job starts take it); past logBound it writes a snapshot
// instead, which empties the log.
func (m *Manager) flush() {
	m.mu.Lock()
	if !m.flushing || m.stateLog == nil {
		m.mu.Unlock()
		return // Close flushed it
	}
	m.flushing = false
	if m.logSize > logBound {
		err := m.saveLocked()
		m.mu.Unlock()
		if err != nil {
			m.log.Error("make the workspaces' state durable", "err", err)
		}
		return
	}
	f := m.stateLog
	m.mu.Unlock()
	m.syncMu.Lock()
	defer m.syncMu.Unlock()
	if m.logClosed {
		return
	}
	if err := f.Sync(); err != nil {
		m.log.Error("make the workspaces' log durable", "err", err)
	}
}

// closeLogLocked makes the log durable and closes it; the state
// is saved whole from then on.
func (m *Manager) closeLogLocked() {
	m.flushing = false
	f := m.stateLog
	if f == nil {
		return
	}
	m.stateLog = nil
	m.syncMu.Lock()
	defer m.syncMu.Unlock()
	m.logClosed = true
	if err := f.Sync(); err != nil {
		m.log.Error("make the workspaces' log durable", "err", err)
	}
	f.Close()
}
