package agents

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dshd/dshd/internal/atomicfile"
	"github.com/dshd/dshd/internal/faults"
	"github.com/dshd/dshd/internal/ids"
	"github.com/dshd/dshd/internal/limits"
	"github.com/dshd/dshd/internal/sandbox"
	"github.com/dshd/dshd/internal/stages"
)

const (
	fileExt     = ".jsonl"
	tmpSuffix   = ".tmp"
	fileMode    = 0o600
	dirMode     = 0o700
	headerType  = "session"
	headerVer   = 1
	maxIDLength = 128
)

// Store keeps agents and their transcripts under one directory. It is safe for
// concurrent use. A Store assumes it is the only writer of its directory.
type Store struct {
	dir        string
	keptDir    string // Options.KeptResults
	defaultCwd string
	now        func() time.Time
	newID      func() string
	maxDepth   int
	log        *slog.Logger
	metrics    *metrics

	// syncFile makes a file's contents durable; tests replace it to observe
	// the fsync path.
	syncFile func(f *os.File) error
	// syncAppends: Append waits for an fsync (SyncCommit).
	syncAppends bool
	// journal, when not nil, holds the agents instead of dir (see
	// Journal); home is this replica's id.
	journal Journal
	home    string

	mu       sync.RWMutex
	agents   map[string]*entry
	reserved map[string]struct{} // ids being created
	closed   bool
}

// entry is one agent's in-memory state. mu serialises every write to the
// agent's file and guards lastSeq, size and the group commit state.
type entry struct {
	agent Agent // immutable after creation

	mu      sync.Mutex
	lastSeq int64
	size    int64    // bytes of valid content in the file
	pending []string // set by load: tool calls without a result, for closeInterrupted

	durable  int64         // bytes known fsynced (SyncCommit)
	syncing  chan struct{} // non-nil while a leader fsyncs; closed when it ends
	syncUpTo int64         // size the running fsync covers
	syncErr  error         // outcome of the last fsync, for its followers

	// With a journal: the version of the last line, and whether version
	// and lastSeq are known (false until read, and after a failed append).
	version uint64
	synced  bool
	// unsure is the line of the last append that failed other than by a
	// conflict: the journal may have stored it. notRun are the tool calls
	// such lines turned out to hold (see syncJournal).
	unsure []byte
	notRun []string
}

// header is the first line of a transcript.
type header struct {
	Type      string    `json:"type"`
	Version   int       `json:"version"`
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"createdAt"`
	Cwd       string    `json:"cwd"`
	ParentID  *string   `json:"parentId"`
	Origin    Origin    `json:"origin"`
	Depth     int       `json:"depth"`
	// Sandbox is the agent's sandbox policy, absent when none was recorded.
	Sandbox *sandbox.Policy `json:"sandbox,omitempty"`
	// Limits are the agent's limits, absent when none were recorded.
	Limits *limits.Limits `json:"limits,omitempty"`
}

// Open prepares the store in opts.Dir, creating the directory (0700) if
// needed, and indexes every <id>.jsonl in it so agents persisted before a
// restart are found again. Torn or invalid event lines are skipped, logged and
// counted; a torn tail is truncated away (see the package comment). Files with
// an invalid header are skipped and reported, never fatal. Leftover temporary
// files from an interrupted Create, Fork or Spawn are removed.
//
// With opts.Journal, Open reads no directory: it indexes the agents whose
// home is opts.Home from the journal and answers their interrupted tool
// calls there.
//
// Open returns an error if Dir is empty (without a Journal) or cannot be
// created or read, if the journal cannot be read, or if ctx is cancelled.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if opts.Dir == "" && opts.Journal == nil {
		return nil, errors.New("open agent store: Dir is required")
	}
	if !opts.Sync.Valid() {
		return nil, fmt.Errorf("open agent store: sync policy %q is not %s or %s", opts.Sync, SyncCommit, SyncNone)
	}
	s, err := newStore(opts)
	if err != nil {
		return nil, err
	}
	if s.journal != nil {
		if s.home == "" {
			return nil, errors.New("open agent store: Home is required with a Journal")
		}
		if err := s.openJournal(ctx); err != nil {
			return nil, err
		}
		return s, nil
	}
	if err := s.openDir(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// newStore is the Store of opts, with the defaults of what opts leaves
// out; it reads nothing yet.
func newStore(opts Options) (*Store, error) {
	var dir string
	if opts.Dir != "" {
		var err error
		if dir, err = filepath.Abs(opts.Dir); err != nil {
			return nil, fmt.Errorf("open agent store: %w", err)
		}
	}
	s := &Store{
		dir:         dir,
		defaultCwd:  opts.DefaultCwd,
		now:         opts.Now,
		newID:       opts.NewID,
		maxDepth:    opts.MaxDepth,
		log:         opts.Logger,
		metrics:     newMetrics(opts.Registerer),
		syncFile:    (*os.File).Sync,
		syncAppends: opts.Sync != SyncNone,
		journal:     opts.Journal,
		home:        opts.Home,
		keptDir:     opts.KeptResults,
		agents:      make(map[string]*entry),
		reserved:    make(map[string]struct{}),
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.newID == nil {
		src := ids.NewSource(s.now)
		s.newID = func() string { return src.New("agt_") }
	}
	if s.maxDepth <= 0 {
		s.maxDepth = DefaultMaxDepth
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.defaultCwd == "" {
		var err error
		if s.defaultCwd, err = os.Getwd(); err != nil {
			return nil, fmt.Errorf("open agent store: default cwd: %w", err)
		}
	}
	return s, nil
}

// openDir makes the store's directory (0700, never a link) and indexes the
// transcripts in it, removing the temporary files of interrupted creations
// and skipping the files whose header is invalid.
func (s *Store) openDir(ctx context.Context) error {
	dir := s.dir
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return fmt.Errorf("open agent store: %w", err)
	}
	// Transcripts are written by name inside dir: a link in its place would
	// send them anywhere.
	if fi, err := os.Lstat(dir); err != nil {
		return fmt.Errorf("open agent store: %w", err)
	} else if !fi.IsDir() {
		return fmt.Errorf("open agent store: %s is a symbolic link or not a directory", dir)
	}
	des, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("open agent store: %w", err)
	}
	for _, de := range des {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("open agent store: %w", err)
		}
		name := de.Name()
		if strings.HasPrefix(name, ".") && strings.HasSuffix(name, tmpSuffix) {
			// An interrupted creation: the id was never handed out.
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				s.log.Warn("remove leftover temporary transcript", "file", name, "err", err)
			}
			continue
		}
		id, ok := strings.CutSuffix(name, fileExt)
		if !ok || !de.Type().IsRegular() || !validID(id) {
			continue
		}
		e, err := s.load(id)
		if err != nil {
			s.metrics.invalidFiles.Inc()
			s.log.Warn("skipping transcript with invalid header", "file", s.Path(id), "err", err)
			continue
		}
		s.closeInterrupted(e)
		s.agents[id] = e
	}
	for _, e := range s.agents {
		e.agent.RootID = s.rootOf(e.agent.ID, e.agent.ParentID)
	}
	return nil
}

// rootOf walks parent links from an agent whose parent is parentID. It needs
// s.agents to be complete for the walk and is called with s.mu held or before
// the store is shared.
func (s *Store) rootOf(id, parentID string) string {
	root := id
	for steps := 0; parentID != "" && steps <= len(s.agents); steps++ {
		root = parentID
		p, ok := s.agents[parentID]
		if !ok {
			break
		}
		parentID = p.agent.ParentID
	}
	return root
}

// validID reports whether id is safe to use as a file name: 1 to 128
// letters, digits, '_' or '-'.
func validID(id string) bool {
	if id == "" || len(id) > maxIDLength {
		return false
	}
	for _, c := range []byte(id) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// Path returns the transcript file of the agent with the given id, whether or
// not such an agent exists.
func (s *Store) Path(id string) string {
	return filepath.Join(s.dir, id+fileExt)
}

// Create makes a new root agent at depth 0 and returns it once its header is
// durable on disk. An empty cwd means Options.DefaultCwd. It returns
// ErrInvalidCwd if cwd is not absolute or not an existing directory, and
// ErrClosed after Close.
//
// b are the agent's sandbox policy and limits, recorded in its header
// (zero: none).
func (s *Store) Create(ctx context.Context, cwd string, b Bounds) (Agent, error) {
	if err := ctx.Err(); err != nil {
		return Agent{}, fmt.Errorf("create agent: %w", err)
	}
	if cwd == "" {
		cwd = s.defaultCwd
	}
	cwd, err := checkCwd(cwd)
	if err != nil {
		return Agent{}, fmt.Errorf("create agent: %w", err)
	}
	a := Agent{Cwd: cwd, Origin: OriginRoot, Sandbox: b.Sandbox, Limits: b.Limits}
	return s.create(ctx, a, nil, b.Prepare)
}

func checkCwd(cwd string) (string, error) {
	if !filepath.IsAbs(cwd) {
		return "", fmt.Errorf("%w: %q is not absolute", ErrInvalidCwd, cwd)
	}
	cwd = filepath.Clean(cwd)
	fi, err := os.Stat(cwd)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("%w: %s does not exist", ErrInvalidCwd, cwd)
		}
		return "", fmt.Errorf("%w: %w", ErrInvalidCwd, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%w: %s is not a directory", ErrInvalidCwd, cwd)
	}
	return cwd, nil
}

// create assigns a to a new id, runs prepare with it (when set), writes
// its header followed by events (raw, newline-terminated lines whose last
// seq is lastSeq) and indexes it.
func (s *Store) create(ctx context.Context, a Agent, events [][]byte, prepare func(Agent) error) (Agent, error) {
	// Reserve the id under the lock, but write and fsync without it, so a
	// slow disk does not stall lookups and appends of other agents.
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return Agent{}, ErrClosed
	}
	a.ID = s.newID()
	_, dup := s.agents[a.ID]
	_, reserved := s.reserved[a.ID]
	switch {
	case !validID(a.ID):
		s.mu.Unlock()
		return Agent{}, fmt.Errorf("create agent: generated id %q is not URL-safe", a.ID)
	case dup || reserved:
		s.mu.Unlock()
		return Agent{}, fmt.Errorf("create agent: id %s already in use", a.ID)
	}
	s.reserved[a.ID] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.reserved, a.ID)
		s.mu.Unlock()
	}()

	if prepare != nil {
		if err := prepare(a); err != nil {
			return Agent{}, fmt.Errorf("create agent %s: %w", a.ID, err)
		}
		faults.Point("agents.create.prepared")
	}
	a.CreatedAt = s.now().UTC()
	if a.Origin == OriginRoot {
		a.RootID = a.ID
	}
	h := header{Type: headerType, Version: headerVer, ID: a.ID, CreatedAt: a.CreatedAt,
		Cwd: a.Cwd, Origin: a.Origin, Depth: a.Depth}
	if a.Sandbox != (sandbox.Policy{}) {
		h.Sandbox = &a.Sandbox
	}
	if !a.Limits.IsZero() {
		h.Limits = &a.Limits
	}
	if a.ParentID != "" {
		h.ParentID = &a.ParentID
	}
	if s.journal != nil {
		return s.createJournal(ctx, a, h, events)
	}
	line, err := json.Marshal(h)
	if err != nil {
		return Agent{}, fmt.Errorf("create agent: %w", err)
	}
	var buf bytes.Buffer
	buf.Write(line)
	buf.WriteByte('\n')
	var lastSeq int64
	for _, ev := range events {
		buf.Write(ev)
		if seq := seqOf(ev); seq > lastSeq {
			lastSeq = seq
		}
	}
	if err := s.writeNew(a.ID, buf.Bytes()); err != nil {
		return Agent{}, fmt.Errorf("create agent %s: %w", a.ID, err)
	}
	// The transcript is durable: index it even if Close ran meanwhile, so
	// the caller's agent exists for the next Open either way.
	s.mu.Lock()
	s.agents[a.ID] = &entry{agent: a, lastSeq: lastSeq, size: int64(buf.Len())}
	s.mu.Unlock()
	s.metrics.created.WithLabelValues(string(a.Origin)).Inc()
	s.log.Debug("agent created", "agent_id", a.ID, "origin", a.Origin, "parent_id", a.ParentID)
	return a, nil
}

// writeNew makes <id>.jsonl with content durably (atomicfile.Write: a
// hidden temporary file, fsynced, renamed into place, the directory fsynced
// so the new name survives a crash too).
func (s *Store) writeNew(id string, content []byte) error {
	final := s.Path(id)
	if _, err := os.Lstat(final); err == nil {
		return fmt.Errorf("%s already exists", final)
	}
	return atomicfile.Write(final, content, atomicfile.Options{Perm: fileMode, Sync: s.syncFile})
}

// lookup returns the entry for id, or ErrNotFound (or ErrClosed).
func (s *Store) lookup(id string) (*entry, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	e, ok := s.agents[id]
	if !ok {
		return nil, fmt.Errorf("agent %s: %w", id, ErrNotFound)
	}
	return e, nil
}

// Get returns the agent with the given id, or ErrNotFound.
func (s *Store) Get(ctx context.Context, id string) (Agent, error) {
	if err := ctx.Err(); err != nil {
		return Agent{}, err
	}
	e, err := s.find(ctx, id)
	if err != nil {
		return Agent{}, err
	}
	return e.agent, nil
}

// List returns every agent, sorted by id (which is creation order for the
// default ids).
func (s *Store) List(ctx context.Context) ([]Agent, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.journal != nil {
		return s.listJournal(ctx)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	out := make([]Agent, 0, len(s.agents))
	for _, e := range s.agents {
		out = append(out, e.agent)
	}
	slices.SortFunc(out, func(a, b Agent) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// Resume continues the agent with the given id under the same id and appends
// a session/resume event ({} as data) to its transcript. An agent not yet
// indexed is looked for on disk first, so a transcript that appeared after
// Open can be resumed. It returns ErrNotFound if there is no such agent.
func (s *Store) Resume(ctx context.Context, id string) (Agent, error) {
	if err := ctx.Err(); err != nil {
		return Agent{}, err
	}
	e, err := s.find(ctx, id)
	if errors.Is(err, ErrNotFound) && s.journal == nil {
		e, err = s.reload(id)
	}
	if err != nil {
		return Agent{}, fmt.Errorf("resume: %w", err)
	}
	if _, err := s.append(ctx, e, EventSessionResume, struct{}{}); err != nil {
		return Agent{}, fmt.Errorf("resume %s: %w", id, err)
	}
	s.log.Debug("agent resumed", "agent_id", id)
	return e.agent, nil
}

// reload indexes <id>.jsonl from disk if it exists and is not indexed yet.
func (s *Store) reload(id string) (*entry, error) {
	notFound := fmt.Errorf("agent %s: %w", id, ErrNotFound)
	if !validID(id) {
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
	if _, creating := s.reserved[id]; creating {
		// Create owns this file and indexes it when it is done; a second
		// entry would be a second writer handing out the same seqs.
		return nil, notFound
	}
	if _, err := os.Lstat(s.Path(id)); err != nil {
		return nil, notFound
	}
	e, err := s.load(id)
	if err != nil {
		s.metrics.invalidFiles.Inc()
		s.log.Warn("skipping transcript with invalid header", "file", s.Path(id), "err", err)
		return nil, notFound
	}
	e.agent.RootID = s.rootOf(id, e.agent.ParentID)
	s.closeInterrupted(e)
	s.agents[id] = e
	return e, nil
}

// Fork makes a new agent whose transcript is a copy of the agent id's events
// with seq up to and including *boundary (every event when boundary is nil;
// none when it is 0). Copied lines are kept byte for byte, seq and time
// included, so the fork's next event continues from the boundary. The fork
// has a new id, ParentID id, origin fork, the parent's cwd, and the parent's
// depth: a fork is an alternative continuation of the same conversation, not
// a sub-agent, so it does not count against MaxDepth.
//
// It returns ErrNotFound for an unknown id and ErrInvalidBoundary when
// *boundary is negative or beyond the last event's seq.
//
// b are the child's sandbox policy and limits; the caller checks they are
// within the parent's.
func (s *Store) Fork(ctx context.Context, id string, boundary *int64, b Bounds) (Agent, error) {
	if err := ctx.Err(); err != nil {
		return Agent{}, err
	}
	e, err := s.find(ctx, id)
	if err != nil {
		return Agent{}, fmt.Errorf("fork: %w", err)
	}
	e.mu.Lock()
	data, last, err := s.contents(ctx, e)
	e.mu.Unlock()
	if err != nil {
		return Agent{}, fmt.Errorf("fork %s: %w", id, err)
	}
	if boundary != nil && (*boundary < 0 || *boundary > last) {
		return Agent{}, fmt.Errorf("fork %s: %w: %d (last seq is %d)", id, ErrInvalidBoundary, *boundary, last)
	}
	limit := last
	if boundary != nil {
		limit = *boundary
	}
	var events [][]byte
	for _, line := range eventLines(data) {
		ev, ok := parseEvent(line)
		if !ok || ev.Seq > limit {
			continue
		}
		events = append(events, append(line, '\n'))
	}
	p := e.agent
	child := Agent{ParentID: p.ID, RootID: p.RootID, Cwd: p.Cwd, Origin: OriginFork, Depth: p.Depth, Sandbox: b.Sandbox, Limits: b.Limits}
	a, err := s.create(ctx, child, events, b.Prepare)
	if err != nil {
		return Agent{}, fmt.Errorf("fork %s: %w", id, err)
	}
	return a, nil
}

// Spawn makes a child agent of id: new id, ParentID id, origin spawn, the
// parent's cwd, depth one more than the parent's, and an empty transcript. It
// returns ErrNotFound for an unknown id and ErrDepthExceeded when the child's
// depth would exceed MaxDepth.
//
// b are the child's sandbox policy and limits; the caller checks they are
// within the parent's.
func (s *Store) Spawn(ctx context.Context, id string, b Bounds) (Agent, error) {
	if err := ctx.Err(); err != nil {
		return Agent{}, err
	}
	e, err := s.find(ctx, id)
	if err != nil {
		return Agent{}, fmt.Errorf("spawn: %w", err)
	}
	p := e.agent
	if p.Depth+1 > s.maxDepth {
		return Agent{}, fmt.Errorf("spawn from %s: %w: child depth %d, max %d", id, ErrDepthExceeded, p.Depth+1, s.maxDepth)
	}
	child := Agent{ParentID: p.ID, RootID: p.RootID, Cwd: p.Cwd, Origin: OriginSpawn, Depth: p.Depth + 1, Sandbox: b.Sandbox, Limits: b.Limits}
	a, err := s.create(ctx, child, nil, b.Prepare)
	if err != nil {
		return Agent{}, fmt.Errorf("spawn from %s: %w", id, err)
	}
	return a, nil
}

// CommitLater marks ctx so that an Append made with it returns once its
// line is written, without waiting for an fsync of its own: the next
// Append to the same agent made without the mark makes it durable with its
// own (one fsync covers every line written before it). A tool call's
// tool/call event is appended so, before its command runs: a process crash
// keeps the line (it is in the kernel's page cache, and the next start
// gives the call an interrupted result), and the call's tool/result, made
// durable before the call is answered, makes the pair durable with one
// fsync instead of two. Without SyncCommit, or on a journal, it changes
// nothing.
func CommitLater(ctx context.Context) context.Context {
	return context.WithValue(ctx, commitLaterKey{}, true)
}

type commitLaterKey struct{}

func commitLater(ctx context.Context) bool {
	v, _ := ctx.Value(commitLaterKey{}).(bool)
	return v
}

// Append adds an event of type typ with data to the agent's transcript and
// returns it. data is encoded with encoding/json (a json.RawMessage is
// stored compacted); nil is stored as {}. Concurrent appends to one agent get
// contiguous seqs in the order they take the agent's lock.
//
// It returns ErrNotFound for an unknown id, ErrInvalidEvent for a blank type
// or data that cannot be encoded, and ErrClosed after Close.
func (s *Store) Append(ctx context.Context, id, typ string, data any) (Event, error) {
	if err := ctx.Err(); err != nil {
		return Event{}, err
	}
	e, err := s.find(ctx, id)
	if err != nil {
		return Event{}, fmt.Errorf("append: %w", err)
	}
	ev, err := s.append(ctx, e, typ, data)
	if err != nil {
		return Event{}, fmt.Errorf("append to %s: %w", id, err)
	}
	return ev, nil
}

func (s *Store) append(ctx context.Context, e *entry, typ string, data any) (Event, error) {
	defer stages.Done(stages.Commit, stages.Start())
	if strings.TrimSpace(typ) == "" {
		return Event{}, fmt.Errorf("%w: blank type", ErrInvalidEvent)
	}
	if data == nil {
		data = struct{}{}
	}
	raw, err := json.Marshal(data)
	if err != nil {
		return Event{}, fmt.Errorf("%w: data: %w", ErrInvalidEvent, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if s.journal != nil {
		return s.appendJournal(ctx, e, func(seq int64) ([]byte, Event, error) {
			ev := Event{Type: typ, Seq: seq, Time: s.now().UTC(), Data: raw}
			line, err := json.Marshal(ev)
			if err != nil {
				return nil, Event{}, fmt.Errorf("%w: %w", ErrInvalidEvent, err)
			}
			return line, ev, nil
		})
	}
	ev := Event{Type: typ, Seq: e.lastSeq + 1, Time: s.now().UTC(), Data: raw}
	line, err := json.Marshal(ev)
	if err != nil {
		return Event{}, fmt.Errorf("%w: %w", ErrInvalidEvent, err)
	}
	line = append(line, '\n')
	f, err := s.writeAt(e, line)
	if err != nil {
		return Event{}, err
	}
	if !s.syncAppends || commitLater(ctx) {
		if err := f.Close(); err != nil {
			return Event{}, err
		}
		e.lastSeq = ev.Seq
		e.size += int64(len(line))
		return ev, nil
	}
	// Once fsynced through f, the line is durable whatever its close says.
	defer f.Close()
	e.lastSeq = ev.Seq
	e.size += int64(len(line))
	if err := s.commitLocked(e, e.size, f); err != nil {
		// The line is written and may survive, but it is not known
		// durable: the caller must not take it as acknowledged.
		return Event{}, fmt.Errorf("make event durable: %w", err)
	}
	return ev, nil
}

// commitLocked returns once the first upTo bytes of e's file are fsynced
// (group commit, see the package documentation), through f, the caller's
// descriptor of the file, when it leads the fsync: the descriptor that
// wrote the line, so a commit opens nothing. Called with e.mu held; it
// releases e.mu while an fsync runs, so other appends to e can write their
// lines meanwhile and be covered by the next fsync.
func (s *Store) commitLocked(e *entry, upTo int64, f *os.File) error {
	for e.durable < upTo {
		if ch := e.syncing; ch != nil {
			// A leader is syncing. If its fsync covers our line, its
			// outcome is ours; otherwise lead the next one.
			covered := e.syncUpTo >= upTo
			e.mu.Unlock()
			<-ch
			e.mu.Lock()
			if covered && e.syncErr != nil {
				return e.syncErr
			}
			continue
		}
		ch := make(chan struct{})
		e.syncing, e.syncUpTo = ch, e.size
		target := e.size
		e.mu.Unlock()
		err := s.syncFile(f)
		if err != nil {
			err = fmt.Errorf("fsync: %w", err)
		}
		e.mu.Lock()
		e.syncing, e.syncErr = nil, err
		close(ch)
		if err != nil {
			return err
		}
		e.durable = max(e.durable, target)
	}
	return nil
}

// writeAt appends line to e's file in one write and returns the file,
// still open for the line's commit; the caller closes it. If the write
// fails part way the file is truncated back to its previous size so no
// torn line is left behind. Called with e.mu held.
func (s *Store) writeAt(e *entry, line []byte) (*os.File, error) {
	f, err := os.OpenFile(s.Path(e.agent.ID), os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(line); err != nil {
		if terr := f.Truncate(e.size); terr != nil {
			s.log.Warn("could not undo partial transcript write", "agent_id", e.agent.ID, "err", terr)
		}
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// readLocked returns the valid content of e's file. Called with e.mu held.
func (s *Store) readLocked(e *entry) ([]byte, error) {
	data, err := os.ReadFile(s.Path(e.agent.ID))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > e.size {
		data = data[:e.size]
	}
	return data, nil
}

// Transcript returns the agent's JSONL file as stored, header first. It
// returns ErrNotFound for an unknown id.
func (s *Store) Transcript(ctx context.Context, id string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	e, err := s.find(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("transcript: %w", err)
	}
	if s.journal != nil {
		// The journal orders lines itself: reading needs no lock, and
		// does not wait for this replica's appends.
		lines, _, err := s.journal.Read(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("transcript %s: %w", id, err)
		}
		return joinLines(lines), nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	data, err := s.readLocked(e)
	if err != nil {
		return nil, fmt.Errorf("transcript %s: %w", id, err)
	}
	return data, nil
}

// Events returns the agent's events in file order, without the header. Lines
// that are not valid events are skipped. It returns ErrNotFound for an
// unknown id.
func (s *Store) Events(ctx context.Context, id string) ([]Event, error) {
	data, err := s.Transcript(ctx, id)
	if err != nil {
		return nil, err
	}
	lines := eventLines(data)
	out := make([]Event, 0, len(lines))
	for _, line := range lines {
		if ev, ok := parseEvent(line); ok {
			out = append(out, ev)
		}
	}
	return out, nil
}

// Close stops the store: later calls return ErrClosed. No file is held open
// between calls, so there is nothing to flush; Close always returns nil.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}
