// Package tenantfs is the one way crimux, running as root, reaches the
// files in a tenant's volume: a directory kubelet made for the pod (an
// emptyDir, a PVC's mount point, a hostPath) whose content the tenant
// writes, from this pod or from any other pod sharing the volume, at the
// same time as crimux works in it.
//
// A path into such a directory names whatever the tenant made of it the
// moment it is looked up: a file checked and then opened again by path,
// or removed and then created by path, may be a symbolic link to a host
// file by the second look-up, and a root process writes that host file.
// So nothing here looks a tenant's name up twice:
//
//   - the volume's directory is opened once (OpenRoot), as an O_PATH
//     descriptor; its own last component is not followed (kubelet makes
//     a real directory there), its parents, the node's, are;
//   - every name is resolved from that descriptor with openat2, beneath
//     it (no "..", absolute path or mount point out of it), following no
//     symbolic link at all and no /proc magic link: a link anywhere in
//     the name is refused (ELOOP), never followed;
//   - an existing file is held by an O_PATH descriptor, checked to be a
//     regular file (fstat, on the descriptor), and only then opened for
//     reading or writing, through that descriptor: a FIFO is not waited
//     on, a device is never opened, and the inode opened is the inode
//     checked;
//   - a new file is created O_EXCL: a name the tenant took in the
//     meantime, a link included, is refused rather than opened;
//   - a name is removed relative to the directory's descriptor: a link
//     there is removed itself, never followed.
//
// What a file is opened as is then the only way to it: its descriptor is
// read and written, and handed to a child process (ChildFiles) that
// opens /dev/fd/N, the same open inode, rather than given the path.
//
// On kernels without openat2 (before 5.6) the same resolution is walked
// one component at a time, each opened O_PATH|O_NOFOLLOW and checked.
package tenantfs
