package run

import (
	"context"
	"fmt"

	"github.com/dshd/dshd/internal/files"
	"github.com/dshd/dshd/internal/sandbox"
)

// FileScope is what the file routes may read and write for agentID: its
// cwd, seen through its snapshot view when it has one, under its sandbox
// policy and the host's paths (the same writable roots, protected and
// hidden paths its commands get). release gives the view's lease back; the
// scope must not be used after it. agents.ErrNotFound for an unknown
// agent; the workspace's errors when its view cannot be had.
func (s *Service) FileScope(ctx context.Context, agentID string) (sc *files.Scope, release func(), err error) {
	agent, err := s.agents.Get(ctx, agentID)
	if err != nil {
		return nil, nil, err
	}
	sc = &files.Scope{Cwd: agent.Cwd, ViewFD: -1, FS: s.AgentPolicy(agent).FS, Home: s.home}
	if s.host != nil {
		cfg := s.host.Config()
		sc.Roots, sc.Protected, sc.Token = cfg.WritableRoots, cfg.Protected, cfg.TokenFile
		sc.Hidden = cfg.Hidden
		if cfg.Home != "" {
			sc.Home = cfg.Home
		}
		if sc.Hidden == nil {
			sc.Hidden = sandbox.DefaultHidden
		}
	}
	lease, err := s.ws.Acquire(agentID)
	if err != nil {
		return nil, nil, fmt.Errorf("files of agent %s: %w", agentID, err)
	}
	if lease != nil && lease.FD >= 0 {
		sc.ViewTarget, sc.ViewFD = lease.Target, lease.FD
	}
	return sc, lease.Release, nil
}

// OnViewRemount calls fn with a descriptor of agentID's snapshot view each
// time a checkpoint mounts it afresh, before a job runs on it (a watch of
// its files moves onto the new mount); the function returned stops it.
func (s *Service) OnViewRemount(agentID string, fn func(fd int)) (cancel func()) {
	return s.ws.OnRemount(agentID, fn)
}
