package core

import (
	"errors"
	"fmt"
	"os"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/store"
)

// Shares starts the virtiofsd of one share of a VM for a starting qemu,
// placed by place before it runs, and returns qemu's end of its socket
// (runtimes/libvirt/virtiofs).
type Shares interface {
	Start(sh vm.Share, dir string, place func(pid int) error) (*os.File, error)
}

// StorageOf is what of a VM container's devices and mounts reaches its
// guest (converter/vm.StorageFrom), judged against the host as it is now.
func StorageOf(cfg *runtimeapi.ContainerConfig) (vm.Storage, error) {
	return vm.StorageFrom(cfg, isHostFile)
}

// VMStorage is StorageOf VM c's config less its root volume.
func VMStorage(c *store.Container) (vm.Storage, error) {
	st, err := StorageOf(c.Config)
	if err != nil || c.RootVolume == nil {
		return st, err
	}
	return st.Without(c.RootVolume.ContainerPath), nil
}

func isHostFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// CheckStorageHost checks the host side of a VM's storage: each device a
// block device, each shared directory an existing directory.
func CheckStorageHost(st vm.Storage) error {
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
	st, err := VMStorage(c)
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

// StorageForDomain gives a starting qemu of a domain its VM's storage: the
// block devices opened by crimux (read-only where the device is) and the
// qemu end of each share's virtiofsd, with the arguments naming them;
// placeholder(i) names the i-th of the files. On error nothing is left
// open (a virtiofsd whose end is closed exits).
func (r *Runtime) StorageForDomain(domain string, placeholder func(i int) string) (files []*os.File, args []string, err error) {
	id, found := strings.CutPrefix(domain, vm.DomainName(""))
	if !found {
		return nil, nil, fmt.Errorf("%s is no crimux VM", domain)
	}
	c, err := r.Store.Container(id)
	if err != nil {
		return nil, nil, err
	}
	st, err := VMStorage(c)
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
		f, err := r.startShare(c, sh)
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

func (r *Runtime) startShare(c *store.Container, sh vm.Share) (*os.File, error) {
	if r.Shares == nil {
		return nil, fmt.Errorf("share %s: this runtime runs no virtiofsd", sh.ContainerPath)
	}
	cg := r.CgroupOf(c)
	return r.Shares.Start(sh, r.PodDir(c.SandboxID), func(pid int) error { return r.Cgroups.Place(cg, pid) })
}
