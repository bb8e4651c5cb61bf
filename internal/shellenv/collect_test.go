package shellenv

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCollect(t *testing.T) {
	r, _ := mustNew(t, Options{})
	mustRegister(t, r, Spec{
		Name: "plain",
		Keys: []KeySpec{{"DSH_PLAIN_A", "set"}, {"DSH_PLAIN_B", "declared, never set"}},
		Resolver: ResolverSpec{Kind: KindStatic, Values: map[string]string{
			"DSH_PLAIN_A": "a value with = and spaces",
		}},
	})
	mustRegister(t, r, Spec{
		Name: "facts",
		Keys: []KeySpec{
			{"DSH_T_AGENT", "d"}, {"DSH_T_PARENT", "d"}, {"DSH_T_ROOT", "d"}, {"DSH_T_ACWD", "d"},
			{"DSH_T_DEPTH", "d"}, {"DSH_T_JOB", "d"}, {"DSH_T_BRACES", "d"}, {"DSH_T_CONST", "d"},
		},
		Resolver: ResolverSpec{Kind: KindTemplate, Values: map[string]string{
			"DSH_T_AGENT":  "{agent.id}",
			"DSH_T_PARENT": "parent={agent.parentId}",
			"DSH_T_ROOT":   "{agent.rootId}",
			"DSH_T_ACWD":   "{agent.cwd}",
			"DSH_T_DEPTH":  "d{agent.depth}",
			"DSH_T_JOB":    "job {job.id} bg={job.background} in {job.cwd}",
			"DSH_T_BRACES": "{{literal}} }} {agent.id}",
			"DSH_T_CONST":  "no facts",
		}},
	})

	common := map[string]string{
		"DSH_PLAIN_A": "a value with = and spaces",
		"DSH_T_CONST": "no facts",
	}
	tests := []struct {
		name string
		x    Execution
		want map[string]string // in addition to common and the built-ins
	}{
		{
			name: "no agent",
			x:    Execution{JobID: "job_1", Cwd: "/w", Command: "true"},
			want: map[string]string{"DSH_T_JOB": "job job_1 bg=false in /w"},
		},
		{
			name: "no agent, no cwd",
			x:    Execution{JobID: "job_1", Background: true},
		},
		{
			name: "root agent",
			x: Execution{JobID: "job_2", Cwd: "/w", Background: true,
				Agent: &Agent{ID: "agt_root", Cwd: "/a", Depth: 0}},
			want: map[string]string{
				KeySessionID:   "agt_root",
				"DSH_T_AGENT":  "agt_root",
				"DSH_T_ROOT":   "agt_root",
				"DSH_T_ACWD":   "/a",
				"DSH_T_DEPTH":  "d0",
				"DSH_T_JOB":    "job job_2 bg=true in /w",
				"DSH_T_BRACES": "{literal} } agt_root",
			},
		},
		{
			name: "child agent",
			x: Execution{JobID: "job_3", Cwd: "/w",
				Agent: &Agent{ID: "agt_child", ParentID: "agt_root", RootID: "agt_root", Cwd: "/c", Depth: 12}},
			want: map[string]string{
				KeySessionID:   "agt_child",
				"DSH_T_AGENT":  "agt_child",
				"DSH_T_PARENT": "parent=agt_root",
				"DSH_T_ROOT":   "agt_root",
				"DSH_T_ACWD":   "/c",
				"DSH_T_DEPTH":  "d12",
				"DSH_T_JOB":    "job job_3 bg=false in /w",
				"DSH_T_BRACES": "{literal} } agt_child",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := mustCollect(t, r, tt.x)
			agentID := ""
			if tt.x.Agent != nil {
				agentID = tt.x.Agent.ID
			}
			want := builtinOverlay(agentID)
			for k, v := range common {
				want[k] = v
			}
			for k, v := range tt.want {
				want[k] = v
			}
			if diff := cmp.Diff(want, o.Map()); diff != "" {
				t.Errorf("overlay (-want +got):\n%s", diff)
			}
			keys := make([]string, 0, o.Len())
			for _, kv := range o.All() {
				keys = append(keys, kv.Key)
			}
			if !slices.IsSorted(keys) {
				t.Errorf("overlay keys not sorted: %v", keys)
			}
			if _, ok := o.Get(KeySessionJSONL); ok {
				t.Errorf("%s is set", KeySessionJSONL)
			}
		})
	}
}

func TestCollectOverlaysAreIndependent(t *testing.T) {
	r, _ := mustNew(t, Options{})
	a := mustCollect(t, r, Execution{Agent: &Agent{ID: "agt_a"}})
	b := mustCollect(t, r, Execution{Agent: &Agent{ID: "agt_b"}})
	env := a.AppendEnv(nil)
	if got, _ := a.Get(KeySessionID); got != "agt_a" {
		t.Errorf("first overlay session = %q after a second collect", got)
	}
	if got, _ := b.Get(KeySessionID); got != "agt_b" {
		t.Errorf("second overlay session = %q", got)
	}
	want := []string{"DSH_HOME=" + testHome, "DSH_SESSION_ID=agt_a", "DSH_SHELL=1"}
	if diff := cmp.Diff(want, env); diff != "" {
		t.Errorf("AppendEnv (-want +got):\n%s", diff)
	}
}

func TestTemplateFacts(t *testing.T) {
	want := []string{"agent.cwd", "agent.depth", "agent.id", "agent.parentId", "agent.rootId", "job.background", "job.cwd", "job.id"}
	if diff := cmp.Diff(want, TemplateFacts()); diff != "" {
		t.Errorf("TemplateFacts() (-want +got):\n%s", diff)
	}
	for _, f := range want {
		tm, unknown, unclosed := parseTemplate("{" + f + "}")
		if len(unknown) > 0 || unclosed || len(tm.segs) != 1 || tm.segs[0].fact == factNone {
			t.Errorf("parseTemplate({%s}) = %+v, %v, %v", f, tm, unknown, unclosed)
		}
	}
	if _, unknown, _ := parseTemplate("{a} {b} x"); strings.Join(unknown, ",") != "a,b" {
		t.Errorf("unknown = %v, want [a b]", unknown)
	}
}
