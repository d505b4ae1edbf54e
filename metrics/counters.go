package metrics

import "github.com/prometheus/client_golang/prometheus"

// GCKinds are the kinds of objects GC removes (exported at 0 from the
// start); others may be counted too.
var GCKinds = []string{"domain", "dir", "record", "network", "image", "container_cgroup", "orphan_task", "foreign_domain", "foreign_netns"}

// counters are what the runtimes count. They are handed *Metrics (through
// an interface each runtime declares: GCRemoved, Reconnected) rather than
// writing package variables, so every Metrics counts only its own
// runtimes' events.
type counters struct {
	// reconnects counts connections re-made after one was lost, by target
	// (libvirtd's URI, containerd's endpoint). The first connection does
	// not count.
	reconnects *prometheus.CounterVec
	// gcRemovals counts what garbage collection removed, by kind of object
	// (a domain, a VM's directory with its overlay disk, a store record...).
	gcRemovals *prometheus.CounterVec
}

func newCounters() counters {
	c := counters{
		reconnects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "reconnects_total",
			Help: "Connections to a runtime daemon (libvirtd, containerd) re-made after one was lost.",
		}, []string{"target"}),
		gcRemovals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "gc_removals_total",
			Help: "Objects garbage collection removed because no pod owned them, by kind.",
		}, []string{"kind"}),
	}
	for _, k := range GCKinds {
		c.gcRemovals.WithLabelValues(k)
	}
	return c
}

// GCRemoved counts n objects of a kind that garbage collection removed.
// A negative n (a caller's bug) is not counted: a counter that panics
// would take the collector down with it.
func (m *Metrics) GCRemoved(kind string, n int) {
	if n < 0 {
		return
	}
	m.gcRemovals.WithLabelValues(kind).Add(float64(n))
}

// Reconnected counts one connection to target (a daemon's endpoint or
// URI) re-made after it was lost.
func (m *Metrics) Reconnected(target string) {
	m.reconnects.WithLabelValues(target).Inc()
}
