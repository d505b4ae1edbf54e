package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/crimux/crimux/test/bench/libvirtdirect"
)

// The migrate phase's direct path: the same VM (the agent image's
// kernel, initrd and disk, 512 MiB, 1 vCPU, a NIC, a cloud-init volume)
// defined in the host's libvirtd by libvirtdirect, without crimux, and
// moved to node two's libvirtd with virsh migrate: live, peer to peer,
// the disk's top layer copied (--copy-storage-inc), memory and disk over
// plain TCP on node two's address, into a domain whose files are its own
// (libvirtdirect.DestinationXML) and whose overlay is made beforehand.

// directMigrateURI is node two's libvirtd as node one's reaches it, with
// node one's key pair.
const directMigrateURI = "qemu+tls://" + node2Addr + "/system?pkipath=" + bedPKIDir + "/node1"

// directMigrateRound starts a direct VM, runs the probe's loop in it (the
// same load as crimux's guest), and times its migration to node two:
// from the dump of its migratable XML (what GetMigrationSource does)
// until virsh migrate exits. The downtime is libvirt's, read on node two.
func (b *bench) directMigrateRound(ctx context.Context, d *libvirtdirect.Client) (migration, error) {
	ctx, cancel := context.WithTimeout(ctx, migrateRoundTimeout)
	defer cancel()
	var m migration
	v, _, err := d.Start(migrateMiB)
	defer func() {
		if v == nil {
			return
		}
		if _, err := b.node2Virsh(context.WithoutCancel(ctx), "destroy", v.Name); err != nil && !strings.Contains(err.Error(), "ailed to get domain") {
			b.logf("migrate: node two: destroy %s: %v", v.Name, err)
		}
		_ = d.Remove(v)
	}()
	if err != nil {
		return m, err
	}
	if err := startDirectProbe(ctx, d, v); err != nil {
		return m, err
	}
	dst, err := d.PrepareDestination(v)
	if err != nil {
		return m, err
	}
	xmlPath := filepath.Join(dst.Dir, "domain.xml")
	t0 := time.Now()
	x, err := d.DestinationXML(v, dst)
	if err != nil {
		return m, err
	}
	if err := os.WriteFile(xmlPath, []byte(x), 0o600); err != nil {
		return m, err
	}
	args := []string{"-c", "qemu:///system", "migrate", "--live", "--p2p", "--copy-storage-inc",
		"--migrateuri", "tcp://" + node2Addr, "--listen-address", node2Addr, "--xml", xmlPath}
	if bw := b.migrateCapMiB(); bw > 0 { // the same limit as crimux's: the paths differ in nothing else
		args = append(args, "--bandwidth", strconv.Itoa(bw))
	}
	out, err := exec.CommandContext(ctx, "virsh", append(args, v.Name, directMigrateURI)...).CombinedOutput()
	m.took = time.Since(t0)
	if err != nil {
		return m, fmt.Errorf("virsh migrate %s: %w: %s", v.Name, err, strings.TrimSpace(string(out)))
	}
	if state, err := b.node2Virsh(ctx, "domstate", v.Name); err != nil || state != "running" {
		return m, fmt.Errorf("node two: %s is %q after virsh migrate (%v)", v.Name, state, err)
	}
	info, err := b.node2Virsh(ctx, "domjobinfo", "--completed", v.Name)
	if m.downtime, m.haveDowntime = jobDowntime(info); err != nil || !m.haveDowntime {
		b.logf("migrate: node two: no downtime in domjobinfo --completed %s (%v): %s", v.Name, err, info)
	}
	return m, nil
}

// startDirectProbe waits for the guest agent of the direct VM v, starts
// the probe's loop in its guest and waits for its first line on the
// console.
func startDirectProbe(ctx context.Context, d *libvirtdirect.Client, v *libvirtdirect.VM) error {
	actx, acancel := context.WithTimeout(ctx, agentReadyTimeout)
	err := waitAgent(actx, d, v.Name)
	acancel()
	if err != nil {
		return fmt.Errorf("guest agent of %s: %w", v.Name, err)
	}
	if err := d.AgentExec(v.Name, probeScript); err != nil {
		return fmt.Errorf("the probe's loop in %s: %w", v.Name, err)
	}
	return waitConsoleProbe(ctx, v.ConsoleLog())
}

// waitConsoleProbe waits until libvirt's console log of a direct VM has a
// line of the probe.
func waitConsoleProbe(ctx context.Context, path string) error {
	ctx, cancel := context.WithTimeout(ctx, probeWait)
	defer cancel()
	return waitUntil(ctx, 50*time.Millisecond, func() error {
		data, err := os.ReadFile(path)
		if err == nil && !strings.Contains(string(data), probeMarker) {
			err = fmt.Errorf("no %q line in %s yet", probeMarker, path)
		}
		return err
	})
}

// downtimeRE is virsh domjobinfo's "Total downtime:   68 ms".
var downtimeRE = regexp.MustCompile(`(?m)^Total downtime:\s+([0-9]+)\s+ms`)

func jobDowntime(info string) (time.Duration, bool) {
	m := downtimeRE.FindStringSubmatch(info)
	if m == nil {
		return 0, false
	}
	ms, err := strconv.Atoi(m[1])
	return time.Duration(ms) * time.Millisecond, err == nil
}
