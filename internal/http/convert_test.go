package httpapi

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dshd/dshd/internal/cluster/status"
	"github.com/dshd/dshd/internal/exec"
	"github.com/dshd/dshd/internal/http/api"
	"github.com/dshd/dshd/internal/run"
	"github.com/dshd/dshd/internal/shellenv"
)

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func withRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey, id)
}

func TestToAPIJob(t *testing.T) {
	created := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	ended := created.Add(1500 * time.Millisecond)
	tests := []struct {
		name string
		in   exec.Snapshot
		want api.Job
	}{
		{
			name: "running without agent",
			in: exec.Snapshot{ID: "job_1", Command: "sleep 9", Cwd: "/w", State: exec.StateRunning, PID: 42,
				Managed: shellenv.NewOverlay(map[string]string{"DSH_HOME": "/h", "DSH_SHELL": "1", "DSH_X": "a=b"}), CreatedAt: created, StartedAt: created},
			want: api.Job{Id: "job_1", Command: "sleep 9", Cwd: "/w", State: "running", Pid: 42,
				ManagedEnv: map[string]string{"DSH_HOME": "/h", "DSH_SHELL": "1", "DSH_X": "a=b"}, CreatedAt: created, StartedAt: created},
		},
		{
			name: "killed by signal",
			in: exec.Snapshot{ID: "job_2", AgentID: "agt_1", State: exec.StateCancelled, Signal: "SIGTERM", Timeout: 5 * time.Second,
				Stdout:    exec.Output{Text: "x", TotalBytes: 10, Truncated: true, Dropped: 3},
				CreatedAt: created, StartedAt: created, EndedAt: &ended, Duration: 1500 * time.Millisecond,
				Usage: exec.Usage{CPUTime: 12 * time.Millisecond}, KilledBy: exec.KilledByCancel},
			want: api.Job{Id: "job_2", AgentId: ptr("agt_1"), State: "cancelled", Signal: ptr("SIGTERM"), TimeoutMs: ptr(int64(5000)),
				Stdout:     api.Output{Text: "x", TotalBytes: 10, Truncated: true, DroppedBytes: ptr(int64(3))},
				ManagedEnv: map[string]string{}, CreatedAt: created, StartedAt: created, EndedAt: &ended, DurationMs: ptr(int64(1500)),
				Usage: &api.JobUsage{CpuMs: 12}, KilledBy: ptr(api.JobKilledBy("cancelled"))},
		},
		{
			name: "out of memory",
			in: exec.Snapshot{ID: "job_3", State: exec.StateExited, Signal: "SIGKILL", CreatedAt: created, StartedAt: created, EndedAt: &ended,
				Duration: 1500 * time.Millisecond, Usage: exec.Usage{CPUTime: time.Second, PeakMemoryBytes: 64 << 20}, KilledBy: exec.KilledByOOM},
			want: api.Job{Id: "job_3", State: "exited", Signal: ptr("SIGKILL"), ManagedEnv: map[string]string{}, CreatedAt: created, StartedAt: created,
				EndedAt: &ended, DurationMs: ptr(int64(1500)), Usage: &api.JobUsage{CpuMs: 1000, PeakMemoryBytes: ptr(int64(64 << 20))},
				KilledBy: ptr(api.JobKilledBy("oom"))},
		},
		{
			name: "lost",
			in:   exec.Snapshot{ID: "job_4", State: exec.StateLost, CreatedAt: created, StartedAt: created, EndedAt: &ended, Duration: 1500 * time.Millisecond},
			want: api.Job{Id: "job_4", State: "lost", ManagedEnv: map[string]string{}, CreatedAt: created, StartedAt: created,
				EndedAt: &ended, DurationMs: ptr(int64(1500))},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, toAPIJob(tt.in)); diff != "" {
				t.Errorf("toAPIJob (-want +got):\n%s", diff)
			}
		})
	}
}

// TestExecFingerprint: the fingerprint of a request ignores how its body
// was spelled and changes with any field that defines the execution.
func TestExecFingerprint(t *testing.T) {
	parse := func(body string) string {
		var in api.ExecRequest
		if err := json.Unmarshal([]byte(body), &in); err != nil {
			t.Fatal(err)
		}
		return execFingerprint(in)
	}
	base := parse(`{"command":"echo hi","env":{"A":"1","B":"2"}}`)
	if got := parse(`{ "env": {"B":"2", "A":"1"}, "command": "echo hi" }`); got != base {
		t.Errorf("the same request spelled differently has another fingerprint")
	}
	for _, body := range []string{
		`{"command":"echo ho","env":{"A":"1","B":"2"}}`,
		`{"command":"echo hi","env":{"A":"1","B":"3"}}`,
		`{"command":"echo hi","env":{"A":"1","B":"2"},"background":true}`,
		`{"command":"echo hi","env":{"A":"1","B":"2"},"agentId":"agt_1"}`,
		`{"command":"echo hi","env":{"A":"1","B":"2"},"cwd":"/tmp"}`,
		`{"command":"echo hi","env":{"A":"1","B":"2"},"stdin":""}`,
		`{"command":"echo hi","env":{"A":"1","B":"2"},"timeoutMs":5}`,
		`{"command":"echo hi","env":{"A":"1","B":"2"},"yieldMs":5}`,
		`{"command":"echo hi","env":{"A":"1","B":"2"},"limits":{"pids":5}}`,
	} {
		if parse(body) == base {
			t.Errorf("%s has the fingerprint of the base request", body)
		}
	}
}

func TestFromAPIExecRequest(t *testing.T) {
	got := fromAPIExecRequest(api.ExecRequest{
		Command: "cat", AgentId: ptr("agt_1"), Cwd: ptr("/w"), Env: &map[string]string{"A": "1"},
		Stdin: ptr(""), TimeoutMs: ptr(int64(1500)), Background: ptr(true),
	}, ptr("key-1"))
	if !strings.HasPrefix(got.IdempotencyFingerprint, "sha256:") {
		t.Errorf("fingerprint = %q, want a sha256", got.IdempotencyFingerprint)
	}
	got.IdempotencyFingerprint = ""
	want := run.ExecRequest{Command: "cat", AgentID: "agt_1", Cwd: "/w", Env: map[string]string{"A": "1"},
		Stdin: []byte{}, HasStdin: true, Timeout: 1500 * time.Millisecond, Background: true, IdempotencyKey: "key-1"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("fromAPIExecRequest (-want +got):\n%s", diff)
	}
	if got := fromAPIExecRequest(api.ExecRequest{Command: "true"}, nil); got.HasStdin || got.Stdin != nil || got.Limits != (exec.Limits{}) {
		t.Errorf("absent stdin and limits became %+v", got)
	}
	// A share no float32 holds: limits keep the exact value given, both ways.
	const cpu = 4.908383222582934
	got = fromAPIExecRequest(api.ExecRequest{Command: "true", Limits: &api.Limits{Pids: ptr(int64(64)), MemoryBytes: ptr(int64(1 << 28)), Cpu: ptr(cpu)}}, nil)
	if want := (exec.Limits{Pids: 64, MemoryBytes: 1 << 28, CPU: cpu}); got.Limits != want {
		t.Errorf("limits = %+v, want %+v", got.Limits, want)
	}
	if a := toAPIAgentLimits(got.Limits); a == nil || a.Cpu == nil || *a.Cpu != cpu {
		t.Errorf("agent limits = %+v, want cpu %v exactly", a, cpu)
	}
	if j := toAPIJobLimits(got.Limits, exec.LimitEnforcement{}); j == nil || j.Cpu == nil || *j.Cpu != cpu {
		t.Errorf("job limits = %+v, want cpu %v exactly", j, cpu)
	}
}

func TestParseEventID(t *testing.T) {
	tests := []struct {
		id       string
		want     [2]int64
		wantExit bool
		wantErr  bool
	}{
		{"0.0", [2]int64{0, 0}, false, false},
		{"123.45", [2]int64{123, 45}, false, false},
		{"123.45.exit", [2]int64{123, 45}, true, false},
		{"12", [2]int64{}, false, true},
		{"12.exit", [2]int64{}, false, true},
		{"1.2.3", [2]int64{}, false, true},
		{"1.2.exit.exit", [2]int64{}, false, true},
		{"a.b", [2]int64{}, false, true},
		{"-1.0", [2]int64{}, false, true},
	}
	for _, tt := range tests {
		got, exit, err := parseEventID(tt.id)
		if (err != nil) != tt.wantErr || got != tt.want || exit != tt.wantExit {
			t.Errorf("parseEventID(%q) = %v, %v, %v; want %v, %v, err %v", tt.id, got, exit, err, tt.want, tt.wantExit, tt.wantErr)
		}
	}
}

func TestWholeRunes(t *testing.T) {
	euro := "€" // 3 bytes
	tests := []struct {
		in, want string
	}{
		{"abc", "abc"},
		{"ab" + euro, "ab" + euro},
		{"ab" + euro[:1], "ab"},
		{"ab" + euro[:2], "ab"},
		{"\xff\xfe", "\xff\xfe"}, // invalid bytes never complete: pass them on
		{"", ""},
	}
	for _, tt := range tests {
		if got := string(wholeRunes([]byte(tt.in))); got != tt.want {
			t.Errorf("wholeRunes(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestToAPIContainment(t *testing.T) {
	reason := "no usable cgroup v2 subtree: no cgroup2 mount"
	for _, tc := range []struct {
		name string
		in   exec.ContainmentInfo
		want api.Containment
	}{
		{
			"cgroup",
			exec.ContainmentInfo{Requested: "auto", Mode: "cgroup", CgroupDir: "/sys/fs/cgroup/x", Controllers: []string{"memory", "pids"},
				Limits: exec.LimitEnforcement{Pids: "cgroup", MemoryBytes: "cgroup", CPU: "watcher"}},
			api.Containment{Requested: "auto", Mode: "cgroup", Controllers: []api.ContainmentControllers{"memory", "pids"},
				Limits: &api.JobLimitsEnforcement{Pids: ptr(api.LimitEnforcementCgroup), MemoryBytes: ptr(api.LimitEnforcementCgroup), Cpu: ptr(api.LimitEnforcementWatcher)}},
		},
		{
			"hybrid",
			exec.ContainmentInfo{Requested: "cgroup", Mode: "cgroup", CgroupDir: "/sys/fs/cgroup/unified/x", V1Controllers: []string{"cpu", "memory", "pids"},
				Limits: exec.LimitEnforcement{Pids: "cgroup_v1", MemoryBytes: "cgroup_v1", CPU: "cgroup_v1"}},
			api.Containment{Requested: "cgroup", Mode: "cgroup", Controllers: []api.ContainmentControllers{},
				V1Controllers: &[]api.ContainmentV1Controllers{"cpu", "memory", "pids"},
				Limits:        &api.JobLimitsEnforcement{Pids: ptr(api.LimitEnforcementCgroupV1), MemoryBytes: ptr(api.LimitEnforcementCgroupV1), Cpu: ptr(api.LimitEnforcementCgroupV1)}},
		},
		{
			"fallback",
			exec.ContainmentInfo{Requested: "auto", Mode: "group", Reason: reason, Subreaper: true},
			api.Containment{Requested: "auto", Mode: "group", Reason: &reason, Controllers: []api.ContainmentControllers{}, Subreaper: true},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, toAPIContainment(tc.in)); diff != "" {
				t.Errorf("toAPIContainment (-want +got):\n%s", diff)
			}
		})
	}
}

// TestResolverRoundTrip converts each resolver variant from its JSON body to
// the domain and back to the JSON the contract describes.
func TestResolverRoundTrip(t *testing.T) {
	tests := []struct {
		name     string
		resolver string
		want     shellenv.ResolverSpec
	}{
		{"static", `{"kind":"static","values":{"DSH_A":"a"}}`, shellenv.ResolverSpec{Kind: "static", Values: map[string]string{"DSH_A": "a"}}},
		{"template", `{"kind":"template","values":{"DSH_A":"{agent.id}"}}`, shellenv.ResolverSpec{Kind: "template", Values: map[string]string{"DSH_A": "{agent.id}"}}},
		{"webhook", `{"kind":"webhook","timeoutMs":500,"url":"http://127.0.0.1:9/f"}`, shellenv.ResolverSpec{Kind: "webhook", URL: "http://127.0.0.1:9/f", Timeout: 500 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var in api.ContributorInput
			body := `{"name":"c","keys":[{"key":"DSH_A","description":"d"}],"resolver":` + tt.resolver + `}`
			if err := json.Unmarshal([]byte(body), &in); err != nil {
				t.Fatal(err)
			}
			spec, err := fromAPIContributorInput(in)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, spec.Resolver); diff != "" {
				t.Errorf("domain resolver (-want +got):\n%s", diff)
			}
			out, err := toAPIContributor(shellenv.Contributor{Name: "c", Kind: tt.want.Kind, Resolver: tt.want})
			if err != nil {
				t.Fatal(err)
			}
			b, err := json.Marshal(out)
			if err != nil {
				t.Fatal(err)
			}
			var fields struct {
				Kind     string          `json:"kind"`
				Resolver json.RawMessage `json:"resolver"`
			}
			if err := json.Unmarshal(b, &fields); err != nil {
				t.Fatal(err)
			}
			if string(fields.Resolver) != tt.resolver {
				t.Errorf("API resolver = %s, want %s", fields.Resolver, tt.resolver)
			}
			if fields.Kind != tt.want.Kind {
				t.Errorf("API contributor kind = %q, want %q", fields.Kind, tt.want.Kind)
			}
		})
	}
	if _, err := toAPIContributor(shellenv.Contributor{Name: "c", Kind: "mystery", Resolver: shellenv.ResolverSpec{Kind: "mystery"}}); err == nil {
		t.Error("a resolver kind the contract does not know converted without error")
	}
}

// TestContributorVariants converts a built-in and one contributor of each
// resolver kind, and checks that each comes out as its own variant of the
// contract's discriminated Contributor, with the fields of that variant.
func TestContributorVariants(t *testing.T) {
	created := time.Date(2026, 12, 1, 10, 40, 58, 0, time.UTC)
	keys := []shellenv.KeySpec{{Key: "DSH_A", Description: "d"}}
	tests := []struct {
		name string
		in   shellenv.Contributor
		want any
	}{
		{"builtin", shellenv.Contributor{Name: "dsh.home", Builtin: true, Kind: "builtin", Keys: keys, CreatedAt: created},
			api.BuiltinContributor{Name: "dsh.home", Builtin: true, Kind: "builtin", Keys: []api.KeySpec{{Key: "DSH_A", Description: "d"}}, CreatedAt: created}},
		{"static", shellenv.Contributor{Name: "s", Kind: "static", Plugin: "plg_1", Keys: keys, CreatedAt: created, Resolver: shellenv.ResolverSpec{Kind: "static", Values: map[string]string{"DSH_A": "a"}}},
			api.StaticContributor{Name: "s", Kind: "static", Plugin: ptr("plg_1"), Keys: []api.KeySpec{{Key: "DSH_A", Description: "d"}}, CreatedAt: created,
				Resolver: api.StaticResolver{Kind: "static", Values: &map[string]string{"DSH_A": "a"}}}},
		{"template", shellenv.Contributor{Name: "t", Kind: "template", Keys: keys, CreatedAt: created, Resolver: shellenv.ResolverSpec{Kind: "template"}},
			api.TemplateContributor{Name: "t", Kind: "template", Keys: []api.KeySpec{{Key: "DSH_A", Description: "d"}}, CreatedAt: created,
				Resolver: api.TemplateResolver{Kind: "template"}}},
		{"webhook", shellenv.Contributor{Name: "w", Kind: "webhook", Keys: keys, CreatedAt: created, Resolver: shellenv.ResolverSpec{Kind: "webhook", URL: "http://127.0.0.1:9/f", Timeout: time.Second}},
			api.WebhookContributor{Name: "w", Kind: "webhook", Keys: []api.KeySpec{{Key: "DSH_A", Description: "d"}}, CreatedAt: created,
				Resolver: api.WebhookResolver{Kind: "webhook", Url: ptr("http://127.0.0.1:9/f"), TimeoutMs: ptr(int64(1000))}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := toAPIContributor(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			got, err := out.ValueByDiscriminator()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("contributor variant (-want +got):\n%s", diff)
			}
		})
	}
}

func TestToAPIClusterStatus(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 10, 0, time.UTC)
	started := now.Add(-time.Hour)
	st := status.Status{
		ReplicaID: "vm-a", AdvertiseURL: "http://10.0.0.11:7433", Connected: true,
		RegistryRevision: 40, StoreRevision: 42, Lag: 2, SampledAt: now.Add(-500 * time.Millisecond),
		Replicas: []status.Replica{
			{ID: "vm-a", URL: "http://10.0.0.11:7433", StartedAt: started, LastSeen: now.Add(-300 * time.Millisecond), RegistryRevision: 40, Self: true},
			{ID: "vm-b", URL: "http://10.0.0.12:7433", StartedAt: started, LastSeen: now.Add(time.Millisecond), RegistryRevision: 42},
		},
	}
	want := api.ClusterStatus{
		ReplicaId: "vm-a", AdvertiseUrl: ptr("http://10.0.0.11:7433"), Connected: true,
		RegistryRevision: 40, StoreRevision: ptr(int64(42)), RegistryLag: 2, SampledAt: ptr(now.Add(-500 * time.Millisecond)),
		Replicas: []api.ClusterReplica{
			{Id: "vm-a", Url: "http://10.0.0.11:7433", StartedAt: started, LastSeenMs: 300, RegistryRevision: 40, Self: true},
			// A heartbeat stamped after now (clock step) is not negative.
			{Id: "vm-b", Url: "http://10.0.0.12:7433", StartedAt: started, LastSeenMs: 0, RegistryRevision: 42},
		},
	}
	if diff := cmp.Diff(want, toAPIClusterStatus(st, now)); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
	// Never sampled: no store revision or time; no replicas is an empty list.
	got := toAPIClusterStatus(status.Status{ReplicaID: "vm-a"}, now)
	if got.SampledAt != nil || got.StoreRevision != nil || got.Replicas == nil || got.DuplicateReplicaId != nil {
		t.Errorf("unsampled status: %+v", got)
	}
	// Degraded: what is, and since when; nothing when all is well.
	if got := toAPIClusterStatus(st, now); got.Degraded != nil || got.DisconnectedSince != nil || got.HeartbeatsFrozenSince != nil {
		t.Errorf("healthy status says degraded: %+v", got)
	}
	down, frozen := now.Add(-3*time.Second), now.Add(-4*time.Second)
	got = toAPIClusterStatus(status.Status{ReplicaID: "vm-a", DownSince: down, ViewFrozenSince: frozen, DuplicateID: true}, now)
	wantDegraded := []api.ClusterStatusDegraded{api.NatsDisconnected, api.HeartbeatsFrozen, api.DuplicateReplicaId}
	if got.Degraded == nil || !cmp.Equal(*got.Degraded, wantDegraded) || got.DisconnectedSince == nil || !got.DisconnectedSince.Equal(down) || got.HeartbeatsFrozenSince == nil || !got.HeartbeatsFrozenSince.Equal(frozen) {
		t.Errorf("degraded status: %+v", got)
	}
}
