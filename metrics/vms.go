package metrics

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// powerStates are always exported, 0 when no VM is in them, so dashboards
// see every series.
var powerStates = []string{"running", "paused", "shutdown", "hibernate", "not_running", "unknown"}

// vmScrapeTimeout bounds how long a scrape waits for the VM runtime (a
// hung libvirtd must not hang the whole scrape).
const vmScrapeTimeout = 5 * time.Second

var vmsDesc = prometheus.NewDesc(namespace+"_vms", "VMs by power state, as the VM runtime reports them at scrape time.",
	[]string{"power_state"}, nil)

// vmCollector reads the VM runtime at every scrape.
type vmCollector struct {
	count func() (map[string]int, error)
}

func newVMCollector(count func() (map[string]int, error)) *vmCollector {
	return &vmCollector{count: count}
}

func (c *vmCollector) Describe(ch chan<- *prometheus.Desc) { ch <- vmsDesc }

func (c *vmCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[string]int{}
	if c.count != nil {
		var err error
		if counts, err = withTimeout(c.count); err != nil {
			ch <- prometheus.NewInvalidMetric(vmsDesc, err)
			return
		}
		if counts == nil {
			counts = map[string]int{}
		}
	}
	for _, s := range powerStates {
		ch <- prometheus.MustNewConstMetric(vmsDesc, prometheus.GaugeValue, float64(counts[s]), s)
		delete(counts, s)
	}
	for s, n := range counts {
		ch <- prometheus.MustNewConstMetric(vmsDesc, prometheus.GaugeValue, float64(n), s)
	}
}

// withTimeout is f's answer, or an error once vmScrapeTimeout passed (a
// hung libvirtd must not hang the whole scrape).
func withTimeout[T any](f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-time.After(vmScrapeTimeout):
		var zero T
		return zero, errors.New("VM runtime did not answer within " + vmScrapeTimeout.String())
	}
}
