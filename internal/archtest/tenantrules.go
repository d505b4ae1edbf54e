package archtest

import "slices"

// pathFuncs are the functions of syscall and x/sys/unix that look a path
// up (open, create, remove, rename, change, stat, mount, walk it), the
// *at forms included: resolving beneath a directory's descriptor is
// internal/tenantfs's business.
var pathFuncs = []string{
	"Open", "Openat", "Openat2", "Creat", "Stat", "Lstat", "Statfs", "Statx", "Fstatat",
	"Access", "Faccess", "Faccessat", "Faccessat2", "Unlink", "Unlinkat", "Rmdir",
	"Rename", "Renameat", "Renameat2", "Chown", "Lchown", "Fchownat", "Chmod", "Fchmodat",
	"Truncate", "Mknod", "Mknodat", "Mkdir", "Mkdirat", "Mount", "Unmount",
	"Readlink", "Readlinkat", "Symlink", "Symlinkat", "Link", "Linkat",
	"Utimes", "UtimesNano", "UtimesNanoAt", "Getxattr", "Lgetxattr", "Setxattr",
	"Lsetxattr", "Removexattr", "Lremovexattr", "Chdir", "Chroot",
}

// TenantPaths is the tenant-path rule (tenantpaths.go): in the code that
// takes a tenant's volume paths, a path is looked up only where this
// table allows it, and qemu-img is run only where it allows it.
var TenantPaths = TenantPathRule{
	Scopes: []TenantScope{
		{Path: "runtimes/libvirt/rootvol",
			Why: "a durable VM's root volume: its directory and the disk file in it, or its block device"},
		{Path: "converter/cloudinit",
			Why: "the cloud-init volume's user-data file: read by the caller (tenantfs.ReadBeneath), never here"},
		{Path: "runtimes/libvirt/virtiofs",
			Why: "a share's directory (a CRI mount's host path), bound and handed to virtiofsd"},
		{Path: "runtimes/libvirt/rootdisk/volume.go",
			Why: "a root volume prepared, examined and its disk's snapshots read"},
		{Path: "runtimes/libvirt/rootdisk/check.go",
			Why: "a root volume checked and given to the VM before a start"},
		{Path: "runtimes/libvirt/rootdisk/make_volume.go",
			Why: "a pod's root volume claimed, prepared and attached at CreateContainer"},
		{Path: "runtimes/libvirt/vmstorage/storage.go",
			Why: "the host paths of a VM's CRI mounts and devices, checked and opened for qemu"},
		{Path: "runtimes/libvirt/cidata/cidata.go",
			Why: "the cloud-init volume's content written into the VM's directory"},
	},
	Forbidden: map[string][]string{
		"os": {"Open", "OpenFile", "Create", "CreateTemp", "ReadFile", "WriteFile", "ReadDir",
			"Remove", "RemoveAll", "Rename", "Truncate", "Chown", "Lchown", "Chmod", "Chtimes",
			"Stat", "Lstat", "Mkdir", "MkdirAll", "MkdirTemp", "Readlink", "Symlink", "Link",
			"DirFS", "OpenRoot", "OpenInRoot", "CopyFS", "Chdir"},
		"io/ioutil":             {"ReadFile", "WriteFile", "ReadDir", "TempFile", "TempDir"},
		"path/filepath":         {"EvalSymlinks", "Walk", "WalkDir", "Glob"},
		"syscall":               pathFuncs,
		"golang.org/x/sys/unix": pathFuncs,
	},
	Allowed: slices.Concat(rootvolAllowed, virtiofsAllowed, hostPathAllowed),
}

// A VM's directory (vmDir, in crimux's state dir) is root's, 0711: the
// VM's identity owns only run/ in it, and the names used here are
// crimux's. A root volume's disk is there as <vmDir>/root-volume: a bind
// mount of the inode tenantfs opened, or crimux's own device node.
var rootvolAllowed = []PathAllowance{
	{File: "runtimes/libvirt/rootvol/attach.go", Func: "Attach", Calls: map[string]int{"os.Lchown": 1},
		Why: "crimux's own device node in the VM's directory, given to the VM's identity; Lchown follows no link"},
	{File: "runtimes/libvirt/rootvol/attach.go", Func: "attachDevice", Calls: map[string]int{"unix.Stat": 1, "unix.Mknod": 1},
		Why: "a block volume's host path is kubelet's device path for the claim, no name in a tenant's directory: only its device number is read; the node is made in the VM's directory"},
	{File: "runtimes/libvirt/rootvol/attach.go", Func: "giveFile", Calls: map[string]int{"os.WriteFile": 1, "unix.Mount": 1},
		Why: "the placeholder in the VM's directory, and the bind mount onto it of /proc/self/fd/N, the disk file tenantfs opened"},
	{File: "runtimes/libvirt/rootvol/idmap.go", Func: "attachMapped", Calls: map[string]int{"os.WriteFile": 1},
		Why: "the placeholder in the VM's directory the idmapped mount (open_tree of the disk file's descriptor tenantfs opened) is moved onto"},
	{File: "runtimes/libvirt/rootvol/idmap.go", Func: "mappingNamespace", Calls: map[string]int{"os.Open": 1},
		Why: "/proc/<pid>/ns/user of crimux's own stopped child: no name in a tenant's volume"},
	{File: "runtimes/libvirt/rootvol/attach.go", Func: "Release", Calls: map[string]int{"unix.Unmount": 1, "os.Remove": 2},
		Why: "the attachment (unmounted UMOUNT_NOFOLLOW) and the owner record, both in the VM's directory"},
	{File: "runtimes/libvirt/rootvol/attach.go", Func: "RemoveVMDir", Calls: map[string]int{"os.RemoveAll": 1},
		Why: "the VM's directory in crimux's state dir, once Release has unmounted the volume's disk from it"},
	{File: "runtimes/libvirt/rootvol/given.go", Func: "openAttached", Calls: map[string]int{"unix.Open": 2},
		Why: "the attachment in the VM's directory, O_PATH|O_NOFOLLOW, then reopened through its own /proc/self/fd link once fstat says it is a regular file"},
	{File: "runtimes/libvirt/rootvol/given.go", Func: "writeGiven", Calls: map[string]int{"os.OpenFile": 1, "os.Rename": 1, "os.Remove": 1, "os.Open": 1},
		Why: "the owner record, written durably in the VM's directory (temporary file, rename, the directory synced)"},
	{File: "runtimes/libvirt/rootvol/given.go", Func: "readGiven", Calls: map[string]int{"os.ReadFile": 1},
		Why: "the owner record, in the VM's directory"},
	{File: "runtimes/libvirt/rootvol/import.go", Func: "importQcow2", Calls: map[string]int{QemuImg: 2},
		Why: "qemu-img writes /dev/fd/3 (tenantfs.ChildFiles): the disk file tenantfs created, or the block device openDevice opened; it reads the image's disk in crimux's image cache"},
	{File: "runtimes/libvirt/rootvol/import.go", Func: "importRaw", Calls: map[string]int{QemuImg: 3},
		Why: "as importQcow2: the target is /dev/fd/3 (file.filename in --target-image-opts), the source the image's disk in crimux's image cache"},
	{File: "runtimes/libvirt/rootvol/snapshots.go", Func: "Snapshots", Calls: map[string]int{QemuImg: 1},
		Why: "qemu-img info reads the attachment in the VM's directory (its one caller, rootdisk's RedefineVolumeSnapshots, is handed the domain's disk, <vmDir>/root-volume), never a path in the volume"},
	{File: "runtimes/libvirt/rootvol/volume.go", Func: "Capacity", Calls: map[string]int{"unix.Statfs": 1},
		Why: "the volume's own directory (kubelet's mount point for the claim), not a name in it: only its filesystem's size is read"},
	{File: "runtimes/libvirt/rootvol/volume.go", Func: "Key", Calls: map[string]int{"unix.Stat": 1},
		Why: "the volume's own directory or device path (kubelet's), not a name in it: only its identity (device and inode, or device number) is read"},
	{File: "runtimes/libvirt/rootvol/volume.go", Func: "openDevice", Calls: map[string]int{"os.OpenFile": 1},
		Why: "a block volume's device path (kubelet's), not a name in a tenant's directory: opened once, checked on the descriptor to be a block device, and used through that descriptor only"},
	{File: "runtimes/libvirt/rootvol/volume.go", Func: "checkDir", Calls: map[string]int{"os.Stat": 1},
		Why: "the volume's own directory (kubelet's), checked to be one; names in it are resolved by tenantfs"},
}

// A share's directory is a CRI mount's host path: kubelet's directory for
// the volume (its parents kubelet's too), not a name in it. virtiofsd,
// not crimux, resolves names in it, inside its own sandbox.
var virtiofsAllowed = []PathAllowance{
	{File: "runtimes/libvirt/virtiofs/asuser.go", Func: "exposeForUser", Calls: map[string]int{"unix.Open": 1, "unix.Mount": 2, "os.MkdirAll": 1},
		Why: "the share's directory opened O_PATH once and bound by that descriptor onto a directory of a tmpfs, both in the helper's own mount namespace"},
	{File: "runtimes/libvirt/virtiofs/helper.go", Func: "sandboxAndRun", Calls: map[string]int{"unix.Mount": 1},
		Why: "/ made a slave mount in the helper's own mount namespace"},
	{File: "runtimes/libvirt/virtiofs/helper.go", Func: "bindReadOnly", Calls: map[string]int{"unix.Mount": 2},
		Why: "the share's directory bound onto itself and made read-only, in the helper's own mount namespace"},
	{File: "runtimes/libvirt/virtiofs/virtiofs.go", Func: "connectedPair", Calls: map[string]int{"os.MkdirTemp": 1, "os.RemoveAll": 1},
		Why: "a fresh 0700 directory for a socket, in the pod's directory in crimux's state dir"},
}

// A CRI device's or mount's host path is kubelet's (a claim's device
// path, a volume's directory, a file kubelet writes such as /etc/hosts),
// not a name in a tenant's volume.
var hostPathAllowed = []PathAllowance{
	{File: "runtimes/libvirt/vmstorage/storage.go", Func: "isHostFile", Calls: map[string]int{"os.Stat": 1},
		Why: "a CRI mount's host path, to tell kubelet's file mounts from directories; nothing is opened"},
	{File: "runtimes/libvirt/vmstorage/storage.go", Func: "CheckHost", Calls: map[string]int{"os.Stat": 2},
		Why: "the host paths of the CRI devices and mounts, checked for their kind; each is opened later on its own and checked again there"},
	{File: "runtimes/libvirt/vmstorage/storage.go", Func: "openBlockDevice", Calls: map[string]int{"os.OpenFile": 1},
		Why: "a CRI device's host path (kubelet's), opened once, checked on the descriptor to be a block device, and handed to qemu as that descriptor"},
	{File: "runtimes/libvirt/cidata/cidata.go", Func: "ISO.WriteCIData", Calls: map[string]int{"os.WriteFile": 1, "os.Truncate": 1, "os.Remove": 1},
		Why: "cidata.iso in the VM's directory in crimux's state dir: the tenant's user-data is its content, never a path"},
}
