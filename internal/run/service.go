// Package run is the one pipeline every dshd execution goes through —
// collect the managed overlay, run hooks, spawn, record — for both the
// harness-facing /exec path (Service.Exec) and model tool calls
// (Service.Call), so the two cannot drift apart, and the agent lifecycle
// around it (creating, resuming, forking and spawning agents runs their
// SessionStart hooks). What a tool is (definitions, argument rules, result
// rendering) lives in package tools.
//
// Floor 5 of the layout (docs/design.md#floors): it imports only packages on the floors below.
package run

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dshd/dshd/internal/agents"
	"github.com/dshd/dshd/internal/exec"
	"github.com/dshd/dshd/internal/hooks"
	"github.com/dshd/dshd/internal/ids"
	"github.com/dshd/dshd/internal/limits"
	"github.com/dshd/dshd/internal/sandbox"
	"github.com/dshd/dshd/internal/shellenv"
	"github.com/dshd/dshd/internal/stages"
	"github.com/dshd/dshd/internal/tools"
	"github.com/dshd/dshd/internal/workspace"
)

// envCollector is the part of *shellenv.Registry the pipeline uses.
type envCollector interface {
	Collect(ctx context.Context, x shellenv.Execution) (shellenv.Overlay, error)
}

// jobRunner is the part of *exec.Executor the pipeline and the job tools use.
type jobRunner interface {
	Reserve(ctx context.Context, s exec.Spec) (*exec.Reservation, error)
	Job(id string) (*exec.Job, error)
	Jobs(agentID string, state exec.State) []exec.Snapshot
	Cancel(ctx context.Context, id string) (exec.Snapshot, error)
	WriteInput(ctx context.Context, id string, data []byte, closeInput bool) (exec.Snapshot, error)
}

// agentStore is the part of *agents.Store the pipeline uses: it reads and
// records sessions, and starts them so that SessionStart hooks run.
type agentStore interface {
	Get(ctx context.Context, id string) (agents.Agent, error)
	Append(ctx context.Context, id, typ string, data any) (agents.Event, error)
	Create(ctx context.Context, cwd string, b agents.Bounds) (agents.Agent, error)
	Resume(ctx context.Context, id string) (agents.Agent, error)
	Fork(ctx context.Context, id string, boundary *int64, b agents.Bounds) (agents.Agent, error)
	Spawn(ctx context.Context, id string, b agents.Bounds) (agents.Agent, error)
}

// hookRunner is the part of *hooks.Runner the pipeline uses.
type hookRunner interface {
	Run(ctx context.Context, in hooks.Input) (hooks.Outcome, error)
}

// The real dependencies satisfy the interfaces.
var (
	_ envCollector = (*shellenv.Registry)(nil)
	_ jobRunner    = (*exec.Executor)(nil)
	_ agentStore   = (*agents.Store)(nil)
	_ hookRunner   = (*hooks.Runner)(nil)
)

// Options configures a Service. Env, Jobs and Agents are required; Hooks may
// be nil (no hooks run).
type Options struct {
	Logger *slog.Logger // nil: discard
	Env    envCollector // usually *shellenv.Registry
	Jobs   jobRunner    // usually *exec.Executor
	Agents agentStore   // usually *agents.Store
	Hooks  hookRunner   // usually *hooks.Runner; nil: no hooks
	// Home is the resolved dshd home; hooks run there when the agent has no
	// working directory.
	Home       string
	Now        func() time.Time      // clock for call ids; nil: time.Now
	Registerer prometheus.Registerer // nil: no metrics
	// Sandbox is the server's default sandbox policy (empty fields:
	// sandbox.Default): what a new root agent gets unless its request
	// says otherwise, and what an execution without agent runs under.
	Sandbox sandbox.Policy
	// SandboxHost checks that an agent's policy is enforceable when the
	// agent is made; nil checks nothing (executions are checked anyway).
	SandboxHost *sandbox.Host
	// Limits are the server's default limits (the executor's): what a new
	// root agent gets unless its request sets others.
	Limits limits.Limits
	// KeptResults is where a tool result that ran but could not be
	// written is kept until it is (agents.KeepResult; the agent store's
	// Options.KeptResults); "" keeps it in memory only.
	KeptResults string
	// Workspaces keeps the agents' snapshot workspaces; nil: every fork
	// and spawn shares its parent's directory, and asking for a snapshot
	// fails with workspace.ErrUnavailable.
	Workspaces *workspace.Manager
}

// Service runs executions and model tool calls. It is safe for concurrent
// use.
type Service struct {
	log    *slog.Logger
	env    envCollector
	jobs   jobRunner
	agents agentStore
	hooks  hookRunner
	home   string
	policy sandbox.Policy // the server default, complete
	limits limits.Limits  // the server default
	host   *sandbox.Host
	ids    *ids.Source
	calls  *prometheus.CounterVec
	// cursors is how much of each job's output the model has read
	// (write_stdin returns what is new).
	cursors readCursors
	held    heldContext
	ledger  callLedger
	kept    string // Options.KeptResults
	ws      *workspace.Manager
}

// New returns a Service over the given dependencies. It panics if Env, Jobs
// or Agents is nil, which is a wiring mistake.
func New(o Options) *Service {
	if o.Env == nil || o.Jobs == nil || o.Agents == nil {
		panic("run.New: Env, Jobs and Agents are required")
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Service{
		log:    log,
		ws:     o.Workspaces,
		env:    o.Env,
		jobs:   o.Jobs,
		agents: o.Agents,
		hooks:  o.Hooks,
		home:   o.Home,
		kept:   o.KeptResults,
		policy: o.Sandbox.Or(sandbox.Default),
		limits: o.Limits,
		host:   o.SandboxHost,
		ids:    ids.NewSource(o.Now),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dshd_tool_calls_total",
			Help: "Model tool calls by tool and outcome: ok, error (an error result, blocked calls included) or failed (no result could be produced).",
		}, []string{"tool", "outcome"}),
	}
	if o.Registerer != nil {
		if err := o.Registerer.Register(s.calls); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				if c, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
					s.calls = c
				}
			} else {
				s.log.Warn("register metrics", "err", err)
			}
		}
	}
	return s
}

// ExecRequest is one harness-facing execution (POST /exec).
type ExecRequest struct {
	Command  string
	AgentID  string // "" = no agent: DSH_SESSION_ID is absent
	Cwd      string // "" = the agent's cwd, else the executor's default
	Env      map[string]string
	Stdin    []byte
	HasStdin bool
	Timeout  time.Duration // 0 = executor default (foreground) / none (background)
	// Background makes a background job: no default timeout, counted
	// against the agent's background cap. Exec never waits either way.
	Background     bool
	IdempotencyKey string
	// IdempotencyFingerprint identifies the request for IdempotencyKey
	// (see exec.Spec); "" lets the executor compute one.
	IdempotencyFingerprint string
	// Limits override the server's per-job limits (harness-facing only);
	// with an agent, empty fields take the agent's and the others may only
	// tighten them (limits.ErrLooser).
	Limits limits.Limits
	// Sandbox is the execution's sandbox policy; empty fields take the
	// agent's (or, without agent, the server default). With an agent it may
	// only tighten the agent's (sandbox.ErrLooser).
	Sandbox sandbox.Policy
	// TTY runs the command in a pseudo-terminal of Cols×Rows (see
	// exec.Spec); OpenStdin keeps a pipe stdin open for later writes.
	TTY        bool
	Cols, Rows int
	OpenStdin  bool
}

// Exec starts one harness-facing execution and returns its job, running or
// finished; the caller decides whether and how long to wait.
//
// With AgentID set the agent is loaded (errors wrap agents.ErrNotFound when it
// does not exist) and its cwd is used when Cwd is empty. With IdempotencyKey
// set and a job already started under that key by the same agent for the same
// request, that job is returned and nothing else happens; the executor's
// idempotency errors (exec.ErrIdempotencyKeyReused, ErrIdempotencyKeyInUse,
// ErrIdempotencyJobGone) say why not. Otherwise a fresh managed overlay is collected
// (errors wrap shellenv.ErrResolution) and the job is started (errors wrap
// the exec sentinels, such as exec.ErrTooManyJobs or exec.ErrInvalidCwd). An
// empty command is tools.ErrInvalidArguments.
func (s *Service) Exec(ctx context.Context, r ExecRequest) (*exec.Job, error) {
	if r.Command == "" {
		return nil, fmt.Errorf("%w: command is required", tools.ErrInvalidArguments)
	}
	var agent *agents.Agent
	if r.AgentID != "" {
		a, err := s.agents.Get(ctx, r.AgentID)
		if err != nil {
			return nil, fmt.Errorf("exec: %w", err) // the store's error names the agent
		}
		agent = &a
	}
	return s.start(ctx, agent, exec.Spec{
		Command:                r.Command,
		Cwd:                    r.Cwd,
		CwdIsRoot:              true, // the harness's cwd is its own choice of a root
		Env:                    r.Env,
		Stdin:                  r.Stdin,
		HasStdin:               r.HasStdin,
		Timeout:                r.Timeout,
		Background:             r.Background,
		IdempotencyKey:         r.IdempotencyKey,
		IdempotencyFingerprint: r.IdempotencyFingerprint,
		Limits:                 r.Limits,
		Sandbox:                r.Sandbox,
		TTY:                    r.TTY,
		Cols:                   r.Cols,
		Rows:                   r.Rows,
		OpenStdin:              r.OpenStdin,
	}, nil)
}

// gate runs between collecting the overlay and spawning (the hooks). When it
// reports blocked, no process starts and start returns an *errBlocked.
type gate func(ctx context.Context) (blockReason string, blocked bool, err error)

// errBlocked is returned by start when its gate blocked the execution.
type errBlocked struct{ reason string }

func (e *errBlocked) Error() string { return "blocked by hook: " + e.reason }

// start is THE pipeline: validate the request's sandbox policy and limits,
// reserve the job (cwd, id, idempotency, caps), collect a fresh overlay
// for it, pass the gate (hooks), spawn with the overlay as the managed
// environment. Every execution, harness- or model-facing, foreground or
// background, goes through here. Nothing slow or external (resolvers,
// webhooks, hooks) runs for a request the job table refuses. spec.Cwd ""
// means the agent's cwd; spec.AgentID is set here.
//
// start is the one place that validates an execution's sandbox and limits
// (sandbox.ErrInvalid, limits.ErrInvalid): the request's fields as given,
// then the policy in effect once completed from the agent's (or the
// server's); exec.Reserve takes them as valid.
func (s *Service) start(ctx context.Context, agent *agents.Agent, spec exec.Spec, pass gate) (*exec.Job, error) {
	t := stages.Start()
	if err := errors.Join(spec.Sandbox.Validate(), spec.Limits.Validate()); err != nil {
		return nil, err
	}
	if agent != nil {
		if err := s.withinAgent(*agent, &spec); err != nil {
			return nil, err
		}
	}
	spec.Sandbox = spec.Sandbox.Or(s.policy)
	if agent == nil {
		// With an agent, withinAgent checked the policy in effect.
		if err := spec.Sandbox.ValidateEffective(); err != nil {
			return nil, err
		}
	}
	var lease *workspace.Lease
	if agent != nil {
		var err error
		if lease, err = s.ws.Acquire(agent.ID); err != nil {
			return nil, err
		}
		if lease != nil && lease.FD >= 0 {
			spec.View = &sandbox.View{Target: lease.Target, FD: lease.FD}
		}
	}
	started := false
	defer func() {
		if !started {
			lease.Release()
		}
	}()
	t = stages.Done(stages.Validate, t)
	res, err := s.jobs.Reserve(ctx, spec)
	if err != nil {
		return nil, err // the executor's error says what was refused
	}
	if job, ok := res.Existing(); ok {
		return job, nil // idempotent repeat: nothing runs again
	}
	t = stages.Done(stages.Reserve, t)
	overlay, err := s.collect(ctx, res, agent, spec)
	stages.Done(stages.Overlay, t)
	if err == nil && pass != nil {
		err = passGate(ctx, pass)
	}
	if err != nil {
		res.Release()
		return nil, err
	}
	job, err := res.Start(overlay)
	if err != nil {
		return nil, err // the executor's error says what failed, and for which job
	}
	if lease != nil {
		// The agent's layer stays as it is (no snapshot fork freezes it)
		// until the job is done.
		started = true
		go func() {
			<-job.Done()
			lease.Release()
		}()
	}
	s.log.Debug("job started", "job_id", job.ID(), "agent_id", spec.AgentID, "background", spec.Background, "managed_keys", overlay.Len())
	return job, nil
}

// withinAgent completes spec from agent's bounds: its id, its cwd (when
// spec names none), its workspace as the writable root, and the fields of
// its sandbox and limits that spec leaves out. A sandbox or limits looser
// than the agent's fails with sandbox.ErrLooser or limits.ErrLooser, a
// policy incomplete or invalid once merged with sandbox.ErrInvalid.
func (s *Service) withinAgent(agent agents.Agent, spec *exec.Spec) error {
	spec.AgentID = agent.ID
	if spec.Cwd == "" {
		spec.Cwd = agent.Cwd
	}
	outer := s.AgentPolicy(agent)
	spec.Sandbox = spec.Sandbox.Or(outer)
	if err := spec.Sandbox.ValidateEffective(); err != nil {
		return err
	}
	if err := spec.Sandbox.CheckWithin(outer, "agent "+agent.ID); err != nil {
		return err
	}
	spec.WritableRoots = []string{agent.Cwd}
	lim := s.AgentLimits(agent)
	spec.Limits = spec.Limits.Or(lim)
	return spec.Limits.CheckWithin(lim, "agent "+agent.ID)
}

// passGate runs the gate: its error, an *errBlocked when it blocked, else
// nil.
func passGate(ctx context.Context, pass gate) error {
	reason, blocked, err := pass(ctx)
	switch {
	case err != nil:
		return err
	case blocked:
		return &errBlocked{reason: reason}
	}
	return nil
}

// collect resolves the managed overlay of the reserved job.
func (s *Service) collect(ctx context.Context, res *exec.Reservation, agent *agents.Agent, spec exec.Spec) (shellenv.Overlay, error) {
	x := shellenv.Execution{
		JobID:      res.ID(),
		Command:    spec.Command,
		Cwd:        res.Cwd(), // where the job really runs, so {job.cwd} names it too
		Background: spec.Background,
	}
	if agent != nil {
		x.Agent = &shellenv.Agent{
			ID:       agent.ID,
			ParentID: agent.ParentID,
			RootID:   agent.RootID,
			Cwd:      agent.Cwd,
			Depth:    agent.Depth,
		}
	}
	overlay, err := s.env.Collect(ctx, x)
	if err != nil {
		return overlay, fmt.Errorf("collect environment for job %s: %w", x.JobID, err)
	}
	return overlay, nil
}

// AgentPolicy is the sandbox policy a's commands run under: the one recorded
// at its creation, completed by the server default.
func (s *Service) AgentPolicy(a agents.Agent) sandbox.Policy { return a.Sandbox.Or(s.policy) }

// AgentLimits are the limits a's commands run under: the ones recorded at
// its creation, completed by the server default.
func (s *Service) AgentLimits(a agents.Agent) limits.Limits { return a.Limits.Or(s.limits) }

// AgentBounds are a's sandbox policy and limits (AgentPolicy, AgentLimits).
func (s *Service) AgentBounds(a agents.Agent) agents.Bounds {
	return agents.Bounds{Sandbox: s.AgentPolicy(a), Limits: s.AgentLimits(a)}
}

// DefaultPolicy is the server's default sandbox policy.
func (s *Service) DefaultPolicy() sandbox.Policy { return s.policy }

// ContextDelivered tells the service that the SessionStart context held
// for agentID reached the model another way (an MCP session's
// instructions), so no tool result carries it again.
func (s *Service) ContextDelivered(agentID string) { s.held.take(agentID) }

// maxHeldContext bounds how many SessionStart contexts wait for one agent's
// next tool result; beyond it the oldest are dropped (an agent resumed
// again and again without a tool call).
const maxHeldContext = 16

// heldContext keeps, per agent, the additionalContext its SessionStart
// hooks offered that no tool result has carried to the model yet. It lives
// in memory: after a restart the transcript (hook/result) and the answer
// of the agent call that started the session still have it.
type heldContext struct {
	mu sync.Mutex
	m  map[string][]string
}

// hold adds ctx to what waits for agentID.
func (h *heldContext) hold(agentID string, ctx []string) {
	if len(ctx) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = make(map[string][]string)
	}
	all := append(h.m[agentID], ctx...)
	if len(all) > maxHeldContext {
		all = append([]string(nil), all[len(all)-maxHeldContext:]...)
	}
	h.m[agentID] = all
}

// take removes and returns what waits for agentID.
func (h *heldContext) take(agentID string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	ctx := h.m[agentID]
	delete(h.m, agentID)
	return ctx
}

// giveBack puts ctx, taken for a result that could not be recorded, back
// in front of what waits for agentID.
func (h *heldContext) giveBack(agentID string, ctx []string) {
	if len(ctx) == 0 {
		return
	}
	h.mu.Lock()
	rest := h.m[agentID]
	delete(h.m, agentID)
	h.mu.Unlock()
	h.hold(agentID, append(append([]string(nil), ctx...), rest...))
}
