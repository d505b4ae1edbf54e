package tenantfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ReadBeneath reads dir/name, which must resolve to a regular file
// beneath dir, at most limit bytes of it. It is the second way to a
// tenant's file (Root is the first), for a file the
// tenant's volume may reach through its own links: a Secret's or a
// ConfigMap's (kubelet makes them of relative links, user-data ->
// ..data/user-data, ..data -> ..<timestamp>, swapped on an update). The
// volume may change while crimux reads it (a directory swapped for a
// link, a PVC's other users writing) and may hold anything a filesystem
// can. So its file is found once, on descriptors, following only the
// relative links that stay beneath the volume, never by checking a path
// and opening it again; and it is only opened for reading once it is
// known to be a regular file.
//
// Nothing here waits on the tenant (callers hold a pod's lock): a FIFO
// or a device is refused on its O_PATH descriptor, never opened, and
// reading a regular file does not block (on a network filesystem that
// hangs it would, as kubelet's own reads of the volume would). A name
// that does not exist is an error that is os.ErrNotExist.
func ReadBeneath(dir, name string, limit int64) ([]byte, error) {
	f, err := openRegularBeneath(dir, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}

// beneath is how the volume's file is resolved: from the volume's root,
// never above it (an absolute link or a ".." past the root is EXDEV),
// never through /proc's magic links, never across a mount point.
//
// RESOLVE_BENEATH rather than RESOLVE_IN_ROOT: IN_ROOT would confine a
// link out of the volume into it ("/etc/shadow" read as
// <volume>/etc/shadow), reading a file the tenant did not mean; a link
// that leaves the volume is a mistake or an attack, and the pod is told
// so rather than given another file. Kubelet's own
// links (user-data -> ..data/user-data, ..data -> ..<timestamp>) are
// relative and stay inside, so both resolve them alike.
var beneath = unix.OpenHow{
	Flags:   unix.O_PATH | unix.O_CLOEXEC,
	Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
}

// maxLinks is the kernel's own limit (MAXSYMLINKS).
const maxLinks = 40

// openRegularBeneath opens dir/name for reading, resolved beneath dir,
// if it is a regular file. dir itself is kubelet's directory for the
// volume (a tmpfs, a PVC's mount point, a subPath bind mount; a
// hostPath's own path): a real directory, so a link as its last
// component is nothing kubelet makes and is not followed (O_NOFOLLOW);
// its parents are the node's (/var/lib/kubelet may be a link) and are.
// The file is first held by an O_PATH descriptor, which opens nothing:
// a FIFO is not waited on, a device's driver never sees an open (some
// act on one: a watchdog starts, a tape rewinds). Only a regular file is
// then opened, through /proc/self/fd, so the very inode checked.
func openRegularBeneath(dir, name string) (*os.File, error) {
	root, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOTDIR) {
		return nil, fmt.Errorf("the volume's host path %s is not a directory (a symbolic link there is not followed)", dir)
	} else if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(root)
	fd, err := pathBeneath(root, name)
	switch {
	case errors.Is(err, unix.EXDEV):
		return nil, fmt.Errorf("%s resolves outside the volume (a symbolic link out of it, or a mount point in it)", name)
	case err != nil:
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%s is %s, not a regular file", name, FileKind(st.Mode))
	}
	// O_NONBLOCK and O_NOCTTY cannot matter for a regular file; they are
	// there in case the check above is ever wrong.
	rfd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(fd), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "reopen", Path: name, Err: err}
	}
	f := os.NewFile(uintptr(rfd), name)
	var rst unix.Stat_t
	if err := unix.Fstat(rfd, &rst); err != nil || rst.Dev != st.Dev || rst.Ino != st.Ino {
		f.Close()
		return nil, fmt.Errorf("%s changed while it was opened", name)
	}
	return f, nil
}

// pathBeneath resolves name beneath the directory root to an O_PATH
// descriptor: openat2, or on kernels without it (before 5.6) the same
// resolution done by hand.
func pathBeneath(root int, name string) (int, error) {
	for try := 0; ; try++ {
		how := beneath
		fd, err := openat2(root, name, &how)
		switch {
		case errors.Is(err, unix.EAGAIN) && try < openRetries:
			continue
		case errors.Is(err, unix.ENOSYS):
			return walkBeneath(root, name)
		}
		return fd, err
	}
}

// walkBeneath is what openat2 does with beneath's flags, one component
// at a time: each opened O_PATH|O_NOFOLLOW, a link read and spliced into
// what is left (an absolute one refused), and ".." going back to the
// directory held open rather than being looked up, so neither a link nor
// a rename can take the walk above root. A mount point is known by its
// device number (a bind mount of root's own filesystem is not; only the
// node makes mounts).
func walkBeneath(root int, name string) (int, error) {
	w := beneathWalk{dirs: []int{root}} // dirs[0] is the caller's to close
	if err := unix.Fstat(root, &w.root); err != nil {
		return -1, err
	}
	defer w.closeDirs()
	w.todo = components(name)
	for len(w.todo) > 0 {
		c := w.todo[0]
		w.todo = w.todo[1:]
		if c == ".." {
			if len(w.dirs) == 1 {
				return -1, unix.EXDEV
			}
			unix.Close(w.dirs[len(w.dirs)-1])
			w.dirs = w.dirs[:len(w.dirs)-1]
			continue
		}
		fd, err := unix.Openat(w.dirs[len(w.dirs)-1], c, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, err
		}
		last, err := w.take(fd)
		if err != nil {
			return -1, err
		}
		if last {
			return fd, nil
		}
	}
	// name ended at a directory (".." or a link to one): the caller
	// refuses it as not a regular file.
	return unix.Openat(w.dirs[len(w.dirs)-1], ".", unix.O_PATH|unix.O_CLOEXEC, 0)
}

// beneathWalk is walkBeneath's state: root's stat (its device tells a
// mount point), the directories held open from root down, the names left
// to resolve and the links followed so far.
type beneathWalk struct {
	root  unix.Stat_t
	dirs  []int
	todo  []string
	links int
}

// closeDirs closes the directories the walk opened (not root).
func (w *beneathWalk) closeDirs() {
	for _, d := range w.dirs[1:] {
		unix.Close(d)
	}
}

// take decides what the component just opened as fd is: the last one
// (last: fd is the walk's answer), a directory the walk goes into (fd
// held), or a link whose target goes before the names left (fd closed).
// On an error fd is closed.
func (w *beneathWalk) take(fd int) (last bool, err error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return false, err
	}
	switch kind := st.Mode & unix.S_IFMT; {
	case st.Dev != w.root.Dev:
		err = unix.EXDEV
	case kind == unix.S_IFLNK:
		err = w.spliceLink(fd)
	case len(w.todo) == 0:
		return true, nil
	case kind == unix.S_IFDIR:
		w.dirs = append(w.dirs, fd)
		return false, nil
	default:
		err = unix.ENOTDIR
	}
	unix.Close(fd)
	return false, err
}

// spliceLink puts the target of the link fd holds before the names left;
// an absolute target, or a link past maxLinks, is refused.
func (w *beneathWalk) spliceLink(fd int) error {
	target, err := readLink(fd)
	w.links++
	switch {
	case err != nil:
	case w.links > maxLinks:
		err = unix.ELOOP
	case strings.HasPrefix(target, "/"):
		err = unix.EXDEV
	default:
		w.todo = append(components(target), w.todo...)
	}
	return err
}

// readLink reads the link an O_PATH descriptor holds.
func readLink(fd int) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(fd, "", buf)
	if err != nil {
		return "", err
	}
	if n == len(buf) {
		return "", unix.ENAMETOOLONG
	}
	return string(buf[:n]), nil
}
