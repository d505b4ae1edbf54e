package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	vmv1 "github.com/crimux/crimux/proto/vm/v1"
	"github.com/crimux/crimux/test/bench/libvirtdirect"
	"github.com/crimux/crimux/test/bench/stats"
)

// The VM figures: start overhead and first console line (one set of
// rounds serves both) and snapshots; the burst is burst.go's.

const bootTimeout = 90 * time.Second

// vmRound is one VM started, booted and removed on one path.
type vmRound struct {
	start, console time.Duration
}

func (b *bench) crimuxVMRound(ctx context.Context, name string) (vmRound, error) {
	t0 := time.Now()
	v, err := b.startVM(ctx, name, b.opts.vmMiB)
	r := vmRound{start: time.Since(t0)}
	defer func() { _ = b.removeVM(context.WithoutCancel(ctx), v) }()
	if err != nil {
		return r, err
	}
	if err := waitMarker(ctx, v.logPath, bootTimeout); err != nil {
		return r, fmt.Errorf("VM %s: boot marker in the CRI log: %w", v.domain(), err)
	}
	r.console = time.Since(t0)
	return r, nil
}

func (b *bench) directVMRound(ctx context.Context) (vmRound, error) {
	t0 := time.Now()
	v, took, err := b.direct.Start(b.opts.vmMiB)
	r := vmRound{start: took}
	defer func() { _ = b.direct.Remove(v) }()
	if err != nil {
		return r, err
	}
	if err := waitMarker(ctx, v.ConsoleLog(), bootTimeout); err != nil {
		return r, fmt.Errorf("direct VM %s: boot marker: %w", v.Name, err)
	}
	r.console = time.Since(t0)
	return r, nil
}

// phaseVMStart runs vmRounds pairs of VM rounds, alternating which path
// goes first; a failed pair is skipped and noted.
func (b *bench) phaseVMStart(ctx context.Context) error {
	// Warm-up, unrecorded: crimux extracts the image once, libvirt probes
	// an emulator it has not seen.
	if _, err := b.crimuxVMRound(ctx, "vm-warmup"); err != nil {
		return err
	}
	if _, err := b.directVMRound(ctx); err != nil {
		return err
	}
	var cStart, dStart, cConsole, dConsole stats.Samples
	var failed []error
	for i := range b.opts.vmRounds {
		var c, d vmRound
		var cErr, dErr error
		if i%2 == 0 {
			d, dErr = b.directVMRound(ctx)
			c, cErr = b.crimuxVMRound(ctx, fmt.Sprintf("vm-start-%d", i))
		} else {
			c, cErr = b.crimuxVMRound(ctx, fmt.Sprintf("vm-start-%d", i))
			d, dErr = b.directVMRound(ctx)
		}
		if err := errors.Join(cErr, dErr); err != nil {
			failed = append(failed, err)
			b.logf("VM round %d failed: %v", i, err)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			continue
		}
		cStart, dStart = append(cStart, c.start), append(dStart, d.start)
		cConsole, dConsole = append(cConsole, c.console), append(dConsole, d.console)
	}
	b.samplesOf("VMStart", dStart, cStart)
	b.samplesOf("VMFirstConsoleLine", dConsole, cConsole)
	if len(cStart) > 0 {
		b.res.Set("vm_start_overhead_ms", stats.Millis(stats.MedianDiff(cStart, dStart)), cStart.Summary(0.5, 0.9), dStart.Summary(0.5, 0.9))
		b.res.Set("vm_first_console_line_ms", stats.Millis(cConsole.Median()), cConsole.Summary(0.5, 0.9), dConsole.Summary(0.5, 0.9))
	}
	b.res.Note("vm_start_overhead_ms", "direct = qemu-img overlay + define + start with qemu as emulator; crimux adds runp, image resolve, store writes, cgroup creation and the qemu wrapper's placement")
	b.res.Note("vm_first_console_line_ms", "direct column: from define to the marker in libvirt's console log (no CRI log copier)")
	if len(failed) > 0 {
		for _, name := range []string{"vm_start_overhead_ms", "vm_first_console_line_ms"} {
			b.res.Note(name, "%d of %d rounds failed, first: %v", len(failed), b.opts.vmRounds, failed[0])
		}
	}
	b.logf("VM start: crimux %s; direct %s", cStart.Summary(0.5, 0.9), dStart.Summary(0.5, 0.9))
	b.logf("VM first console line: crimux %s; direct %s", cConsole.Summary(0.5, 0.9), dConsole.Summary(0.5, 0.9))
	return nil
}

// phaseSnapshots times snapshot create and restore of a running 128 MiB
// VM through the VM API and the same libvirt calls directly.
func (b *bench) phaseSnapshots(ctx context.Context) error {
	vmapi := vmv1.NewVMServiceClient(b.cri.Conn)
	v, err := b.startVM(ctx, "snapshots", b.opts.vmMiB)
	defer func() { _ = b.removeVM(context.WithoutCancel(ctx), v) }()
	if err != nil {
		return err
	}
	dv, _, err := b.direct.Start(b.opts.vmMiB)
	defer func() { _ = b.direct.Remove(dv) }()
	if err != nil {
		return err
	}
	if err := waitMarker(ctx, v.logPath, bootTimeout); err != nil {
		return err
	}
	if err := waitMarker(ctx, dv.ConsoleLog(), bootTimeout); err != nil {
		return err
	}
	ref := &vmv1.VMRef{Ref: &vmv1.VMRef_Id{Id: v.container}}
	var times snapshotTimes
	for i := range b.opts.snapshotRounds {
		calls := b.snapshotCalls(ctx, vmapi, ref, dv, fmt.Sprintf("bench-%d", i))
		if err := calls.timeRound(i, &times); err != nil {
			return err
		}
	}
	b.recordSnapshots(times)
	return nil
}

// snapshotTimes are the timed snapshot calls of every round, per path.
type snapshotTimes struct {
	cCreate, dCreate, cRestore, dRestore stats.Samples
}

// snapshotRoundCalls are one round's snapshot calls on either path.
type snapshotRoundCalls struct {
	name                    string
	create, restore, remove map[stats.Path]func() error
}

// snapshotCalls are the calls of the round making snapshot name of the
// crimux VM ref and of the direct VM dv.
func (b *bench) snapshotCalls(ctx context.Context, vmapi vmv1.VMServiceClient, ref *vmv1.VMRef, dv *libvirtdirect.VM, name string) snapshotRoundCalls {
	return snapshotRoundCalls{
		name: name,
		create: map[stats.Path]func() error{
			stats.ViaCrimux: func() error {
				_, err := vmapi.CreateSnapshot(ctx, &vmv1.CreateSnapshotRequest{Vm: ref, SnapshotName: name})
				return err
			},
			stats.Direct: func() error { return b.direct.Snapshot(dv, name) },
		},
		restore: map[stats.Path]func() error{
			stats.ViaCrimux: func() error {
				_, err := vmapi.RestoreSnapshot(ctx, &vmv1.RestoreSnapshotRequest{Vm: ref, SnapshotName: name})
				return err
			},
			stats.Direct: func() error { return b.direct.Revert(dv, name) },
		},
		// Deleted again, untimed: each snapshot makes the next one of the
		// same qcow2 slower, and every round should start alike.
		remove: map[stats.Path]func() error{
			stats.ViaCrimux: func() error {
				_, err := vmapi.DeleteSnapshot(ctx, &vmv1.DeleteSnapshotRequest{Vm: ref, SnapshotName: name})
				return err
			},
			stats.Direct: func() error { return b.direct.DeleteSnapshot(dv, name) },
		},
	}
}

// timeRound runs round i's create, restore and delete on both paths (in
// turns, the direct one first in even rounds) and adds the create and
// restore times to times.
func (c snapshotRoundCalls) timeRound(i int, times *snapshotTimes) error {
	order := []stats.Path{stats.Direct, stats.ViaCrimux}
	if i%2 == 1 {
		order = []stats.Path{stats.ViaCrimux, stats.Direct}
	}
	for _, step := range []struct {
		calls map[stats.Path]func() error
		into  [2]*stats.Samples
		what  string
	}{
		{calls: c.create, into: [2]*stats.Samples{&times.dCreate, &times.cCreate}, what: "create"},
		{calls: c.restore, into: [2]*stats.Samples{&times.dRestore, &times.cRestore}, what: "restore"},
		{calls: c.remove, what: "delete"},
	} {
		for _, p := range order {
			t, err := stats.Timed(step.calls[p])
			if status.Code(err) == codes.Unimplemented {
				return errVMAPIMissing
			}
			if err != nil {
				return fmt.Errorf("snapshot %s %s (%s): %w", step.what, c.name, p, err)
			}
			if step.into[p] != nil {
				*step.into[p] = append(*step.into[p], t)
			}
		}
	}
	return nil
}

// recordSnapshots records the snapshot samples and ratios.
func (b *bench) recordSnapshots(t snapshotTimes) {
	b.samplesOf("SnapshotCreate", t.dCreate, t.cCreate)
	b.samplesOf("SnapshotRestore", t.dRestore, t.cRestore)
	b.res.Set("snapshot_create_ratio", stats.MedianRatio(t.cCreate, t.dCreate), t.cCreate.Summary(0.5, 1), t.dCreate.Summary(0.5, 1))
	b.res.Set("snapshot_restore_ratio", stats.MedianRatio(t.cRestore, t.dRestore), t.cRestore.Summary(0.5, 1), t.dRestore.Summary(0.5, 1))
	for _, name := range []string{"snapshot_create_ratio", "snapshot_restore_ratio"} {
		b.res.Note(name, "median of the per-round ratios; each round's snapshot is deleted again (untimed); the crimux VM's qemu runs in its pod's cgroup, the direct one in libvirtd's")
	}
	b.logf("snapshot create: crimux %s; direct %s", t.cCreate.Summary(0.5), t.dCreate.Summary(0.5))
	b.logf("snapshot restore: crimux %s; direct %s", t.cRestore.Summary(0.5), t.dRestore.Summary(0.5))
}

// errVMAPIMissing: this crimux does not serve crimux.vm.v1.VMService.
var errVMAPIMissing = errors.New("crimux does not serve the VM API (crimux.vm.v1.VMService is Unimplemented)")
