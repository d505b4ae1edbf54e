package metrics

import "github.com/prometheus/client_golang/prometheus"

// Migration roles and results, the labels of crimux_migrations_total.
const (
	MigrationOutgoing  = "outgoing"
	MigrationIncoming  = "incoming"
	MigrationSucceeded = "succeeded"
	MigrationFailed    = "failed"
)

// migrations are live migrations as this node takes part in them: how
// many ended, and how far the VMs leaving now are.
type migrations struct {
	ended *prometheus.CounterVec
	// remaining and dirtyRate follow each VM leaving now, by its
	// container ID; its series go when its migration ends.
	remaining, dirtyRate *prometheus.GaugeVec
}

func newMigrations() migrations {
	m := migrations{
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "migrations_total",
			Help: "Live migrations this node took part in, by role (outgoing, incoming) and result (succeeded, failed).",
		}, []string{"role", "result"}),
		remaining: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "migration_remaining_bytes",
			Help: "Bytes of memory and disk a VM leaving this node has still to send, by container.",
		}, []string{"container"}),
		dirtyRate: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "migration_dirty_rate_bytes",
			Help: "Bytes of memory per second the guest of a VM leaving this node dirties, by container.",
		}, []string{"container"}),
	}
	for _, role := range []string{MigrationOutgoing, MigrationIncoming} {
		for _, res := range []string{MigrationSucceeded, MigrationFailed} {
			m.ended.WithLabelValues(role, res)
		}
	}
	return m
}

func (m migrations) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.ended, m.remaining, m.dirtyRate}
}

// MigrationProgress records how far container's outgoing migration is.
func (m *Metrics) MigrationProgress(container string, remaining, dirtyRate uint64) {
	m.remaining.WithLabelValues(container).Set(float64(remaining))
	m.dirtyRate.WithLabelValues(container).Set(float64(dirtyRate))
}

// MigrationEnded counts a migration of container's VM in role that
// ended with result, and drops its progress series.
func (m *Metrics) MigrationEnded(container, role, result string) {
	m.ended.WithLabelValues(role, result).Inc()
	m.remaining.DeleteLabelValues(container)
	m.dirtyRate.DeleteLabelValues(container)
}
