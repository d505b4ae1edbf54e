package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/crimux/crimux/internal/testutil"

	"github.com/crimux/crimux/runtimes/libvirt/qcow2"
)

// identity is who a process runs as: its uid, gid and supplementary
// groups, read from /proc.
type identity struct {
	uid, gid uint32
	groups   []uint32
}

func identityOf(t *testing.T, pid int) identity {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	var id identity
	field := func(name string) []uint32 {
		m := regexp.MustCompile(`(?m)^` + name + `:\s*(.*)$`).FindSubmatch(b)
		var out []uint32
		for _, f := range strings.Fields(string(m[1])) {
			n, _ := strconv.ParseUint(f, 10, 32)
			out = append(out, uint32(n))
		}
		return out
	}
	uids, gids := field("Uid"), field("Gid")
	id.uid, id.gid, id.groups = uids[0], gids[0], field("Groups")
	for _, u := range uids {
		if u != id.uid {
			t.Fatalf("pid %d has mixed uids %v", pid, uids)
		}
	}
	return id
}

// asIdentity runs fn on an OS thread of its own that runs as id: its
// uid, gid and groups, every capability gone (a uid change away from root
// drops them all). The thread is never given back to the Go runtime, so it
// ends with fn: nothing else ever runs with these credentials or loses
// root's. This is exactly what a compromised qemu of that VM holds.
func asIdentity(t *testing.T, id identity, fn func() error) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with this goroutine
		groups := make([]uint32, len(id.groups))
		copy(groups, id.groups)
		var gp uintptr
		if len(groups) > 0 {
			gp = uintptrOf(groups)
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), gp, 0); e != 0 {
			errc <- fmt.Errorf("setgroups: %w", e)
			return
		}
		runtime.KeepAlive(groups)
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(id.gid), uintptr(id.gid), uintptr(id.gid)); e != 0 {
			errc <- fmt.Errorf("setresgid: %w", e)
			return
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(id.uid), uintptr(id.uid), uintptr(id.uid)); e != 0 {
			errc <- fmt.Errorf("setresuid: %w", e)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// connectUnix connects to the unix socket at path.
func connectUnix(path string) error {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Connect(fd, &unix.SockaddrUnix{Name: path})
}

// openFile opens path with flags, closing it at once.
func openFile(path string, flags int) error {
	fd, err := unix.Open(path, flags|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err == nil {
		unix.Close(fd)
	}
	return err
}

// vmPaths are a VM's files on the host.
type vmPaths struct{ disk, cidata, console, base string }

func pathsOf(t *testing.T, c *crimux, v *testVM) vmPaths {
	t.Helper()
	vmDir := filepath.Join(c.stateDir, "vms", strings.TrimPrefix(v.ctrID, "vm--"))
	p := vmPaths{
		disk:    filepath.Join(c.stateDir, "pods", strings.TrimPrefix(v.podID, "vm--"), "disk.qcow2"),
		cidata:  filepath.Join(vmDir, "cidata.iso"),
		console: filepath.Join(vmDir, "run", "console.sock"),
	}
	m := regexp.MustCompile(`<backingStore type=.file.[^>]*>\s*<format[^>]*/>\s*<source file='([^']+)'`).FindStringSubmatch(virsh(t, "dumpxml", v.domain))
	if m == nil {
		t.Fatalf("domain %s names no backing file", v.domain)
	}
	p.base = m[1]
	return p
}

// vmImageOther is a second good VM image: vm-busybox's files under an
// image of its own (its own digest, so its own image cache entry).
const vmImageOther = "127.0.0.1:5117/crimux/vm-busybox-b:latest"

// TestTwoTenants: VM pods A and B run from one image, C from another. Each
// qemu runs as a uid and gid of its own, neither root nor libvirt's shared
// qemu user. Acting as A's qemu (its uid, gids, no capabilities), every
// reach into B and into C fails: signal or ptrace its qemu, read its
// /proc/<pid>/environ, read its cloud-init ISO, open its root disk, open
// its image's disk for writing, connect to its console socket. The same
// identity does reach A's own (the harness acts with A's rights, so the
// test can fail). B and C keep running, their qemu the same processes.
func TestTwoTenants(t *testing.T) {
	parallel(t)
	requireVM(t)
	c := startVMAPICrimux(t)
	a := startTestVM(t, c, "tenant-a")
	victims := map[string]*testVM{
		"B (same image)":    startTestVM(t, c, "tenant-b"),
		"C (another image)": startTestVMOf(t, c, "tenant-c", vmImageOther),
	}
	pidA := qemuPID(t, a.domain)
	idA := identityOf(t, pidA)
	if idA.uid == 0 || idA.uid == qemuUserUID(t) {
		t.Errorf("A's qemu runs as %+v: want a uid of its own", idA)
	}
	pa := pathsOf(t, c, a)
	requireOwnReachable(t, idA, pidA, pa)
	for name, v := range victims {
		pid := qemuPID(t, v.domain)
		id := identityOf(t, pid)
		t.Logf("A's qemu (pid %d) runs as %+v, %s's (pid %d) as %+v", pidA, idA, name, pid, id)
		if id.uid == idA.uid || id.gid == idA.gid {
			t.Errorf("A and %s share an identity: %+v, %+v", name, idA, id)
		}
		requireUnreachable(t, idA, name, pid, pathsOf(t, c, v))
		if now := qemuPID(t, v.domain); now != pid {
			t.Fatalf("%s's qemu is pid %d now, was %d", name, now, pid)
		}
		if st := strings.TrimSpace(virsh(t, "domstate", v.domain)); st != "running" {
			t.Fatalf("%s is %q, want running", name, st)
		}
	}
}

// requireOwnReachable: acting as A's qemu reaches A's own files and
// process, or the harness proves nothing.
func requireOwnReachable(t *testing.T, idA identity, pidA int, pa vmPaths) {
	t.Helper()
	err := asIdentity(t, idA, func() error {
		for what, err := range map[string]error{
			"signal its own qemu": unix.Kill(pidA, 0),
			"read its own disk":   openFile(pa.disk, unix.O_RDONLY),
			"read the image disk": openFile(pa.base, unix.O_RDONLY),
			"enter its run dir":   openFile(filepath.Dir(pa.console), unix.O_RDONLY|unix.O_DIRECTORY),
		} {
			if err != nil {
				return fmt.Errorf("as A's qemu, %s: %v: the harness does not act as A", what, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// requireUnreachable: acting as A's qemu reaches nothing of victim's.
func requireUnreachable(t *testing.T, idA identity, victim string, pid int, p vmPaths) {
	t.Helper()
	err := asIdentity(t, idA, func() error {
		var reached []string
		for what, err := range map[string]error{
			"signal its qemu":         unix.Kill(pid, 0),
			"ptrace its qemu":         unix.PtraceAttach(pid),
			"read its environ":        openFile(fmt.Sprintf("/proc/%d/environ", pid), unix.O_RDONLY),
			"read its cloud-init ISO": openFile(p.cidata, unix.O_RDONLY),
			"read its root disk":      openFile(p.disk, unix.O_RDONLY),
			"write its root disk":     openFile(p.disk, unix.O_WRONLY),
			"write its image's disk":  openFile(p.base, unix.O_WRONLY),
			"connect to its console":  connectUnix(p.console),
		} {
			t.Logf("as A's qemu, %s of %s: %v", what, victim, err)
			if err == nil {
				reached = append(reached, what)
			} else if !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EACCES) {
				return fmt.Errorf("%s of %s: %v, want EPERM or EACCES", what, victim, err)
			}
		}
		if len(reached) > 0 {
			return fmt.Errorf("as A's qemu, these reached %s: %s", victim, strings.Join(reached, "; "))
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// qemuUserUID is libvirt's shared qemu user's uid (libvirt-qemu).
func qemuUserUID(t *testing.T) uint32 {
	t.Helper()
	b, _ := os.ReadFile("/etc/passwd")
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Split(line, ":"); len(f) > 2 && f[0] == "libvirt-qemu" {
			n, _ := strconv.ParseUint(f[2], 10, 32)
			return uint32(n)
		}
	}
	return 1<<32 - 1
}

// TestRewrittenDiskHeaderIsRefused: A's qemu, which may write its pod
// disk, rewrites the header to name a root-only host file as a raw backing
// file and exits (SIGKILLs itself, so nothing of qemu's own writes the
// header again), and A's container exits. The next container of the pod
// (kubelet's restart) does not start: the error says the root disk changed
// and names it; the host file keeps its owner, mode and content, and no
// qemu runs. (Had the new container reused the disk after an Lstat alone,
// libvirt would chown the host file to libvirt-qemu.)
func TestRewrittenDiskHeaderIsRefused(t *testing.T) {
	parallel(t)
	requireVM(t)
	c := startVMAPICrimux(t)
	a := startTestVM(t, c, "header-a")
	pidA := qemuPID(t, a.domain)
	idA := identityOf(t, pidA)
	disk := pathsOf(t, c, a).disk
	secret := filepath.Join(t.TempDir(), "host-secret")
	if err := os.WriteFile(secret, []byte("root's alone\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// The header a compromised qemu writes: crimux's own overlay layout,
	// naming the host file.
	evil := filepath.Join(t.TempDir(), "evil.qcow2")
	if err := qcow2.CreateOverlay(evil, secret, "raw", 64<<20, 0o600); err != nil {
		t.Fatal(err)
	}
	header, err := os.ReadFile(evil)
	if err != nil {
		t.Fatal(err)
	}
	header = header[:3*64<<10] // header, refcount table and block
	if err := asIdentity(t, idA, func() error {
		f, err := os.OpenFile(disk, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err = f.WriteAt(header, 0); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		return unix.Kill(pidA, unix.SIGKILL)
	}); err != nil {
		t.Fatalf("as A's qemu, rewrite its disk's header and exit: %v", err)
	}
	testutil.Eventually(t, within(t, 30*time.Second), "A's container exits", func() error {
		if out := c.crictl("inspect", "-o", "go-template", "--template", "{{.status.state}}", a.ctrID); out != "CONTAINER_EXITED" {
			return fmt.Errorf("state %s", out)
		}
		return nil
	})
	if b, err := qcow2.Inspect(disk); err != nil || b.Path != secret {
		t.Fatalf("the rewritten disk names %+v, %v; want %s", b, err, secret)
	}

	pod := vmPodJSON(t, "header-a", testCgroupParent(t), "")
	ctr2 := c.crictl("create", a.podID, vmContainerJSON(t, vmImage, vmMemory, ""), pod)
	out, err := c.crictlErr("start", ctr2)
	t.Logf("start after the rewrite: %v: %s", err, out)
	if err == nil || !strings.Contains(out, "root disk was changed") || !strings.Contains(out, disk) {
		t.Fatalf("start of a VM whose disk names %s: %v: %s; want a refusal naming the disk", secret, err, out)
	}
	if !strings.Contains(out, "FailedPrecondition") {
		t.Errorf("refusal is not FailedPrecondition: %s", out)
	}
	fi, err := os.Stat(secret)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || st.Gid != 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("host file is now %d:%d %v, want root's 0600", st.Uid, st.Gid, fi.Mode().Perm())
	}
	if b, _ := os.ReadFile(secret); !bytes.Equal(b, []byte("root's alone\n")) {
		t.Fatalf("host file's content changed: %q", b)
	}
	if out := virsh(t, "list", "--name"); strings.Contains(out, domainOf(ctr2)) {
		t.Fatalf("the VM runs:\n%s", out)
	}
	if _, err := os.Stat(disk); err != nil {
		t.Fatalf("the disk is not kept for inspection: %v", err)
	}
}

func uintptrOf(s []uint32) uintptr { return uintptr(unsafe.Pointer(&s[0])) }
