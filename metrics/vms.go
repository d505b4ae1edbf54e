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
		if counts, err = c.countWithTimeout(); err != nil {
			ch <- prometheus.NewInvalidMetric(vmsDesc, err)
			return
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

type countResult struct {
	counts map[string]int
	err    error
}

func (c *vmCollector) countWithTimeout() (map[string]int, error) {
	done := make(chan countResult, 1)
	go func() {
		counts, err := c.count()
		done <- countResult{counts, err}
	}()
	select {
	case r := <-done:
		if r.counts == nil {
			r.counts = map[string]int{}
		}
		return r.counts, r.err
	case <-time.After(vmScrapeTimeout):
		return nil, errors.New("VM runtime did not answer within " + vmScrapeTimeout.String())
	}
}
