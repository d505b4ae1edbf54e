package instant

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crimux/crimux/converter/cloudinit"
	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/podnet"
	"github.com/crimux/crimux/runtimes/libvirt/qcow2"
	"github.com/crimux/crimux/runtimes/libvirt/saveimage"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/template"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/vmfiles"
	"github.com/crimux/crimux/runtimes/libvirt/vmidentity"
)

// The template's neutral identity: no pod's name, address or data. Its
// NIC has an address no pod network uses, so its guest waits for no DHCP.
const (
	templateHostname = "crimux-template"
	templateIP       = "169.254.0.2"
)

// TemplateMAC is the MAC the NIC of template key has (and every clone's,
// until its identity replaces it): locally administered, from the key.
func TemplateMAC(key string) string {
	return fmt.Sprintf("02:%s:%s:%s:%s:%s", key[0:2], key[2:4], key[4:6], key[6:8], key[8:10])
}

// bootAndSave boots the template's VM, settles its guest and saves it
// into p.State; it returns where qemu's stream starts there, and the
// identity its qemu ran as. Whatever
// happens, the VM, its cgroup and its tap are gone when it returns.
func (m *Maker) bootAndSave(ctx context.Context, req Request, p template.Paths, key string) (_ int64, _ *store.VMIdentity, err error) {
	domain := template.Domain(key)
	cg := m.cgroup(req, domain)
	newNIC := m.NIC
	if newNIC == nil {
		newNIC = m.isolatedNIC
	}
	nic, closeNIC, err := newNIC(TemplateMAC(key))
	if err != nil {
		return 0, nil, err
	}
	defer closeNIC()
	id, done, err := m.makingVM(domain, VM{Cgroup: cg, NIC: nic})
	if err != nil {
		return 0, nil, err
	}
	cgroupMade := false
	defer func() {
		if cgroupMade {
			m.freeWhenGone(cg, done)
			return
		}
		done()
	}()
	spec, err := m.files(req, p, key, id)
	if err != nil {
		return 0, nil, err
	}
	xml, err := vm.DomainXML(spec)
	if err != nil {
		return 0, nil, err
	}
	l, err := m.R.Conn.Get()
	if err != nil {
		return 0, nil, err
	}
	if err := m.R.Cgroups.Create(cg); err != nil {
		return 0, nil, fmt.Errorf("cgroup of template %s: %w", key, err)
	}
	cgroupMade = true
	offset, err := m.runAndSave(ctx, l, req, p, key, xml)
	return offset, id, err
}

// runAndSave defines and starts the template's domain from xml, settles
// its guest and saves it into p.State; it returns where qemu's stream
// starts there. The domain is gone when it returns.
func (m *Maker) runAndSave(ctx context.Context, l virt.Libvirt, req Request, p template.Paths, key, xml string) (int64, error) {
	domain := template.Domain(key)
	dom, err := l.Define(xml)
	if err != nil {
		return 0, fmt.Errorf("define template %s: %w", key, err)
	}
	defer func() { _ = core.DestroyAndUndefine(l, domain) }()
	if err := m.startingVM(domain, func() error { return l.Start(dom) }); err != nil {
		return 0, fmt.Errorf("start template %s: %w", key, err)
	}
	vmgenid, err := settle(ctx, l, dom)
	if err != nil {
		return 0, fmt.Errorf("template %s of %s: %w (its console: %s)", key, req.Image, err, filepath.Join(p.Dir, vmfiles.ConsoleLogFile))
	}
	m.R.Log.Info("template settled", "template", key, "guest_vmgenid_driver", vmgenid)
	if err := l.SaveState(dom, p.State); err != nil {
		return 0, fmt.Errorf("save template %s: %w", key, err)
	}
	img, err := saveimage.Read(p.State)
	if err != nil {
		return 0, err
	}
	if err := img.Clonable(); err != nil {
		return 0, err
	}
	return img.StreamOffset, nil
}

// DefaultCgroupRetry is how often a template's cgroup that still held a
// process is removed again when Maker.CgroupRetry is 0.
const DefaultCgroupRetry = 5 * time.Second

// freeWhenGone removes the template VM's cgroup cg, then frees its
// identity (done). A cgroup that still holds a process (a qemu thread
// exiting, or one that escaped its domain's end) keeps the identity: that
// process runs as it, and a pod given it could signal or trace it. It is
// removed again every CgroupRetry until it goes; only then is the
// identity freed.
func (m *Maker) freeWhenGone(cg core.VMCgroup, done func()) {
	retry := m.CgroupRetry
	if retry <= 0 {
		retry = DefaultCgroupRetry
	}
	err := m.R.Cgroups.Remove(cg)
	if err == nil {
		done()
		return
	}
	m.R.Log.Error("template cgroup not removed; its VM identity stays taken until it is", "cgroup", cg.Name, "err", err)
	go func() {
		for {
			time.Sleep(retry)
			if err := m.R.Cgroups.Remove(cg); err == nil {
				m.R.Log.Info("template cgroup removed; its VM identity is free", "cgroup", cg.Name)
				done()
				return
			}
		}
	}()
}

// cgroup is the cgroup of a template's VM, domain: a leaf of Parent
// (outside kubepods: no pod's), limited to the template's memory and
// qemu's overhead, and to CPUMillis of CPU time (a template boots with
// no pod to charge it to: the quota keeps it from taking the pods' CPUs).
func (m *Maker) cgroup(req Request, domain string) core.VMCgroup {
	parent := m.Parent
	if parent == "" {
		parent = DefaultParent
	}
	cg := core.VMCgroup{Parent: parent, Name: domain, MemoryLimit: int64(req.Shape.MemoryMiB<<20) + m.R.Opts.MemoryOverheadMiB<<20}
	if millis := m.limits().CPUMillis; millis > 0 {
		cg.CPUQuota, cg.CPUPeriod = millis*cpuPeriod/1000, cpuPeriod
	}
	return cg
}

// isolatedNIC is the template's NIC: a tap alone in a namespace of its
// own, or none when VM pods have no network (their VMs have no NIC either).
func (m *Maker) isolatedNIC(mac string) (func(fd string) (*os.File, []string, error), func(), error) {
	if m.R.Net == nil {
		return func(string) (*os.File, []string, error) { return nil, nil, nil }, func() {}, nil
	}
	tap, err := podnet.NewIsolatedTap()
	if err != nil {
		return nil, nil, err
	}
	open := func(fd string) (*os.File, []string, error) {
		dup, err := unix.FcntlInt(tap.Tap.Fd(), unix.F_DUPFD_CLOEXEC, 0) // the placer closes what it sends
		if err != nil {
			return nil, nil, fmt.Errorf("the template's tap: %w", err)
		}
		return os.NewFile(uintptr(dup), tap.Tap.Name()), podnet.NICArgs(mac, fd), nil
	}
	return open, func() { _ = tap.Close() }, nil
}

// files makes the template's disk (an overlay over the image's), its
// neutral cloud-init volume and run/, each its making qemu's, and says
// what its domain is.
func (m *Maker) files(req Request, p template.Paths, key string, id *store.VMIdentity) (vm.Spec, error) {
	var spec vm.Spec
	if err := os.Chmod(p.Dir, 0o711); err != nil { // qemu opens its files here, lists nothing
		return spec, err
	}
	run := filepath.Join(p.Dir, vmfiles.RunDir)
	if err := os.Mkdir(run, 0o700); err != nil {
		return spec, err
	}
	if err := qcow2.CreateOverlay(p.Disk, req.Layout.DiskPath, req.Layout.DiskFormat, req.Layout.DiskVirtualSize, 0o600); err != nil {
		return spec, fmt.Errorf("template disk: %w", err)
	}
	files, err := cloudinit.Build(cloudinit.Input{InstanceID: "crimux-template-" + key, Hostname: templateHostname,
		Network: &cloudinit.Network{MAC: TemplateMAC(key), IP: templateIP, PrefixLen: 16, MTU: 1500}})
	if err != nil {
		return spec, err
	}
	iso, err := m.R.CIData.WriteCIData(p.Dir, files)
	if err != nil {
		return spec, err
	}
	for _, f := range []string{run, p.Disk, iso} {
		if err := vmidentity.GiveTo(id, f); err != nil {
			return spec, err
		}
	}
	s := req.Shape
	spec = vm.Spec{
		Name: template.Domain(key), Meta: vm.Metadata{Instance: m.R.Opts.Instance, ContainerID: "template-" + key},
		VCPUs: s.VCPUs, MaxVCPUs: s.MaxVCPUs, MemoryMiB: s.MemoryMiB, MaxMemoryMiB: s.MaxMemoryMiB,
		Accel: s.Accel, Emulator: m.R.Opts.Emulator,
		Console: vm.Console{Socket: filepath.Join(run, vmfiles.ConsoleSocketFile), Log: filepath.Join(p.Dir, vmfiles.ConsoleLogFile)},
		Disk: &vm.Disk{Path: p.Disk, Format: "qcow2",
			Backing: &vm.Disk{Path: req.Layout.DiskPath, Format: req.Layout.DiskFormat}},
		CIData: iso, GenID: true,
	}
	if id != nil {
		spec.Identity = &vm.Identity{UID: id.UID, GID: id.GID}
	}
	return spec, nil
}
