package exec

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are always created so the hot path needs no nil checks; they are
// registered only when Options.Registerer is set.
type metrics struct {
	started   prometheus.Counter
	exited    prometheus.Counter
	timedOut  prometheus.Counter
	cancelled prometheus.Counter
	running   prometheus.Gauge
	spawn     prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	finished := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "dshd_jobs_finished_total",
		Help: "Jobs finished, by final state.",
	}, []string{"state"})
	m := &metrics{
		started: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dshd_jobs_started_total",
			Help: "Jobs whose process was started.",
		}),
		exited:    finished.WithLabelValues(string(StateExited)),
		timedOut:  finished.WithLabelValues(string(StateTimedOut)),
		cancelled: finished.WithLabelValues(string(StateCancelled)),
		running: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dshd_jobs_running",
			Help: "Jobs currently running.",
		}),
		spawn: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "dshd_exec_spawn_seconds",
			Help:    "Time to start a process (pipes, fork, exec), jobs and hook processes alike.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 14), // 100µs .. ~0.8s
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.started, finished, m.running, m.spawn} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register exec metrics: %w", err)
			}
		}
	}
	return m, nil
}

func (m *metrics) finished(s State) {
	switch s {
	case StateTimedOut:
		m.timedOut.Inc()
	case StateCancelled:
		m.cancelled.Inc()
	default:
		m.exited.Inc()
	}
}
