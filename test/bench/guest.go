package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/converter/cloudinit"
	"github.com/crimux/crimux/test/bench/cgroups"
	"github.com/crimux/crimux/test/bench/criclient"
	"github.com/crimux/crimux/test/bench/libvirtdirect"
	"github.com/crimux/crimux/test/bench/stats"
)

// The usable guest's figure: from RunPodSandbox until the guest agent of
// the Debian guest (crimux/vm-debian: its own disk, GRUB, systemd,
// cloud-init from a cidata volume) answers guest-ping, through crimux and
// through libvirt directly with the same disk, the same domain and a
// cidata volume of the same content: crimux's guest has a NIC with the
// addressing its pod's CNI result gave, the direct path's one with
// addressing of the same shape (directGuestNet).

const (
	debianImage       = "127.0.0.1:5117/crimux/vm-debian:latest"
	guestMiB          = 1024
	guestVCPUs        = 2
	guestReadyTimeout = 10 * time.Minute
)

// guestContainerConfig is the Debian guest's container: 2 vCPUs, 1 GiB.
func (b *bench) guestContainerConfig() *runtimeapi.ContainerConfig {
	cfg := b.vmContainerConfig(guestMiB)
	cfg.Image.Image = debianImage
	cfg.Linux.Resources.CpuPeriod, cfg.Linux.Resources.CpuQuota = 100000, guestVCPUs*100000
	return cfg
}

// waitAgent polls guest-ping on domain until it answers.
func waitAgent(ctx context.Context, d *libvirtdirect.Client, domain string) error {
	return waitUntil(ctx, 250*time.Millisecond, func() error {
		return d.AgentPing(domain)
	})
}

func (b *bench) crimuxGuestRound(ctx context.Context, d *libvirtdirect.Client, name string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, guestReadyTimeout)
	defer cancel()
	t0 := time.Now()
	v, err := b.startVMWith(ctx, name, b.guestContainerConfig(), func(p *runtimeapi.PodSandboxConfig) { p.Hostname = name })
	defer func() { _ = b.removeVM(context.WithoutCancel(ctx), v) }()
	if err != nil {
		return 0, err
	}
	if err := waitAgent(ctx, d, v.domain()); err != nil {
		return 0, fmt.Errorf("guest agent of %s: %w", v.domain(), err)
	}
	return time.Since(t0), nil
}

// directGuestNet is the direct guest's addressing, shaped as the bench's
// CNI network gives crimux's (daemon.writeCNIConf: an address in
// 10.89.0.0/16, the bridge's gateway, a default route). Its tap is on
// no bridge: the guest's boot waits for no answer either way.
var directGuestNet = cloudinit.Network{
	MAC: "52:54:00:be:9c:01", IP: "10.89.255.250", PrefixLen: 16, Gateway: "10.89.0.1", MTU: 1500,
	Routes: []cloudinit.Route{{Dst: "0.0.0.0/0", GW: "10.89.0.1"}},
}

func (b *bench) directGuestRound(ctx context.Context, d *libvirtdirect.Client, name string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, guestReadyTimeout)
	defer cancel()
	net := directGuestNet
	files, err := cloudinit.Build(cloudinit.Input{InstanceID: b.runID + "-" + name, Hostname: name, Network: &net})
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	v, _, err := d.StartShape(libvirtdirect.Shape{MiB: guestMiB, VCPUs: guestVCPUs, CIData: files, NIC: true, MAC: net.MAC})
	defer func() { _ = d.Remove(v) }()
	if err != nil {
		return 0, err
	}
	if err := waitAgent(ctx, d, v.Name); err != nil {
		return 0, fmt.Errorf("guest agent of %s: %w", v.Name, err)
	}
	return time.Since(t0), nil
}

// phaseGuest boots the Debian guest guestRounds times each way,
// alternating which path goes first.
func (b *bench) phaseGuest(ctx context.Context) error {
	if err := criclient.Pull(ctx, b.cri, debianImage); err != nil {
		return err
	}
	d, err := libvirtdirect.New(ctx, b.opts.containerd, debianImage, filepath.Join(b.dir, "direct-guest"), b.runID+"g")
	if err != nil {
		return err
	}
	defer func() { _ = d.RemoveAll(); d.Close() }()
	if err := d.PlaceIn(cgroups.Direct); err != nil {
		return err
	}
	// Warm-up, untimed: crimux extracts the image's disk on its first
	// create (the direct path's New did above).
	v, err := b.startVMWith(ctx, "guest-warmup", b.guestContainerConfig(), nil)
	_ = b.removeVM(context.WithoutCancel(ctx), v)
	if err != nil {
		return err
	}
	var c, dir stats.Samples
	var failed []error
	for i := range b.opts.guestRounds {
		name := fmt.Sprintf("guest-%d", i)
		var ct, dt time.Duration
		var cErr, dErr error
		if i%2 == 0 {
			dt, dErr = b.directGuestRound(ctx, d, name)
			ct, cErr = b.crimuxGuestRound(ctx, d, name)
		} else {
			ct, cErr = b.crimuxGuestRound(ctx, d, name)
			dt, dErr = b.directGuestRound(ctx, d, name)
		}
		if err := errors.Join(cErr, dErr); err != nil {
			failed = append(failed, err)
			b.logf("guest round %d failed: %v", i, err)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			continue
		}
		c, dir = append(c, ct), append(dir, dt)
		b.logf("guest round %d: agent answers after %.1fs via crimux, %.1fs direct", i, ct.Seconds(), dt.Seconds())
	}
	b.samplesOf("VMGuestReady", dir, c)
	if len(c) > 0 {
		cm, dm := c.Median().Seconds(), dir.Median().Seconds()
		b.res.Set("vm_guest_ready_s", cm, c.Summary(0.5, 0.9), dir.Summary(0.5, 0.9))
		b.res.Set("vm_guest_ready_direct_s", dm, c.Summary(0.5, 0.9), dir.Summary(0.5, 0.9))
		b.res.Set("vm_guest_ready_ratio", cm/dm, c.Summary(0.5, 0.9), dir.Summary(0.5, 0.9))
	}
	for _, name := range []string{"vm_guest_ready_s", "vm_guest_ready_direct_s", "vm_guest_ready_ratio"} {
		b.res.Note(name, "Debian 12 from its disk (GRUB, systemd, cloud-init), 2 vCPUs, 1 GiB, TCG; direct = cidata ISO + overlay + define + start through libvirt, the same agent ping")
		if len(failed) > 0 {
			b.res.Note(name, "%d of %d rounds failed, first: %v", len(failed), b.opts.guestRounds, failed[0])
		}
	}
	return nil
}
