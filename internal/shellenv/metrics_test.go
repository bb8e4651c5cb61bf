package shellenv

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func TestMetrics(t *testing.T) {
	h := newHookServer(t)
	reg := prometheus.NewRegistry()
	r, _ := mustNew(t, Options{Registerer: reg})
	mustRegister(t, r, staticSpec("s", "DSH_S", "v"))
	mustRegister(t, r, Spec{Name: "t", Keys: []KeySpec{{"DSH_T", "d"}}, Resolver: ResolverSpec{Kind: KindTemplate}})
	mustRegister(t, r, hookSpec("good", h.URL+"/ok", "DSH_GOOD"))
	mustRegister(t, r, hookSpec("bad", h.URL+"/status", "DSH_BAD"))
	mustRegister(t, r, staticSpec("gone", "DSH_GONE", "v"))
	if err := r.Unregister(context.Background(), "gone"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := r.Collect(context.Background(), Execution{}); err == nil {
			t.Fatal("Collect succeeded with a failing webhook")
		}
	}

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			name := f.GetName() + labels(m)
			switch f.GetType() {
			case dto.MetricType_GAUGE:
				got[name] = m.GetGauge().GetValue()
			case dto.MetricType_COUNTER:
				got[name] = m.GetCounter().GetValue()
			case dto.MetricType_HISTOGRAM:
				got[name+"_count"] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	want := map[string]float64{
		`dshd_env_contributors{kind="builtin"}`:                        3,
		`dshd_env_contributors{kind="static"}`:                         1,
		`dshd_env_contributors{kind="template"}`:                       1,
		`dshd_env_contributors{kind="webhook"}`:                        2,
		`dshd_env_resolver_failures_total{contributor="bad"}`:          3,
		`dshd_env_resolver_duration_seconds{contributor="bad"}_count`:  3,
		`dshd_env_resolver_duration_seconds{contributor="good"}_count`: 3,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}

	if _, err := New(Options{Home: testHome, Registerer: reg}); err == nil {
		t.Error("New registered its metrics twice on one registry")
	}
}

func labels(m *dto.Metric) string {
	s := ""
	for _, l := range m.GetLabel() {
		if s != "" {
			s += ","
		}
		s += l.GetName() + `="` + l.GetValue() + `"`
	}
	return "{" + s + "}"
}
