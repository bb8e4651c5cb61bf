// Package mcp serves dshd's model-facing tools over the Model Context
// Protocol (Streamable HTTP transport, official Go SDK). Every MCP session is
// bound to one dshd agent when it initializes: a new root agent, or an
// existing one the client names. Tool calls go through the same pipeline as
// POST /agents/{id}/tools/{name} — overlay, hooks, caps, rendering and the
// agent's transcript — so DSH_SESSION_ID in every command is the bound
// agent's id. A foreground bash call reports its output as MCP progress
// notifications while it runs, and an MCP cancellation stops its job.
//
// The package only adapts: it declares what it needs of the pipeline
// (pipeline, jobStopper) and never runs anything itself.
//
// Floor 6 of the layout (docs/design.md#floors): it imports only packages on the floors below.
package mcp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dshd/dshd/internal/agents"
	"github.com/dshd/dshd/internal/exec"
	"github.com/dshd/dshd/internal/run"
	"github.com/dshd/dshd/internal/sandbox"
	"github.com/dshd/dshd/internal/tools"
)

// Binding an MCP session to an existing agent: the client sends the agent id
// in this header, or in this query parameter of the endpoint URL, with its
// initialize request. The initialize response carries the bound agent's id
// in the same header.
const (
	AgentHeader = "Dsh-Agent-Id"
	AgentQuery  = "agentId"
)

// errSessionEnded ends the calls of a session the client ended.
var errSessionEnded = errors.New("the MCP session ended (DELETE /mcp)")

// ErrAgentConflict is returned by ServeMCP when the header and the query
// parameter name different agents (HTTP 400).
var ErrAgentConflict = errors.New("the " + AgentHeader + " header and the " + AgentQuery + " query parameter name different agents")

// pipeline is what the endpoint needs of the shared execution pipeline
// (*run.Service): model tool calls, and starting the sessions agents are
// bound to, so their SessionStart hooks run.
type pipeline interface {
	CallWith(ctx context.Context, agentID, name, callID string, args json.RawMessage, o run.CallOptions) (run.CallResult, error)
	CreateAgent(ctx context.Context, cwd string, b agents.Bounds) (run.Session, error)
	AgentPolicy(a agents.Agent) sandbox.Policy
	ResumeAgent(ctx context.Context, id string) (run.Session, error)
	ContextDelivered(agentID string)
}

// jobStopper stops a job whose MCP request was cancelled (*exec.Executor).
type jobStopper interface {
	Cancel(ctx context.Context, id string) (exec.Snapshot, error)
}

var (
	_ pipeline   = (*run.Service)(nil)
	_ jobStopper = (*exec.Executor)(nil)
)

// Options configures a Handler. Pipeline and Jobs are required.
type Options struct {
	Logger   *slog.Logger // nil: discard
	Pipeline pipeline     // usually *run.Service
	Jobs     jobStopper   // usually *exec.Executor
	// Version is reported to clients as the server's version ("" = "dev").
	Version string
	// SessionTimeout closes MCP sessions idle for this long (0 = never);
	// a running call keeps its session from being idle. The agent and its
	// transcript stay; a client that comes back starts a new session,
	// naming the agent to keep its identity.
	SessionTimeout time.Duration
	// MaxSessions caps the open sessions (0 = no cap): an initialize beyond
	// it is answered with a JSON-RPC error (HTTP 429) and creates nothing.
	MaxSessions int
	// AllowedRoots are the directories (absolute) a client's roots may lie
	// within to become a new session's agent's cwd (see roots.go); none:
	// roots are not asked for.
	AllowedRoots []string
	// ProgressInterval is the least time between two progress
	// notifications of one call (default 100ms).
	ProgressInterval time.Duration
	// ProgressBytes caps the output one progress notification carries per
	// stream (default 16 KiB); output beyond it follows in later ones.
	ProgressBytes int
	// SessionIDPrefix starts every session id (cluster mode: it names the
	// replica, so any replica routes a session's requests here); "" leaves
	// the ids to the SDK.
	SessionIDPrefix string
	// KeepAlive is the time between two SSE comments on a tool call's
	// stream while the call runs (default 15s); the stream itself is
	// opened as the call starts (see stream.go).
	KeepAlive time.Duration
}

// Handler serves the MCP endpoint. It is safe for concurrent use.
type Handler struct {
	log      *slog.Logger
	pipeline pipeline
	jobs     jobStopper
	impl     *sdk.Implementation
	// bare answers what arrives before a session exists and is not an
	// initialize request (a server/discover probe, a stray call): it has no
	// tools, and the SDK closes the session it makes at once.
	bare          *sdk.Server
	streamable    *sdk.StreamableHTTPHandler
	progressEvery time.Duration
	progressBytes int
	keepAlive     time.Duration
	// streams are the wires of the tools/call requests being served, by
	// the key ServeMCP gives each in streamHeader (streamSeq counts them).
	streams   sync.Map
	streamSeq atomic.Uint64
	// requests are the wires of the requests being served, by session id,
	// "\x00" and the request's id as the client sent it (see cancelled).
	requests sync.Map
	// sessionIDPrefix: see Options.SessionIDPrefix.
	sessionIDPrefix string
	// sdkLog is the SDK's logger: what it logs of a client's mistakes at
	// ERROR, and its chatter at INFO, one level down (see demote).
	sdkLog *slog.Logger
	ids    *idMap

	allowedRoots   []string
	maxSessions    int
	sessionTimeout time.Duration
	mu             sync.Mutex
	live           map[string]bool // open sessions, by id
	opening        int             // initialize requests being served
	// calls are the running tool calls of each session, by session id,
	// each with what stops it; ended marks a session DELETE ended.
	calls map[string]*sessionCalls
	// pending counts the pipeline calls still running, some of them for
	// handlers that have returned (see toolHandler).
	pending sync.WaitGroup
}

// sessionCalls are the running tool calls of one session.
type sessionCalls struct {
	ended bool
	next  int
	stop  map[int]context.CancelCauseFunc
}

// sessionVersions are the protocol versions that have sessions (2025-11-25
// back to the first Streamable HTTP one). The sessionless protocol that
// follows them has no initialize request to bind an agent to.
var sessionVersions = []string{"2025-11-25", "2025-06-18", "2025-03-26"}

// New returns the MCP endpoint over the given pipeline. It panics if
// Pipeline or Jobs is nil, which is a wiring mistake.
func New(o Options) *Handler {
	if o.Pipeline == nil || o.Jobs == nil {
		panic("mcp.New: Pipeline and Jobs are required")
	}
	h := &Handler{
		log:             o.Logger,
		pipeline:        o.Pipeline,
		jobs:            o.Jobs,
		impl:            &sdk.Implementation{Name: "dshd", Title: "dshd shell", Version: o.Version},
		progressEvery:   o.ProgressInterval,
		progressBytes:   o.ProgressBytes,
		keepAlive:       o.KeepAlive,
		sessionIDPrefix: o.SessionIDPrefix,
		ids:             newIDMap(),
		maxSessions:     o.MaxSessions,
		allowedRoots:    allowedRoots(o.AllowedRoots),
		sessionTimeout:  o.SessionTimeout,
		live:            map[string]bool{},
		calls:           map[string]*sessionCalls{},
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	h.sdkLog = slog.New(demote{h.log.Handler()})
	if h.impl.Version == "" {
		h.impl.Version = "dev"
	}
	if h.progressEvery <= 0 {
		h.progressEvery = 100 * time.Millisecond
	}
	if h.progressBytes <= 0 {
		h.progressBytes = 16 << 10
	}
	if h.keepAlive <= 0 {
		h.keepAlive = defaultKeepAlive
	}
	h.bare = sdk.NewServer(h.impl, h.serverOptions())
	h.streamable = sdk.NewStreamableHTTPHandler(h.server, &sdk.StreamableHTTPOptions{
		Logger:         h.sdkLog,
		SessionTimeout: o.SessionTimeout,
	})
	return h
}

func (h *Handler) serverOptions() *sdk.ServerOptions {
	o := &sdk.ServerOptions{
		Logger: h.sdkLog,
		// Tools only: no logging capability, which the SDK offers by default.
		// Codex sends its sandbox state with each call to a server that
		// declares this experimental capability (see declared.go).
		Capabilities:              &sdk.ServerCapabilities{Experimental: map[string]any{CodexSandboxMeta: map[string]any{}}},
		SupportedProtocolVersions: sessionVersions,
	}
	if prefix := h.sessionIDPrefix; prefix != "" {
		o.GetSessionID = func() string { return prefix + rand.Text() }
	}
	return o
}

// serverKey is the context key of the server built for a new session.
type serverKey struct{}

// server is the SDK's getServer: the per-session server ServeMCP built
// for an initialize request, else the bare one.
func (h *Handler) server(r *http.Request) *sdk.Server {
	if s, ok := r.Context().Value(serverKey{}).(*sdk.Server); ok {
		return s
	}
	return h.bare
}

// ServeMCP serves one request to the endpoint. An initialize request that
// opens a session first binds it to an agent: the one named by the
// Dsh-Agent-Id header or the agentId query parameter (resumed, so its
// SessionStart hooks run with source "resume"), else a new root agent in
// the server's default directory (SessionStart source "startup"). Every
// later request of the session runs as that agent; naming an agent on them
// changes nothing.
//
// Every answer is JSON-RPC (see wire.go): ids come back as the client sent
// them, and the transport's errors are JSON-RPC errors. An initialize
// beyond Options.MaxSessions is refused (HTTP 429) before any agent is
// made; an initialize on a session that already has one, too (HTTP 400,
// invalid request).
//
// ServeMCP returns an error, having written nothing, only when binding
// failed: errors wrapping agents.ErrNotFound for an agent that does not
// exist, ErrAgentConflict, or the store's errors. Everything else is
// answered by the transport, as the MCP specification says.
func (h *Handler) ServeMCP(w http.ResponseWriter, r *http.Request) error {
	out := &wire{ResponseWriter: w, prefix: `"` + h.ids.prefix}
	if r.Method != http.MethodPost {
		h.serveStream(out, w, r)
		return nil
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return fmt.Errorf("read MCP request: %w", err)
	}
	msgs, batch, ok := parse(body)
	if !ok {
		h.log.Debug("MCP request is not JSON-RPC")
		writeRPCError(w, http.StatusBadRequest, nil, codeParseError, "parse error: the body is not a JSON-RPC message or batch")
		return nil
	}
	var id json.RawMessage
	initialize := false
	if len(msgs) == 1 && !batch {
		id, initialize = msgs[0].id, msgs[0].method == "initialize"
	}
	out.id = id
	session := r.Header.Get("Mcp-Session-Id")
	if h.refuseVersion(w, r, msgs) {
		return nil
	}
	if session == "" && needsSession(msgs) {
		h.log.Debug("MCP request without a session")
		writeRPCError(w, http.StatusBadRequest, id, codeInvalidRequest,
			"Bad Request: an Mcp-Session-Id header is required: send initialize first, then the session id it answers with on every request")
		return nil
	}
	r.Header.Del(streamHeader) // only dshd sets it
	if session != "" && id != nil && msgs[0].method != "" {
		defer h.inFlight(session, id, out)()
		if msgs[0].method == "tools/call" {
			defer h.track(r, out)()
		}
	}
	if session != "" {
		// Before the SDK sees a cancellation: the answer it causes is dropped.
		h.cancelled(session, msgs)
	}
	if initialize && session != "" && h.isLive(session) {
		h.log.Debug("MCP initialize on an initialized session", "session_id", session)
		writeRPCError(w, http.StatusBadRequest, id, codeInvalidRequest,
			"this session is already initialized: to start another, send initialize without the Mcp-Session-Id header")
		return nil
	}
	swapped, back, done := h.ids.swap(session, msgs, batch)
	defer done()
	if swapped != nil {
		body = swapped
	}
	out.back = back
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))

	if !initialize || session != "" {
		h.serveSession(out, r, msgs, session)
		return nil
	}
	return h.open(out, w, r, msgs[0], id)
}

// serveStream answers a request other than POST (a GET's stream, a DELETE
// ending the session and its calls) through the SDK.
func (h *Handler) serveStream(out *wire, w http.ResponseWriter, r *http.Request) {
	if h.refuseVersion(w, r, nil) {
		return
	}
	if r.Method == http.MethodDelete {
		h.endCalls(r)
	}
	defer out.finish()
	h.streamable.ServeHTTP(out, r)
}

// serveSession hands a request of an open session (or an initialize the
// SDK refuses) to the SDK.
func (h *Handler) serveSession(out *wire, r *http.Request, msgs []*message, session string) {
	defer out.finish()
	h.streamable.ServeHTTP(out, r)
	if r.Context().Err() != nil && len(msgs) == 1 && msgs[0].method == "tools/call" && !out.handled.Load() {
		// Disconnection is not cancellation (MCP): the call runs on.
		h.log.Info("MCP client left during a tool call without cancelling it: the call runs to its end or its timeout, "+
			"its result recorded in the transcript", "session_id", session)
	}
}

// open answers an initialize without a session: it counts the session
// against MaxSessions, binds it to its agent (or leaves that to the first
// call, in the client's root) and opens it through the SDK. Its errors are
// ServeMCP's.
func (h *Handler) open(out *wire, w http.ResponseWriter, r *http.Request, init *message, id json.RawMessage) error {
	if !h.reserve() {
		h.log.Info("MCP session refused: too many open", "max_sessions", h.maxSessions)
		writeRPCError(w, http.StatusTooManyRequests, id, codeTooManySessions, h.tooMany())
		return nil
	}
	var server *sdk.Server
	if h.rootsApply(r, init) {
		// The agent is made at the first call, in the client's root: no
		// Dsh-Agent-Id yet (DSH_SESSION_ID names it in every command).
		server = h.rootsServer()
	} else {
		sess, err := h.bind(r)
		if err != nil {
			h.opened("", nil)
			return err
		}
		w.Header().Set(AgentHeader, sess.ID)
		h.log.Debug("MCP session bound", "agent_id", sess.ID)
		server = h.boundServer(sess)
	}
	r = r.WithContext(context.WithValue(r.Context(), serverKey{}, server))
	h.streamable.ServeHTTP(out, r)
	out.finish()
	h.opened(w.Header().Get("Mcp-Session-Id"), server)
	return nil
}

// reserve counts an initialize request against MaxSessions; false: none
// is left.
func (h *Handler) reserve() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.maxSessions > 0 && len(h.live)+h.opening >= h.maxSessions {
		return false
	}
	h.opening++
	return true
}

// opened ends a reservation: the session id the SDK gave, if it opened
// one on server, is live until the session ends.
func (h *Handler) opened(id string, server *sdk.Server) {
	var ss *sdk.ServerSession
	if server != nil && id != "" {
		for s := range server.Sessions() {
			ss = s
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.opening--
	if ss == nil {
		return
	}
	h.live[id] = true
	go func() {
		_ = ss.Wait()
		h.mu.Lock()
		delete(h.live, id)
		delete(h.calls, id)
		h.mu.Unlock()
		h.log.Debug("MCP session ended", "session_id", id)
	}()
}

// refuseVersion answers a request whose MCP-Protocol-Version header names a
// version the server does not speak with a JSON-RPC error (-32022, HTTP
// 400) listing the ones it does, and reports whether it did. A
// server/discover probe is left to the SDK, which answers it as MCP says.
func (h *Handler) refuseVersion(w http.ResponseWriter, r *http.Request, msgs []*message) bool {
	v := r.Header.Get("Mcp-Protocol-Version")
	if v == "" || slices.Contains(sessionVersions, v) {
		return false
	}
	var id json.RawMessage
	if len(msgs) == 1 {
		if msgs[0].method == "server/discover" {
			return false
		}
		id = msgs[0].id
	}
	h.log.Debug("MCP request with an unsupported protocol version", "version", v)
	writeRPCError(w, http.StatusBadRequest, id, codeUnsupportedVersion,
		fmt.Sprintf("unsupported MCP-Protocol-Version %q: this server speaks %s", v, strings.Join(sessionVersions, ", ")),
		sdk.UnsupportedProtocolVersionData{Supported: sessionVersions, Requested: v})
	return true
}

// needsSession reports whether msgs, sent without a session, hold a request
// that only a session may send: anything but initialize, ping and a
// server/discover probe. (Notifications are accepted and go nowhere.)
func needsSession(msgs []*message) bool {
	for _, m := range msgs {
		if m.id == nil || m.method == "" {
			continue
		}
		switch m.method {
		case "initialize", "ping", "server/discover":
		default:
			return true
		}
	}
	return false
}

// enter registers a running tool call of session, stopped by stop when the
// session ends; false: the session has ended, and the call must not start.
func (h *Handler) enter(session string, stop context.CancelCauseFunc) (leave func(), ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	sc := h.calls[session]
	if sc == nil {
		sc = &sessionCalls{stop: map[int]context.CancelCauseFunc{}}
		h.calls[session] = sc
	}
	if sc.ended {
		return nil, false
	}
	n := sc.next
	sc.next++
	sc.stop[n] = stop
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(sc.stop, n)
	}, true
}

// endCalls stops the running tool calls of the session a DELETE request
// ends, as a client's cancellation would, before the SDK closes the
// session (which waits for its handlers); a call that arrives later does
// not start. A request the SDK will refuse (no session, an unknown one)
// stops nothing.
func (h *Handler) endCalls(r *http.Request) {
	session := r.Header.Get("Mcp-Session-Id")
	h.mu.Lock()
	defer h.mu.Unlock()
	if session == "" || !h.live[session] {
		return
	}
	sc := h.calls[session]
	if sc == nil {
		sc = &sessionCalls{stop: map[int]context.CancelCauseFunc{}}
		h.calls[session] = sc
	}
	sc.ended = true
	for _, stop := range sc.stop {
		stop(errSessionEnded)
	}
	h.log.Debug("MCP session ended by its client", "session_id", session, "calls_stopped", len(sc.stop))
}

// Wait waits, until ctx is done, for the tool calls still running whose
// handlers have returned (the client cancelled them or ended their
// session): each records its result once its job has stopped. The server calls it as it shuts down, after
// the jobs were stopped and before the agent store closes.
func (h *Handler) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		h.pending.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for the MCP calls still running: %w", ctx.Err())
	}
}

func (h *Handler) isLive(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.live[id]
}

// Sessions is the number of open sessions.
func (h *Handler) Sessions() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.live)
}

// tooMany is the message of a refused initialize.
func (h *Handler) tooMany() string {
	msg := fmt.Sprintf("too many MCP sessions: %d are open, the most this server allows (mcp.maxSessions); "+
		"end one (DELETE /mcp with its Mcp-Session-Id header)", h.maxSessions)
	if h.sessionTimeout > 0 {
		msg += fmt.Sprintf(" or wait: a session unused for %s ends", h.sessionTimeout)
	}
	return msg
}

// bind returns the agent a new session runs as.
func (h *Handler) bind(r *http.Request) (run.Session, error) {
	id := r.Header.Get(AgentHeader)
	if q := r.URL.Query().Get(AgentQuery); q != "" {
		if id != "" && id != q {
			return run.Session{}, ErrAgentConflict
		}
		id = q
	}
	if id == "" {
		a, err := h.pipeline.CreateAgent(r.Context(), "", agents.Bounds{})
		if err != nil {
			return a, fmt.Errorf("create an agent for the MCP session: %w", err)
		}
		return a, nil
	}
	a, err := h.pipeline.ResumeAgent(r.Context(), id)
	if err != nil {
		return a, fmt.Errorf("bind the MCP session to %s: %w", id, err)
	}
	return a, nil
}

// newServer returns the server of one session: the model-facing tools,
// each running as the session's agent, under policy (the agent's, which
// the bash description states). instructions are the server's
// instructions, which MCP clients hand their model: what the agent's
// SessionStart hooks gave as additional context, as Claude Code and Codex
// do with the context of their own SessionStart hooks.
func (h *Handler) newServer(agent *sessionAgent, policy sandbox.Policy, instructions string) *sdk.Server {
	o := h.serverOptions()
	o.Instructions = instructions
	s := sdk.NewServer(h.impl, o)
	for _, d := range tools.DefinitionsFor(policy) {
		s.AddTool(&sdk.Tool{
			Name:        d.Name,
			Description: d.Description,
			InputSchema: d.Schema,
			Title:       d.Title,
			Annotations: annotations(d),
		}, h.toolHandler(agent, policy, d.Name))
	}
	return s
}

// boundServer is the server of a session bound to sess at initialize.
func (h *Handler) boundServer(sess run.Session) *sdk.Server {
	instructions := strings.Join(sess.AdditionalContext, "\n\n")
	if instructions != "" {
		// The instructions reach the model: its first tool result need not.
		h.pipeline.ContextDelivered(sess.ID)
	}
	return h.newServer(&sessionAgent{id: sess.ID}, h.pipeline.AgentPolicy(sess.Agent), instructions)
}

// annotations are d's hints as MCP tool annotations, every hint stated
// (a client assumes the worst of a hint left out).
func annotations(d tools.Definition) *sdk.ToolAnnotations {
	h := d.Hints
	return &sdk.ToolAnnotations{
		Title:           d.Title,
		ReadOnlyHint:    h.ReadOnly,
		DestructiveHint: &h.Destructive,
		IdempotentHint:  h.Idempotent,
		OpenWorldHint:   &h.OpenWorld,
	}
}
