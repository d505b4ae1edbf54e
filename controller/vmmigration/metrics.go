package vmmigration

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/crimux/crimux/kubeapi"
)

// Metrics are the controller's series of the cluster's migrations. A
// nil *Metrics records nothing.
type Metrics struct {
	phases   *prometheus.GaugeVec
	results  *prometheus.CounterVec
	duration prometheus.Histogram
	downtime prometheus.Histogram
}

// NewMetrics registers the series on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		phases: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "crimux_controller_vmmigrations",
			Help: "VMMigration objects in the cluster, by phase (Pending: waiting for a slot under the caps)."}, []string{"phase"}),
		results: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "crimux_controller_vmmigrations_ended_total",
			Help: "Migrations this controller ended, by phase (Succeeded, Failed) and reason."}, []string{"phase", "reason"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "crimux_controller_migration_duration_seconds",
			Help: "How long a succeeded migration took, from its start to its source pod deleted.", Buckets: prometheus.ExponentialBuckets(1, 2, 12)}),
		downtime: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "crimux_controller_migration_downtime_seconds",
			Help: "The guest's pause at the switch-over of a succeeded migration, as its target's node agent measured it.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 12)}),
	}
	reg.MustRegister(m.phases, m.results, m.duration, m.downtime)
	return m
}

// observePhases sets the count of migrations in each phase.
func (m *Metrics) observePhases(migs []*kubeapi.VMMigration) {
	if m == nil {
		return
	}
	counts := map[string]int{}
	for _, p := range []string{kubeapi.VMMigrationPending, kubeapi.VMMigrationScheduling, kubeapi.VMMigrationTargetReady,
		kubeapi.VMMigrationRunning, kubeapi.VMMigrationSucceeded, kubeapi.VMMigrationFailed} {
		counts[p] = 0
	}
	for _, mig := range migs {
		counts[phaseOrPending(mig.Status.Phase)]++
	}
	for p, n := range counts {
		m.phases.WithLabelValues(p).Set(float64(n))
	}
}

// ended counts a migration that ended.
func (m *Metrics) ended(phase, reason string, took time.Duration, downtimeMS int64) {
	if m == nil {
		return
	}
	m.results.WithLabelValues(phase, reason).Inc()
	if phase == kubeapi.VMMigrationSucceeded {
		m.duration.Observe(took.Seconds())
		m.downtime.Observe(float64(downtimeMS) / 1000)
	}
}

func phaseOrPending(p string) string {
	if p == "" {
		return kubeapi.VMMigrationPending
	}
	return p
}
