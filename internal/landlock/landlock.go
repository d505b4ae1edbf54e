// Package landlock confines the calling thread, and what it execs, to the
// files of a list of paths with Linux's Landlock LSM. An unprivileged
// process may do this to itself; once done it cannot be undone, and every
// process it execs or forks inherits it. DAC still applies on top: a rule
// never lets a process open what its uid could not.
//
// Only file system access is handled (not the network, not ioctls on
// devices): the rights known to the running kernel's Landlock ABI, from
// the first (5.13) on. Where the kernel has no Landlock, Restrict does
// nothing and says so (ABI 0).
package landlock

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Access is a set of Landlock file system rights.
type Access uint64

// The rights rules grant.
const (
	// Read reads files and lists directories beneath the path, and runs
	// programs there.
	Read = Access(unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR)
	// ReadWrite is Read plus writing and truncating files that exist.
	ReadWrite = Read | Access(unix.LANDLOCK_ACCESS_FS_WRITE_FILE|unix.LANDLOCK_ACCESS_FS_TRUNCATE)
	// All is every right: making, removing, linking and renaming too.
	All = ReadWrite | Access(unix.LANDLOCK_ACCESS_FS_REMOVE_DIR|unix.LANDLOCK_ACCESS_FS_REMOVE_FILE|
		unix.LANDLOCK_ACCESS_FS_MAKE_CHAR|unix.LANDLOCK_ACCESS_FS_MAKE_DIR|unix.LANDLOCK_ACCESS_FS_MAKE_REG|
		unix.LANDLOCK_ACCESS_FS_MAKE_SOCK|unix.LANDLOCK_ACCESS_FS_MAKE_FIFO|unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK|
		unix.LANDLOCK_ACCESS_FS_MAKE_SYM|unix.LANDLOCK_ACCESS_FS_REFER)
)

// fileRights are the rights a rule on a file (not a directory) may hold.
const fileRights = Access(unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE |
	unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_TRUNCATE)

// Rule grants Access to Path and, for a directory, everything beneath it.
type Rule struct {
	Path   string
	Access Access
}

// ABI is the running kernel's Landlock ABI version; 0 if it has none (not
// built in, or not enabled at boot).
func ABI() int {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0
	}
	return int(v)
}

// handled is every file system right ABI abi knows.
func handled(abi int) Access {
	h := All &^ Access(unix.LANDLOCK_ACCESS_FS_REFER|unix.LANDLOCK_ACCESS_FS_TRUNCATE)
	if abi >= 2 {
		h |= Access(unix.LANDLOCK_ACCESS_FS_REFER)
	}
	if abi >= 3 {
		h |= Access(unix.LANDLOCK_ACCESS_FS_TRUNCATE)
	}
	return h
}

// Restrict confines the calling OS thread to rules: from now on it, and
// every program it execs, opens, runs, makes or removes nothing outside
// them. A rule whose path does not exist is left out. The caller must
// hold its OS thread (runtime.LockOSThread) from before Restrict until it
// execs, or the exec may run on another, unconfined thread; Restrict locks
// it and never unlocks it. It returns the ABI used, 0 (and no error) on a
// kernel without Landlock. logExec asks the kernel (ABI 7) to audit what
// the exec'd program is denied.
func Restrict(rules []Rule, logExec bool) (int, error) {
	runtime.LockOSThread()
	abi := ABI()
	if abi == 0 {
		return 0, nil
	}
	h := handled(abi)
	attr := unix.LandlockRulesetAttr{Access_fs: uint64(h)}
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
	if errno != 0 {
		return abi, fmt.Errorf("landlock_create_ruleset: %w", errno)
	}
	ruleset := int(fd)
	defer unix.Close(ruleset)
	for _, r := range rules {
		if err := addRule(ruleset, r, h); err != nil {
			return abi, err
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return abi, fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	var flags uintptr
	if logExec && abi >= 7 {
		flags = unix.LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(ruleset), flags, 0); errno != 0 {
		return abi, fmt.Errorf("landlock_restrict_self: %w", errno)
	}
	return abi, nil
}

// addRule adds r to ruleset, its rights cut to what the ABI handles and,
// on a file, to a file's rights.
func addRule(ruleset int, r Rule, h Access) error {
	fd, err := unix.Open(r.Path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("landlock rule %s: %w", r.Path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("landlock rule %s: %w", r.Path, err)
	}
	access := r.Access & h
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		access &= fileRights
	}
	if access == 0 {
		return nil
	}
	attr := unix.LandlockPathBeneathAttr{Allowed_access: uint64(access), Parent_fd: int32(fd)}
	if _, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(ruleset), unix.LANDLOCK_RULE_PATH_BENEATH,
		uintptr(unsafe.Pointer(&attr)), 0, 0, 0); errno != 0 {
		return fmt.Errorf("landlock rule %s: %w", r.Path, os.NewSyscallError("landlock_add_rule", errno))
	}
	return nil
}
