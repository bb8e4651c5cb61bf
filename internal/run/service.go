// Package run is the one pipeline every dshd execution goes through —
// collect the managed overlay, run hooks, spawn, record — for both the
// harness-facing /exec path (Service.Exec) and model tool calls
// (Service.Call), so the two cannot drift apart, and the agent lifecycle
// around it (creating, resuming, forking and spawning agents runs their
// SessionStart hooks). What a tool is (definitions, argument rules, result
// rendering) lives in package tools.
package run

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dshd/dshd/internal/agents"
	"github.com/dshd/dshd/internal/exec"
	"github.com/dshd/dshd/internal/hooks"
	"github.com/dshd/dshd/internal/ids"
	"github.com/dshd/dshd/internal/shellenv"
	"github.com/dshd/dshd/internal/tools"
)

// envCollector is the part of *shellenv.Registry the pipeline uses.
type envCollector interface {
	Collect(ctx context.Context, x shellenv.Execution) (shellenv.Overlay, error)
}

// jobRunner is the part of *exec.Executor the pipeline and the job tools use.
type jobRunner interface {
	NewID() string
	ResolveCwd(cwd string) string
	Lookup(idempotencyKey string) (*exec.Job, bool)
	Start(ctx context.Context, s exec.Spec) (*exec.Job, error)
	Job(id string) (*exec.Job, error)
	Jobs(agentID string, state exec.State) []exec.Snapshot
	Cancel(ctx context.Context, id string) (exec.Snapshot, error)
}

// agentStore is the part of *agents.Store the pipeline uses: it reads and
// records sessions, and starts them so that SessionStart hooks run.
type agentStore interface {
	Get(ctx context.Context, id string) (agents.Agent, error)
	Append(ctx context.Context, id, typ string, data any) (agents.Event, error)
	Create(ctx context.Context, cwd string) (agents.Agent, error)
	Resume(ctx context.Context, id string) (agents.Agent, error)
	Fork(ctx context.Context, id string, boundary *int64) (agents.Agent, error)
	Spawn(ctx context.Context, id string) (agents.Agent, error)
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
	ids    *ids.Source
	calls  *prometheus.CounterVec
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
		env:    o.Env,
		jobs:   o.Jobs,
		agents: o.Agents,
		hooks:  o.Hooks,
		home:   o.Home,
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
}

// Exec starts one harness-facing execution and returns its job, running or
// finished; the caller decides whether and how long to wait.
//
// With AgentID set the agent is loaded (errors wrap agents.ErrNotFound when it
// does not exist) and its cwd is used when Cwd is empty. With IdempotencyKey
// set and a job already started under that key, that job is returned and
// nothing else happens. Otherwise a fresh managed overlay is collected
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
	if r.IdempotencyKey != "" {
		if j, ok := s.jobs.Lookup(r.IdempotencyKey); ok {
			return j, nil
		}
	}
	return s.start(ctx, run{
		command:    r.Command,
		cwd:        r.Cwd,
		agent:      agent,
		env:        r.Env,
		stdin:      r.Stdin,
		hasStdin:   r.HasStdin,
		timeout:    r.Timeout,
		background: r.Background,
		idemKey:    r.IdempotencyKey,
	}, nil)
}

// run is one execution as the shared pipeline sees it.
type run struct {
	command    string
	cwd        string // "" = agent cwd, else executor default
	agent      *agents.Agent
	env        map[string]string // harness-facing only
	stdin      []byte            // harness-facing only
	hasStdin   bool
	timeout    time.Duration
	background bool
	idemKey    string
}

// gate runs between collecting the overlay and spawning (the hooks). When it
// reports blocked, no process starts and start returns an *errBlocked.
type gate func(ctx context.Context) (blockReason string, blocked bool, err error)

// errBlocked is returned by start when its gate blocked the execution.
type errBlocked struct{ reason string }

func (e *errBlocked) Error() string { return "blocked by hook: " + e.reason }

// start is THE pipeline: collect a fresh overlay for this execution, pass
// the gate (hooks), spawn with the overlay as the managed environment. Every
// execution, harness- or model-facing, foreground or background, goes
// through here.
func (s *Service) start(ctx context.Context, r run, pass gate) (*exec.Job, error) {
	cwd := r.cwd
	if cwd == "" && r.agent != nil {
		cwd = r.agent.Cwd
	}
	// The directory the job will really run in, so {job.cwd} names it too.
	cwd = s.jobs.ResolveCwd(cwd)
	x := shellenv.Execution{
		JobID:      s.jobs.NewID(),
		Command:    r.command,
		Cwd:        cwd,
		Background: r.background,
	}
	agentID := ""
	if r.agent != nil {
		agentID = r.agent.ID
		x.Agent = &shellenv.Agent{
			ID:       r.agent.ID,
			ParentID: r.agent.ParentID,
			RootID:   r.agent.RootID,
			Cwd:      r.agent.Cwd,
			Depth:    r.agent.Depth,
		}
	}
	spec := exec.Spec{
		ID:             x.JobID,
		Command:        r.command,
		Cwd:            cwd,
		AgentID:        agentID,
		Env:            r.env,
		Stdin:          r.stdin,
		HasStdin:       r.hasStdin,
		Timeout:        r.timeout,
		Background:     r.background,
		IdempotencyKey: r.idemKey,
	}
	// Refuse bad input before resolvers (webhooks among them) run for it.
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("job %s: %w", x.JobID, err)
	}
	overlay, err := s.env.Collect(ctx, x)
	if err != nil {
		return nil, fmt.Errorf("collect environment for job %s: %w", x.JobID, err)
	}
	if pass != nil {
		reason, blocked, err := pass(ctx)
		if err != nil {
			return nil, err
		}
		if blocked {
			return nil, &errBlocked{reason: reason}
		}
	}
	spec.Managed = overlay.AppendEnv(nil)
	job, err := s.jobs.Start(ctx, spec)
	if err != nil {
		return nil, err // the executor's error says what failed, and for which job
	}
	s.log.Debug("job started", "job_id", job.ID(), "agent_id", agentID, "background", r.background, "managed_keys", overlay.Len())
	return job, nil
}
