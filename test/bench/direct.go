package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"
	"libvirt.org/go/libvirtxml"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/runtimes/libvirt"
)

// The direct VM path: libvirt through go-libvirt, with the domain XML
// crimux's converter builds for the same image and size. Its emulator is
// qemu itself, not crimux's wrapper (no cgroup placement: that is part of
// what crimux costs), and its overlay disk is made with qemu-img exactly as
// crimux makes one.

const (
	qemuBinary   = "/usr/bin/qemu-system-x86_64"
	libvirtSock  = "/var/run/libvirt/libvirt-sock"
	qemuUser     = "libvirt-qemu"
	directPrefix = "crimuxbench-"
)

// directLibvirt makes VMs directly through libvirt.
type directLibvirt struct {
	l      *golibvirt.Libvirt
	layout libvirt.ImageLayout
	dir    string
	prefix string
	uid    int
	gid    int

	mu   sync.Mutex
	seq  int
	live map[string]*directVM
}

// directVM is one domain of the direct path.
type directVM struct {
	name, dir string
	dom       golibvirt.Domain
}

func (v *directVM) consoleLog() string { return filepath.Join(v.dir, "console.log") }

// newDirectLibvirt connects to libvirtd and reads the VM image's files out
// of containerd with crimux's own image reader (runtimes/libvirt/vmimage),
// into a cache of the bench's.
func newDirectLibvirt(ctx context.Context, containerdEndpoint, dir, runID string) (*directLibvirt, error) {
	images, closeImages, err := libvirt.ContainerdImages(containerdEndpoint, filepath.Join(dir, "images"))
	if err != nil {
		return nil, err
	}
	defer closeImages()
	layout, err := images.Prepare(ctx, vmImage)
	if err != nil {
		return nil, fmt.Errorf("VM image for the direct path: %w", err)
	}
	l := golibvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(libvirtSock), dialers.WithLocalTimeout(5*time.Second)))
	if err := l.ConnectToURI(golibvirt.QEMUSystem); err != nil {
		return nil, fmt.Errorf("connect to libvirtd: %w", err)
	}
	d := &directLibvirt{l: l, layout: layout, dir: filepath.Join(dir, "vms"), prefix: directPrefix + runID + "-", live: map[string]*directVM{}}
	if u, err := user.Lookup(qemuUser); err == nil {
		d.uid, _ = strconv.Atoi(u.Uid)
		d.gid, _ = strconv.Atoi(u.Gid)
	}
	return d, os.MkdirAll(d.dir, 0o711)
}

// spec is the VM crimux would make of the image with mib of memory and one
// vCPU, under TCG, without crimux's identity stamp.
func (d *directLibvirt) spec(name, dir string, mib int) vm.Spec {
	s := vm.Spec{
		Name: name, VCPUs: 1, MemoryMiB: uint64(mib), Accel: vm.AccelTCG, Emulator: qemuBinary,
		Console: vm.Console{Socket: filepath.Join(dir, "console.sock"), Log: filepath.Join(dir, "console.log")},
	}
	if d.layout.Kernel != "" {
		s.Boot = &vm.KernelBoot{Kernel: d.layout.Kernel, Initrd: d.layout.Initrd, Args: d.layout.KernelArgs}
	}
	if d.layout.DiskPath != "" {
		s.Disk = &vm.Disk{Path: filepath.Join(dir, "disk.qcow2"), Format: "qcow2"}
	}
	return s
}

// start makes the VM's directory (outside the timing: crimux's is made
// in CreateContainer too, but a mkdir is noise), then times what crimux
// does for a VM: the overlay with qemu-img, define, start.
func (d *directLibvirt) start(mib int) (*directVM, time.Duration, error) {
	d.mu.Lock()
	d.seq++
	v := &directVM{name: fmt.Sprintf("%s%d", d.prefix, d.seq)}
	d.live[v.name] = v
	d.mu.Unlock()
	v.dir = filepath.Join(d.dir, v.name)
	if err := os.MkdirAll(v.dir, 0o700); err != nil {
		return v, 0, err
	}
	if err := os.Chown(v.dir, d.uid, d.gid); err != nil {
		return v, 0, err
	}
	spec := d.spec(v.name, v.dir, mib)
	took, err := timed(func() error {
		if spec.Disk != nil {
			out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2",
				"-b", d.layout.DiskPath, "-F", d.layout.DiskFormat, spec.Disk.Path).CombinedOutput()
			if err != nil {
				return fmt.Errorf("overlay: %v: %s", err, out)
			}
		}
		xml, err := vm.DomainXML(spec)
		if err != nil {
			return err
		}
		if v.dom, err = d.l.DomainDefineXML(xml); err != nil {
			return fmt.Errorf("define %s: %w", v.name, err)
		}
		if err := d.l.DomainCreate(v.dom); err != nil {
			return fmt.Errorf("start %s: %w", v.name, err)
		}
		return nil
	})
	return v, took, err
}

// remove destroys and undefines the VM and deletes its files.
func (d *directLibvirt) remove(v *directVM) error {
	err := destroyDomain(d.l, v.name)
	if rmErr := os.RemoveAll(v.dir); err == nil {
		err = rmErr
	}
	d.mu.Lock()
	delete(d.live, v.name)
	d.mu.Unlock()
	return err
}

// removeAll removes every VM of the direct path, and any domain of this
// run's prefix libvirt still has (a start cut short).
func (d *directLibvirt) removeAll() error {
	var errs []error
	d.mu.Lock()
	vms := make([]*directVM, 0, len(d.live))
	for _, v := range d.live {
		vms = append(vms, v)
	}
	d.mu.Unlock()
	for _, v := range vms {
		errs = append(errs, d.remove(v))
	}
	if doms, _, err := d.l.ConnectListAllDomains(1, 0); err == nil {
		for _, dom := range doms {
			if strings.HasPrefix(dom.Name, d.prefix) {
				errs = append(errs, destroyDomain(d.l, dom.Name))
			}
		}
	}
	return errors.Join(errs...)
}

func (d *directLibvirt) close() { _ = d.l.Disconnect() }

// destroyDomain destroys (if running) and undefines a domain with its
// snapshot metadata; a missing domain is fine.
func destroyDomain(l *golibvirt.Libvirt, name string) error {
	dom, err := l.DomainLookupByName(name)
	if golibvirt.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	if state, _, err := l.DomainGetState(dom, 0); err == nil && golibvirt.DomainState(state) != golibvirt.DomainShutoff {
		if err := l.DomainDestroy(dom); err != nil && !golibvirt.IsNotFound(err) {
			return fmt.Errorf("destroy %s: %w", name, err)
		}
	}
	err = l.DomainUndefineFlags(dom, golibvirt.DomainUndefineManagedSave|golibvirt.DomainUndefineSnapshotsMetadata|golibvirt.DomainUndefineNvram)
	if err != nil && !golibvirt.IsNotFound(err) {
		return fmt.Errorf("undefine %s: %w", name, err)
	}
	return nil
}

// snapshotXML asks for what crimux's VM API asks for of a running VM: an
// internal snapshot with the memory.
func snapshotXML(name string) (string, error) {
	s := libvirtxml.DomainSnapshot{Name: name, Memory: &libvirtxml.DomainSnapshotMemory{Snapshot: "internal"}}
	return s.Marshal()
}

// snapshot takes an internal snapshot of a running direct VM.
func (d *directLibvirt) snapshot(v *directVM, name string) error {
	doc, err := snapshotXML(name)
	if err != nil {
		return err
	}
	_, err = d.l.DomainSnapshotCreateXML(v.dom, doc, uint32(golibvirt.DomainSnapshotCreateAtomic))
	return err
}

// revert returns a direct VM to a snapshot.
func (d *directLibvirt) revert(v *directVM, name string) error {
	snap, err := d.l.DomainSnapshotLookupByName(v.dom, name, 0)
	if err != nil {
		return err
	}
	return d.l.DomainRevertToSnapshot(snap, 0)
}

// deleteSnapshot deletes a snapshot of a direct VM.
func (d *directLibvirt) deleteSnapshot(v *directVM, name string) error {
	snap, err := d.l.DomainSnapshotLookupByName(v.dom, name, 0)
	if err != nil {
		return err
	}
	return d.l.DomainSnapshotDelete(snap, 0)
}
