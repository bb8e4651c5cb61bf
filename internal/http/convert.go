package httpapi

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/dshd/dshd/internal/agents"
	"github.com/dshd/dshd/internal/cluster/status"
	"github.com/dshd/dshd/internal/exec"
	"github.com/dshd/dshd/internal/hooks"
	"github.com/dshd/dshd/internal/http/api"
	"github.com/dshd/dshd/internal/limits"
	"github.com/dshd/dshd/internal/netallow"
	"github.com/dshd/dshd/internal/run"
	"github.com/dshd/dshd/internal/sandbox"
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

func millis[T int32 | int64](ms *T) time.Duration {
	if ms == nil {
		return 0
	}
	return time.Duration(*ms) * time.Millisecond
}

// lease converts an optional leaseSeconds. Absent is 0, the domain's
// default; a value given is passed on as it is, except that one below a
// second (which the domain would read as "default") is refused, so that an
// explicit 0 never silently becomes the default lease.
func lease(s *int32) (time.Duration, error) {
	if s == nil {
		return 0, nil
	}
	if *s < 1 {
		return 0, fmt.Errorf("%w: leaseSeconds %d is outside [%d, %d]", shellenv.ErrInvalidPlugin, *s,
			int(shellenv.MinLease/time.Second), int(shellenv.MaxLease/time.Second))
	}
	return time.Duration(*s) * time.Second, nil
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

// fromAPIContributorInput converts a registration. The resolver's kind
// picks its variant; a resolver that is none of them (the validator lets
// none through) is errBadRequest.
func fromAPIContributorInput(in api.ContributorInput) (shellenv.Spec, error) {
	s := shellenv.Spec{
		Name:   in.Name,
		Plugin: deref(in.Plugin),
		Keys:   make([]shellenv.KeySpec, len(in.Keys)),
	}
	for i, k := range in.Keys {
		s.Keys[i] = shellenv.KeySpec{Key: k.Key, Description: k.Description}
	}
	v, err := in.Resolver.ValueByDiscriminator()
	if err != nil {
		return s, fmt.Errorf("%w: resolver: %v", errBadRequest, err)
	}
	switch r := v.(type) {
	case api.StaticResolver:
		s.Resolver = shellenv.ResolverSpec{Kind: string(r.Kind), Values: deref(r.Values)}
	case api.TemplateResolver:
		s.Resolver = shellenv.ResolverSpec{Kind: string(r.Kind), Values: deref(r.Values)}
	case api.WebhookResolver:
		s.Resolver = shellenv.ResolverSpec{Kind: string(r.Kind), URL: deref(r.Url), Timeout: millis(r.TimeoutMs)}
	}
	return s, nil
}

// toAPIContributor converts a contributor to the variant its kind names:
// built-ins have no resolver, the others carry theirs.
func toAPIContributor(c shellenv.Contributor) (api.Contributor, error) {
	keys := make([]api.KeySpec, len(c.Keys))
	for i, k := range c.Keys {
		keys[i] = api.KeySpec{Key: k.Key, Description: k.Description}
	}
	plugin := optional(c.Plugin)
	var values *map[string]string
	if len(c.Resolver.Values) > 0 {
		values = &c.Resolver.Values
	}
	var (
		out api.Contributor
		err error
	)
	switch {
	case c.Builtin:
		err = out.FromBuiltinContributor(api.BuiltinContributor{
			Name: c.Name, Builtin: true, Kind: api.BuiltinContributorKindBuiltin, Plugin: plugin,
			Keys: keys, CreatedAt: c.CreatedAt, ExpiresAt: c.ExpiresAt,
		})
	case c.Resolver.Kind == string(api.StaticResolverKindStatic):
		err = out.FromStaticContributor(api.StaticContributor{
			Name: c.Name, Kind: api.StaticContributorKindStatic, Plugin: plugin,
			Keys: keys, CreatedAt: c.CreatedAt, ExpiresAt: c.ExpiresAt,
			Resolver: api.StaticResolver{Kind: api.StaticResolverKindStatic, Values: values},
		})
	case c.Resolver.Kind == string(api.TemplateResolverKindTemplate):
		err = out.FromTemplateContributor(api.TemplateContributor{
			Name: c.Name, Kind: api.TemplateContributorKindTemplate, Plugin: plugin,
			Keys: keys, CreatedAt: c.CreatedAt, ExpiresAt: c.ExpiresAt,
			Resolver: api.TemplateResolver{Kind: api.TemplateResolverKindTemplate, Values: values},
		})
	case c.Resolver.Kind == string(api.WebhookResolverKindWebhook):
		w := api.WebhookResolver{Kind: api.WebhookResolverKindWebhook, Url: optional(c.Resolver.URL)}
		if c.Resolver.Timeout > 0 {
			w.TimeoutMs = ptr(c.Resolver.Timeout.Milliseconds())
		}
		err = out.FromWebhookContributor(api.WebhookContributor{
			Name: c.Name, Kind: api.WebhookContributorKindWebhook, Plugin: plugin,
			Keys: keys, CreatedAt: c.CreatedAt, ExpiresAt: c.ExpiresAt,
			Resolver: w,
		})
	default:
		err = fmt.Errorf("resolver kind %q, which the contract does not know", c.Resolver.Kind)
	}
	if err != nil {
		return out, fmt.Errorf("convert contributor %s: %w", c.Name, err)
	}
	return out, nil
}

func toAPIPlugin(p shellenv.Plugin) api.Plugin {
	return api.Plugin{
		Id:           p.ID,
		Name:         p.Name,
		LeaseSeconds: int32(p.Lease / time.Second),
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
		Depth:     int32(a.Depth),
		Cwd:       a.Cwd,
		CreatedAt: a.CreatedAt,
		Sandbox:   toAPISandbox(a.Sandbox),
		Limits:    toAPIAgentLimits(a.Limits),
	}
}

// fromAPILimits are requested limits; nil requests none.
func fromAPILimits(in *api.Limits) limits.Limits {
	if in == nil {
		return limits.Limits{}
	}
	return limits.Limits{Pids: deref(in.Pids), MemoryBytes: deref(in.MemoryBytes), CPU: deref(in.Cpu)}
}

// toAPIAgentLimits are an agent's recorded limits; nil when none were.
func toAPIAgentLimits(l limits.Limits) *api.AgentLimits {
	if l.IsZero() {
		return nil
	}
	return &api.AgentLimits{Pids: optional(l.Pids), MemoryBytes: optional(l.MemoryBytes), Cpu: optional(l.CPU)}
}

// toAPIJobLimits are a job's limits in effect and how each is enforced;
// nil when it has none.
func toAPIJobLimits(l limits.Limits, e exec.LimitEnforcement) *api.JobLimits {
	if l.IsZero() {
		return nil
	}
	return &api.JobLimits{
		Pids:        optional(l.Pids),
		MemoryBytes: optional(l.MemoryBytes),
		Cpu:         optional(l.CPU),
		Enforcement: toAPIEnforcement(e),
	}
}

// toAPIEnforcement says how each limit is enforced; a limit without an
// enforcement ("") is absent.
func toAPIEnforcement(e exec.LimitEnforcement) api.JobLimitsEnforcement {
	enf := func(s string) *api.LimitEnforcement {
		if s == "" {
			return nil
		}
		return ptr(api.LimitEnforcement(s))
	}
	return api.JobLimitsEnforcement{Cpu: enf(e.CPU), MemoryBytes: enf(e.MemoryBytes), Pids: enf(e.Pids)}
}

// fromAPISandbox is a requested policy; nil requests nothing.
func fromAPISandbox(in *api.SandboxRequest) sandbox.Policy {
	var p sandbox.Policy
	if in != nil {
		if in.Policy != nil {
			p.FS = sandbox.FS(*in.Policy)
		}
		if in.Network != nil {
			p.Network = sandbox.Network(*in.Network)
		}
		if in.Allow != nil {
			p.Allow = sandbox.HostsOf(*in.Allow)
		}
	}
	return p
}

// toAPISandbox is a policy in effect; nil when p is not complete (an agent
// recorded before policies existed).
func toAPISandbox(p sandbox.Policy) *api.SandboxPolicy {
	if p.FS == "" || p.Network == "" {
		return nil
	}
	out := &api.SandboxPolicy{Policy: api.SandboxFS(p.FS), Network: api.SandboxNetwork(p.Network)}
	if !p.Allow.IsZero() {
		out.Allow = ptr(p.Allow.Entries())
	}
	return out
}

// toAPINetwork is what a job reached and was refused; nil for none.
func toAPINetwork(r *netallow.Record) *api.NetworkRecord {
	if r == nil {
		return nil
	}
	conv := func(hs []netallow.HostCount) []api.NetworkHostCount {
		out := make([]api.NetworkHostCount, len(hs))
		for i, h := range hs {
			out[i] = api.NetworkHostCount{Host: h.Host, Count: int64(h.Count), Reason: optional(h.Reason)}
		}
		return out
	}
	return &api.NetworkRecord{Reached: conv(r.Reached), Refused: conv(r.Refused)}
}

func toAPISandboxSupport(s sandbox.Support, def sandbox.Policy) api.SandboxSupport {
	out := api.SandboxSupport{Default: *toAPISandbox(def), Mechanism: optional(s.Mechanism), Seccomp: optional(s.Seccomp), Reason: optional(s.Reason)}
	for _, f := range s.Policies {
		out.Policies = append(out.Policies, api.SandboxFS(f))
	}
	for _, n := range s.Networks {
		out.Networks = append(out.Networks, api.SandboxNetwork(n))
	}
	return out
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

// execFingerprint is the fingerprint of an Exec request for its
// Idempotency-Key: a hash of its body in canonical form (every field of
// ExecRequest in declaration order, map keys sorted), so that a retry of the
// same request matches whatever its spacing or key order, and a request
// differing in any field does not.
func execFingerprint(in api.ExecRequest) string {
	b, err := json.Marshal(in)
	if err != nil { // strings, numbers and maps of strings always encode
		panic(fmt.Sprintf("encode exec request: %v", err))
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
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
	if r.IdempotencyKey != "" {
		r.IdempotencyFingerprint = execFingerprint(in)
	}
	if in.Stdin != nil {
		r.Stdin, r.HasStdin = []byte(*in.Stdin), true
	}
	r.Sandbox = fromAPISandbox(in.Sandbox)
	r.TTY, r.OpenStdin = deref(in.Tty), deref(in.OpenStdin)
	r.Cols, r.Rows = int(deref(in.Cols)), int(deref(in.Rows))
	r.Limits = fromAPILimits(in.Limits)
	return r
}

// fromAPIJobInput returns the bytes a write carries: data or base64, at
// most one of them (errBadRequest for both).
func fromAPIJobInput(in api.JobInputRequest) ([]byte, error) {
	switch {
	case in.Data != nil && in.Base64 != nil:
		return nil, fmt.Errorf("%w: give data or base64, not both", errBadRequest)
	case in.Data != nil:
		return []byte(*in.Data), nil
	case in.Base64 != nil:
		return *in.Base64, nil
	}
	return nil, nil
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
		Pid:        int32(s.PID),
		ExitCode:   int32Ptr(s.ExitCode),
		Signal:     optional(s.Signal),
		Stdout:     toAPIOutput(s.Stdout),
		Stderr:     toAPIOutput(s.Stderr),
		ManagedEnv: s.Managed.Map(),
		CreatedAt:  s.CreatedAt,
		StartedAt:  s.StartedAt,
		EndedAt:    s.EndedAt,
	}
	if s.Timeout > 0 {
		j.TimeoutMs = ptr(s.Timeout.Milliseconds())
	}
	if s.EndedAt != nil {
		j.DurationMs = ptr(s.Duration.Milliseconds())
		if s.State != exec.StateLost {
			j.Usage = &api.JobUsage{CpuMs: s.Usage.CPUTime.Milliseconds(), PeakMemoryBytes: optional(s.Usage.PeakMemoryBytes), PeakPids: optional(s.Usage.PeakPids)}
		}
	}
	j.Sandbox = toAPISandbox(s.Sandbox)
	j.Network = toAPINetwork(s.Network)
	j.Limits = toAPIJobLimits(s.Limits, s.Enforcement)
	if t := s.Terminal; t != nil {
		j.Terminal = &api.JobTerminal{Cols: int32(t.Cols), Rows: int32(t.Rows), Term: t.Term}
	}
	if in := s.Input; in != nil {
		j.Input = &api.JobInput{Open: in.Open, Bytes: in.Bytes, Writes: in.Writes, Closed: in.Closed}
		if !in.LastWriteAt.IsZero() {
			j.Input.LastWriteAt = ptr(in.LastWriteAt)
		}
		if in.Text != "" || in.Truncated {
			j.Input.Text, j.Input.Truncated = ptr(in.Text), ptr(in.Truncated)
		}
	}
	if s.KilledBy != "" {
		j.KilledBy = ptr(api.JobKilledBy(s.KilledBy))
	}
	if r := s.Remaining; r != nil {
		j.Remaining = &api.JobRemaining{Processes: int32(r.Processes), Since: r.Since}
	}
	return j
}

func toAPIToolResult(r run.CallResult) api.ToolResult {
	return api.ToolResult{
		CallId:   r.CallID,
		IsError:  r.IsError,
		Text:     r.Text,
		JobId:    optional(r.JobID),
		ExitCode: int32Ptr(r.ExitCode),

		AdditionalContext: optionalSlice(r.AdditionalContext),
		SystemMessages:    optionalSlice(r.SystemMessages),
	}
}

// optionalSlice returns nil for an empty slice, so an omitempty pointer
// field is left out.
// int32Ptr converts an optional int (an exit code) to the contract's int32.
func int32Ptr(p *int) *int32 {
	if p == nil {
		return nil
	}
	return ptr(int32(*p))
}

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
			TimeoutSeconds: int32(h.Timeout / time.Second),
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
	if len(c.V1Controllers) > 0 {
		v1 := make([]api.ContainmentV1Controllers, 0, len(c.V1Controllers))
		for _, ctl := range c.V1Controllers {
			v1 = append(v1, api.ContainmentV1Controllers(ctl))
		}
		out.V1Controllers = &v1
	}
	if c.Reason != "" {
		out.Reason = &c.Reason
	}
	if c.Limits != (exec.LimitEnforcement{}) {
		e := toAPIEnforcement(c.Limits)
		out.Limits = &e
	}
	return out
}

// toAPIClusterStatus converts a replica's view of its cluster; now dates
// the heartbeats' ages.
func toAPIClusterStatus(st status.Status, now time.Time) api.ClusterStatus {
	out := api.ClusterStatus{
		ReplicaId:        st.ReplicaID,
		Connected:        st.Connected,
		Replicas:         make([]api.ClusterReplica, 0, len(st.Replicas)),
		RegistryRevision: int64(st.RegistryRevision),
		RegistryLag:      int64(st.Lag),
	}
	if st.AdvertiseURL != "" {
		out.AdvertiseUrl = ptr(st.AdvertiseURL)
	}
	if st.DuplicateID {
		out.DuplicateReplicaId = ptr(true)
	}
	if !st.SampledAt.IsZero() {
		out.SampledAt = ptr(st.SampledAt.UTC())
		out.StoreRevision = ptr(int64(st.StoreRevision))
	}
	var degraded []api.ClusterStatusDegraded
	if !st.Connected {
		degraded = append(degraded, api.NatsDisconnected)
		if !st.DownSince.IsZero() {
			out.DisconnectedSince = ptr(st.DownSince.UTC())
		}
	}
	if !st.ViewFrozenSince.IsZero() {
		degraded = append(degraded, api.HeartbeatsFrozen)
		out.HeartbeatsFrozenSince = ptr(st.ViewFrozenSince.UTC())
	}
	if st.DuplicateID {
		degraded = append(degraded, api.DuplicateReplicaId)
	}
	if len(degraded) > 0 {
		out.Degraded = &degraded
	}
	for _, r := range st.Replicas {
		out.Replicas = append(out.Replicas, api.ClusterReplica{
			Id: r.ID, Url: r.URL, StartedAt: r.StartedAt.UTC(),
			LastSeenMs:       max(now.Sub(r.LastSeen).Milliseconds(), 0),
			RegistryRevision: int64(r.RegistryRevision),
			Self:             r.Self,
		})
	}
	return out
}
