package virtiofs

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSquashIDChanges: on a thread with the filter, setresuid, setresgid
// and (when asked) setgroups answer 0 and change nothing; other calls
// still run. The thread is thrown away afterwards (its goroutine ends
// locked to it).
func TestSquashIDChanges(t *testing.T) {
	if _, ok := auditArch[runtime.GOARCH]; !ok {
		t.Skipf("no filter on %s", runtime.GOARCH)
	}
	type result struct {
		err                            error
		uidRet, gidRet, groupsRet      unix.Errno
		euidBefore, euidAfter, egidAft uintptr
		ngroupsBefore, ngroupsAfter    int
		pid                            int
	}
	done := make(chan result)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		var r result
		r.euidBefore, _, _ = unix.RawSyscall(unix.SYS_GETEUID, 0, 0, 0)
		r.ngroupsBefore = ngroups()
		// Without CAP_SYS_ADMIN a filter needs no_new_privs; as root the
		// helper needs neither, and this thread is thrown away.
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			r.err = err
			done <- r
			return
		}
		if r.err = squashIDChanges(true); r.err != nil {
			done <- r
			return
		}
		other := uintptr(r.euidBefore + 4242)
		_, _, r.uidRet = unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), other, ^uintptr(0))
		_, _, r.gidRet = unix.RawSyscall(unix.SYS_SETRESGID, ^uintptr(0), other, ^uintptr(0))
		_, _, r.groupsRet = unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0)
		r.euidAfter, _, _ = unix.RawSyscall(unix.SYS_GETEUID, 0, 0, 0)
		r.egidAft, _, _ = unix.RawSyscall(unix.SYS_GETEGID, 0, 0, 0)
		r.ngroupsAfter = ngroups()
		r.pid = unix.Getpid()
		done <- r
	}()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.uidRet != 0 || r.gidRet != 0 || r.groupsRet != 0 {
		t.Fatalf("setresuid, setresgid, setgroups answered %v, %v, %v; want 0", r.uidRet, r.gidRet, r.groupsRet)
	}
	if r.euidAfter != r.euidBefore || r.egidAft != uintptr(unix.Getegid()) || r.ngroupsAfter != r.ngroupsBefore {
		t.Fatalf("the IDs changed: euid %d -> %d, egid %d, groups %d -> %d", r.euidBefore, r.euidAfter, r.egidAft, r.ngroupsBefore, r.ngroupsAfter)
	}
	if r.pid != unix.Getpid() {
		t.Fatalf("getpid under the filter: %d", r.pid)
	}
}

func ngroups() int {
	n, _, _ := unix.RawSyscall(unix.SYS_GETGROUPS, 0, 0, 0)
	return int(n)
}

// TestSquashFilterShape: the jumps land on the two returns whatever the
// number of calls.
func TestSquashFilterShape(t *testing.T) {
	for _, calls := range [][]uint32{{1}, {1, 2}, {1, 2, 3}} {
		prog := squashFilter(unix.AUDIT_ARCH_X86_64, calls...)
		allow, noop := len(prog)-2, len(prog)-1
		if prog[allow].K != unix.SECCOMP_RET_ALLOW || prog[noop].K != unix.SECCOMP_RET_ERRNO {
			t.Fatalf("%d calls: returns %+v", len(calls), prog[allow:])
		}
		if got := 1 + 1 + int(prog[1].Jf); got != allow {
			t.Fatalf("%d calls: another ABI jumps to %d, want %d (allow)", len(calls), got, allow)
		}
		for i := range calls {
			at := 3 + i
			if got := at + 1 + int(prog[at].Jt); got != noop {
				t.Fatalf("%d calls: call %d jumps to %d, want %d (no-op)", len(calls), i, got, noop)
			}
		}
	}
}
