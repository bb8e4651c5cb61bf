// Package agents keeps agent sessions: identities with lineage (root, fork,
// spawn) and one append-only JSONL transcript per agent.
//
// # On disk
//
// Each agent is one file, <Dir>/<id>.jsonl (mode 0600, directory 0700). The
// first line is the header
//
//	{"type":"session","version":1,"id":…,"createdAt":…,"cwd":…,"parentId":…,"origin":…,"depth":…}
//
// where parentId is null for a root agent. Every further line is an event
// {"type","seq","time","data"} with seq counting up from 1 in each file.
//
// A new transcript (Create, Fork, Spawn) is written to a hidden temporary file,
// fsynced, renamed into place and the directory fsynced, so an agent id is
// never returned before its header is durable and a half-written header is
// never visible under the final name.
//
// # Writers
//
// The Store is the only writer of its directory. Appends to one agent are
// serialised by a per-agent mutex; each append opens the file with O_APPEND,
// writes the whole line in one write call and closes it again. Keeping no
// descriptor open per agent means an idle server with thousands of persisted
// agents holds no files open, and Close has nothing to flush. The cost, one
// open and close per event, is microseconds against the milliseconds of the
// process run the event describes.
//
// # Durability: group commit
//
// With SyncCommit (the default) Append and Resume return only once the
// event is durable: the file has been fsynced after the event was written.
// The one exception is an Append under CommitLater (a tool call's
// tool/call line, before its command runs), which the agent's next Append
// makes durable with its own fsync.
// Appends do not each pay for an fsync of their own. Appends to one agent
// write their lines under the agent's mutex, then wait for durability
// without it: one of them (the leader) fsyncs, through the descriptor it
// wrote its own line with (a commit opens nothing more), and every line
// written before that fsync began is durable when it ends, so concurrent appends to
// one agent share fsyncs. Appends to different agents fsync their files
// concurrently, with no lock between them, and the file system commits
// concurrent fsyncs in one journal transaction. A tool result acknowledged
// to a caller therefore survives a power loss. With SyncNone events are
// left to the kernel's writeback: a crash can lose the last events or tear
// the last line, which the next Open repairs. `make bench` measures both
// (BenchmarkAppend).
//
// # Torn lines
//
// Open reads every transcript. A line that is not a complete JSON event is
// skipped, logged and counted in dshd_transcript_torn_lines_total; it never
// fails Open. When such lines form the tail of a file (the normal shape of a
// crash during a write), Open truncates the file back to the end of the last
// valid line, so the next append starts a clean line and the file stays valid
// JSONL. A valid last line that only lacks its newline is kept and the newline
// is added. A file whose header is missing or invalid is skipped entirely,
// logged and counted in dshd_transcript_invalid_files_total; it is left as it
// is on disk for a person to inspect.
//
// # In a cluster
//
// With Options.Journal the Store keeps no files: headers and transcripts are
// in a store shared by every replica (see Journal), holding the same lines a
// file would, and each header also names the agent's root and its home
// replica. Appends are conditional on the transcript's last line, so two
// replicas writing to one agent cannot interleave or duplicate events: the
// one that loses reads the end again and writes with the next seq. Open
// answers the interrupted tool calls of the agents whose home is this
// replica; other replicas' agents are read from the journal when asked for.
//
// # Managed environment values
//
// This package never writes managed (DSH_*) environment values: it stores the
// data callers pass to Append verbatim, and callers must not pass overlays.
//
// Floor 2 of the layout (docs/design.md#floors): it imports only packages on the floors below.
package agents

import (
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dshd/dshd/internal/limits"
	"github.com/dshd/dshd/internal/sandbox"
)

// Origin says how an agent came to be.
type Origin string

// The origins an agent can have.
const (
	// OriginRoot is an agent created fresh by Create.
	OriginRoot Origin = "root"
	// OriginFork is a copy of another agent's transcript under a new id (Fork).
	OriginFork Origin = "fork"
	// OriginSpawn is a child agent one level deeper than its parent (Spawn).
	OriginSpawn Origin = "spawn"
)

func (o Origin) valid() bool {
	return o == OriginRoot || o == OriginFork || o == OriginSpawn
}

// Event types this package itself writes, and the ones callers use. Append
// accepts any non-blank type; these are the ones the design names.
const (
	// EventToolCall records a model tool call: {callId, name, arguments, ignored}.
	EventToolCall = "tool/call"
	// EventToolResult records a tool result: {callId, isError, text, jobId?, exitCode?}.
	EventToolResult = "tool/result"
	// EventSessionResume is appended by Resume.
	EventSessionResume = "session/resume"
	// EventHookInvoked records that a hook handler is about to run.
	EventHookInvoked = "hook/invoked"
	// EventHookResult records a hook handler's result.
	EventHookResult = "hook/result"
	// EventWorkspaceRewind records a rewind of the agent's view:
	// {callId?, to?, undo}.
	EventWorkspaceRewind = "workspace/rewind"
)

// Agent is an agent's header: its identity and lineage.
type Agent struct {
	// ID is the agent's opaque, URL-safe, time-sortable id ("agt_…").
	ID string `json:"id"`
	// ParentID is the agent this one was forked or spawned from; "" for roots.
	ParentID string `json:"parentId"`
	// RootID is the furthest ancestor reached by walking ParentID; an agent's
	// own id when it is a root. If an ancestor's transcript is missing from
	// the store the walk stops there and RootID is that missing ancestor's id.
	RootID string `json:"rootId"`
	// Cwd is the agent's working directory, absolute.
	Cwd string `json:"cwd"`
	// Origin is how the agent was made.
	Origin Origin `json:"origin"`
	// Depth is 0 for roots, the parent's depth for forks and the parent's
	// depth plus one for spawned children.
	Depth int `json:"depth"`
	// CreatedAt is when the header was written, in UTC.
	CreatedAt time.Time `json:"createdAt"`
	// Sandbox is the sandbox policy recorded at creation; empty fields
	// (agents recorded without one) mean the server default.
	Sandbox sandbox.Policy `json:"sandbox"`
	// Limits are the limits recorded at creation for the agent's jobs;
	// zero fields mean the server default.
	Limits limits.Limits `json:"limits"`
}

// Bounds are what the harness bounds an agent's commands by, recorded in
// its header at creation: a sandbox policy and resource limits. The caller
// (package run) completes them and checks a child's are within its
// parent's.
type Bounds struct {
	Sandbox sandbox.Policy
	Limits  limits.Limits
	// Prepare, when set, runs with the new agent (its id reserved, its
	// cwd set) before its header is written: what the agent must never
	// exist without (its snapshot workspace) is recorded there first, so
	// that a crash leaves either no agent or one that has it. An error
	// stops the creation: no header is written. It is not recorded.
	Prepare func(a Agent) error
}

// Event is one transcript line after the header.
type Event struct {
	// Type is the event type, such as "tool/call".
	Type string `json:"type"`
	// Seq counts events in one transcript, from 1, without gaps.
	Seq int64 `json:"seq"`
	// Time is when the event was appended, in UTC.
	Time time.Time `json:"time"`
	// Data is the event's payload as stored.
	Data json.RawMessage `json:"data"`
}

// DefaultMaxDepth is the deepest spawn allowed when Options.MaxDepth is zero.
const DefaultMaxDepth = 5

// Options configure a Store.
type Options struct {
	// Dir is the transcript directory, normally <home>/sessions. It is created
	// with mode 0700 if missing. Required.
	Dir string
	// DefaultCwd is the cwd of agents created with an empty cwd. When empty,
	// the process working directory at Open is used.
	DefaultCwd string
	// Now is the clock; nil means time.Now. It must be safe for concurrent use.
	Now func() time.Time
	// NewID makes agent ids; nil means ULIDs with the "agt_" prefix from
	// internal/ids. Tests inject deterministic ids. It must be safe for
	// concurrent use and return unique, URL-safe ids (letters, digits, '_'
	// and '-', at most 128 bytes).
	NewID func() string
	// MaxDepth is the deepest Spawn allowed (roots are depth 0); zero means
	// DefaultMaxDepth.
	MaxDepth int
	// Logger receives warnings about torn lines and skipped files; nil
	// discards them.
	Logger *slog.Logger
	// Registerer receives the store's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Sync is the durability of appended events; "" means SyncCommit.
	Sync SyncPolicy
	// Journal, when set, holds the agents instead of Dir (cluster mode):
	// Dir is not read or written, Sync does not apply (the journal
	// acknowledges a line once it is stored), and agents created on other
	// replicas are found in it.
	Journal Journal
	// Home is this replica's id, recorded in the header of every agent
	// created here; required with Journal. Open recovers the interrupted
	// tool calls of the agents whose home it is.
	Home string
	// KeptResults is the directory where the tool results that ran but
	// could not be written are kept until they are (see KeepResult);
	// Open writes such a result instead of an interrupted one. "" keeps
	// none.
	KeptResults string
}

// SyncPolicy says when appended events are made durable.
type SyncPolicy string

// Sync policies (see the package documentation).
const (
	// SyncCommit: Append returns once the event is fsynced (group commit).
	SyncCommit SyncPolicy = "commit"
	// SyncNone: events are left to the kernel's writeback.
	SyncNone SyncPolicy = "none"
)

// Valid reports whether p is a known policy; "" counts as SyncCommit.
func (p SyncPolicy) Valid() bool { return p == "" || p == SyncCommit || p == SyncNone }

// Errors returned by the Store. They are wrapped with context; test them with
// errors.Is.
var (
	// ErrNotFound: no agent has the id (Get, Resume, Fork, Spawn, Append,
	// Transcript, Events). HTTP 404.
	ErrNotFound = errors.New("agent not found")
	// ErrInvalidCwd: Create was given a cwd that is not absolute or not an
	// existing directory. HTTP 422 invalid_cwd.
	ErrInvalidCwd = errors.New("invalid cwd")
	// ErrInvalidBoundary: Fork was given a boundary below zero or beyond the
	// last event's seq. HTTP 422.
	ErrInvalidBoundary = errors.New("invalid fork boundary")
	// ErrDepthExceeded: Spawn would make a child deeper than MaxDepth. HTTP
	// 422 depth_exceeded.
	ErrDepthExceeded = errors.New("agent depth exceeded")
	// ErrInvalidEvent: Append was given a blank event type or data that does
	// not encode as JSON.
	ErrInvalidEvent = errors.New("invalid event")
	// ErrClosed: the Store was closed.
	ErrClosed = errors.New("agent store closed")
)
