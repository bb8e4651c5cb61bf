package run

import (
	"context"

	"github.com/dshd/dshd/internal/agents"
	"github.com/dshd/dshd/internal/hooks"
)

// Session is an agent as its start left it: the agent, and what its
// SessionStart hooks said. A harness passes AdditionalContext on to its
// model, as Codex and Claude Code do with SessionStart context.
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
func (s *Service) CreateAgent(ctx context.Context, cwd string) (Session, error) {
	return s.startSession(ctx, SourceStartup, func() (agents.Agent, error) { return s.agents.Create(ctx, cwd) })
}

// ResumeAgent reloads an agent, records the resume and runs the
// SessionStart hooks (source resume). Returns agents.ErrNotFound.
func (s *Service) ResumeAgent(ctx context.Context, id string) (Session, error) {
	return s.startSession(ctx, SourceResume, func() (agents.Agent, error) { return s.agents.Resume(ctx, id) })
}

// ForkAgent forks an agent and runs the new session's SessionStart hooks
// (source startup: the fork is a new session). Returns agents.ErrNotFound
// or agents.ErrInvalidBoundary.
func (s *Service) ForkAgent(ctx context.Context, id string, boundary *int64) (Session, error) {
	return s.startSession(ctx, SourceStartup, func() (agents.Agent, error) { return s.agents.Fork(ctx, id, boundary) })
}

// SpawnAgent spawns a child agent and runs its SessionStart hooks (source
// startup). Returns agents.ErrNotFound or agents.ErrDepthExceeded.
func (s *Service) SpawnAgent(ctx context.Context, id string) (Session, error) {
	return s.startSession(ctx, SourceStartup, func() (agents.Agent, error) { return s.agents.Spawn(ctx, id) })
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
	return Session{Agent: a, AdditionalContext: out.AdditionalContext(), SystemMessages: out.SystemMessages()}, nil
}
