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

	spoolUsed    prometheus.Gauge
	spoolBudget  prometheus.Gauge
	spoolEvicted prometheus.Counter
	dropped      *prometheus.CounterVec
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
	m.spoolUsed = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "dshd_spool_bytes",
		Help: "Bytes of job output spooled to disk, all recorded jobs together.",
	})
	m.spoolBudget = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "dshd_spool_budget_bytes",
		Help: "The most bytes the output spools may hold together (jobs.spoolTotalBytes).",
	})
	m.spoolEvicted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "dshd_spool_evicted_jobs_total",
		Help: "Finished jobs forgotten early because the spool budget needed their room.",
	})
	m.dropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "dshd_output_dropped_bytes_total",
		Help: "Output bytes not kept, by reason: spool_limit, spool_budget, disk_full, spool_error, no_spool.",
	}, []string{"reason"})
	if reg != nil {
		for _, c := range []prometheus.Collector{m.started, finished, m.running, m.spawn, m.spoolUsed, m.spoolBudget, m.spoolEvicted, m.dropped} {
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

// droppedBytes counts n dropped output bytes. A nil m (a Job built
// without an Executor's metrics, in tests) counts nothing.
func (m *metrics) droppedBytes(reason string, n int64) {
	if m == nil {
		return
	}
	if reason == "" {
		reason = "unknown"
	}
	m.dropped.WithLabelValues(reason).Add(float64(n))
}
