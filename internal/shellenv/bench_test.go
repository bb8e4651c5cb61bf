package shellenv

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// benchRegistry returns a registry with n contributors: two keys each,
// alternating static and template resolvers; every tenth is under a plugin.
func benchRegistry(b *testing.B, n int) *Registry {
	b.Helper()
	r, err := New(Options{Home: testHome})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	p, err := r.OpenPlugin(ctx, "bench", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	for i := range n {
		ka, kb := fmt.Sprintf("DSH_C%05d_A", i), fmt.Sprintf("DSH_C%05d_B", i)
		s := Spec{
			Name: fmt.Sprintf("c%05d", i),
			Keys: []KeySpec{{ka, "first fact of contributor"}, {kb, "second fact of contributor"}},
		}
		if i%2 == 0 {
			s.Resolver = ResolverSpec{Kind: KindStatic, Values: map[string]string{ka: "static-a", kb: "static-b"}}
		} else {
			s.Resolver = ResolverSpec{Kind: KindTemplate, Values: map[string]string{
				ka: "{agent.id}",
				kb: "job {job.id} of {agent.rootId} at depth {agent.depth}",
			}}
		}
		if i%10 == 0 {
			s.Plugin = p.ID
		}
		if _, err := r.Register(ctx, s); err != nil {
			b.Fatal(err)
		}
	}
	return r
}

// BenchmarkCollect1000 collects an overlay over 1,000 static and template
// contributors (budget: 200µs per Collect).
func BenchmarkCollect1000(b *testing.B) {
	r := benchRegistry(b, 1000)
	ctx := context.Background()
	x := Execution{JobID: "job_01", Cwd: "/w", Agent: &Agent{ID: "agt_child", ParentID: "agt_root", RootID: "agt_root", Depth: 1}}
	b.ReportAllocs()
	b.ResetTimer()
	var o Overlay
	for b.Loop() {
		var err error
		if o, err = r.Collect(ctx, x); err != nil {
			b.Fatal(err)
		}
	}
	if o.Len() != 2003 {
		b.Fatalf("overlay has %d entries, want 2003", o.Len())
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/collect")
}

// BenchmarkDeclarations10000 lists the declarations of 10,000 contributors
// (budget: 20ms per listing, no resolver calls).
func BenchmarkDeclarations10000(b *testing.B) {
	r := benchRegistry(b, 10000)
	b.ReportAllocs()
	b.ResetTimer()
	var ds []Declaration
	for b.Loop() {
		ds = r.Declarations()
	}
	if len(ds) != 20003 {
		b.Fatalf("%d declarations, want 20003", len(ds))
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/list")
}

// BenchmarkRegister measures one registration into a registry that already
// holds 1,000 contributors (copy-on-write cost), without persistence.
func BenchmarkRegister(b *testing.B) {
	r := benchRegistry(b, 1000)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		s := staticSpec(fmt.Sprintf("extra%d", i), fmt.Sprintf("DSH_EXTRA%d", i), "v")
		if _, err := r.Register(ctx, s); err != nil {
			b.Fatal(err)
		}
		if err := r.Unregister(ctx, s.Name); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
