package httpapi

import (
	"context"
	"errors"
	"fmt"

	"github.com/dshd/dshd/internal/http/api"
	"github.com/dshd/dshd/internal/workspace"
)

// workspaceService is what the handlers need of the agents' snapshot
// workspaces.
type workspaceService interface {
	Info(agent string) workspace.Info
	Available() (bool, string)
	Usage() (bytes int64, layers int)
	Budget() (maxBytes int64, over bool)
	Changes(agent string, diff bool) ([]workspace.Change, error)
	Apply(agent, dir string) (workspace.Applied, error)
	Drop(agent string) error
}

var _ workspaceService = (*workspace.Manager)(nil)

// withWorkspace adds a's workspace to it.
func (s *Server) withWorkspace(a api.Agent) api.Agent {
	if s.workspaces == nil {
		return a
	}
	w := toAPIAgentWorkspace(s.workspaces.Info(a.Id))
	a.Workspace = &w
	return a
}

// GetWorkspaceChanges lists what an agent changed in its snapshot workspace.
func (s *Server) GetWorkspaceChanges(ctx context.Context, req api.GetWorkspaceChangesRequestObject) (api.GetWorkspaceChangesResponseObject, error) {
	if err := s.workspaceAgent(ctx, req.Id); err != nil {
		return nil, err
	}
	cs, err := s.workspaces.Changes(req.Id, deref(req.Params.Diff))
	if err != nil {
		return nil, err
	}
	return api.GetWorkspaceChanges200JSONResponse{AgentId: req.Id, Path: s.workspaces.Info(req.Id).Path, Changes: toAPIChanges(cs)}, nil
}

// ApplyWorkspace writes an agent's changes onto its parent's view or a
// directory.
func (s *Server) ApplyWorkspace(ctx context.Context, req api.ApplyWorkspaceRequestObject) (api.ApplyWorkspaceResponseObject, error) {
	if err := s.workspaceAgent(ctx, req.Id); err != nil {
		return nil, err
	}
	var dir string
	if req.Body != nil {
		dir = deref(req.Body.Directory)
	}
	res, err := s.workspaces.Apply(req.Id, dir)
	if err != nil {
		return nil, err
	}
	return api.ApplyWorkspace200JSONResponse{AgentId: req.Id, ParentId: optional(res.Parent), Target: res.Target, Changes: toAPIChanges(res.Changes)}, nil
}

// DropWorkspace drops an agent's snapshot workspace.
func (s *Server) DropWorkspace(ctx context.Context, req api.DropWorkspaceRequestObject) (api.DropWorkspaceResponseObject, error) {
	if err := s.workspaceAgent(ctx, req.Id); err != nil {
		return nil, err
	}
	if err := s.workspaces.Drop(req.Id); err != nil {
		return nil, err
	}
	return api.DropWorkspace204Response{}, nil
}

// workspaceAgent checks that the agent exists (agents.ErrNotFound) and that
// workspaces are served here.
func (s *Server) workspaceAgent(ctx context.Context, id string) error {
	if _, err := s.agents.Get(ctx, id); err != nil {
		return err
	}
	if s.workspaces == nil {
		return errors.Join(workspace.ErrNotFound, errors.New("agent "+id+": workspaces are not configured"))
	}
	return nil
}

func toAPIAgentWorkspace(i workspace.Info) api.AgentWorkspace {
	w := api.AgentWorkspace{Mode: api.WorkspaceMode(i.Mode)}
	w.Path, w.ParentId = optional(i.Path), optional(i.Parent)
	if i.Mode == workspace.Snapshot {
		w.Layers = optional(int32(i.Layers))
	}
	if i.Dropped {
		w.Dropped = ptr(true)
	}
	return w
}

func toAPIChanges(cs []workspace.Change) []api.WorkspaceChange {
	out := make([]api.WorkspaceChange, 0, len(cs))
	for _, c := range cs {
		w := api.WorkspaceChange{Path: c.Path, Kind: api.WorkspaceChangeKind(c.Kind), Type: api.WorkspaceChangeType(c.Type), Size: c.Size, Diff: optional(c.Diff)}
		if c.DiffOmitted != "" {
			w.DiffOmitted = ptr(api.WorkspaceChangeDiffOmitted(c.DiffOmitted))
		}
		out = append(out, w)
	}
	return out
}

// toAPIWorkspaceSupport says whether snapshots work here, for /healthz.
func toAPIWorkspaceSupport(w workspaceService) api.WorkspaceSupport {
	ok, why := w.Available()
	bytes, layers := w.Usage()
	s := api.WorkspaceSupport{Snapshot: ok, Reason: optional(why), Layers: int64(layers), Bytes: bytes}
	if max, over := w.Budget(); max > 0 {
		s.MaxBytes, s.OverBudget = &max, &over
	}
	return s
}

// fromCall checks a fork's or spawn's fromCallId against the rest of its
// body: it starts from a checkpoint, so it needs a snapshot workspace, and
// the transcript's boundary is the call's own.
func fromCall(mode workspace.Mode, boundary bool) error {
	switch {
	case mode != workspace.Snapshot:
		return fmt.Errorf("%w: fromCallId starts from a checkpoint of the agent's view: give workspace snapshot with it", workspace.ErrInvalid)
	case boundary:
		return fmt.Errorf("%w: fromCallId sets the transcript's boundary (the call's result): give one or the other", workspace.ErrInvalid)
	}
	return nil
}

// ListCheckpoints lists a snapshot agent's checkpoints.
func (s *Server) ListCheckpoints(ctx context.Context, req api.ListCheckpointsRequestObject) (api.ListCheckpointsResponseObject, error) {
	cps, list, err := s.pipeline.Checkpoints(ctx, req.Id, deref(req.Params.Diff))
	if err != nil {
		return nil, err
	}
	out := api.ListCheckpoints200JSONResponse{AgentId: req.Id, Checkpoints: make([]api.Checkpoint, 0, len(cps)), Pending: list.Pending, Undo: list.Undo}
	if out.Pending == nil {
		out.Pending = []string{}
	}
	for _, c := range cps {
		last := ""
		if len(c.CallIDs) > 0 {
			last = c.CallIDs[len(c.CallIDs)-1]
		}
		ids := c.CallIDs
		if ids == nil {
			ids = []string{}
		}
		cp := api.Checkpoint{CallIds: ids, CallId: last, Seq: c.Seq, Time: c.Time, Changes: toAPIChanges(c.Changes)}
		if c.Compacted {
			cp.Compacted = &c.Compacted
		}
		out.Checkpoints = append(out.Checkpoints, cp)
	}
	return out, nil
}

// DiffCheckpoints lists what differs between two checkpoints' views.
func (s *Server) DiffCheckpoints(ctx context.Context, req api.DiffCheckpointsRequestObject) (api.DiffCheckpointsResponseObject, error) {
	p := req.Params
	cs, err := s.pipeline.CheckpointDiff(ctx, req.Id, deref(p.From), deref(p.To), deref(p.Diff))
	if err != nil {
		return nil, err
	}
	return api.DiffCheckpoints200JSONResponse{AgentId: req.Id, From: p.From, To: p.To, Changes: toAPIChanges(cs)}, nil
}

// RewindAgent sets a snapshot agent's view back to before or after a call.
func (s *Server) RewindAgent(ctx context.Context, req api.RewindAgentRequestObject) (api.RewindAgentResponseObject, error) {
	in := req.Body
	undo := deref(in.Undo)
	callID := deref(in.CallId)
	switch {
	case undo && callID != "":
		return nil, fmt.Errorf("%w: undo takes no callId", workspace.ErrInvalid)
	case !undo && callID == "":
		return nil, fmt.Errorf("%w: name the callId to rewind to, or undo", workspace.ErrInvalid)
	}
	after := !undo && in.To != nil && *in.To == api.RewindInputToAfter
	n, err := s.pipeline.Rewind(ctx, req.Id, callID, after, undo)
	if err != nil {
		return nil, err
	}
	res := api.RewindAgent200JSONResponse{AgentId: req.Id, Undo: undo, Checkpoints: int32(n), CallId: optional(callID)}
	if !undo {
		to := api.RewoundToBefore
		if after {
			to = api.RewoundToAfter
		}
		res.To = &to
	}
	return res, nil
}
