// Package libvirtdirect owns the bench's direct VM path, the baseline
// crimux is measured against: libvirt through go-libvirt, with the domain
// XML crimux's converter builds for the same image and size. Its emulator
// is qemu itself, or a script placing it as crimux's pods are placed
// (PlaceIn), never crimux's wrapper (whose round trip to crimux's
// placement is part of what crimux costs), and its overlay disk is made
// with qemu-img exactly as crimux makes one. It also owns the bench's other direct dealings with
// libvirt: destroying domains by name or by crimux's identity stamp,
// snapshots of its own VMs, and what one needs to migrate to another
// libvirtd on this host's filesystem (migrate.go).
package libvirtdirect

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"

	"github.com/crimux/crimux/converter/cloudinit"
	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/test/bench/cgroups"
	"github.com/crimux/crimux/test/bench/stats"
)

const (
	// QEMUBinary is the host's qemu, the direct path's emulator.
	QEMUBinary = "/usr/bin/qemu-system-x86_64"
	// Socket is libvirtd's socket.
	Socket   = "/var/run/libvirt/libvirt-sock"
	qemuUser = "libvirt-qemu"
	// DomainPrefix starts the names of the direct path's domains, followed
	// by the run ID and a dash.
	DomainPrefix = "crimuxbench-"
)

// Client makes VMs directly through libvirt.
type Client struct {
	l        *golibvirt.Libvirt
	layout   imageLayout
	cidata   cloudinit.Files // of every VM Start makes
	dir      string
	prefix   string
	uid      int
	gid      int
	emulator string // QEMUBinary, or the placing script (PlaceIn)
	nic      bool   // Start's VMs get a NIC (AddNIC)

	mu   sync.Mutex
	seq  int
	live map[string]*VM
}

// VM is one domain of the direct path.
type VM struct {
	Name string
	// Defined is when its domain was defined (the burst's steps).
	Defined time.Time
	dir     string
	dom     golibvirt.Domain
}

// ConsoleLog is the file libvirt writes the VM's serial console to.
func (v *VM) ConsoleLog() string { return filepath.Join(v.dir, "console.log") }

// New connects to libvirtd and reads the files of the VM image image out
// of containerd with crimux's own image reader (runtimes/libvirt/vmimage),
// into a cache of the bench's.
func New(ctx context.Context, containerdEndpoint, image, dir, runID string) (*Client, error) {
	layout, err := prepareImage(ctx, containerdEndpoint, filepath.Join(dir, "images"), image)
	if err != nil {
		return nil, err
	}
	// crimux gives every VM a cidata volume: so does the direct path, so
	// that both start the same domain.
	cidata, err := cloudinit.Build(cloudinit.Input{InstanceID: "bench-" + runID, Hostname: "bench"})
	if err != nil {
		return nil, err
	}
	l := dial()
	if err := l.ConnectToURI(golibvirt.QEMUSystem); err != nil {
		return nil, fmt.Errorf("connect to libvirtd: %w", err)
	}
	d := &Client{l: l, layout: layout, cidata: cidata, dir: filepath.Join(dir, "vms"), prefix: DomainPrefix + runID + "-", live: map[string]*VM{}, emulator: QEMUBinary}
	if u, err := user.Lookup(qemuUser); err == nil {
		d.uid, _ = strconv.Atoi(u.Uid)
		d.gid, _ = strconv.Atoi(u.Gid)
	}
	return d, os.MkdirAll(d.dir, 0o711)
}

// PlaceIn has every VM started from now on run in a cgroup of its own
// below parent (relative to each hierarchy's root) from its first
// instruction, as crimux's VMs run in their pods' cgroups: its emulator
// becomes PlacingEmulator, which moves itself there, then runs qemu. Both paths'
// qemus then share the CPU alike with the daemons of the host, and the
// comparison is of what crimux does, not of where the guests sit.
func (d *Client) PlaceIn(parent string) error {
	dirs, err := cgroups.Delegate(parent, d.uid, d.gid)
	if err != nil {
		return err
	}
	if err := writePlacingEmulator(dirs); err != nil {
		return err
	}
	d.emulator = PlacingEmulator
	return nil
}

// Shape is the size of a direct VM, its cloud-init data (nil: no
// cidata volume) and whether it has a NIC, of which MAC (libvirt's
// choice if empty).
type Shape struct {
	MiB, VCPUs int
	CIData     cloudinit.Files
	NIC        bool
	MAC        string
}

// spec is the VM crimux would make of the image with that shape, under
// TCG, without crimux's identity stamp.
func (d *Client) spec(name, dir string, sh Shape) vm.Spec {
	s := vm.Spec{
		Name: name, VCPUs: uint(max(sh.VCPUs, 1)), MemoryMiB: uint64(sh.MiB), Accel: vm.AccelTCG, Emulator: d.emulator,
		MaxVCPUs: maxVCPUs(sh.VCPUs), MaxMemoryMiB: maxMemoryMiB(sh.MiB),
		Console: vm.Console{Socket: filepath.Join(dir, "console.sock"), Log: filepath.Join(dir, "console.log")},
	}
	if d.layout.Kernel != "" {
		s.Boot = &vm.KernelBoot{Kernel: d.layout.Kernel, Initrd: d.layout.Initrd, Args: d.layout.KernelArgs}
	}
	if d.layout.DiskPath != "" {
		s.Disk = &vm.Disk{Path: filepath.Join(dir, "disk.qcow2"), Format: "qcow2",
			Backing: &vm.Disk{Path: d.layout.DiskPath, Format: d.layout.DiskFormat}}
	}
	if sh.CIData != nil {
		s.CIData = filepath.Join(dir, "cidata.iso")
	}
	return s
}

// maxVCPUs and maxMemoryMiB are the room to grow crimux gives a VM on its
// default config (runtimes/libvirt/resize Headroom): vCPUs up to the
// host's CPUs, plugged later; RAM to twice the VM's from 256 MiB, none
// below. The domain's layout follows (hotpluggable vCPUs; a NUMA cell and
// a virtio-mem device), and so does the guest's boot.
func maxVCPUs(vcpus int) uint { return uint(min(max(runtime.NumCPU(), vcpus, 1), vm.MaxVCPUs)) }

func maxMemoryMiB(mib int) uint64 {
	if mib < 256 {
		return uint64(mib)
	}
	return 2 * uint64(mib)
}

// Start makes the VM's directory (outside the timing: crimux's is made
// in CreateContainer too, but a mkdir is noise), then times what crimux
// does for a VM: the overlay with qemu-img, define, start.
func (d *Client) Start(mib int) (*VM, time.Duration, error) {
	return d.StartShape(Shape{MiB: mib, VCPUs: 1, CIData: d.cidata, NIC: d.nic})
}

// AddNIC gives the VMs Start makes from now on a virtio-net NIC, as
// crimux's VM pods have one on the pod network: without it their guests
// booted measurably faster than crimux's under the burst (the guest
// probes the device; qemu polls its tap), which compared a VM with a NIC
// to one without. See nicOf.
func (d *Client) AddNIC() { d.nic = true }

// StartShape is Start of a VM of any shape; its cidata volume, when it
// has one, is made within the timing (crimux makes one in
// CreateContainer), by the same writer.
func (d *Client) StartShape(sh Shape) (*VM, time.Duration, error) {
	d.mu.Lock()
	d.seq++
	v := &VM{Name: fmt.Sprintf("%s%d", d.prefix, d.seq)}
	d.live[v.Name] = v
	d.mu.Unlock()
	v.dir = filepath.Join(d.dir, v.Name)
	if err := os.MkdirAll(v.dir, 0o700); err != nil {
		return v, 0, err
	}
	if err := os.Chown(v.dir, d.uid, d.gid); err != nil {
		return v, 0, err
	}
	spec := d.spec(v.Name, v.dir, sh)
	took, err := stats.Timed(func() error {
		if sh.CIData != nil {
			if err := writeCIData(spec.CIData, sh.CIData); err != nil {
				return err
			}
		}
		if spec.Disk != nil {
			out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2",
				"-b", d.layout.DiskPath, "-F", d.layout.DiskFormat, spec.Disk.Path).CombinedOutput()
			if err != nil {
				return fmt.Errorf("overlay: %v: %s", err, out)
			}
		}
		xml, err := d.domainXML(spec, sh)
		if err != nil {
			return err
		}
		if v.dom, err = d.l.DomainDefineXML(xml); err != nil {
			return fmt.Errorf("define %s: %w", v.Name, err)
		}
		v.Defined = time.Now()
		return d.create(v)
	})
	return v, took, err
}

// create starts v's domain on a libvirtd connection of its own, as crimux
// starts its VMs (runtimes/libvirt/virt): libvirtd serves at most
// max_client_requests (5) calls of one connection at once, and a burst on
// one connection would start its qemus five at a time.
func (d *Client) create(v *VM) error {
	l := dial()
	if err := l.ConnectToURI(golibvirt.QEMUSystem); err != nil {
		return fmt.Errorf("start %s: connect to libvirtd: %w", v.Name, err)
	}
	defer func() { _ = l.Disconnect() }()
	if err := l.DomainCreate(v.dom); err != nil {
		return fmt.Errorf("start %s: %w", v.Name, err)
	}
	return nil
}

// dial is a new, unconnected, client of libvirtd.
func dial() *golibvirt.Libvirt {
	return golibvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(Socket), dialers.WithLocalTimeout(5*time.Second)))
}

// Suspend pauses the VM's guest.
func (d *Client) Suspend(v *VM) error { return d.l.DomainSuspend(v.dom) }

// Remove destroys and undefines the VM and deletes its files.
func (d *Client) Remove(v *VM) error {
	err := DestroyDomain(d.l, v.Name)
	if rmErr := os.RemoveAll(v.dir); err == nil {
		err = rmErr
	}
	d.mu.Lock()
	delete(d.live, v.Name)
	d.mu.Unlock()
	return err
}

// RemoveAll removes every VM of the direct path, and any domain of this
// run's prefix libvirt still has (a start cut short).
func (d *Client) RemoveAll() error {
	var errs []error
	d.mu.Lock()
	vms := make([]*VM, 0, len(d.live))
	for _, v := range d.live {
		vms = append(vms, v)
	}
	d.mu.Unlock()
	for _, v := range vms {
		errs = append(errs, d.Remove(v))
	}
	if doms, _, err := d.l.ConnectListAllDomains(1, 0); err == nil {
		for _, dom := range doms {
			if strings.HasPrefix(dom.Name, d.prefix) {
				errs = append(errs, DestroyDomain(d.l, dom.Name))
			}
		}
	}
	return errors.Join(errs...)
}

// writeCIData writes the cloud-init volume as crimux does (a direct user
// of libvirt would need one too).
func writeCIData(path string, files cloudinit.Files) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := files.WriteISO(f, time.Now()); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// AgentPing sends guest-ping to the guest agent of domain name (any
// domain: the direct path's or crimux's); nil once the agent answers.
func (d *Client) AgentPing(name string) error {
	dom, err := d.l.DomainLookupByName(name)
	if err != nil {
		return err
	}
	_, err = d.l.QEMUDomainAgentCommand(dom, `{"execute":"guest-ping"}`, 2, 0)
	return err
}

// Close disconnects from libvirtd.
func (d *Client) Close() { _ = d.l.Disconnect() }
