package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/dshd/dshd/internal/agents"
	"github.com/dshd/dshd/internal/exec"
	"github.com/dshd/dshd/internal/http/api"
	"github.com/dshd/dshd/internal/stages"
	"github.com/dshd/dshd/internal/tools"
	"github.com/dshd/dshd/internal/workspace"
)

// GetHealth answers liveness probes.
func (s *Server) GetHealth(context.Context, api.GetHealthRequestObject) (api.GetHealthResponseObject, error) {
	h := api.GetHealth200JSONResponse{Status: "ok"}
	if s.containment != nil {
		c := toAPIContainment(s.containment.Containment())
		h.Details = &api.HealthDetails{Containment: &c}
	}
	if s.sandbox != nil {
		if h.Details == nil {
			h.Details = &api.HealthDetails{}
		}
		sb := toAPISandboxSupport(s.sandbox.Support(), s.sandbox.Default())
		h.Details.Sandbox = &sb
	}
	if s.workspaces != nil {
		if h.Details == nil {
			h.Details = &api.HealthDetails{}
		}
		w := toAPIWorkspaceSupport(s.workspaces)
		h.Details.Workspaces = &w
	}
	if s.cluster != nil {
		if h.Details == nil {
			h.Details = &api.HealthDetails{}
		}
		c := toAPIClusterStatus(s.cluster.Status(), time.Now())
		h.Details.Cluster = &c
		if c.Degraded != nil {
			h.Status = "degraded"
		}
	}
	return h, nil
}

// ListDeclarations lists every declared managed key. It runs no resolver.
func (s *Server) ListDeclarations(context.Context, api.ListDeclarationsRequestObject) (api.ListDeclarationsResponseObject, error) {
	return api.ListDeclarations200JSONResponse(toAPIDeclarations(s.env.Declarations())), nil
}

// ListContributors lists contributors with their declarations.
func (s *Server) ListContributors(context.Context, api.ListContributorsRequestObject) (api.ListContributorsResponseObject, error) {
	cs := s.env.Contributors()
	out := make(api.ListContributors200JSONResponse, len(cs))
	for i, c := range cs {
		var err error
		if out[i], err = toAPIContributor(c); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// RegisterContributor registers a contributor.
func (s *Server) RegisterContributor(ctx context.Context, req api.RegisterContributorRequestObject) (api.RegisterContributorResponseObject, error) {
	spec, err := fromAPIContributorInput(*req.Body)
	if err != nil {
		return nil, err
	}
	c, err := s.env.Register(ctx, spec)
	if err != nil {
		return nil, err
	}
	out, err := toAPIContributor(c)
	if err != nil {
		return nil, err
	}
	return api.RegisterContributor201JSONResponse(out), nil
}

// GetContributor returns one contributor.
func (s *Server) GetContributor(_ context.Context, req api.GetContributorRequestObject) (api.GetContributorResponseObject, error) {
	c, err := s.env.Contributor(req.Name)
	if err != nil {
		return nil, err
	}
	out, err := toAPIContributor(c)
	if err != nil {
		return nil, err
	}
	return api.GetContributor200JSONResponse(out), nil
}

// DeleteContributor disposes one contributor.
func (s *Server) DeleteContributor(ctx context.Context, req api.DeleteContributorRequestObject) (api.DeleteContributorResponseObject, error) {
	if err := s.env.Unregister(ctx, req.Name); err != nil {
		return nil, err
	}
	return api.DeleteContributor204Response{}, nil
}

// ListPlugins lists open plugins.
func (s *Server) ListPlugins(context.Context, api.ListPluginsRequestObject) (api.ListPluginsResponseObject, error) {
	return api.ListPlugins200JSONResponse(convertAll(s.env.Plugins(), toAPIPlugin)), nil
}

// OpenPlugin opens a plugin scope.
func (s *Server) OpenPlugin(ctx context.Context, req api.OpenPluginRequestObject) (api.OpenPluginResponseObject, error) {
	d, err := lease(req.Body.LeaseSeconds)
	if err != nil {
		return nil, err
	}
	p, err := s.env.OpenPlugin(ctx, req.Body.Name, d)
	if err != nil {
		return nil, err
	}
	return api.OpenPlugin201JSONResponse(toAPIPlugin(p)), nil
}

// GetPlugin returns one plugin.
func (s *Server) GetPlugin(_ context.Context, req api.GetPluginRequestObject) (api.GetPluginResponseObject, error) {
	p, err := s.env.Plugin(req.Id)
	if err != nil {
		return nil, err
	}
	return api.GetPlugin200JSONResponse(toAPIPlugin(p)), nil
}

// RenewPlugin extends a plugin's lease.
func (s *Server) RenewPlugin(ctx context.Context, req api.RenewPluginRequestObject) (api.RenewPluginResponseObject, error) {
	var d time.Duration
	if req.Body != nil {
		var err error
		if d, err = lease(req.Body.LeaseSeconds); err != nil {
			return nil, err
		}
	}
	p, err := s.env.RenewPlugin(ctx, req.Id, d)
	if err != nil {
		return nil, err
	}
	return api.RenewPlugin200JSONResponse(toAPIPlugin(p)), nil
}

// ClosePlugin disposes a plugin and its contributors.
func (s *Server) ClosePlugin(ctx context.Context, req api.ClosePluginRequestObject) (api.ClosePluginResponseObject, error) {
	if err := s.env.ClosePlugin(ctx, req.Id); err != nil {
		return nil, err
	}
	return api.ClosePlugin204Response{}, nil
}

// ListAgents lists agents.
func (s *Server) ListAgents(ctx context.Context, _ api.ListAgentsRequestObject) (api.ListAgentsResponseObject, error) {
	as, err := s.agents.List(ctx)
	if err != nil {
		return nil, err
	}
	out := convertAll(as, toAPIAgent)
	for i := range out {
		out[i] = s.withWorkspace(out[i])
	}
	return api.ListAgents200JSONResponse(out), nil
}

// CreateAgent creates a root agent.
func (s *Server) CreateAgent(ctx context.Context, req api.CreateAgentRequestObject) (api.CreateAgentResponseObject, error) {
	var cwd string
	var b agents.Bounds
	var mode workspace.Mode
	if req.Body != nil {
		cwd = deref(req.Body.Cwd)
		b = agents.Bounds{Sandbox: fromAPISandbox(req.Body.Sandbox), Limits: fromAPILimits(req.Body.Limits)}
		mode = workspace.Mode(deref(req.Body.Workspace))
	}
	a, err := s.pipeline.CreateAgentIn(ctx, cwd, b, mode)
	if err != nil {
		return nil, err
	}
	return api.CreateAgent201JSONResponse(s.withWorkspace(toAPISession(a))), nil
}

// GetAgent returns an agent's header.
func (s *Server) GetAgent(ctx context.Context, req api.GetAgentRequestObject) (api.GetAgentResponseObject, error) {
	a, err := s.agents.Get(ctx, req.Id)
	if err != nil {
		return nil, err
	}
	return api.GetAgent200JSONResponse(s.withWorkspace(toAPIAgent(a))), nil
}

// ResumeAgent reloads an agent and records the resume.
func (s *Server) ResumeAgent(ctx context.Context, req api.ResumeAgentRequestObject) (api.ResumeAgentResponseObject, error) {
	a, err := s.pipeline.ResumeAgent(ctx, req.Id)
	if err != nil {
		return nil, err
	}
	return api.ResumeAgent200JSONResponse(s.withWorkspace(toAPISession(a))), nil
}

// ForkAgent forks an agent.
func (s *Server) ForkAgent(ctx context.Context, req api.ForkAgentRequestObject) (api.ForkAgentResponseObject, error) {
	var boundary *int64
	var b agents.Bounds
	var mode workspace.Mode
	if req.Body != nil {
		boundary = req.Body.Boundary
		b = agents.Bounds{Sandbox: fromAPISandbox(req.Body.Sandbox), Limits: fromAPILimits(req.Body.Limits)}
		mode = workspace.Mode(deref(req.Body.Workspace))
		if from := deref(req.Body.FromCallId); from != "" {
			if err := fromCall(mode, boundary != nil); err != nil {
				return nil, err
			}
			a, err := s.pipeline.ForkAgentFrom(ctx, req.Id, from, b)
			if err != nil {
				return nil, err
			}
			return api.ForkAgent201JSONResponse(s.withWorkspace(toAPISession(a))), nil
		}
	}
	a, err := s.pipeline.ForkAgent(ctx, req.Id, boundary, b, mode)
	if err != nil {
		return nil, err
	}
	return api.ForkAgent201JSONResponse(s.withWorkspace(toAPISession(a))), nil
}

// SpawnAgent spawns a child agent.
func (s *Server) SpawnAgent(ctx context.Context, req api.SpawnAgentRequestObject) (api.SpawnAgentResponseObject, error) {
	var b agents.Bounds
	var mode workspace.Mode
	if req.Body != nil {
		b = agents.Bounds{Sandbox: fromAPISandbox(req.Body.Sandbox), Limits: fromAPILimits(req.Body.Limits)}
		mode = workspace.Mode(deref(req.Body.Workspace))
		if from := deref(req.Body.FromCallId); from != "" {
			if err := fromCall(mode, false); err != nil {
				return nil, err
			}
			a, err := s.pipeline.SpawnAgentFrom(ctx, req.Id, from, b)
			if err != nil {
				return nil, err
			}
			return api.SpawnAgent201JSONResponse(s.withWorkspace(toAPISession(a))), nil
		}
	}
	a, err := s.pipeline.SpawnAgent(ctx, req.Id, b, mode)
	if err != nil {
		return nil, err
	}
	return api.SpawnAgent201JSONResponse(s.withWorkspace(toAPISession(a))), nil
}

// GetTranscript returns an agent's JSONL transcript as stored.
func (s *Server) GetTranscript(ctx context.Context, req api.GetTranscriptRequestObject) (api.GetTranscriptResponseObject, error) {
	b, err := s.agents.Transcript(ctx, req.Id)
	if err != nil {
		return nil, err
	}
	if wantsJSON(acceptFrom(ctx)) {
		return transcriptJSON(transcriptAsJSON(b)), nil
	}
	return api.GetTranscript200ApplicationxNdjsonResponse{Body: bytes.NewReader(b), ContentLength: int64(len(b))}, nil
}

// transcriptJSON is the JSON form of a transcript, already encoded: the
// stored lines are JSON, so they are copied rather than decoded and encoded.
type transcriptJSON []byte

// VisitGetTranscriptResponse writes the JSON form.
func (t transcriptJSON) VisitGetTranscriptResponse(w http.ResponseWriter) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, err := w.Write(t)
	return err
}

// transcriptAsJSON turns stored JSONL into {"header":…,"events":[…]}. Lines
// that are not valid JSON (a torn last line after a crash) are left out.
func transcriptAsJSON(jsonl []byte) []byte {
	var b bytes.Buffer
	b.Grow(len(jsonl) + 32)
	b.WriteString(`{"header":`)
	first := true
	events := 0
	for line := range bytes.Lines(jsonl) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 || !json.Valid(line) {
			continue
		}
		if first {
			b.Write(line)
			b.WriteString(`,"events":[`)
			first = false
			continue
		}
		if events > 0 {
			b.WriteByte(',')
		}
		b.Write(line)
		events++
	}
	if first {
		b.WriteString(`null,"events":[`)
	}
	b.WriteString("]}\n")
	return b.Bytes()
}

// ListTools returns the model tool definitions in the requested format.
func (s *Server) ListTools(_ context.Context, req api.ListToolsRequestObject) (api.ListToolsResponseObject, error) {
	format := ""
	if req.Params.Format != nil && *req.Params.Format != api.Generic {
		format = string(*req.Params.Format)
	}
	defs := tools.Definitions()
	if s.sandbox != nil {
		// The server default: what a new agent's commands run under.
		defs = tools.DefinitionsFor(s.sandbox.Default())
	}
	rendered, err := tools.Render(defs, format)
	if err != nil {
		return nil, err
	}
	// Round-trip through JSON: the generated response is a list of objects.
	b, err := json.Marshal(rendered)
	if err != nil {
		return nil, fmt.Errorf("render tools: %w", err)
	}
	var out api.ListTools200JSONResponse
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("render tools: %w", err)
	}
	return out, nil
}

// CallTool runs one model tool call for an agent.
func (s *Server) CallTool(ctx context.Context, req api.CallToolRequestObject) (api.CallToolResponseObject, error) {
	clock := stageClockOf(ctx)
	clock.done(stages.Decode)
	defer clock.resumed(time.Time{})
	args, err := json.Marshal(req.Body.Arguments)
	if err != nil {
		return nil, fmt.Errorf("%w: arguments: %v", errBadRequest, err)
	}
	res, err := s.pipeline.Call(ctx, req.Id, req.Name, deref(req.Body.CallId), args)
	if err != nil {
		return nil, err
	}
	return api.CallTool200JSONResponse(toAPIToolResult(res)), nil
}

// Exec runs a harness command. Background jobs answer 202 at once; foreground
// jobs answer 200 when they end, or still running once yieldMs has passed.
// The job outlives the request either way.
func (s *Server) Exec(ctx context.Context, req api.ExecRequestObject) (api.ExecResponseObject, error) {
	clock := stageClockOf(ctx)
	clock.done(stages.Decode)
	job, err := s.pipeline.Exec(ctx, fromAPIExecRequest(*req.Body, req.Params.IdempotencyKey))
	if err != nil {
		return nil, err
	}
	if job.Background() {
		return api.Exec202JSONResponse{
			Body:    toAPIJob(job.Snapshot()),
			Headers: api.Exec202ResponseHeaders{Location: "/jobs/" + job.ID()},
		}, nil
	}
	if req.Body.YieldMs != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, millis(req.Body.YieldMs))
		defer cancel()
	}
	snap := waitJob(ctx, job)
	clock.resumed(job.DoneAt())
	return jobAnswer(toAPIJob(snap)), nil
}

// waitJob waits for job to end or ctx to expire, and returns its state then.
// An expired ctx is not an error: the caller asked for the job as it stands.
func waitJob(ctx context.Context, job *exec.Job) exec.Snapshot {
	select {
	case <-job.Done():
	case <-ctx.Done():
	}
	return job.Snapshot()
}

// ListJobs lists jobs, optionally by agent and state. In cluster mode a
// request naming no agent (an agent's jobs all run at its home, where the
// forwarder sent the request) also lists the other replicas' jobs, and
// names those that did not answer.
func (s *Server) ListJobs(ctx context.Context, req api.ListJobsRequestObject) (api.ListJobsResponseObject, error) {
	var state exec.State
	if req.Params.State != nil {
		state = exec.State(*req.Params.State)
	}
	jobs := convertAll(s.jobs.Jobs(deref(req.Params.AgentId), state), toAPIJob)
	resp := api.ListJobs200JSONResponse{Body: jobs}
	if s.peers == nil || req.Params.AgentId != nil || servedForPeer(ctx) {
		return resp, nil
	}
	theirs, missing := s.peers.jobs(ctx, string(state))
	resp.Body = append(resp.Body, theirs...)
	slices.SortFunc(resp.Body, func(a, b api.Job) int { return strings.Compare(a.Id, b.Id) })
	if len(missing) > 0 {
		h := joinIDs(missing)
		resp.Headers.DshUnavailableReplicas = &h
	}
	return resp, nil
}

// GetJob returns a job, long-polling up to waitMs for it to end.
func (s *Server) GetJob(ctx context.Context, req api.GetJobRequestObject) (api.GetJobResponseObject, error) {
	job, err := s.jobs.Job(req.Id)
	if err != nil {
		return nil, err
	}
	snap := job.Snapshot()
	if req.Params.WaitMs != nil && snap.State == exec.StateRunning {
		wctx, cancel := context.WithTimeout(ctx, millis(req.Params.WaitMs))
		defer cancel()
		snap = waitJob(wctx, job)
	}
	return jobAnswer(toAPIJob(snap)), nil
}

// CancelJob cancels a job through the executor's kill path.
func (s *Server) CancelJob(ctx context.Context, req api.CancelJobRequestObject) (api.CancelJobResponseObject, error) {
	snap, err := s.jobs.Cancel(ctx, req.Id)
	if err != nil {
		return nil, err
	}
	if snap.State == exec.StateRunning {
		return api.CancelJob202JSONResponse(toAPIJob(snap)), nil
	}
	return api.CancelJob200JSONResponse(toAPIJob(snap)), nil
}

// WriteJobInput writes to a running job's input and optionally closes it.
func (s *Server) WriteJobInput(ctx context.Context, req api.WriteJobInputRequestObject) (api.WriteJobInputResponseObject, error) {
	data, err := fromAPIJobInput(*req.Body)
	if err != nil {
		return nil, err
	}
	if req.Body.TimeoutMs != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, millis(req.Body.TimeoutMs))
		defer cancel()
	}
	snap, err := s.jobs.WriteInput(ctx, req.Id, data, deref(req.Body.Close))
	if err != nil {
		return nil, err
	}
	if prefersMinimal(deref(req.Params.Prefer)) {
		applied := "return=minimal"
		return api.WriteJobInput204Response{Headers: api.WriteJobInput204ResponseHeaders{PreferenceApplied: &applied}}, nil
	}
	return api.WriteJobInput200JSONResponse(toAPIJob(snap)), nil
}

// prefersMinimal reports whether a Prefer header (RFC 7240: preferences
// separated by commas, each token[=value] with parameters after ';')
// asks for return=minimal.
func prefersMinimal(prefer string) bool {
	for _, p := range strings.Split(prefer, ",") {
		pref, _, _ := strings.Cut(p, ";")
		name, value, _ := strings.Cut(strings.TrimSpace(pref), "=")
		if strings.EqualFold(strings.TrimSpace(name), "return") &&
			strings.EqualFold(strings.Trim(strings.TrimSpace(value), `"`), "minimal") {
			return true
		}
	}
	return false
}

// ResizeJob resizes a running job's terminal.
func (s *Server) ResizeJob(_ context.Context, req api.ResizeJobRequestObject) (api.ResizeJobResponseObject, error) {
	snap, err := s.jobs.Resize(req.Id, int(req.Body.Cols), int(req.Body.Rows))
	if err != nil {
		return nil, err
	}
	return api.ResizeJob200JSONResponse(toAPIJob(snap)), nil
}

// SignalJob sends an allowlisted signal to a running job's process group.
func (s *Server) SignalJob(_ context.Context, req api.SignalJobRequestObject) (api.SignalJobResponseObject, error) {
	snap, err := s.jobs.Signal(req.Id, string(req.Body.Signal))
	if err != nil {
		return nil, err
	}
	return api.SignalJob200JSONResponse(toAPIJob(snap)), nil
}

// ListSkills lists local skills.
func (s *Server) ListSkills(ctx context.Context, _ api.ListSkillsRequestObject) (api.ListSkillsResponseObject, error) {
	ss, err := s.skills.List(ctx)
	if err != nil {
		return nil, err
	}
	return api.ListSkills200JSONResponse(toAPISkills(ss)), nil
}

// ListHooks lists configured hooks in the order they run.
func (s *Server) ListHooks(context.Context, api.ListHooksRequestObject) (api.ListHooksResponseObject, error) {
	return api.ListHooks200JSONResponse(toAPIHooks(s.hooks.Handlers())), nil
}
