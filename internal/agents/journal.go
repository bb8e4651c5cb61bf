package agents

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
)

// A Journal keeps every agent's header and transcript in a store shared by
// several dshd replicas (cluster mode; package cluster implements it on
// NATS JetStream). With Options.Journal set the Store writes no files: the
// journal holds the same lines a transcript file would, header first, so a
// transcript read from any replica is byte-identical to what its file
// would be.
//
// Every transcript is one ordered log of lines, each with a version that
// grows with every line (a stream sequence). Appends are conditional on the
// version of the log's last line, so two writers can never interleave or
// duplicate lines: the second gets ErrConflict and must look again.
type Journal interface {
	// Create stores a new agent: its transcript lines (the header line,
	// then any events, without newlines) and then its header under its
	// id, which is the moment the agent exists for every replica. It
	// returns the version of the last line. An agent whose Create failed
	// part way does not exist (its lines are never read).
	Create(ctx context.Context, id string, lines [][]byte) (version uint64, err error)
	// Append adds line to the agent's transcript if the version of its
	// last line is still after; otherwise it returns an error wrapping
	// ErrConflict and adds nothing.
	Append(ctx context.Context, id string, line []byte, after uint64) (version uint64, err error)
	// Last returns the agent's last transcript line and its version. It
	// returns an error wrapping ErrNotFound when the agent has no lines.
	Last(ctx context.Context, id string) (line []byte, version uint64, err error)
	// Read returns every transcript line of the agent, header first, and
	// the version of the last. It returns an error wrapping ErrNotFound
	// for an agent that does not exist.
	Read(ctx context.Context, id string) (lines [][]byte, version uint64, err error)
	// Header returns the agent's header line, or an error wrapping
	// ErrNotFound.
	Header(ctx context.Context, id string) ([]byte, error)
	// Headers returns the header line of every agent.
	Headers(ctx context.Context) ([][]byte, error)
}

// ErrConflict: a Journal append found another line after the one it was
// conditional on.
var ErrConflict = errors.New("transcript changed since it was read")

// journalTimeout bounds each journal call the Store makes on its own
// account (recovering interrupted calls at Open); calls made for a request
// carry its context.
const journalTimeout = 10 * time.Second

// maxConflictRetries bounds how often an append looks again after a
// conflict. Each retry means another writer appended meanwhile; a writer
// that lost waits a little (up to maxConflictBackoff, at random) before it
// goes again, so two writers racing do not keep colliding.
const (
	maxConflictRetries = 32
	maxConflictBackoff = 20 * time.Millisecond
)

// openJournal indexes the agents whose home is this replica and closes
// their interrupted tool calls, as Open does for files. Other replicas'
// agents are looked up in the journal when asked for.
func (s *Store) openJournal(ctx context.Context) error {
	headers, err := s.journal.Headers(ctx)
	if err != nil {
		return fmt.Errorf("open agent store: list agents: %w", err)
	}
	var home []Agent
	for _, line := range headers {
		a, h, err := parseSharedHeader(line)
		if err != nil {
			s.metrics.invalidFiles.Inc()
			s.log.Warn("skipping agent with invalid header", "err", err)
			continue
		}
		if h == s.home {
			home = append(home, a)
		}
	}
	// Each read is a few round trips to the store: read several agents at
	// once.
	entries := make([]*entry, len(home))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(openReaders)
	for i, a := range home {
		g.Go(func() error {
			e, err := s.readJournal(gctx, a)
			if err != nil {
				return err
			}
			s.closeInterrupted(e)
			entries[i] = e
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("open agent store: %w", err)
	}
	for _, e := range entries {
		s.agents[e.agent.ID] = e
	}
	return nil
}

// openReaders is how many home agents Open reads from the journal at once.
const openReaders = 16

// readJournal builds the entry of agent a from its journal: last seq,
// version and pending tool calls.
func (s *Store) readJournal(ctx context.Context, a Agent) (*entry, error) {
	lines, version, err := s.journal.Read(ctx, a.ID)
	if err != nil {
		return nil, fmt.Errorf("read transcript of %s: %w", a.ID, err)
	}
	e := &entry{agent: a, version: version, synced: true}
	for _, line := range lines[min(1, len(lines)):] {
		if ev, ok := parseEvent(line); ok {
			e.lastSeq = max(e.lastSeq, ev.Seq)
			e.pending = trackCall(e.pending, ev)
		}
	}
	return e, nil
}

// lookupJournal finds an agent this replica has not indexed (another
// replica's) in the journal and indexes its immutable header. Its last seq
// is read when something is appended.
func (s *Store) lookupJournal(ctx context.Context, id string) (*entry, error) {
	notFound := fmt.Errorf("agent %s: %w", id, ErrNotFound)
	if !validID(id) {
		return nil, notFound
	}
	line, err := s.journal.Header(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", id, err)
	}
	a, _, err := parseSharedHeader(line)
	if err != nil || a.ID != id {
		s.log.Warn("agent with invalid header", "agent_id", id, "err", err)
		return nil, notFound
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if e, ok := s.agents[id]; ok {
		return e, nil
	}
	e := &entry{agent: a}
	s.agents[id] = e
	return e, nil
}

// sharedHeader is the header line of an agent in a journal: the file
// header, plus the agent's root (no replica holds every ancestor to walk
// to it) and home replica.
type sharedHeader struct {
	header
	RootID string `json:"rootId"`
	Home   string `json:"home"`
}

func parseSharedHeader(line []byte) (Agent, string, error) {
	var h sharedHeader
	if err := json.Unmarshal(line, &h); err != nil {
		return Agent{}, "", fmt.Errorf("header: %w", err)
	}
	a, err := parseHeader(line, h.ID)
	if err != nil {
		return Agent{}, "", err
	}
	if h.RootID == "" || h.Home == "" {
		return Agent{}, "", fmt.Errorf("header of %s: no rootId or home", h.ID)
	}
	a.RootID = h.RootID
	return a, h.Home, nil
}

// appendJournal appends line (an event with seq e.lastSeq+1, built by
// build) to e's journal. On a conflict it reads the log's last line again
// and rebuilds the event with the next seq: a line this replica wrote whose
// answer was lost is recognised and not written twice. Called with e.mu
// held.
func (s *Store) appendJournal(ctx context.Context, e *entry, build func(seq int64) ([]byte, Event, error)) (Event, error) {
	for attempt := 0; ; attempt++ {
		if !e.synced {
			if err := s.syncJournal(ctx, e); err != nil {
				return Event{}, err
			}
			if err := s.closeNotRun(ctx, e); err != nil {
				return Event{}, err
			}
		}
		line, ev, err := build(e.lastSeq + 1)
		if err != nil {
			return Event{}, err
		}
		v, err := s.journal.Append(ctx, e.agent.ID, line, e.version)
		if err == nil {
			e.version, e.lastSeq = v, ev.Seq
			return ev, nil
		}
		e.synced = false
		if !errors.Is(err, ErrConflict) {
			// The journal may have stored the line all the same (its
			// answer was lost): the next sync looks.
			e.unsure = line
			return Event{}, err
		}
		if attempt == maxConflictRetries {
			return Event{}, err
		}
		s.metrics.conflicts.Inc()
		last, v, lerr := s.journal.Last(ctx, e.agent.ID)
		if lerr == nil && bytes.Equal(last, line) {
			// Our own line: the journal took it and its answer was lost.
			e.version, e.lastSeq, e.synced = v, ev.Seq, true
			return ev, nil
		}
		backoff := time.Duration(rand.Int64N(int64(min(time.Duration(attempt+1)*time.Millisecond, maxConflictBackoff)) + 1))
		select {
		case <-ctx.Done():
			return Event{}, fmt.Errorf("append to %s: %w", e.agent.ID, ctx.Err())
		case <-time.After(backoff):
		}
	}
}

// syncJournal reads the version and seq of e's last line. When that line is
// the one an append reported failed (e.unsure), the journal stored it after
// all; a tool call among such lines is remembered in e.notRun, since its
// caller was told it failed and ran nothing.
func (s *Store) syncJournal(ctx context.Context, e *entry) error {
	line, v, err := s.journal.Last(ctx, e.agent.ID)
	if err != nil {
		return fmt.Errorf("read transcript end: %w", err)
	}
	e.version, e.lastSeq, e.synced = v, 0, true
	ev, ok := parseEvent(line)
	if ok {
		e.lastSeq = ev.Seq
	}
	if ok && e.unsure != nil && bytes.Equal(line, e.unsure) {
		e.notRun = trackCall(e.notRun, ev)
	}
	e.unsure = nil
	return nil
}

// NotRunText is the text of the result appended for a tool call whose
// recording was reported failed, so that it did not run, but which the
// journal had stored.
const NotRunText = "[not run: the call could not be recorded, so its command did not run]"

// notRunResult is the data of that tool/result event.
type notRunResult struct {
	CallID  string `json:"callId"`
	IsError bool   `json:"isError"`
	Text    string `json:"text"`
	NotRun  bool   `json:"notRun"`
}

// closeNotRun appends a result for every call in e.notRun, so a model
// reading the transcript is never left waiting for one. Called with e.mu
// held, after a sync.
func (s *Store) closeNotRun(ctx context.Context, e *entry) error {
	for len(e.notRun) > 0 {
		// Taken off first: the append below may sync again (after a
		// conflict) and come back here for the others.
		id := e.notRun[0]
		e.notRun = e.notRun[1:]
		raw, err := json.Marshal(notRunResult{CallID: id, IsError: true, Text: NotRunText, NotRun: true})
		if err == nil {
			_, err = s.appendJournal(ctx, e, func(seq int64) ([]byte, Event, error) {
				ev := Event{Type: EventToolResult, Seq: seq, Time: s.now().UTC(), Data: raw}
				line, err := json.Marshal(ev)
				return line, ev, err
			})
		}
		if err != nil {
			e.notRun = append([]string{id}, e.notRun...)
			return fmt.Errorf("record that call %s did not run: %w", id, err)
		}
		s.log.Info("recorded a tool call that did not run", "agent_id", e.agent.ID, "call_id", id)
	}
	return nil
}

// listJournal returns every agent in the journal, sorted by id.
func (s *Store) listJournal(ctx context.Context) ([]Agent, error) {
	headers, err := s.journal.Headers(ctx)
	if err != nil {
		return nil, fmt.Errorf("list agents: %w", err)
	}
	out := make([]Agent, 0, len(headers))
	for _, line := range headers {
		a, _, err := parseSharedHeader(line)
		if err != nil {
			s.log.Warn("skipping agent with invalid header", "err", err)
			continue
		}
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b Agent) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// joinLines is a transcript as a file holds it: every line ends with '\n'.
func joinLines(lines [][]byte) []byte {
	n := 0
	for _, l := range lines {
		n += len(l) + 1
	}
	out := make([]byte, 0, n)
	for _, l := range lines {
		out = append(out, l...)
		out = append(out, '\n')
	}
	return out
}

// createJournal stores agent a (header h, then events) in the journal. The
// id was reserved by create.
func (s *Store) createJournal(ctx context.Context, a Agent, h header, events [][]byte) (Agent, error) {
	line, err := json.Marshal(sharedHeader{header: h, RootID: a.RootID, Home: s.home})
	if err != nil {
		return Agent{}, fmt.Errorf("create agent: %w", err)
	}
	lines := make([][]byte, 0, 1+len(events))
	lines = append(lines, line)
	var lastSeq int64
	for _, ev := range events {
		lines = append(lines, bytes.TrimSuffix(ev, []byte{'\n'}))
		lastSeq = max(lastSeq, seqOf(ev))
	}
	version, err := s.journal.Create(ctx, a.ID, lines)
	if err != nil {
		return Agent{}, fmt.Errorf("create agent %s: %w", a.ID, err)
	}
	s.mu.Lock()
	s.agents[a.ID] = &entry{agent: a, lastSeq: lastSeq, version: version, synced: true}
	s.mu.Unlock()
	s.metrics.created.WithLabelValues(string(a.Origin)).Inc()
	s.log.Debug("agent created", "agent_id", a.ID, "origin", a.Origin, "parent_id", a.ParentID)
	return a, nil
}

// find returns the entry for id: an indexed one, or with a journal one
// looked up there.
func (s *Store) find(ctx context.Context, id string) (*entry, error) {
	e, err := s.lookup(id)
	if s.journal != nil && errors.Is(err, ErrNotFound) {
		return s.lookupJournal(ctx, id)
	}
	return e, err
}

// contents returns e's transcript and the seq of its last event. Called
// with e.mu held.
func (s *Store) contents(ctx context.Context, e *entry) ([]byte, int64, error) {
	if s.journal == nil {
		data, err := s.readLocked(e)
		return data, e.lastSeq, err
	}
	lines, _, err := s.journal.Read(ctx, e.agent.ID)
	if err != nil {
		return nil, 0, err
	}
	var last int64
	for _, line := range lines[min(1, len(lines)):] {
		if ev, ok := parseEvent(line); ok {
			last = max(last, ev.Seq)
		}
	}
	return joinLines(lines), last, nil
}
