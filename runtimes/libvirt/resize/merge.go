package resize

import (
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// mergeResources is old with what update sets: a field left at its zero
// value keeps old's, as containerd's UpdateContainerResources does. kubelet
// relies on it: its CPU manager sends the cpuset alone, and a VM must keep
// its CPU and memory limits then.
func mergeResources(old, update *runtimeapi.LinuxContainerResources) *runtimeapi.LinuxContainerResources {
	out := &runtimeapi.LinuxContainerResources{}
	if old != nil {
		out = proto.Clone(old).(*runtimeapi.LinuxContainerResources)
	}
	setInt := func(dst *int64, v int64) {
		if v != 0 {
			*dst = v
		}
	}
	setStr := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	setInt(&out.CpuPeriod, update.GetCpuPeriod())
	setInt(&out.CpuQuota, update.GetCpuQuota())
	setInt(&out.CpuShares, update.GetCpuShares())
	setInt(&out.MemoryLimitInBytes, update.GetMemoryLimitInBytes())
	setInt(&out.OomScoreAdj, update.GetOomScoreAdj())
	setInt(&out.MemorySwapLimitInBytes, update.GetMemorySwapLimitInBytes())
	setStr(&out.CpusetCpus, update.GetCpusetCpus())
	setStr(&out.CpusetMems, update.GetCpusetMems())
	if len(update.GetHugepageLimits()) > 0 {
		out.HugepageLimits = update.GetHugepageLimits()
	}
	if len(update.GetUnified()) > 0 {
		out.Unified = update.GetUnified()
	}
	return out
}
