package httpapi

import (
	"strings"
	"time"

	"github.com/dshd/dshd/internal/agents"
	"github.com/dshd/dshd/internal/exec"
	"github.com/dshd/dshd/internal/hooks"
	"github.com/dshd/dshd/internal/http/api"
	"github.com/dshd/dshd/internal/run"
	"github.com/dshd/dshd/internal/shellenv"
	"github.com/dshd/dshd/internal/skills"
)

// optional returns nil for the zero value, so JSON says null.
func optional[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}

// convertAll converts each element of in with f.
func convertAll[T, U any](in []T, f func(T) U) []U {
	out := make([]U, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}

func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

func millis(ms *int) time.Duration {
	if ms == nil {
		return 0
	}
	return time.Duration(*ms) * time.Millisecond
}

func seconds(s *int) time.Duration {
	if s == nil {
		return 0
	}
	return time.Duration(*s) * time.Second
}

func toAPIDeclarations(ds []shellenv.Declaration) api.DeclarationList {
	out := api.DeclarationList{Prefix: shellenv.Prefix, Declarations: make([]api.Declaration, len(ds))}
	for i, d := range ds {
		out.Declarations[i] = api.Declaration{
			Key:         d.Key,
			Description: d.Description,
			Contributor: d.Contributor,
			Builtin:     d.Builtin,
			Plugin:      optional(d.Plugin),
			ExpiresAt:   d.ExpiresAt,
			Kind:        api.DeclarationKind(d.Kind),
			Template:    optional(d.Template),
			WebhookUrl:  optional(d.WebhookURL),
		}
	}
	return out
}

func fromAPIContributorInput(in api.ContributorInput) shellenv.Spec {
	s := shellenv.Spec{
		Name:   in.Name,
		Plugin: deref(in.Plugin),
		Keys:   make([]shellenv.KeySpec, len(in.Keys)),
		Resolver: shellenv.ResolverSpec{
			Kind:    in.Resolver.Kind,
			Values:  deref(in.Resolver.Values),
			URL:     deref(in.Resolver.Url),
			Timeout: millis(in.Resolver.TimeoutMs),
		},
	}
	for i, k := range in.Keys {
		s.Keys[i] = shellenv.KeySpec{Key: k.Key, Description: k.Description}
	}
	return s
}

func toAPIContributor(c shellenv.Contributor) api.Contributor {
	out := api.Contributor{
		Name:      c.Name,
		Builtin:   c.Builtin,
		Kind:      c.Kind,
		Plugin:    optional(c.Plugin),
		Keys:      make([]api.KeySpec, len(c.Keys)),
		CreatedAt: c.CreatedAt,
		ExpiresAt: c.ExpiresAt,
	}
	for i, k := range c.Keys {
		out.Keys[i] = api.KeySpec{Key: k.Key, Description: k.Description}
	}
	if !c.Builtin {
		r := &api.Resolver{Kind: c.Resolver.Kind, Url: optional(c.Resolver.URL)}
		if len(c.Resolver.Values) > 0 {
			r.Values = &c.Resolver.Values
		}
		if c.Resolver.Timeout > 0 {
			r.TimeoutMs = ptr(int(c.Resolver.Timeout / time.Millisecond))
		}
		out.Resolver = r
	}
	return out
}

func toAPIPlugin(p shellenv.Plugin) api.Plugin {
	return api.Plugin{
		Id:           p.ID,
		Name:         p.Name,
		LeaseSeconds: int(p.Lease / time.Second),
		CreatedAt:    p.CreatedAt,
		ExpiresAt:    p.ExpiresAt,
		Contributors: append([]string{}, p.Contributors...),
	}
}

func toAPIAgent(a agents.Agent) api.Agent {
	return api.Agent{
		Id:        a.ID,
		ParentId:  optional(a.ParentID),
		RootId:    a.RootID,
		Origin:    api.AgentOrigin(a.Origin),
		Depth:     a.Depth,
		Cwd:       a.Cwd,
		CreatedAt: a.CreatedAt,
	}
}

// toAPISession is an agent with what its SessionStart hooks said.
func toAPISession(s run.Session) api.Agent {
	a := toAPIAgent(s.Agent)
	a.SessionStart = &api.HookOutput{
		AdditionalContext: nonNil(s.AdditionalContext),
		SystemMessages:    nonNil(s.SystemMessages),
	}
	return a
}

// nonNil returns s, or an empty slice for nil, so JSON says [] rather than null.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func fromAPIExecRequest(in api.ExecRequest, idempotencyKey *string) run.ExecRequest {
	r := run.ExecRequest{
		Command:        in.Command,
		AgentID:        deref(in.AgentId),
		Cwd:            deref(in.Cwd),
		Env:            deref(in.Env),
		Timeout:        millis(in.TimeoutMs),
		Background:     deref(in.Background),
		IdempotencyKey: deref(idempotencyKey),
	}
	if in.Stdin != nil {
		r.Stdin, r.HasStdin = []byte(*in.Stdin), true
	}
	return r
}

func toAPIOutput(o exec.Output) api.Output {
	out := api.Output{Text: o.Text, TotalBytes: o.TotalBytes, Truncated: o.Truncated, DroppedBytes: optional(o.Dropped)}
	if o.Dropped > 0 && o.DropReason != "" {
		out.DroppedReason = ptr(api.OutputDroppedReason(o.DropReason))
	}
	return out
}

func toAPIJob(s exec.Snapshot) api.Job {
	j := api.Job{
		Id:         s.ID,
		State:      api.JobState(s.State),
		Command:    s.Command,
		AgentId:    optional(s.AgentID),
		Background: s.Background,
		Cwd:        s.Cwd,
		Pid:        s.PID,
		ExitCode:   s.ExitCode,
		Signal:     optional(s.Signal),
		Stdout:     toAPIOutput(s.Stdout),
		Stderr:     toAPIOutput(s.Stderr),
		ManagedEnv: make(map[string]string, len(s.Managed)),
		CreatedAt:  s.CreatedAt,
		StartedAt:  s.StartedAt,
		EndedAt:    s.EndedAt,
	}
	for _, kv := range s.Managed {
		k, v, _ := strings.Cut(kv, "=")
		j.ManagedEnv[k] = v
	}
	if s.Timeout > 0 {
		j.TimeoutMs = ptr(s.Timeout.Milliseconds())
	}
	if s.EndedAt != nil {
		j.DurationMs = ptr(s.Duration.Milliseconds())
	}
	return j
}

func toAPIToolResult(r run.CallResult) api.ToolResult {
	return api.ToolResult{
		CallId:   r.CallID,
		IsError:  r.IsError,
		Text:     r.Text,
		JobId:    optional(r.JobID),
		ExitCode: r.ExitCode,

		AdditionalContext: optionalSlice(r.AdditionalContext),
		SystemMessages:    optionalSlice(r.SystemMessages),
	}
}

// optionalSlice returns nil for an empty slice, so an omitempty pointer
// field is left out.
func optionalSlice(s []string) *[]string {
	if len(s) == 0 {
		return nil
	}
	return &s
}

func toAPIHooks(hs []hooks.Handler) []api.Hook {
	out := make([]api.Hook, len(hs))
	for i, h := range hs {
		out[i] = api.Hook{
			Name:           h.Name,
			Dialect:        api.HookDialect(h.Dialect),
			Event:          string(h.Event),
			Matcher:        h.Matcher,
			Command:        h.Command,
			TimeoutSeconds: int(h.Timeout / time.Second),
		}
	}
	return out
}

func toAPISkills(ss []skills.Skill) []api.Skill {
	out := make([]api.Skill, len(ss))
	for i, s := range ss {
		out[i] = api.Skill{Name: s.Name, Description: s.Description, Path: s.Path}
	}
	return out
}

func toAPIContainment(c exec.ContainmentInfo) api.Containment {
	out := api.Containment{
		Requested:   api.ContainmentRequested(c.Requested),
		Mode:        api.ContainmentMode(c.Mode),
		Controllers: make([]api.ContainmentControllers, 0, len(c.Controllers)),
		Subreaper:   c.Subreaper,
	}
	for _, ctl := range c.Controllers {
		out.Controllers = append(out.Controllers, api.ContainmentControllers(ctl))
	}
	if c.Reason != "" {
		out.Reason = &c.Reason
	}
	return out
}
