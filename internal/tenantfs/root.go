package tenantfs

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Root is a tenant's volume directory, held open: every name in it is
// resolved from this descriptor.
type Root struct {
	dir string
	fd  int
	dev uint64 // the directory's filesystem: the walk's mount check
}

// resolve is how a name is resolved from the Root: beneath it (an
// absolute path or a ".." past it is EXDEV), across no mount point
// (EXDEV), through no symbolic link (ELOOP) and no /proc magic link.
const resolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// openat2 is unix.Openat2; tests make it ENOSYS to run the walk kernels
// without openat2 take.
var openat2 = unix.Openat2

// openRetries: openat2 says EAGAIN when a rename raced a ".." of the
// resolution; a tenant renaming in a loop gets a refusal, not a spin.
const openRetries = 16

// OpenRoot opens the volume's directory dir. dir itself is kubelet's (a
// link as its last component is nothing kubelet makes, and is not
// followed); its parents are the node's, and are.
func OpenRoot(dir string) (*Root, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOTDIR) {
		return nil, &os.PathError{Op: "open", Path: dir, Err: errors.New("not a directory (a symbolic link there is not followed)")}
	} else if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "stat", Path: dir, Err: err}
	}
	return &Root{dir: dir, fd: fd, dev: st.Dev}, nil
}

// Dir is the path the Root was opened at (for messages).
func (r *Root) Dir() string { return r.dir }

// Close closes the directory's descriptor; files opened from it stay
// open.
func (r *Root) Close() error {
	if r.fd < 0 {
		return nil
	}
	err := unix.Close(r.fd)
	r.fd = -1
	return err
}

// Open opens the existing regular file name for reading (os.O_RDONLY) or
// writing (os.O_RDWR, os.O_WRONLY); any other flag is refused. The file
// is held first by an O_PATH descriptor, which opens nothing, and is
// opened only once fstat says it is a regular file: a FIFO is not waited
// on, a device's driver never sees an open. A name that is not there is
// an error satisfying errors.Is(err, fs.ErrNotExist).
func (r *Root) Open(name string, flag int) (*os.File, error) {
	if flag&^unix.O_ACCMODE != 0 {
		return nil, r.pathErr("open", name, fmt.Errorf("flags %#x: only an access mode is taken", flag))
	}
	pfd, err := r.resolve(name, unix.O_PATH, 0)
	if err != nil {
		return nil, r.pathErr("open", name, err)
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return nil, r.pathErr("stat", name, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, r.pathErr("open", name, fmt.Errorf("it is %s, not a regular file", FileKind(st.Mode)))
	}
	// The O_PATH descriptor's own magic link: the very inode checked,
	// not a name looked up again.
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(pfd), flag|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, r.pathErr("reopen", name, err)
	}
	f := os.NewFile(uintptr(fd), r.path(name))
	var rst unix.Stat_t
	if err := unix.Fstat(fd, &rst); err != nil || rst.Dev != st.Dev || rst.Ino != st.Ino {
		f.Close()
		return nil, r.pathErr("reopen", name, errors.New("the file changed while it was opened"))
	}
	return f, nil
}

// Create creates name, a new regular file (mode 0600, less the umask),
// and opens it for reading and writing. The name must not be there: a
// file, a link (not followed) or anything else the tenant put there is
// an error satisfying errors.Is(err, fs.ErrExist).
func (r *Root) Create(name string) (*os.File, error) {
	fd, err := r.resolve(name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_NOCTTY, 0o600)
	if err != nil {
		return nil, r.pathErr("create", name, err)
	}
	return os.NewFile(uintptr(fd), r.path(name)), nil
}

// Remove removes name (not a directory) relative to the directory it is
// in, itself resolved beneath the Root: a link there is removed, never
// followed. A name that is not there is an error satisfying
// errors.Is(err, fs.ErrNotExist).
func (r *Root) Remove(name string) error {
	dirName, base := path.Split(name)
	if base == "" || base == "." || base == ".." {
		return r.pathErr("remove", name, unix.EINVAL)
	}
	dfd := r.fd
	if dirName != "" {
		var err error
		if dfd, err = r.resolve(dirName, unix.O_PATH|unix.O_DIRECTORY, 0); err != nil {
			return r.pathErr("remove", name, err)
		}
		defer unix.Close(dfd)
	}
	if err := unix.Unlinkat(dfd, base, 0); err != nil {
		return r.pathErr("remove", name, err)
	}
	return nil
}

// resolve opens name beneath the Root with flags (O_CLOEXEC added): by
// openat2, or on kernels without it (before 5.6) by walk.
func (r *Root) resolve(name string, flags int, mode uint32) (int, error) {
	if r.fd < 0 {
		return -1, os.ErrClosed
	}
	for try := 0; ; try++ {
		how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Mode: uint64(mode), Resolve: resolve}
		fd, err := openat2(r.fd, name, &how)
		switch {
		case errors.Is(err, unix.EAGAIN) && try < openRetries:
			continue
		case errors.Is(err, unix.ENOSYS):
			return r.walk(name, flags, mode)
		}
		return fd, err
	}
}

// walk is what openat2 does with resolve's flags, one component at a
// time: each directory on the way opened O_PATH|O_NOFOLLOW and checked
// (a link is ELOOP, another filesystem EXDEV), and ".." going back to
// the directory held open rather than being looked up, so that neither a
// link nor a rename takes the walk above the Root. The last component is
// opened with flags and O_NOFOLLOW, from the directory the walk holds. A
// mount point is known by its device number (a bind mount of the Root's
// own filesystem is not; only the node makes mounts).
func (r *Root) walk(name string, flags int, mode uint32) (int, error) {
	if strings.HasPrefix(name, "/") {
		return -1, unix.EXDEV
	}
	dirs := []int{r.fd} // dirs[0] is the Root's
	defer func() {
		for _, d := range dirs[1:] {
			unix.Close(d)
		}
	}()
	todo := components(name)
	last := "."
	if n := len(todo); n > 0 && todo[n-1] != ".." {
		last, todo = todo[n-1], todo[:n-1]
	}
	for _, c := range todo {
		if c == ".." {
			if len(dirs) == 1 {
				return -1, unix.EXDEV
			}
			unix.Close(dirs[len(dirs)-1])
			dirs = dirs[:len(dirs)-1]
			continue
		}
		fd, err := unix.Openat(dirs[len(dirs)-1], c, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, err
		}
		if err := r.check(fd, true); err != nil {
			unix.Close(fd)
			return -1, err
		}
		dirs = append(dirs, fd)
	}
	fd, err := unix.Openat(dirs[len(dirs)-1], last, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	if err != nil {
		return -1, err
	}
	if err := r.check(fd, false); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// check refuses what the walk must not go through: a link (only an
// O_PATH|O_NOFOLLOW open gives one), another filesystem, and on the way
// (dir) anything but a directory.
func (r *Root) check(fd int, dir bool) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	switch kind := st.Mode & unix.S_IFMT; {
	case kind == unix.S_IFLNK:
		return unix.ELOOP
	case st.Dev != r.dev:
		return unix.EXDEV
	case dir && kind != unix.S_IFDIR:
		return unix.ENOTDIR
	}
	return nil
}

// components splits a path into its names, "" and "." dropped.
func components(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

func (r *Root) path(name string) string { return filepath.Join(r.dir, name) }

// pathErr is an error about name in the Root, saying in words what a
// refused resolution's errno means (errors.Is still sees the errno).
func (r *Root) pathErr(op, name string, err error) error {
	switch {
	case errors.Is(err, unix.ELOOP):
		err = fmt.Errorf("%w: a symbolic link in a tenant's volume is not followed", err)
	case errors.Is(err, unix.EXDEV):
		err = fmt.Errorf("%w: it resolves outside the volume (\"..\" or an absolute path out of it, or a mount point in it)", err)
	}
	return &os.PathError{Op: op, Path: r.path(name), Err: err}
}

// FileKind names a file type for an error message ("a FIFO").
func FileKind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "a regular file"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFLNK:
		return "a symbolic link"
	}
	return "of an unknown kind"
}
