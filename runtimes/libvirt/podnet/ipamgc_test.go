package podnet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
)

// TestGCReachesTheIPAMPlugin: a plugin that does not pass GC on (as the
// reference bridge does not) still has its IPAM plugin collected, with
// the plugin's config and the valid attachments; disableGC stops both.
func TestGCReachesTheIPAMPlugin(t *testing.T) {
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	for _, name := range []string{"br", "ipamx"} {
		script := fmt.Sprintf("#!/bin/sh\n{ printf '%s %%s ' \"$CNI_COMMAND\"; cat; echo; } >> %s\n", name, calls)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	c := withIPAMGC{libcni.NewCNIConfigWithCacheDir([]string{dir}, filepath.Join(dir, "cache"), nil), []string{dir}}
	args := &libcni.GCArgs{ValidAttachments: []types.GCAttachment{{ContainerID: "live", IfName: "eth0"}}}
	for _, disable := range []bool{true, false} {
		list, err := libcni.NetworkConfFromBytes([]byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"pods","disableGC":%v,"plugins":[
			{"type":"br","ipam":{"type":"ipamx","dataDir":"/x"}}]}`, disable)))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.GCNetworkList(context.Background(), list, args); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := os.ReadFile(calls)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "br GC ") || !strings.HasPrefix(lines[1], "ipamx GC ") {
		t.Fatalf("plugin calls:\n%s\nwant one GC of br, then one of its IPAM, none with disableGC", b)
	}
	for _, want := range []string{`"cni.dev/valid-attachments":[{"containerID":"live","ifname":"eth0"}]`, `"ipam":{"dataDir":"/x","type":"ipamx"}`, `"name":"pods"`} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("the IPAM plugin's GC stdin %s lacks %s", lines[1], want)
		}
	}
}
