package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/crimux/crimux/config"
)

// Node two of the test bed (test/bed/node2-up.sh): its own libvirtd and
// virtlogd in mount and network namespaces of their own, reached from
// the host (node one) at 10.231.0.2 over libvirt's TLS.
var node2 = struct {
	exec, cniConfDir, pki1, pki2 string
	addr1, addr2                 string
}{
	exec:       filepath.Join(repoRoot(), "test", "bed", "node2-exec.sh"),
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

// migrationConfig writes a crimux config of node n (1 or 2) that sends
// and receives VMs; node two's VMs run as uids of another range, as on
// another machine.
func migrationConfig(t *testing.T, n int) string {
	addr, pki, base := node2.addr1, node2.pki1, uint32(config.DefaultVMIDBase)
	if n == 2 {
		addr, pki, base = node2.addr2, node2.pki2, config.DefaultVMIDBase+config.DefaultVMIDCount
	}
	path := filepath.Join(t.TempDir(), fmt.Sprintf("node%d.toml", n))
	body := fmt.Sprintf(`[libvirt]
vm_id_base = %d

[libvirt.migration]
address = "%s:7345"
libvirt_uri = "qemu+tls://%s/system"
pki_dir = %q
`, base, addr, addr, pki)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
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
