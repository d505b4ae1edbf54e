// Package vmstorage is a VM's storage beside its root disk: the devices
// and shared directories of its CRI config judged against the host, the
// operations refused while it has shares, and, for each start of its
// qemu, the block devices crimux opens and the virtiofsd it starts, handed
// to qemu as descriptors with the arguments naming them.
package vmstorage

import (
	"errors"
	"fmt"
	"os"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/vmfiles"
)

// Shares starts the virtiofsd of one share of a VM for a starting qemu,
// placed by place before it runs, and returns qemu's end of its socket
// (runtimes/libvirt/virtiofs).
type Shares interface {
	Start(sh vm.Share, dir string, place func(pid int) error) (*os.File, error)
}

// Of is what of a VM container's devices and mounts reaches its guest
// (converter/vm.StorageFrom), judged against the host as it is now.
func Of(cfg *runtimeapi.ContainerConfig) (vm.Storage, error) {
	return vm.StorageFrom(cfg, isHostFile)
}

// OfVM is the storage (Of) of VM c's config less its root volume.
func OfVM(c *store.Container) (vm.Storage, error) {
	st, err := Of(c.Config)
	if err != nil || c.RootVolume == nil {
		return st, err
	}
	return st.Without(c.RootVolume.ContainerPath), nil
}

func isHostFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// CheckHost checks the host side of a VM's storage: each device a block
// device, each shared directory an existing directory.
func CheckHost(st vm.Storage) error {
	for _, d := range st.Devices {
		fi, err := os.Stat(d.HostPath)
		if err != nil {
			return errdefs.Invalid(d.Field+".host_path", "device %s: %v", d.ContainerPath, errors.Unwrap(err))
		}
		if fi.Mode()&os.ModeDevice == 0 || fi.Mode()&os.ModeCharDevice != 0 {
			return errdefs.Invalid(d.Field+".host_path", "device %s: %s is not a block device (%s); a VM is given block devices only", d.ContainerPath, d.HostPath, fi.Mode().Type())
		}
	}
	for _, sh := range st.Shares {
		fi, err := os.Stat(sh.HostPath)
		if err != nil {
			return errdefs.Invalid(sh.Field+".host_path", "mount %s: %v", sh.ContainerPath, err)
		}
		if !fi.IsDir() {
			return errdefs.Invalid(sh.Field+".host_path", "mount %s: %s is not a directory", sh.ContainerPath, sh.HostPath)
		}
	}
	return nil
}

// RequireNoShares refuses an operation that saves a VM's memory (hibernate,
// a snapshot of a running or paused VM) when the VM has virtio-fs shares:
// qemu cannot save a vhost-user-fs device's state (it blocks migration,
// which saving is), and the shared directories' contents live on the host
// anyway.
func RequireNoShares(c *store.Container, what string) error {
	st, err := OfVM(c)
	if err != nil || len(st.Shares) == 0 {
		return nil
	}
	paths := make([]string, len(st.Shares))
	for i, sh := range st.Shares {
		paths[i] = sh.ContainerPath
	}
	return fmt.Errorf("%s needs the VM's memory saved, and qemu cannot save a VM with shared directories (virtio-fs: %s); stop the VM first, or give it its data as a block device: %w",
		what, strings.Join(paths, ", "), errdefs.ErrFailedPrecondition)
}

// Starter hands a starting qemu its VM's storage: the VMs' records, the
// state dir whose pod directories hold the shares' sockets, the virtiofsd
// starter (nil: VMs get no shares), and Place, which puts a virtiofsd of
// VM c in its VM's cgroup.
type Starter struct {
	Store    *store.Store
	StateDir string
	Shares   Shares
	Place    func(c *store.Container, pid int) error
}

// ForDomain gives a starting qemu of a VM's domain its storage: the
// block devices opened by crimux (read-only where the device is) and the
// qemu end of each share's virtiofsd, with the arguments naming them;
// placeholder(i) names the i-th of the files. On error nothing is left
// open (a virtiofsd whose end is closed exits).
func (s Starter) ForDomain(domain string, placeholder func(i int) string) (files []*os.File, args []string, err error) {
	id, found := strings.CutPrefix(domain, vm.DomainName(""))
	if !found {
		return nil, nil, fmt.Errorf("%s is no crimux VM", domain)
	}
	c, err := s.Store.Container(id)
	if err != nil {
		return nil, nil, err
	}
	st, err := OfVM(c)
	if err != nil || st.Empty() {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			files, args = nil, nil
		}
	}()
	for i, d := range st.Devices {
		f, err := openBlockDevice(d)
		if err != nil {
			return files, nil, err
		}
		args = append(args, d.QemuArgs(i, placeholder(len(files)))...)
		files = append(files, f)
	}
	for i, sh := range st.Shares {
		f, err := s.startShare(c, sh)
		if err != nil {
			return files, nil, err
		}
		args = append(args, sh.QemuArgs(len(st.Devices)+i, placeholder(len(files)))...)
		files = append(files, f)
	}
	return files, args, nil
}

// openBlockDevice opens a device for qemu, and checks what was opened.
func openBlockDevice(d vm.BlockDevice) (*os.File, error) {
	flag := os.O_RDWR
	if d.ReadOnly {
		flag = os.O_RDONLY
	}
	f, err := os.OpenFile(d.HostPath, flag, 0)
	if err != nil {
		return nil, fmt.Errorf("device %s: %w", d.ContainerPath, err)
	}
	fi, err := f.Stat()
	if err == nil && (fi.Mode()&os.ModeDevice == 0 || fi.Mode()&os.ModeCharDevice != 0) {
		err = fmt.Errorf("%s is not a block device", d.HostPath)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("device %s: %w", d.ContainerPath, err)
	}
	return f, nil
}

func (s Starter) startShare(c *store.Container, sh vm.Share) (*os.File, error) {
	if s.Shares == nil {
		return nil, fmt.Errorf("share %s: this runtime runs no virtiofsd", sh.ContainerPath)
	}
	return s.Shares.Start(sh, vmfiles.PodDir(s.StateDir, c.SandboxID), func(pid int) error { return s.Place(c, pid) })
}
