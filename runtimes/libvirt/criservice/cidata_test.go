package criservice

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/converter/cloudinit"
	"github.com/crimux/crimux/runtimes/libvirt/cidata"
)

const testKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGm7pS6YQOJc3b3dX4BDXbO4vQ3ZJx0n2kq3o8sQd6hF user@example"

// TestVMGetsItsCloudInitVolume: the VM's cidata volume holds the pod's
// identity, its user-data with the SSH keys merged in, the network the
// pod's CNI result gave it, and the pod's DNS config, its resolver
// options through vendor-data; the domain attaches it.
func TestVMGetsItsCloudInitVolume(t *testing.T) {
	s, e := newService(t)
	cfg := podConfig(t, "web")
	cfg.Hostname = "web-0"
	cfg.DnsConfig = &runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"}, Searches: []string{"ns.svc.cluster.local"}, Options: []string{"ndots:5"}}
	cfg.Annotations = map[string]string{
		cloudinit.AnnotationUserData: "#cloud-config\nruncmd:\n  - [touch, /etc/ssh-marker]\n",
		cloudinit.AnnotationSSHKeys:  "# the operator's key\n" + testKey + "\n",
	}
	sb := runPod(t, s, cfg)
	resp, err := s.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: sb, Config: vmConfig(256, 0, 0), SandboxConfig: cfg})
	if err != nil {
		t.Fatal(err)
	}
	c, err := e.R.Store.Container(resp.ContainerId)
	if err != nil {
		t.Fatal(err)
	}
	files := e.CIData.Of(c.Dir)
	for name, want := range map[string][]string{
		"meta-data":      {`instance-id: "web-uid"`, `local-hostname: "web-0"`},
		"user-data":      {"#cloud-config\n", "/etc/ssh-marker", testKey},
		"network-config": {"version: 2", "10.1.0.5/24", "macaddress:", "10.96.0.10", "ns.svc.cluster.local"},
		"vendor-data":    {"crimux-resolv", "options ndots:5", "nameserver 10.96.0.10", "/etc/resolv.conf"},
	} {
		for _, w := range want {
			if !strings.Contains(string(files[name]), w) {
				t.Errorf("%s lacks %q:\n%s", name, w, files[name])
			}
		}
	}
	if _, err := os.Stat(filepath.Join(c.Dir, cidata.File)); err != nil {
		t.Fatal(err)
	}
	dom, err := e.Libvirt.Lookup(c.Domain)
	if err != nil {
		t.Fatal(err)
	}
	xml, _ := e.Libvirt.XML(dom)
	if !strings.Contains(xml, filepath.Join(c.Dir, cidata.File)) || !strings.Contains(xml, `device="cdrom"`) {
		t.Fatalf("the domain does not attach the cidata volume:\n%s", xml)
	}
}

// TestUserDataFromAMountedVolume: a Secret-like volume at
// /crimux/cloud-init (its user-data a symbolic link, as kubelet makes
// them) gives the user-data; a link out of the volume is refused.
func TestUserDataFromAMountedVolume(t *testing.T) {
	vol := t.TempDir()
	data := filepath.Join(vol, "..data")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "user-data"), []byte("#cloud-config\nhostname: from-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..data/user-data", filepath.Join(vol, "user-data")); err != nil {
		t.Fatal(err)
	}
	s, e := newService(t)
	cfg := podConfig(t, "sec")
	sb := runPod(t, s, cfg)
	ctr := vmConfig(256, 0, 0)
	ctr.Mounts = []*runtimeapi.Mount{{ContainerPath: cloudinit.MountPath, HostPath: vol, Readonly: true}}
	resp, err := s.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: sb, Config: ctr})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := e.R.Store.Container(resp.ContainerId)
	if ud := string(e.CIData.Of(c.Dir)["user-data"]); !strings.Contains(ud, "from-secret") {
		t.Fatalf("user-data = %q", ud)
	}

	outside := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(outside, []byte("#cloud-config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	vol2 := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(vol2, "user-data")); err != nil {
		t.Fatal(err)
	}
	sb2 := runPod(t, s, podConfig(t, "sec2"))
	ctr.Mounts[0].HostPath = vol2
	_, err = s.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: sb2, Config: ctr})
	wantCode(t, "CreateContainer", err, codes.InvalidArgument, "config.mounts[0]")
}
