package vm

import "libvirt.org/go/libvirtxml"

// The source's domain reaches the target from whoever drives the
// migration: with kubectl crimux migrate, through pod annotations a
// tenant can write. So nothing of it may reach the target's host beyond
// the guest's own state: what touches the host (the emulator, qemu's
// command line, host paths, tuning, devices backed by host resources) is
// the target's own domain's, the one crimux defined for the target pod.

// hostFromTarget sets d's host-facing settings to t's: for a genuine
// migration they are equal (the same crimux made both from the same pod
// spec), or the target pod's own (its CPU pinning, its memory backing).
func hostFromTarget(d, t *libvirtxml.Domain) {
	d.QEMUCommandline, d.QEMUCapabilities, d.QEMUOverride, d.QEMUDeprecation =
		t.QEMUCommandline, t.QEMUCapabilities, t.QEMUOverride, t.QEMUDeprecation
	d.MemoryBacking, d.Resource = t.MemoryBacking, t.Resource
	d.CPUTune, d.NUMATune, d.MemoryTune, d.BlockIOTune = t.CPUTune, t.NUMATune, t.MemoryTune, t.BlockIOTune
	devices(d).Emulator = devices(t).Emulator
	if d.OS != nil {
		var o libvirtxml.DomainOS
		if t.OS != nil {
			o = *t.OS
		}
		d.OS.Kernel, d.OS.Initrd, d.OS.DTB, d.OS.Loader, d.OS.NVRam, d.OS.ACPI = o.Kernel, o.Initrd, o.DTB, o.Loader, o.NVRam, o.ACPI
	}
}
