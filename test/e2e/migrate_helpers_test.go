package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crimux/crimux/config"
	"github.com/crimux/crimux/internal/testutil"
)

// Node two of the test bed (test/bed/node2-up.sh): its own libvirtd,
// virtlogd and containerd in mount and network namespaces of their own,
// reached from the host (node one) at 10.231.0.2 over libvirt's TLS.
var node2 = struct {
	exec, cniConfDir, pki1, pki2 string
	addr1, addr2                 string
	containerd                   string
}{
	exec:       filepath.Join(repoRoot(), "test", "bed", "node2-exec.sh"),
	containerd: "unix:///run/crimux-testbed/node2/containerd/containerd.sock",
	cniConfDir: "/etc/crimux-testbed/node2/cni/net.d",
	pki1:       "/etc/crimux-testbed/pki/node1",
	pki2:       "/etc/crimux-testbed/pki/node2",
	addr1:      "10.231.0.1",
	addr2:      "10.231.0.2",
}

// requireNode2 skips unless make e2e-migrate brought node two up.
func requireNode2(t *testing.T) {
	t.Helper()
	if os.Getenv("CRIMUX_MIGRATE") == "" {
		t.Skip("node two is not up: make e2e-migrate runs the migration tests")
	}
	if out, err := exec.Command(node2.exec, "virsh", "-c", "qemu:///system", "version").CombinedOutput(); err != nil {
		t.Fatalf("node two's libvirtd does not answer (test/bed/node2-up.sh): %v\n%s", err, out)
	}
}

// node2VMIDBase is node two's vm_id_base: its VMs run as uids of another
// range than node one's, as on another machine.
const node2VMIDBase = config.DefaultVMIDBase + config.DefaultVMIDCount

// migrationConfig writes a crimux config of node n (1 or 2) that sends
// and receives VMs, its migration section with extra (TOML lines).
func migrationConfig(t *testing.T, n int, extra string) string {
	base := uint32(config.DefaultVMIDBase)
	if n == 2 {
		base = node2VMIDBase
	}
	path := filepath.Join(t.TempDir(), fmt.Sprintf("node%d.toml", n))
	// The bed's wrapper and socket, not a slot of this host's
	// (ownPlacement): a VM keeps its <emulator> as it migrates, and the
	// bed's wrapper asks /run/crimux/placement.sock, which is each node's
	// own (node two binds a dir of its own over /run/crimux).
	body := fmt.Sprintf("[libvirt]\nemulator = %q\nplacement_socket = %q\nvm_id_base = %d\n\n%s",
		bedWrapper, bedPlacement, base, migrationSection(n, extra))
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// migrationSection is node n's (1 or 2) [libvirt.migration] section, extra
// (TOML lines) at its end: where it carries migrating VMs' streams, how
// the other node's libvirtd reaches its own, its key pair.
func migrationSection(n int, extra string) string {
	addr, pki := node2.addr1, node2.pki1
	if n == 2 {
		addr, pki = node2.addr2, node2.pki2
	}
	return fmt.Sprintf("[libvirt.migration]\naddress = \"%s:7345\"\nlibvirt_uri = \"qemu+tls://%s/system\"\npki_dir = %q\n%s", addr, addr, pki, extra)
}

// node2Virsh runs virsh against node two's libvirtd.
func node2Virsh(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(node2.exec, append([]string{"virsh", "-c", "qemu:///system"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("node two: virsh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// node2QemuPID is the pid of a domain's qemu on node two.
func node2QemuPID(t *testing.T, domain string) int {
	t.Helper()
	out, err := exec.Command(node2.exec, "cat", "/run/libvirt/qemu/"+domain+".pid").Output()
	if err != nil {
		t.Fatalf("node two: qemu pid of %s: %v", domain, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// guestInt reads an integer the guest prints.
func guestInt(t *testing.T, c *crimux, ctr string, argv ...string) float64 {
	t.Helper()
	out := c.crictl(append([]string{"exec", ctr}, argv...)...)
	f, err := strconv.ParseFloat(strings.Fields(out + " x")[0], 64)
	if err != nil {
		t.Fatalf("%s: %q is no number", strings.Join(argv, " "), out)
	}
	return f
}

// migrationRig is a VM pod running on node one with a counter in its
// guest's memory and a file on its root disk, and a target VM pod on
// node two waiting for it.
type migrationRig struct {
	n1, n2                     *crimux
	pod1, podID1, ctr1         string
	podID2, ctr2, parent2, ip2 string
	count, uptime              float64
}

// newMigrationRig starts both nodes' crimux (node one's migration
// section with extra, toml lines) and makes both pods.
func newMigrationRig(t *testing.T, extra string) *migrationRig {
	t.Helper()
	return newMigrationRigOf(t, extra, func() string { return vmContainerJSON(t, vmAgentImage, vmMemory, "") })
}

// newMigrationRigOf is newMigrationRig with both pods' container config
// from ctrJSON.
func newMigrationRigOf(t *testing.T, extra string, ctrJSON func() string) *migrationRig {
	t.Helper()
	requireVM(t)
	requireNode2(t)
	g := &migrationRig{}
	g.n1 = startCrimux(t, bed.containerd, "--vm-accel", "tcg", "--config", migrationConfig(t, 1, extra))
	g.n2 = startCrimuxOn(t, []string{node2.exec}, "", node2.containerd, "--vm-accel", "tcg",
		"--config", migrationConfig(t, 2, ""), "--cni-conf-dir", node2.cniConfDir)
	g.n1.crictl("pull", vmAgentImage)
	g.n2.crictl("pull", vmAgentImage)

	g.pod1 = vmPodJSON(t, "vm-migrate", testCgroupParent(t), "")
	g.podID1 = g.n1.crictl("runp", "--runtime", "vm", g.pod1)
	t.Cleanup(func() { g.n1.crictlErr("rmp", "-f", g.podID1) })
	g.ctr1 = g.n1.crictl("create", g.podID1, ctrJSON(), g.pod1)
	g.n1.crictl("start", g.ctr1)
	testutil.Eventually(t, 2*time.Minute, "crictl exec through the source's guest agent", func() error {
		_, err := g.n1.crictlErr("exec", "-s", g.ctr1, "true")
		return err
	})
	g.n1.crictl("exec", g.ctr1, "sh", "-c", "echo crimux-migrated-disk >/mnt/migrate-file && sync")
	g.n1.crictl("exec", g.ctr1, "sh", "-c", "(i=0; while :; do i=$((i+1)); echo $i >/run/count; sleep 0.2; done) </dev/null >/dev/null 2>&1 &")
	time.Sleep(time.Second)
	g.count = guestInt(t, g.n1, g.ctr1, "cat", "/run/count")
	g.uptime = guestInt(t, g.n1, g.ctr1, "cat", "/proc/uptime")

	g.parent2 = testCgroupParent(t)
	pod2 := vmPodJSON(t, "vm-migrate-target", g.parent2, `"crimux.io/migrate-from": "crimux-e2e/vm-migrate"`)
	g.podID2 = g.n2.crictl("runp", "--runtime", "vm", pod2)
	t.Cleanup(func() { g.n2.crictlErr("rmp", "-f", g.podID2) })
	g.ctr2 = g.n2.crictl("create", g.podID2, ctrJSON(), pod2)
	g.n2.crictl("start", g.ctr2)
	if st := containerStateReason(t, g.n2, g.ctr2); st != "CONTAINER_RUNNING" {
		t.Fatalf("the waiting target is %q, want CONTAINER_RUNNING", st)
	}
	g.ip2 = g.n2.crictl("inspectp", "-o", "go-template", "--template", "{{.status.network.ip}}", g.podID2)
	return g
}

// requireSameMachine: the guest in ctr on c is the source's, moved: its
// counter went on, its uptime too (no reboot), its disk has the file.
func (g *migrationRig) requireSameMachine(t *testing.T, c *crimux, ctr string) {
	t.Helper()
	if n := guestInt(t, c, ctr, "cat", "/run/count"); n <= g.count {
		t.Fatalf("the guest's counter is %v, %v before: not where it was", n, g.count)
	}
	if up := guestInt(t, c, ctr, "cat", "/proc/uptime"); up <= g.uptime {
		t.Fatalf("the guest's uptime is %vs, %vs before: it rebooted", up, g.uptime)
	}
	if out := c.crictl("exec", ctr, "cat", "/mnt/migrate-file"); out != "crimux-migrated-disk" {
		t.Fatalf("the file on the root disk reads %q", out)
	}
}

// requireStillOnSource: after a failed migration the VM runs on node one
// as it did, its container running.
func (g *migrationRig) requireStillOnSource(t *testing.T) {
	t.Helper()
	if st := virsh(t, "domstate", domainOf(g.ctr1)); st != "running" {
		t.Fatalf("node one: the VM is %q after the failed migration, want running", st)
	}
	if r := containerStateReason(t, g.n1, g.ctr1); r != "CONTAINER_RUNNING" {
		t.Fatalf("node one: the container is %q after the failed migration, want CONTAINER_RUNNING", r)
	}
	g.requireSameMachine(t, g.n1, g.ctr1)
}

// requireNothingOnNode2: once the failed target's pod is removed, node
// two has no domain, VM dir or migration sockets of it.
func (g *migrationRig) requireNothingOnNode2(t *testing.T) {
	t.Helper()
	g.n2.crictl("rmp", "-f", g.podID2)
	if out := node2Virsh(t, "list", "--all", "--name"); strings.Contains(out, domainOf(g.ctr2)) {
		t.Fatalf("node two keeps domain %s:\n%s", domainOf(g.ctr2), out)
	}
	requireNoVMDirs(t, g.n2)
	if out, _ := exec.Command(node2.exec, "ls", "-A", "/run/crimux/migration").CombinedOutput(); strings.TrimSpace(string(out)) != "" {
		t.Fatalf("node two keeps migration sockets: %s", out)
	}
}

// containerStateReason is a container's "STATE REASON".
func containerStateReason(t *testing.T, c *crimux, ctr string) string {
	t.Helper()
	return c.crictl("inspect", "-o", "go-template", "--template", "{{.status.state}} {{.status.reason}}", ctr)
}

// migrateRun is crimuxctl vm migrate running in the background.
type migrateRun struct {
	cmd            *exec.Cmd
	stdout, stderr *testutil.SyncBuffer
}

// startMigrate starts crimuxctl vm migrate and returns once its memory
// stream has carried something.
func (g *migrationRig) startMigrate(t *testing.T) *migrateRun {
	t.Helper()
	r := &migrateRun{stdout: &testutil.SyncBuffer{}, stderr: &testutil.SyncBuffer{}}
	r.cmd = exec.Command(ctlBin(t), "--endpoint", g.n1.endpoint, "vm", "migrate", g.ctr1, g.ctr2, "--to", g.n2.endpoint)
	r.cmd.Stdout, r.cmd.Stderr = r.stdout, r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.cmd.Process.Kill(); _ = r.cmd.Wait() })
	testutil.Eventually(t, time.Minute, "the migration under way", func() error {
		if !movedRE.MatchString(r.stdout.String()) {
			return fmt.Errorf("crimuxctl so far: %s%s", r.stdout, r.stderr)
		}
		return nil
	})
	return r
}

// movedRE matches a progress line of a migration that has sent data.
var movedRE = regexp.MustCompile(`\s[1-9][0-9]*/[0-9]+ MiB sent`)

// wait waits for crimuxctl's end.
func (r *migrateRun) wait() ctlResult {
	err := r.cmd.Wait()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		code = -1
	}
	return ctlResult{code: code, stdout: r.stdout.String(), stderr: r.stderr.String()}
}
