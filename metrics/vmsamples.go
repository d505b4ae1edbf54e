package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/crimux/crimux/vmtypes"
)

// Per-VM series, labelled with the pod's namespace and name and the
// container's name, as KubeVirt's kubevirt_vmi_* are. They are read from
// the VM runtime at every scrape, so a VM's series go with it: their
// number is the number of VMs on the node.
var vmLabels = []string{"namespace", "pod", "container"}

var (
	vmPowerDesc = prometheus.NewDesc(namespace+"_vm_power_state", "1 for each VM, with its power state.",
		append(append([]string{}, vmLabels...), "power_state"), nil)
	vmCPUDesc = prometheus.NewDesc(namespace+"_vm_cpu_seconds_total",
		"CPU time of the VM's cgroup: qemu and every vCPU, since its qemu started.", vmLabels, nil)
	vmMemoryDesc = prometheus.NewDesc(namespace+"_vm_memory_working_set_bytes",
		"Working set of the VM's cgroup: the guest RAM it touched and qemu's own.", vmLabels, nil)
	vmGuestMemoryDesc = prometheus.NewDesc(namespace+"_vm_guest_memory_used_bytes",
		"Memory the guest reports in use (virtio-balloon statistics); absent when it reports none.", vmLabels, nil)
	vmBlockReadDesc = prometheus.NewDesc(namespace+"_vm_block_read_bytes_total",
		"Bytes the VM read from all its disks since its qemu started.", vmLabels, nil)
	vmBlockWriteDesc = prometheus.NewDesc(namespace+"_vm_block_write_bytes_total",
		"Bytes the VM wrote to all its disks since its qemu started.", vmLabels, nil)
	vmNetRxDesc = prometheus.NewDesc(namespace+"_vm_network_receive_bytes_total",
		"Bytes the VM received on all its NICs since its qemu started.", vmLabels, nil)
	vmNetTxDesc = prometheus.NewDesc(namespace+"_vm_network_transmit_bytes_total",
		"Bytes the VM sent on all its NICs since its qemu started.", vmLabels, nil)
)

// vmSampleCollector reads the VMs' samples at every scrape.
type vmSampleCollector struct {
	samples func() ([]vmtypes.VMSample, error)
}

func (c *vmSampleCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{vmPowerDesc, vmCPUDesc, vmMemoryDesc, vmGuestMemoryDesc,
		vmBlockReadDesc, vmBlockWriteDesc, vmNetRxDesc, vmNetTxDesc} {
		ch <- d
	}
}

func (c *vmSampleCollector) Collect(ch chan<- prometheus.Metric) {
	samples, err := withTimeout(c.samples)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(vmPowerDesc, err)
		return
	}
	for _, s := range samples {
		names := []string{s.Namespace, s.Pod, s.Container}
		ch <- prometheus.MustNewConstMetric(vmPowerDesc, prometheus.GaugeValue, 1, append(names, s.PowerState)...)
		if !s.Running {
			continue
		}
		ch <- prometheus.MustNewConstMetric(vmCPUDesc, prometheus.CounterValue, s.CPUSeconds, names...)
		ch <- prometheus.MustNewConstMetric(vmMemoryDesc, prometheus.GaugeValue, float64(s.MemoryBytes), names...)
		if s.GuestMemoryBytes > 0 {
			ch <- prometheus.MustNewConstMetric(vmGuestMemoryDesc, prometheus.GaugeValue, float64(s.GuestMemoryBytes), names...)
		}
		for d, v := range map[*prometheus.Desc]uint64{vmBlockReadDesc: s.BlockReadBytes, vmBlockWriteDesc: s.BlockWriteBytes,
			vmNetRxDesc: s.NetReceiveBytes, vmNetTxDesc: s.NetSendBytes} {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), names...)
		}
	}
}
