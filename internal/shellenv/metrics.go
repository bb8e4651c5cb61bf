package shellenv

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics holds the registry's Prometheus collectors. They always exist, so
// callers never check for nil; they are registered only when a Registerer
// is given.
type metrics struct {
	contributors *prometheus.GaugeVec
	latency      *prometheus.HistogramVec
	failures     *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		contributors: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "dshd_env_contributors",
			Help: "Registered environment contributors by resolver kind.",
		}, []string{"kind"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "dshd_env_resolver_duration_seconds",
			Help:    "Latency of remote (webhook) resolver calls by contributor.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"contributor"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dshd_env_resolver_failures_total",
			Help: "Resolver failures that stopped an execution, by contributor.",
		}, []string{"contributor"}),
	}
	if reg == nil {
		return m, nil
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.contributors, m.latency, m.failures} {
		if err := reg.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("register shellenv metrics: %w", err)
	}
	return m, nil
}

// setKinds publishes the contributor counts of a snapshot.
func (m *metrics) setKinds(kinds map[string]int) {
	for _, k := range []string{KindBuiltin, KindStatic, KindTemplate, KindWebhook} {
		m.contributors.WithLabelValues(k).Set(float64(kinds[k]))
	}
}
