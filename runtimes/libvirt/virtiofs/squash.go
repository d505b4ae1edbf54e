package virtiofs

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// virtiofsd (Debian 12's, the C one of qemu 7.2) switches its thread's
// effective uid and gid to the guest caller's, with the raw setresuid and
// setresgid system calls, around each request that makes a file (mknod,
// mkdir, symlink, create). A share that acts as one user (a container's
// run_as_user, or root without CAP_SETUID/CAP_SETGID) must not: this
// seccomp filter makes those calls succeed without doing anything, so
// virtiofsd makes every file as its own user. virtiofsd's own filter
// allows them; seccomp's answer is the strictest of all filters', and
// "errno 0" is stricter than "allow".
//
// virtiofsd also drops its supplemental groups at start (setgroups(0),
// so that root's groups never reach a guest's files); a share that acts
// as a container's user keeps that user's supplemental groups, as the
// container's processes do, so for it setgroups does nothing either.
//
// If the filter cannot be installed, the share does not start.

// auditArch is the seccomp architecture of the running binary.
var auditArch = map[string]uint32{"amd64": unix.AUDIT_ARCH_X86_64, "arm64": unix.AUDIT_ARCH_AARCH64}

// squashFilter is the classic BPF program: on this architecture, the
// calls nr return 0 and do nothing; everything else is left to the other
// filters.
func squashFilter(arch uint32, nr ...uint32) []unix.SockFilter {
	const (
		ld  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		ret = unix.BPF_RET | unix.BPF_K
		// offsets in struct seccomp_data
		nrOffset, archOffset = 0, 4
	)
	n := uint8(len(nr))
	prog := []unix.SockFilter{
		{Code: ld, K: archOffset},
		{Code: jeq, K: arch, Jt: 0, Jf: n + 1}, // another ABI: allow
		{Code: ld, K: nrOffset},
	}
	for i, call := range nr {
		prog = append(prog, unix.SockFilter{Code: jeq, K: call, Jt: n - uint8(i)}) // → no-op
	}
	return append(prog,
		unix.SockFilter{Code: ret, K: unix.SECCOMP_RET_ALLOW},
		unix.SockFilter{Code: ret, K: unix.SECCOMP_RET_ERRNO | 0}, // return 0
	)
}

// squashIDChanges installs squashFilter (for setresuid, setresgid, and
// setgroups if keepGroups) on the calling thread (which the
// caller has locked): what it execs or starts inherits it.
func squashIDChanges(keepGroups bool) error {
	arch, ok := auditArch[runtime.GOARCH]
	if !ok {
		return fmt.Errorf("no seccomp filter to squash IDs on %s", runtime.GOARCH)
	}
	calls := []uint32{unix.SYS_SETRESUID, unix.SYS_SETRESGID}
	if keepGroups {
		calls = append(calls, unix.SYS_SETGROUPS)
	}
	prog := squashFilter(arch, calls...)
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0); err != nil {
		return fmt.Errorf("install the seccomp filter that squashes IDs: %w", err)
	}
	runtime.KeepAlive(prog)
	return nil
}
