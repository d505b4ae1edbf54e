package cidata_test

import (
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/converter/cloudinit"
	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/runtimes/libvirt/cidata"
	"github.com/crimux/crimux/runtimes/libvirt/podnet"
	"github.com/crimux/crimux/runtimes/libvirt/store"
)

// TestFilesFor: the instance is the pod's UID and the hostname the pod's;
// without them, the sandbox ID and the pod's name. The network config is
// the pod's address once its network is ready, none before; each share
// is mounted at its container path.
func TestFilesFor(t *testing.T) {
	att := &podnet.Attachment{GuestMAC: "52:54:00:00:00:01", MTU: 1400, Ready: true}
	att.IP, att.PrefixLen, att.Gateway = "10.88.0.7", 16, "10.88.0.1"
	sb := &store.Sandbox{ID: "sb1", Net: att, Config: &runtimeapi.PodSandboxConfig{
		Metadata:  &runtimeapi.PodSandboxMetadata{Name: "web", Uid: "uid-1"},
		Hostname:  "web-host",
		DnsConfig: &runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"}},
	}}
	shares := []vm.Share{{Tag: "data", ContainerPath: "/data", ReadOnly: true}}
	f, err := cidata.FilesFor(sb, cloudinit.Source{}, shares)
	if err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string][]string{
		"meta-data":      {"uid-1", "web-host"},
		"network-config": {"10.88.0.7/16", "10.88.0.1", "10.96.0.10", "1400"},
		"vendor-data":    {"data", "/data", "ro"},
	} {
		for _, w := range want {
			if !strings.Contains(string(f[file]), w) {
				t.Errorf("%s lacks %q:\n%s", file, w, f[file])
			}
		}
	}

	att.Ready = false
	sb.Config.Metadata.Uid, sb.Config.Hostname = "", ""
	f, err = cidata.FilesFor(sb, cloudinit.Source{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if md := string(f["meta-data"]); !strings.Contains(md, "sb1") || !strings.Contains(md, "web") {
		t.Errorf("meta-data of a pod without UID and hostname:\n%s", md)
	}
	if nc, ok := f["network-config"]; ok {
		t.Errorf("network-config for a pod whose network is not ready:\n%s", nc)
	}
}
