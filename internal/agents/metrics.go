package agents

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the store's Prometheus collectors. They exist (and count) even
// when no Registerer is given, so the code never checks for nil.
type metrics struct {
	tornLines    prometheus.Counter
	invalidFiles prometheus.Counter
	created      *prometheus.CounterVec
	conflicts    prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		tornLines: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dshd_transcript_torn_lines_total",
			Help: "Transcript lines skipped on load because they were incomplete or not valid events.",
		}),
		invalidFiles: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dshd_transcript_invalid_files_total",
			Help: "Transcript files skipped on load because their header was missing or invalid.",
		}),
		created: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dshd_agents_created_total",
			Help: "Agents created, by origin (root, fork, spawn).",
		}, []string{"origin"}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dshd_transcript_append_conflicts_total",
			Help: "Transcript appends (cluster mode) that found another line after the one they expected and tried again.",
		}),
	}
	if reg != nil {
		m.tornLines = register(reg, m.tornLines)
		m.invalidFiles = register(reg, m.invalidFiles)
		m.created = register(reg, m.created)
		m.conflicts = register(reg, m.conflicts)
	}
	return m
}

// register registers c, or returns the collector already registered under
// the same description (for example when a store is reopened in one process).
// Any other registration error is a programming error and panics, as
// prometheus.MustRegister would.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
}
