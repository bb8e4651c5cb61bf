package run

import (
	"context"
	"fmt"

	"github.com/dshd/dshd/internal/agents"
	"github.com/dshd/dshd/internal/hooks"
	"github.com/dshd/dshd/internal/sandbox"
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
// pol is the agent's sandbox policy; empty fields take the server default.
func (s *Service) CreateAgent(ctx context.Context, cwd string, pol sandbox.Policy) (Session, error) {
	if err := pol.Validate(); err != nil {
		return Session{}, err
	}
	pol = pol.Or(s.policy)
	if err := s.checkHost(pol); err != nil {
		return Session{}, fmt.Errorf("create agent: %w", err)
	}
	return s.startSession(ctx, SourceStartup, func() (agents.Agent, error) { return s.agents.Create(ctx, cwd, pol) })
}

// childPolicy is the sandbox policy of a child of parent asking for req:
// req completed by the parent's, and within it (sandbox.ErrLooser).
func (s *Service) childPolicy(ctx context.Context, parent string, req sandbox.Policy) (sandbox.Policy, error) {
	if err := req.Validate(); err != nil {
		return sandbox.Policy{}, err
	}
	p, err := s.agents.Get(ctx, parent)
	if err != nil {
		return sandbox.Policy{}, err
	}
	outer := s.AgentPolicy(p)
	pol := req.Or(outer)
	if err := pol.CheckWithin(outer, "parent agent "+parent); err != nil {
		return sandbox.Policy{}, err
	}
	return pol, s.checkHost(pol)
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
// pol may only tighten the parent's sandbox policy (sandbox.ErrLooser);
// empty fields inherit it.
func (s *Service) ForkAgent(ctx context.Context, id string, boundary *int64, pol sandbox.Policy) (Session, error) {
	pol, err := s.childPolicy(ctx, id, pol)
	if err != nil {
		return Session{}, fmt.Errorf("fork: %w", err)
	}
	return s.startSession(ctx, SourceStartup, func() (agents.Agent, error) { return s.agents.Fork(ctx, id, boundary, pol) })
}

// SpawnAgent spawns a child agent and runs its SessionStart hooks (source
// startup). Returns agents.ErrNotFound or agents.ErrDepthExceeded.
// pol may only tighten the parent's sandbox policy (sandbox.ErrLooser);
// empty fields inherit it.
func (s *Service) SpawnAgent(ctx context.Context, id string, pol sandbox.Policy) (Session, error) {
	pol, err := s.childPolicy(ctx, id, pol)
	if err != nil {
		return Session{}, fmt.Errorf("spawn: %w", err)
	}
	return s.startSession(ctx, SourceStartup, func() (agents.Agent, error) { return s.agents.Spawn(ctx, id, pol) })
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
