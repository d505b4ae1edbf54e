package rootvol

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/crimux/crimux/internal/tenantfs"
)

// givenDisk is the record of a filesystem volume's disk file given to a
// VM: which inode, whose it was, whom it was given to.
type givenDisk struct {
	// Volume and File are where the disk file was: the volume's host
	// directory and the file's name in it, to reach it again when the
	// bind mount is gone.
	Volume string `json:"volume"`
	File   string `json:"file"`
	// Dev and Ino identify the inode: nothing else is ever given back.
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
	// UID, GID and Mode (permission bits) are the file's before Attach.
	UID  uint32 `json:"uid"`
	GID  uint32 `json:"gid"`
	Mode uint32 `json:"mode"`
	// GivenUID and GivenGID are whom Attach gave it to (the owner it
	// found, when it was given to no identity).
	GivenUID uint32 `json:"given_uid"`
	GivenGID uint32 `json:"given_gid"`
}

// giveBack gives the recorded disk its owner and mode again, through
// the attachment at p if it is still the recorded inode's bind mount,
// else beneath the volume's directory. A disk crimux can no longer reach
// (the volume not mounted, the file removed or replaced: another inode,
// a link, not a regular file) is left: there is nothing of it to give.
func giveBack(rec *givenDisk, p string) error {
	f, err := openRecorded(rec, p)
	if err != nil || f == nil {
		return err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	switch st.Uid {
	case rec.GivenUID:
		if st.Uid != rec.UID || st.Gid != rec.GID {
			if err := f.Chown(int(rec.UID), int(rec.GID)); err != nil {
				return err
			}
		}
	case rec.UID: // Attach stopped before it gave the disk away
	default:
		// Someone else's since (the tenant's, or another node's VM
		// sharing the volume, which has its own record): left to them.
		return nil
	}
	if st.Mode&0o7777 != rec.Mode || st.Uid != rec.UID {
		// chown clears set-id bits: the mode goes back after it.
		return f.Chmod(os.FileMode(rec.Mode&0o777) | modeBits(rec.Mode))
	}
	return nil
}

// modeBits are os.FileMode's bits for the set-id and sticky bits of a
// unix mode.
func modeBits(m uint32) os.FileMode {
	var fm os.FileMode
	if m&unix.S_ISUID != 0 {
		fm |= os.ModeSetuid
	}
	if m&unix.S_ISGID != 0 {
		fm |= os.ModeSetgid
	}
	if m&unix.S_ISVTX != 0 {
		fm |= os.ModeSticky
	}
	return fm
}

// openRecorded opens the recorded inode for reading, or says nil when it
// is nowhere crimux may reach it.
func openRecorded(rec *givenDisk, p string) (*os.File, error) {
	f, err := openAttached(p)
	if err != nil {
		return nil, err
	}
	if f != nil && isRecorded(f, rec) {
		return f, nil
	}
	if f != nil {
		f.Close() // the placeholder Attach binds over: no mount (any more)
	}
	root, err := tenantfs.OpenRoot(rec.Volume)
	if err != nil {
		return nil, nil // the volume is not there (any more)
	}
	defer root.Close()
	f, err = root.Open(rec.File, os.O_RDONLY)
	if err != nil {
		// Not there, a link, not a regular file: not the recorded disk.
		// (A real I/O error is one as well; the disk then stays the VM
		// identity's, as it would with no record.)
		return nil, nil
	}
	if !isRecorded(f, rec) {
		f.Close()
		return nil, nil
	}
	return f, nil
}

// openAttached opens the regular file at p, crimux's attachment in the
// VM's directory (root's: nothing but crimux makes a name there), for
// reading; nil when there is none. It is held by an O_PATH descriptor
// first and opened only once it is a regular file.
func openAttached(p string) (*os.File, error) {
	pfd, err := unix.Open(p, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	} else if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: p, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, nil // a block volume's node: nothing recorded of it
	}
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(pfd), unix.O_RDONLY|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "reopen", Path: p, Err: err}
	}
	return os.NewFile(uintptr(fd), p), nil
}

func isRecorded(f *os.File, rec *givenDisk) bool {
	var st unix.Stat_t
	return unix.Fstat(int(f.Fd()), &st) == nil && st.Dev == rec.Dev && st.Ino == rec.Ino && st.Mode&unix.S_IFMT == unix.S_IFREG
}

// writeGiven writes the record durably, whole or not at all, before the
// disk is changed.
func writeGiven(vmDir string, rec *givenDisk) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	p := filepath.Join(vmDir, GivenName)
	tmp := p + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("record the root volume's disk owner: %w", err)
	}
	d, err := os.Open(vmDir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// readGiven reads the record; nil when there is none.
func readGiven(vmDir string) (*givenDisk, error) {
	p := filepath.Join(vmDir, GivenName)
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var rec givenDisk
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return &rec, nil
}
