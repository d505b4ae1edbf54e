package vm

import (
	"fmt"
	"path"

	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
)

// A VM's root disk on a volume (docs/storage.md, "Durable VMs"): the
// annotation crimux.io/root-disk, on the pod or its container, names one
// of the container's volumes by its path in the container: the
// devicePath of a volumeDevices entry (a block volume: the disk is the
// device) or the mountPath of a filesystem volume (the disk is
// disk.qcow2, or disk.img for raw, in its root). That volume is the
// VM's root disk, in place of the overlay that dies with the pod; it is
// not given to the guest a second time as a disk or a share.
const (
	AnnotationRootDisk       = "crimux.io/root-disk"
	AnnotationRootDiskFormat = "crimux.io/root-disk-format"
	AnnotationRootDiskSize   = "crimux.io/root-disk-size"
)

// RootVolume is the volume a VM's root disk lives on.
type RootVolume struct {
	// ContainerPath is the annotation's value; HostPath the block device
	// or the directory.
	ContainerPath, HostPath string
	Block                   bool
	// Format is qcow2 (the default: internal snapshots work) or raw.
	Format string
	// Size is the disk the guest sees when the volume is imported into;
	// 0 is the volume's size.
	Size int64
	// Field is the CRI field the volume came from, for errors.
	Field string
}

// DiskFile is the file of a filesystem volume that holds the disk.
func (v *RootVolume) DiskFile() string {
	if v.Format == FormatRaw {
		return "disk.img"
	}
	return "disk.qcow2"
}

// Disk formats of a root volume.
const (
	FormatQcow2 = "qcow2"
	FormatRaw   = "raw"
)

// RootVolumeFrom reads the root disk annotations (the container's over
// the pod's) and finds the volume they name; nil when there are none.
func RootVolumeFrom(pod, container map[string]string, cfg *runtimeapi.ContainerConfig) (*RootVolume, error) {
	get := func(k string) (string, string, bool) {
		if v, ok := container[k]; ok {
			return v, "config.annotations[" + k + "]", true
		}
		v, ok := pod[k]
		return v, "pod annotations[" + k + "]", ok
	}
	want, field, ok := get(AnnotationRootDisk)
	if !ok {
		for _, k := range []string{AnnotationRootDiskFormat, AnnotationRootDiskSize} {
			if _, f, ok := get(k); ok {
				return nil, errdefs.Invalid(f, "is set without %s naming the volume", AnnotationRootDisk)
			}
		}
		return nil, nil
	}
	if !path.IsAbs(want) || path.Clean(want) != want {
		return nil, errdefs.Invalid(field, "%q is not a clean absolute path: name a volumeDevices devicePath or a volumeMounts mountPath", want)
	}
	v, err := findVolume(want, field, cfg)
	if err != nil {
		return nil, err
	}
	if v.Format, err = rootFormat(get(AnnotationRootDiskFormat)); err != nil {
		return nil, err
	}
	if v.Size, err = rootSize(get(AnnotationRootDiskSize)); err != nil {
		return nil, err
	}
	return v, nil
}

func findVolume(want, field string, cfg *runtimeapi.ContainerConfig) (*RootVolume, error) {
	for i, d := range cfg.GetDevices() {
		if path.Clean(d.GetContainerPath()) != want {
			continue
		}
		f := fmt.Sprintf("config.devices[%d]", i)
		if p := d.GetPermissions(); p != "" && !containsW(p) {
			return nil, errdefs.Invalid(f+".permissions", "root disk %s: the device is read-only (%q); a VM's root disk is written", want, p)
		}
		if !path.IsAbs(d.GetHostPath()) {
			return nil, errdefs.Invalid(f+".host_path", "%q is not an absolute path", d.GetHostPath())
		}
		return &RootVolume{ContainerPath: want, HostPath: d.GetHostPath(), Block: true, Field: f}, nil
	}
	for i, m := range cfg.GetMounts() {
		if path.Clean(m.GetContainerPath()) != want {
			continue
		}
		f := fmt.Sprintf("config.mounts[%d]", i)
		if m.GetReadonly() {
			return nil, errdefs.Invalid(f+".readonly", "root disk %s: the volume is mounted read-only; a VM's root disk is written", want)
		}
		if !path.IsAbs(m.GetHostPath()) {
			return nil, errdefs.Invalid(f+".host_path", "%q is not an absolute path", m.GetHostPath())
		}
		if len(m.GetUidMappings())+len(m.GetGidMappings()) > 0 {
			return nil, errdefs.Invalid(f+".uidMappings", "root disk %s: a volume with ID mappings cannot hold a VM's root disk", want)
		}
		return &RootVolume{ContainerPath: want, HostPath: m.GetHostPath(), Field: f}, nil
	}
	return nil, errdefs.Invalid(field, "%s names no volume of the container: use the devicePath of a volumeDevices entry (a block volume) or the mountPath of a volumeMounts entry (a filesystem volume)", want)
}

func containsW(perms string) bool {
	for _, c := range perms {
		if c == 'w' {
			return true
		}
	}
	return false
}

func rootFormat(v, field string, ok bool) (string, error) {
	switch {
	case !ok || v == FormatQcow2:
		return FormatQcow2, nil
	case v == FormatRaw:
		return FormatRaw, nil
	}
	return "", errdefs.Invalid(field, "%q is not qcow2 or raw", v)
}

func rootSize(v, field string, ok bool) (int64, error) {
	if !ok {
		return 0, nil
	}
	q, err := resource.ParseQuantity(v)
	if err != nil || q.Sign() <= 0 {
		return 0, errdefs.Invalid(field, "%q is not a positive size (a Kubernetes quantity: 10Gi, 512Mi)", v)
	}
	n, ok := q.AsInt64()
	if !ok || n%(1<<20) != 0 {
		return 0, errdefs.Invalid(field, "%q is not a whole number of MiB", v)
	}
	return n, nil
}
