package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/dshd/dshd/internal/agents"
	"github.com/dshd/dshd/internal/workspace"
)

// Checkpoints: every tool call of an agent with a snapshot view ends with
// a checkpoint of it (package workspace); here they are made after each
// call's result is recorded, listed, rewound to and forked from.

// CreateAgentIn is CreateAgent with a workspace mode: with
// workspace.Snapshot the agent works in a view of cwd from its creation
// (recorded before its header), and each of its tool calls is
// checkpointed.
func (s *Service) CreateAgentIn(ctx context.Context, cwd string, b agents.Bounds, mode workspace.Mode) (Session, error) {
	if !mode.Valid() {
		return Session{}, fmt.Errorf("create agent: %w: workspace mode %q (want shared or snapshot)", workspace.ErrInvalid, mode)
	}
	if mode == workspace.Snapshot {
		if s.ws == nil {
			return Session{}, &workspace.UnavailableError{Reason: "workspaces are not configured"}
		}
		if ok, why := s.ws.Available(); !ok {
			return Session{}, &workspace.UnavailableError{Reason: why}
		}
		var recorded string
		b.Prepare = func(a agents.Agent) error {
			if err := s.ws.Adopt(a.ID, a.Cwd); err != nil {
				return err
			}
			recorded = a.ID
			return nil
		}
		sess, err := s.CreateAgent(ctx, cwd, b)
		if err != nil && recorded != "" {
			s.ws.Forget(recorded)
		}
		return sess, err
	}
	return s.CreateAgent(ctx, cwd, b)
}

// checkpoint ends agent's call callID, whose result was recorded at seq,
// with a checkpoint of its view. A failure is logged: the call ran and its
// result stands; its changes stay in the view and go into the next
// checkpoint.
func (s *Service) checkpoint(agent, callID string, seq int64) {
	if s.ws == nil {
		return
	}
	if _, err := s.ws.Checkpoint(agent, callID, seq); err != nil {
		s.log.Error("checkpoint after a tool call failed; its changes go into the next one", "agent_id", agent, "call_id", callID, "err", err)
	}
}

// CheckpointInfo is one checkpoint with what its calls changed.
type CheckpointInfo struct {
	workspace.Checkpoint
	Changes []workspace.Change
}

// Checkpoints lists agent's checkpoints, oldest first, each with its
// changes (diffs with diff).
func (s *Service) Checkpoints(ctx context.Context, agent string, diff bool) ([]CheckpointInfo, workspace.CheckpointList, error) {
	if _, err := s.agents.Get(ctx, agent); err != nil {
		return nil, workspace.CheckpointList{}, err
	}
	if s.ws == nil {
		return nil, workspace.CheckpointList{}, fmt.Errorf("%w: agent %s: workspaces are not configured", workspace.ErrNotFound, agent)
	}
	// The changes are read checkpoint by checkpoint, the view not held
	// between them: a compaction or a rewind recorded meanwhile changes the
	// checkpoints, and the list is read again (each checkpoint listed is
	// the one whose changes are given).
	for range 3 {
		out, list, again, err := s.checkpointsOnce(agent, diff)
		if !again {
			return out, list, err
		}
	}
	return nil, workspace.CheckpointList{}, fmt.Errorf("%w: agent %s's checkpoints changed while they were listed (compactions, rewinds); list them again", workspace.ErrBusy, agent)
}

func (s *Service) checkpointsOnce(agent string, diff bool) (out []CheckpointInfo, list workspace.CheckpointList, again bool, err error) {
	list, err = s.ws.Checkpoints(agent)
	if err != nil {
		return nil, list, false, err
	}
	out = make([]CheckpointInfo, 0, len(list.Checkpoints))
	for _, c := range list.Checkpoints {
		info := CheckpointInfo{Checkpoint: c}
		if len(c.CallIDs) > 0 {
			got, cs, err := s.ws.CheckpointChanges(agent, c.CallIDs[len(c.CallIDs)-1], diff)
			if errors.Is(err, workspace.ErrCheckpointNotFound) || err == nil && (got.Layer != c.Layer || got.Depth != c.Depth) {
				return nil, list, true, nil
			}
			if err != nil {
				return nil, list, false, err
			}
			info.Changes = cs
		}
		out = append(out, info)
	}
	return out, list, false, nil
}

// Rewind sets agent's view back to before (after false) or after the call
// callID, or undoes the last rewind, and records it in the transcript. A
// call that changed nothing goes to the checkpoint before it.
// workspace.ErrCheckpointNotFound when the call is neither in a checkpoint
// nor in the transcript; workspace.ErrBusy while a job of the view runs.
func (s *Service) Rewind(ctx context.Context, agent, callID string, after, undo bool) (int, error) {
	if _, err := s.agents.Get(ctx, agent); err != nil {
		return 0, err
	}
	if s.ws == nil {
		return 0, fmt.Errorf("%w: agent %s: workspaces are not configured", workspace.ErrNotFound, agent)
	}
	var at workspace.Mark
	if !undo {
		var err error
		if at, err = s.depthAt(ctx, agent, callID, after); err != nil {
			return 0, err
		}
	}
	if err := s.ws.Rewind(agent, at, undo); err != nil {
		return 0, err
	}
	ev := rewindEvent{CallID: callID, Undo: undo}
	if !undo {
		ev.To = "before"
		if after {
			ev.To = "after"
		}
	}
	if err := s.record(context.WithoutCancel(ctx), agent, agents.EventWorkspaceRewind, ev); err != nil {
		s.log.Error("a rewind was made but could not be recorded", "agent_id", agent, "call_id", callID, "err", err)
	}
	list, err := s.ws.Checkpoints(agent)
	return len(list.Checkpoints), err
}

type rewindEvent struct {
	CallID string `json:"callId,omitempty"`
	To     string `json:"to,omitempty"`
	Undo   bool   `json:"undo"`
}

// depthAt is the point of agent's stack before or after callID: from its
// checkpoint, else (a call that changed nothing) from the transcript.
func (s *Service) depthAt(ctx context.Context, agent, callID string, after bool) (workspace.Mark, error) {
	d, err := s.ws.DepthAt(agent, callID, after)
	if !errors.Is(err, workspace.ErrCheckpointNotFound) {
		return d, err
	}
	_, resultSeq, ok, terr := s.callSeqs(ctx, agent, callID)
	if terr != nil {
		return workspace.Mark{}, terr
	}
	if !ok || resultSeq == 0 {
		return workspace.Mark{}, err
	}
	list, lerr := s.ws.Checkpoints(agent)
	if lerr != nil {
		return workspace.Mark{}, lerr
	}
	for _, p := range list.Pending {
		if p == callID {
			return workspace.Mark{}, fmt.Errorf("%w: call %s's changes are not in a checkpoint yet (it ended while another job of the view ran)", workspace.ErrCheckpointNotFound, callID)
		}
	}
	return s.ws.DepthBeforeSeq(agent, resultSeq)
}

// callSeqs finds call callID in agent's transcript: the seqs of its
// tool/call and tool/result events (0 for one not there).
func (s *Service) callSeqs(ctx context.Context, agent, callID string) (callSeq, resultSeq int64, ok bool, err error) {
	r, isReader := s.agents.(eventReader)
	if !isReader {
		return 0, 0, false, nil
	}
	evs, err := r.Events(ctx, agent)
	if err != nil {
		return 0, 0, false, err
	}
	for _, ev := range evs {
		if ev.Type != agents.EventToolCall && ev.Type != agents.EventToolResult {
			continue
		}
		var d struct {
			CallID string `json:"callId"`
		}
		if json.Unmarshal(ev.Data, &d) != nil || d.CallID != callID {
			continue
		}
		ok = true
		if ev.Type == agents.EventToolCall {
			callSeq = ev.Seq
		} else {
			resultSeq = ev.Seq
		}
	}
	return callSeq, resultSeq, ok, nil
}

// ForkAgentFrom forks agent id from its tool call callID: the transcript
// up to the call's result, the workspace as it was after it.
func (s *Service) ForkAgentFrom(ctx context.Context, id, callID string, b agents.Bounds) (Session, error) {
	return s.childFrom(ctx, id, callID, b, true)
}

// SpawnAgentFrom spawns a child of agent id whose workspace is the
// parent's as it was after its tool call callID.
func (s *Service) SpawnAgentFrom(ctx context.Context, id, callID string, b agents.Bounds) (Session, error) {
	return s.childFrom(ctx, id, callID, b, false)
}

func (s *Service) childFrom(ctx context.Context, id, callID string, b agents.Bounds, fork bool) (Session, error) {
	b, err := s.childBounds(ctx, id, b)
	if err != nil {
		return Session{}, err
	}
	if s.ws == nil {
		return Session{}, &workspace.UnavailableError{Reason: "workspaces are not configured"}
	}
	at, err := s.depthAt(ctx, id, callID, true)
	if err != nil {
		return Session{}, err
	}
	_, resultSeq, _, err := s.callSeqs(ctx, id, callID)
	if err != nil {
		return Session{}, err
	}
	make := func(b agents.Bounds) (agents.Agent, error) {
		if !fork {
			return s.agents.Spawn(ctx, id, b)
		}
		var boundary *int64
		if resultSeq > 0 {
			boundary = &resultSeq
		}
		return s.agents.Fork(ctx, id, boundary, b)
	}
	return s.startSession(ctx, SourceStartup, func() (agents.Agent, error) {
		return s.makeChild(b, make, func(a agents.Agent) error { return s.ws.ForkAt(id, a.ID, at) })
	})
}

// CheckpointDiff lists what differs between agent's view after call from
// and after call to ("" for the view before its first checkpoint, and
// after its last): resolved as a rewind resolves them (a call that changed
// nothing names the checkpoint before it; workspace.ErrCheckpointNotFound,
// workspace.ErrCheckpointCompacted), then compared view to view.
func (s *Service) CheckpointDiff(ctx context.Context, agent, from, to string, diff bool) ([]workspace.Change, error) {
	if _, err := s.agents.Get(ctx, agent); err != nil {
		return nil, err
	}
	if s.ws == nil {
		return nil, fmt.Errorf("%w: agent %s: workspaces are not configured", workspace.ErrNotFound, agent)
	}
	df, dt := workspace.Floor, workspace.Top
	var err error
	if from != "" {
		if df, err = s.depthAt(ctx, agent, from, true); err != nil {
			return nil, err
		}
	}
	if to != "" {
		if dt, err = s.depthAt(ctx, agent, to, true); err != nil {
			return nil, err
		}
	}
	return s.ws.CheckpointDiff(agent, df, dt, diff)
}
