package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Migration roles and results, the labels of crimux_migrations_total.
const (
	MigrationOutgoing  = "outgoing"
	MigrationIncoming  = "incoming"
	MigrationSucceeded = "succeeded"
	MigrationFailed    = "failed"
)

// migrationBuckets span a small VM's migration on a fast link (a second)
// to a big one's, or one that stalls until it is aborted (half an hour).
var migrationBuckets = []float64{1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800}

// downtimeBuckets span the switch-over's pause qemu aims for (tens of
// milliseconds) to one that took seconds.
var downtimeBuckets = []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// migrations are live migrations as this node takes part in them: how
// many ended, how long they took, and how far the VMs leaving now are.
type migrations struct {
	ended *prometheus.CounterVec
	// remaining and dirtyRate follow each VM leaving now, by its
	// container ID; its series go when its migration ends.
	remaining, dirtyRate *prometheus.GaugeVec
	// took times migrations by role and result; downtime is the
	// pause of each switch-over, as the target's libvirt measured it.
	took     *prometheus.HistogramVec
	downtime prometheus.Histogram
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
		took: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "migration_duration_seconds",
			Help: "How long live migrations took on this node, by role (source: Migrate; target: from PrepareMigration " +
				"to the VM's arrival or failure) and result (succeeded, failed).",
			Buckets: migrationBuckets,
		}, []string{"role", "result"}),
		downtime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "migration_downtime_seconds",
			Help:    "The pause of each live migration's switch-over, as libvirt on the target measured it.",
			Buckets: downtimeBuckets,
		}),
	}
	for _, res := range []string{MigrationSucceeded, MigrationFailed} {
		for _, role := range []string{MigrationOutgoing, MigrationIncoming} {
			m.ended.WithLabelValues(role, res)
		}
		for _, role := range []string{MigrationOutgoing, MigrationIncoming} {
			m.took.WithLabelValues(role, res)
		}
	}
	return m
}

func (m migrations) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.ended, m.remaining, m.dirtyRate, m.took, m.downtime}
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

// MigrationTook times a migration in role (MigrationOutgoing,
// MigrationIncoming, as crimux_migrations_total's) that ended with result.
func (m *Metrics) MigrationTook(role, result string, d time.Duration) {
	m.took.WithLabelValues(role, result).Observe(d.Seconds())
}

// MigrationDowntime records the pause of a migration's switch-over.
func (m *Metrics) MigrationDowntime(d time.Duration) {
	m.downtime.Observe(d.Seconds())
}
