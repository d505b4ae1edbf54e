package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/config"
	vmv1 "github.com/crimux/crimux/proto/vm/v1"
	"github.com/crimux/crimux/test/bench/cgroups"
	"github.com/crimux/crimux/test/bench/criclient"
	"github.com/crimux/crimux/test/bench/libvirtdirect"
	"github.com/crimux/crimux/test/bench/stats"
)

// The live migration figures: a running VM pod of the agent image moved by
// crimux from node one (the bench's crimux) to a target pod waiting on
// node two (migrate_node2.go), against the same domain moved between the
// same two libvirtds with virsh migrate (migrate_direct.go), rounds
// alternating which path goes first; libvirt's downtime, and a probe of
// the pause from the guest's side (migrate_probe.go).

var migrateFigures = []string{"vm_migrate_512m_total_s", "vm_migrate_direct_512m_total_s", "vm_migrate_over_direct_ratio",
	"vm_migrate_downtime_ms", "vm_migrate_downtime_probe_ms"}

const (
	migrateMiB = 512
	// migrateRoundTimeout bounds one round of one path: the guest's boot
	// until its agent answers, then the migration (seconds here).
	migrateRoundTimeout = 10 * time.Minute
	migrateShape        = "crimux/vm-busybox-agent, 1 vCPU, 512 MiB, TCG, from node one (the host's libvirtd) to node two " +
		"(test/bed/node2-up.sh: a second libvirtd in namespaces of its own, TLS between the two), the guest printing a line to its console every 10 ms"
)

// migration is one migration's outcome on either path.
type migration struct {
	took         time.Duration
	downtime     time.Duration
	haveDowntime bool
	// crimux's only: each of the four calls' time, the probe's gap and
	// its loop's period, the progress last reported.
	calls              [4]time.Duration
	probe, probePeriod time.Duration
	probeHow           string
	last               *vmv1.MigrateProgress
}

// migrateCalls name the four calls, in migration.calls' order.
var migrateCalls = [4]string{"GetMigrationSource", "PrepareMigration", "Migrate", "FinishMigration"}

// phaseMigrate brings node two up, runs migrateRounds rounds of each
// path, alternating which goes first, and takes node two down.
func (b *bench) phaseMigrate(ctx context.Context) error {
	n, err := b.upNode2(ctx)
	defer b.downNode2(ctx, n)
	if err != nil {
		return err
	}
	for _, e := range []*criclient.Endpoint{b.cri, n.cri} {
		if err := criclient.Pull(ctx, e, vmAgentImage); err != nil {
			return err
		}
	}
	d, err := libvirtdirect.New(ctx, b.opts.containerd, vmAgentImage, filepath.Join(b.dir, "direct-migrate"), b.runID+"m")
	if err != nil {
		return err
	}
	defer func() { _ = d.RemoveAll(); d.Close(); _ = os.RemoveAll(filepath.Join(b.dir, "direct-migrate")) }()
	if err := d.PlaceIn(cgroups.Direct); err != nil {
		return err
	}
	if b.opts.vmNetwork == config.NetworkCNI {
		d.AddNIC()
	}
	// Untimed: node two's libvirtd probes an emulator it has not seen
	// when a domain of it first arrives (crimux's target defines its
	// domain beforehand, in CreateContainer).
	if _, err := b.node2Virsh(ctx, "domcapabilities", "--emulatorbin", d.Emulator(), "--virttype", "qemu"); err != nil {
		b.logf("migrate: node two's capabilities of %s: %v", d.Emulator(), err)
	}
	var t migrateTally
	for i := range b.opts.migrateRounds {
		for _, p := range migrateOrder(i) {
			var m migration
			if p == stats.Direct {
				m, err = b.directMigrateRound(ctx, d)
			} else if m, err = b.crimuxMigrateRound(ctx, n, fmt.Sprintf("migrate-%d", i)); errors.Is(err, errVMAPIMissing) {
				return err
			}
			b.logRound(i, p, m, err)
			t.add(p, m, err)
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	b.recordMigrate(&t)
	if len(t.c) == 0 && len(t.cFailed) > 0 {
		return fmt.Errorf("no crimux migration in %d rounds, first: %w", b.opts.migrateRounds, t.cFailed[0])
	}
	return nil
}

// migrateTally is what the rounds measured, path by path.
type migrateTally struct {
	c, d, cDown, dDown, probes stats.Samples
	calls                      [4]stats.Samples
	periods                    stats.Samples
	cFailed, dFailed           []error
}

func (t *migrateTally) add(p stats.Path, m migration, err error) {
	took, down, failed := &t.c, &t.cDown, &t.cFailed
	if p == stats.Direct {
		took, down, failed = &t.d, &t.dDown, &t.dFailed
	}
	if err != nil {
		*failed = append(*failed, err)
		return
	}
	*took = append(*took, m.took)
	if m.haveDowntime {
		*down = append(*down, m.downtime)
	}
	if m.probe > 0 {
		t.probes, t.periods = append(t.probes, m.probe), append(t.periods, m.probePeriod)
	}
	if p == stats.ViaCrimux {
		for i, d := range m.calls {
			t.calls[i] = append(t.calls[i], d)
		}
	}
}

func (b *bench) logRound(i int, p stats.Path, m migration, err error) {
	switch {
	case err != nil:
		b.logf("migrate round %d (%s) failed: %v", i, p, err)
	case p == stats.Direct:
		b.logf("migrate round %d: direct %.2fs, libvirt's downtime %s", i, m.took.Seconds(), m.downtime)
	default:
		b.logf("migrate round %d: crimux %.2fs (%s), libvirt's downtime %s, probe %s (%s); %s", i, m.took.Seconds(), callsText(m.calls),
			m.downtime, m.probe.Round(time.Millisecond), m.probeHow, progressText(m.last))
	}
}

// migrateOrder is round i's order of the paths.
func migrateOrder(i int) []stats.Path {
	if i%2 == 0 {
		return []stats.Path{stats.Direct, stats.ViaCrimux}
	}
	return []stats.Path{stats.ViaCrimux, stats.Direct}
}

// migrateContainerConfig is the migrating VM's container, on both nodes.
func (b *bench) migrateContainerConfig() *runtimeapi.ContainerConfig {
	cfg := b.vmContainerConfig(migrateMiB)
	cfg.Image.Image = vmAgentImage
	return cfg
}

// crimuxMigrateRound starts a VM pod on node one, runs the probe's loop
// in its guest (CRI ExecSync, through its agent), makes its target pod on
// node two and times the migration: the four VM API calls as crimuxctl
// vm migrate makes them.
func (b *bench) crimuxMigrateRound(ctx context.Context, n *node2, name string) (migration, error) {
	ctx, cancel := context.WithTimeout(ctx, migrateRoundTimeout)
	defer cancel()
	var m migration
	cfg := b.migrateContainerConfig()
	src, err := b.startVMWith(ctx, name, cfg, nil)
	defer func() {
		if src != nil {
			_ = b.removeVM(context.WithoutCancel(ctx), src)
		}
	}()
	if err != nil {
		return m, err
	}
	if err := b.waitAgentExec(ctx, src); err != nil {
		return m, err
	}
	r, err := b.cri.RT.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: src.container, Cmd: []string{"sh", "-c", probeScript}, Timeout: 10})
	if err == nil && r.GetExitCode() != 0 {
		err = fmt.Errorf("exit %d: %s", r.GetExitCode(), r.GetStderr())
	}
	if err != nil {
		return m, fmt.Errorf("the probe's loop in %s: %w", src.name, err)
	}
	dst, err := b.startTarget(ctx, n, src, cfg)
	defer func() { _ = n.removeTarget(ctx, dst) }()
	if err != nil {
		return m, err
	}
	if err := waitProbeLine(ctx, src.logPath); err != nil {
		return m, err
	}
	if m, err = b.migrateVM(ctx, n, src, dst); err != nil {
		return m, err
	}
	if m.probe, m.probePeriod, m.probeHow, err = probeGap(ctx, src.logPath, dst.logPath); err != nil {
		b.logf("migrate %s: no probe figure: %v", name, err)
		m.probe = 0
	}
	return m, nil
}

// migrateVM moves src's VM to dst with the four calls and times them,
// from GetMigrationSource to FinishMigration's answer. A failed Migrate
// is told to the target, as crimuxctl does.
func (b *bench) migrateVM(ctx context.Context, n *node2, src, dst *vmPod) (migration, error) {
	source := vmv1.NewVMServiceClient(b.cri.Conn)
	srcRef := &vmv1.VMRef{Ref: &vmv1.VMRef_Id{Id: src.container}}
	dstRef := &vmv1.VMRef{Ref: &vmv1.VMRef_Id{Id: dst.container}}
	var m migration
	t0 := time.Now()
	step := t0
	lap := func(i int) {
		now := time.Now()
		m.calls[i], step = now.Sub(step), now
	}
	sresp, err := source.GetMigrationSource(ctx, &vmv1.GetMigrationSourceRequest{Vm: srcRef})
	lap(0)
	if status.Code(err) == codes.Unimplemented {
		return m, errVMAPIMissing
	}
	if err != nil {
		return m, fmt.Errorf("GetMigrationSource of %s: %w", src.name, err)
	}
	presp, err := n.vm.PrepareMigration(ctx, &vmv1.PrepareMigrationRequest{Vm: dstRef, Source: sresp.GetSource()})
	lap(1)
	if err != nil {
		return m, fmt.Errorf("node two: PrepareMigration of %s: %w", dst.name, err)
	}
	err = followMigrate(ctx, source, srcRef, presp.GetTarget(), &m.last)
	lap(2)
	if err != nil {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		why := "the bench's Migrate failed: " + status.Convert(err).Message()
		if _, ferr := n.vm.FinishMigration(fctx, &vmv1.FinishMigrationRequest{Vm: dstRef, Failed: why}); ferr != nil {
			b.logf("migrate: node two: FinishMigration of the failed %s: %v", dst.name, ferr)
		}
		return m, fmt.Errorf("Migrate %s: %w", src.name, err)
	}
	fresp, err := n.vm.FinishMigration(ctx, &vmv1.FinishMigrationRequest{Vm: dstRef})
	lap(3)
	m.took = step.Sub(t0)
	if err != nil {
		return m, fmt.Errorf("node two: FinishMigration of %s: %w", dst.name, err)
	}
	// 0: crimux could not read libvirt's statistics (logged by it).
	m.downtime, m.haveDowntime = time.Duration(fresp.GetDowntimeMs())*time.Millisecond, fresp.GetDowntimeMs() > 0
	if fresp.GetNote() != "" {
		b.logf("migrate %s: FinishMigration's note: %s", src.name, fresp.GetNote())
	}
	return m, nil
}

// followMigrate runs the source's Migrate to its end, keeping the last
// progress it reported.
func followMigrate(ctx context.Context, source vmv1.VMServiceClient, ref *vmv1.VMRef, t *vmv1.MigrationTarget, last **vmv1.MigrateProgress) error {
	stream, err := source.Migrate(ctx, &vmv1.MigrateRequest{Vm: ref, Target: t})
	if err != nil {
		return err
	}
	for {
		p, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		*last = p
	}
}

// migrateCapMiB is the memory stream's cap of both paths, MiB/s (0: none).
func (b *bench) migrateCapMiB() int {
	if bw := b.opts.migrateBandwidthMiB; bw >= 0 {
		return bw
	}
	return 64 // crimux's default bandwidth_mib
}

// migrateBandwidth says how both paths' memory streams were capped.
func (b *bench) migrateBandwidth() string {
	switch bw := b.opts.migrateBandwidthMiB; {
	case bw < 0:
		return "both paths' memory streams capped at 64 MiB/s (crimux's default bandwidth_mib; virsh migrate --bandwidth 64)"
	case bw == 0:
		return "the memory stream not capped (bandwidth_mib = 0, -migrate-bandwidth-mib)"
	default:
		return fmt.Sprintf("both paths' memory streams capped at %d MiB/s (-migrate-bandwidth-mib; virsh migrate --bandwidth)", bw)
	}
}

// callsText is the four calls' times, for the log and notes.
func callsText(calls [4]time.Duration) string {
	var parts []string
	for i, d := range calls {
		parts = append(parts, migrateCalls[i]+" "+stats.Human(d))
	}
	return strings.Join(parts, ", ")
}

// progressText is the last progress report, for the log.
func progressText(p *vmv1.MigrateProgress) string {
	if p == nil {
		return "no progress reported"
	}
	const mib = 1 << 20
	return fmt.Sprintf("last progress at %.1fs: %d/%d MiB sent, pass %d", float64(p.GetElapsedMs())/1000,
		p.GetDataProcessedBytes()/mib, p.GetDataTotalBytes()/mib, p.GetIteration())
}
