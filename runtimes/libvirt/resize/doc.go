// Package resize owns a VM's size once kubelet has asked for it: how far
// a new VM can be resized while it runs (Headroom: the vCPUs and the
// virtio-mem room it is defined with), its RAM fitted to its pod's
// cgroup when it is created (FitMemory), the in-place resize itself
// (CRI UpdateContainerResources, Resizer.Resize: the update merged with
// what the VM has, its cgroup, its domain live and in its definition,
// its guest through its agent, the record), and a resized guest brought
// back to its size after it rebooted (Resizer.AfterReboot).
package resize
