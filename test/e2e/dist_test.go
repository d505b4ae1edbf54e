package e2e

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDistTarball: make dist makes a versioned tarball a node
// installs from alone: static binaries, the unit, kubelet's drop-in, the
// manifests, install.sh and SHA256SUMS, with its own .sha256 beside it.
// Its install.sh installs what make install does (TestSystemdUnitAndInstall
// runs it), and refuses a tree whose files differ from SHA256SUMS.
func TestDistTarball(t *testing.T) {
	if os.Getenv("CRIMUX_E2E") != "1" {
		t.Skip("CRIMUX_E2E is not 1")
	}
	out := t.TempDir()
	if b, err := exec.Command("make", "-C", repoRoot(), "dist", "DIST="+out).CombinedOutput(); err != nil {
		t.Fatalf("make dist: %v\n%s", err, b)
	}
	tarballs, _ := filepath.Glob(filepath.Join(out, "crimux-*-linux-amd64.tar.gz"))
	if len(tarballs) != 1 {
		t.Fatalf("make dist made %v, want one crimux-VERSION-linux-amd64.tar.gz", tarballs)
	}
	if b, err := exec.Command("sh", "-c", "cd "+out+" && sha256sum -c "+filepath.Base(tarballs[0])+".sha256").CombinedOutput(); err != nil {
		t.Fatalf("the tarball's .sha256: %v\n%s", err, b)
	}
	unpacked := t.TempDir()
	if b, err := exec.Command("tar", "-C", unpacked, "-xzf", tarballs[0]).CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, b)
	}
	tree := filepath.Join(unpacked, strings.TrimSuffix(filepath.Base(tarballs[0]), ".tar.gz"))
	for _, f := range []string{"bin/crimux", "bin/crimuxctl", "bin/kubectl-crimux", "bin/crimux-controller", "lib/crimux/crimux-qemu-wrapper", "systemd/crimux.service",
		"share/crimux/controller/kustomization.yaml", "share/crimux/controller/crd-vmmigration.yaml",
		"systemd/kubelet-crimux.conf", "share/crimux/runtimeclass-vm.yaml", "share/crimux/crimux-node-agent-rbac.yaml",
		"share/crimux/crimux-node-agent-policy.yaml", "install.sh", "VERSION", "SHA256SUMS"} {
		if _, err := os.Stat(filepath.Join(tree, f)); err != nil {
			t.Errorf("the tarball lacks %s", f)
		}
	}
	for _, b := range []string{"bin/crimux", "bin/crimuxctl", "bin/kubectl-crimux", "bin/crimux-controller", "lib/crimux/crimux-qemu-wrapper"} {
		requireStatic(t, filepath.Join(tree, b))
	}

	root := t.TempDir()
	install := exec.Command(filepath.Join(tree, "install.sh"))
	install.Env = append(os.Environ(), "DESTDIR="+root, "PREFIX=/usr/local", "SYSCONFDIR=/etc", "UNITDIR=/etc/systemd/system")
	if b, err := install.CombinedOutput(); err != nil {
		t.Fatalf("install.sh: %v\n%s", err, b)
	}
	for _, f := range []string{"usr/local/bin/crimux", "usr/local/bin/kubectl-crimux", "usr/local/lib/crimux/crimux-qemu-wrapper", "etc/systemd/system/crimux.service",
		"etc/systemd/system/kubelet.service.d/20-crimux.conf", "etc/crimux/config.toml", "usr/local/share/crimux/runtimeclass-vm.yaml",
		"usr/local/share/crimux/controller/kustomization.yaml"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("install.sh did not install %s", f)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(root, "etc/systemd/system/kubelet.service.d/20-crimux.conf")); !strings.Contains(string(b), "--container-runtime-endpoint=unix:///run/crimux/crimux.sock") {
		t.Errorf("kubelet's drop-in does not point kubelet at crimux:\n%s", b)
	}

	// A file changed after the release was made: install.sh refuses it.
	if err := os.WriteFile(filepath.Join(tree, "share/crimux/runtimeclass-vm.yaml"), []byte("handler: evil\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	install = exec.Command(filepath.Join(tree, "install.sh"))
	install.Env = append(os.Environ(), "DESTDIR="+t.TempDir())
	if b, err := install.CombinedOutput(); err == nil || !strings.Contains(string(b), "SHA256SUMS") {
		t.Fatalf("install.sh of a changed tree: %v\n%s; want a refusal naming SHA256SUMS", err, b)
	}
}

// requireStatic fails unless path is an ELF executable without an
// interpreter (nothing of the node's libc needed).
func requireStatic(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s is dynamically linked", path)
		}
	}
}
