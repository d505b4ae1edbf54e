package main

// crimux/vm-busybox-agent: the test VM with a guest agent, for the
// scenarios that need one (kubectl exec, in-place resize) where the Debian
// guest costs too much (the cgroup-v2 node, itself under TCG). Its
// initramfs is the test VM's followed by a second cpio archive (the kernel
// unpacks concatenated archives in order) holding Debian's own
// qemu-guest-agent, the libraries it links, the virtio_console and
// virtio_mem modules, and /etc/crimux-guest-agent, which the test VM's
// /init runs when it is there.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/crimux/crimux/test/images/oci"
)

// agentModules are loaded by /etc/crimux-guest-agent: the agent's
// virtio-serial port, and virtio-mem for memory resize.
var agentModules = []string{"virtio_console", "virtio_mem"}

// vmAgentScript starts qemu-ga on the port libvirt names
// org.qemu.guest_agent.0 and prints CRIMUX-AGENT: <port> (or
// CRIMUX-AGENT-ERROR: why).
const vmAgentScript = `#!/bin/sh
while read -r m; do
	[ -d "/sys/module/$m" ] && continue # a dependency /init loaded
	insmod "/lib/modules/agent/$m.ko" || echo "CRIMUX-WARN: insmod $m failed"
done </lib/modules/agent/load-order
port=
i=0
while [ -z "$port" ] && [ $i -lt 100 ]; do
	for p in /sys/class/virtio-ports/*; do
		[ "$(cat "$p/name" 2>/dev/null)" = org.qemu.guest_agent.0 ] && port=/dev/${p##*/}
	done
	[ -n "$port" ] && [ -c "$port" ] && break
	port=
	sleep 0.1
	i=$((i + 1))
done
if [ -z "$port" ]; then
	echo "CRIMUX-AGENT-ERROR: no org.qemu.guest_agent.0 port"
	exit 0
fi
if qemu-ga -m virtio-serial -p "$port" -t /run -f /run/qemu-ga.pid -l /var/log/qemu-ga.log -d; then
	echo "CRIMUX-AGENT: $port"
else
	echo "CRIMUX-AGENT-ERROR: qemu-ga failed"
fi
`

// agentArchive reads what the second initramfs archive of
// crimux/vm-busybox-agent is made of and returns its cache key and what
// builds it (a gzipped cpio), run only when the cache misses.
func agentArchive(tmp, qgaDeb, modDir string) (build func() ([]byte, error), key string, err error) {
	qga, err := extractFromDeb(qgaDeb, "./usr/sbin/qemu-ga")
	if err != nil {
		return nil, "", err
	}
	if qga == nil {
		return nil, "", fmt.Errorf("%s has no ./usr/sbin/qemu-ga", qgaDeb)
	}
	bin := filepath.Join(tmp, "qemu-ga")
	if err := os.WriteFile(bin, qga, 0o755); err != nil {
		return nil, "", err
	}
	libs, err := sharedLibraries(bin)
	if err != nil {
		return nil, "", err
	}
	mods, err := kernelModules(modDir, agentModules)
	if err != nil {
		return nil, "", err
	}
	a := newCpio()
	a.file("usr/sbin/qemu-ga", 0o755, qga)
	keyParts := [][]byte{qga, []byte(vmAgentScript)}
	for _, l := range libs {
		b, err := os.ReadFile(l)
		if err != nil {
			return nil, "", err
		}
		a.file(strings.TrimPrefix(l, "/"), 0o755, b)
		keyParts = append(keyParts, []byte(l), b)
	}
	var order strings.Builder
	for _, m := range mods {
		a.file("lib/modules/agent/"+m.name+".ko", 0o644, m.data)
		order.WriteString(m.name + "\n")
		keyParts = append(keyParts, []byte(m.name), m.data)
	}
	a.file("lib/modules/agent/load-order", 0o644, []byte(order.String()))
	a.file("etc/crimux-guest-agent", 0o755, []byte(vmAgentScript))
	return func() ([]byte, error) { return gzipBest(a.bytes()) }, hashOf(keyParts...), nil
}

var lddLine = regexp.MustCompile(`(?:=> )?(/\S+) \(0x[0-9a-f]+\)`)

// sharedLibraries is what ldd resolves bin's libraries to on this host (the
// dynamic loader included), or an error naming one it cannot find.
func sharedLibraries(bin string) ([]string, error) {
	out, err := exec.Command("ldd", bin).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w: %s", bin, err, out)
	}
	var libs []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "not found") {
			return nil, fmt.Errorf("ldd %s: %s (install it on this host)", bin, strings.TrimSpace(line))
		}
		if m := lddLine.FindStringSubmatch(line); m != nil {
			libs = append(libs, m[1])
		}
	}
	sort.Strings(libs)
	return libs, nil
}

// agentInitrdLayer is crimux/vm-busybox-agent's initramfs layer: the test
// VM's initramfs (made by base, cached as baseKey) with the agent archive
// after it.
func agentInitrdLayer(tmp string, in vmInputs, baseKey string, base func() ([]byte, error), cached cachedLayerFunc) (oci.SpecLayer, error) {
	archive, key, err := agentArchive(tmp, in.qemuGADeb, in.modules)
	if err != nil {
		return oci.SpecLayer{}, fmt.Errorf("agent initramfs: %w", err)
	}
	l, err := cached("COPY initrd.img /boot/initrd.img (the test VM's, then qemu-guest-agent of "+filepath.Base(in.qemuGADeb)+", its libraries, virtio_console, virtio_mem)",
		hashOf([]byte(baseKey), []byte(key)), func(l *oci.LayerBuilder) error {
			data, err := base()
			if err != nil {
				return err
			}
			agent, err := archive()
			l.File("boot/initrd.img", 0o644, append(data, agent...))
			return err
		})
	if err != nil {
		return oci.SpecLayer{}, fmt.Errorf("agent initramfs layer: %w", err)
	}
	return l, nil
}
