package run

import (
	"context"
	"errors"
	"fmt"

	"github.com/dshd/dshd/internal/agents"
	"github.com/dshd/dshd/internal/exec"
	"github.com/dshd/dshd/internal/hooks"
	"github.com/dshd/dshd/internal/sandbox"
	"github.com/dshd/dshd/internal/workspace"
)

// Session is an agent as its start left it: the agent, and what its
// SessionStart hooks said. A harness may pass AdditionalContext on to its
// model at once, as Codex and Claude Code do with SessionStart context; the
// agent's next tool result carries it to the model too (see CallWith).
type Session struct {
	agents.Agent
	// AdditionalContext is the additionalContext (or plain stdout) of every
	// SessionStart hook, in configuration order.
	AdditionalContext []string
	// SystemMessages are the SessionStart hooks' systemMessage values.
	SystemMessages []string
}

// Session sources given to SessionStart hooks.
const (
	SourceStartup = "startup"
	SourceResume  = "resume"
)

// CreateAgent creates a root agent and runs the SessionStart hooks (source
// startup). The agent exists, header on disk, before any hook runs. Errors
// are the store's (agents.ErrInvalidCwd); hook failures are recorded in the
// transcript and logged, never fatal: SessionStart cannot block.
//
// b are the agent's sandbox policy and limits; empty fields take the server
// defaults. Errors: sandbox.ErrInvalid, sandbox.ErrUnavailable,
// limits.ErrInvalid.
func (s *Service) CreateAgent(ctx context.Context, cwd string, b agents.Bounds) (Session, error) {
	if err := errors.Join(b.Sandbox.Validate(), b.Limits.Validate()); err != nil {
		return Session{}, fmt.Errorf("create agent: %w", err)
	}
	b.Sandbox = b.Sandbox.Or(s.policy)
	b.Limits = b.Limits.Or(s.limits)
	if err := b.Sandbox.ValidateEffective(); err != nil {
		return Session{}, fmt.Errorf("create agent: %w", err)
	}
	if err := s.checkHost(b.Sandbox); err != nil {
		return Session{}, fmt.Errorf("create agent: %w", err)
	}
	return s.startSession(ctx, SourceStartup, func() (agents.Agent, error) { return s.agents.Create(ctx, cwd, b) })
}

// childBounds are the bounds of a child of parent asking for req: req
// completed by the parent's, and within them (sandbox.ErrLooser,
// limits.ErrLooser).
func (s *Service) childBounds(ctx context.Context, parent string, req agents.Bounds) (agents.Bounds, error) {
	if err := errors.Join(req.Sandbox.Validate(), req.Limits.Validate()); err != nil {
		return agents.Bounds{}, err
	}
	p, err := s.agents.Get(ctx, parent)
	if err != nil {
		return agents.Bounds{}, err
	}
	outer := s.AgentBounds(p)
	b := agents.Bounds{Sandbox: req.Sandbox.Or(outer.Sandbox), Limits: req.Limits.Or(outer.Limits)}
	if err := b.Sandbox.ValidateEffective(); err != nil {
		return agents.Bounds{}, err
	}
	what := "parent agent " + parent
	if err := errors.Join(b.Sandbox.CheckWithin(outer.Sandbox, what), b.Limits.CheckWithin(outer.Limits, what)); err != nil {
		return agents.Bounds{}, err
	}
	return b, s.checkHost(b.Sandbox)
}

// checkHost fails with sandbox.ErrUnavailable when pol cannot be enforced
// here, so an agent is never made that could run nothing.
func (s *Service) checkHost(pol sandbox.Policy) error {
	if s.host == nil {
		return nil
	}
	return s.host.Check(pol)
}

// ResumeAgent reloads an agent, records the resume and runs the
// SessionStart hooks (source resume). Returns agents.ErrNotFound.
func (s *Service) ResumeAgent(ctx context.Context, id string) (Session, error) {
	return s.startSession(ctx, SourceResume, func() (agents.Agent, error) { return s.agents.Resume(ctx, id) })
}

// ForkAgent forks an agent and runs the new session's SessionStart hooks
// (source startup: the fork is a new session). Returns agents.ErrNotFound
// or agents.ErrInvalidBoundary.
// b may only tighten the parent's sandbox policy (sandbox.ErrLooser) and
// limits (limits.ErrLooser); empty fields inherit them. With mode
// workspace.Snapshot the fork gets a snapshot of the parent's workspace
// (workspace.ErrUnavailable, ErrBusy, ErrDropped: nothing is made).
func (s *Service) ForkAgent(ctx context.Context, id string, boundary *int64, b agents.Bounds, mode workspace.Mode) (Session, error) {
	b, err := s.childBounds(ctx, id, b)
	if err != nil {
		return Session{}, fmt.Errorf("fork: %w", err)
	}
	return s.startChild(ctx, id, mode, b, func(b agents.Bounds) (agents.Agent, error) { return s.agents.Fork(ctx, id, boundary, b) })
}

// SpawnAgent spawns a child agent and runs its SessionStart hooks (source
// startup). Returns agents.ErrNotFound or agents.ErrDepthExceeded.
// b may only tighten the parent's sandbox policy (sandbox.ErrLooser) and
// limits (limits.ErrLooser); empty fields inherit them. mode is as for
// ForkAgent.
func (s *Service) SpawnAgent(ctx context.Context, id string, b agents.Bounds, mode workspace.Mode) (Session, error) {
	b, err := s.childBounds(ctx, id, b)
	if err != nil {
		return Session{}, fmt.Errorf("spawn: %w", err)
	}
	return s.startChild(ctx, id, mode, b, func(b agents.Bounds) (agents.Agent, error) { return s.agents.Spawn(ctx, id, b) })
}

// startChild makes a child of parent with make (given b) and starts its
// session. Its workspace, snapshot or the parent's view, is recorded
// before its header is written (b.Prepare): a crash leaves either no child
// or a child whose workspace is recorded, never one that would run in the
// frozen base directory by mistake. What can be checked is checked before
// the child's id is taken.
func (s *Service) startChild(ctx context.Context, parent string, mode workspace.Mode, b agents.Bounds, make func(agents.Bounds) (agents.Agent, error)) (Session, error) {
	if !mode.Valid() {
		return Session{}, fmt.Errorf("%w: workspace mode %q (want shared or snapshot)", workspace.ErrInvalid, mode)
	}
	if mode != workspace.Snapshot {
		if s.ws == nil {
			return s.startSession(ctx, SourceStartup, func() (agents.Agent, error) { return make(b) })
		}
		// The same directory as a snapshot parent is its view.
		return s.startSession(ctx, SourceStartup, func() (agents.Agent, error) {
			return s.makeChild(b, make, func(a agents.Agent) error { return s.ws.Share(parent, a.ID) })
		})
	}
	p, err := s.agents.Get(ctx, parent)
	if err != nil {
		return Session{}, err
	}
	if s.ws == nil {
		return Session{}, &workspace.UnavailableError{Reason: "workspaces are not configured"}
	}
	if err := s.ws.CheckFork(parent, p.Cwd); err != nil {
		return Session{}, err
	}
	// Its jobs in the shared directory too (before its first snapshot
	// fork it has no layer, and they write to what becomes the frozen
	// base).
	if n := len(s.jobs.Jobs(parent, exec.StateRunning)); n > 0 {
		return Session{}, fmt.Errorf("%w: agent %s runs %d job(s); a snapshot fork freezes its workspace and needs it idle", workspace.ErrBusy, parent, n)
	}
	return s.startSession(ctx, SourceStartup, func() (agents.Agent, error) {
		return s.makeChild(b, make, func(a agents.Agent) error { return s.ws.Fork(parent, p.Cwd, a.ID) })
	})
}

// makeChild makes a child with record run on its id before its header is
// written, and forgets what record recorded when the header then fails.
func (s *Service) makeChild(b agents.Bounds, make func(agents.Bounds) (agents.Agent, error), record func(agents.Agent) error) (agents.Agent, error) {
	var recorded string
	b.Prepare = func(a agents.Agent) error {
		if err := record(a); err != nil {
			return err
		}
		recorded = a.ID
		return nil
	}
	a, err := make(b)
	if err != nil && recorded != "" {
		s.ws.Forget(recorded)
	}
	return a, err
}

func (s *Service) startSession(ctx context.Context, source string, start func() (agents.Agent, error)) (Session, error) {
	a, err := start()
	if err != nil {
		return Session{Agent: a}, err
	}
	out, err := s.runHooks(ctx, "", a.ID, hooks.Input{
		Event:     hooks.SessionStart,
		SessionID: a.ID,
		Cwd:       a.Cwd,
		Source:    source,
	})
	if err != nil {
		s.log.Warn("SessionStart hooks failed", "agent_id", a.ID, "source", source, "err", err)
	}
	sessionCtx := out.AdditionalContext()
	s.held.hold(a.ID, sessionCtx)
	return Session{Agent: a, AdditionalContext: sessionCtx, SystemMessages: out.SystemMessages()}, nil
}
