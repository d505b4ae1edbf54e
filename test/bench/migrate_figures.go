package main

import (
	"time"

	"github.com/crimux/crimux/test/bench/stats"
)

// recordMigrate sets the figures: medians of the rounds that worked.
func (b *bench) recordMigrate(t *migrateTally) {
	c, d, cDown, dDown, probes := t.c, t.d, t.cDown, t.dDown, t.probes
	b.samplesOf("VMMigrate512M", d, c)
	b.samplesOf("VMMigrateDowntime", dDown, cDown)
	b.samplesOf("VMMigrateDowntimeProbe", nil, probes)
	b.logf("migrate: crimux %s; direct %s", c.Summary(0.5, 1), d.Summary(0.5, 1))
	b.logf("migrate: libvirt's downtime: crimux %s; direct %s; the probe %s", cDown.Summary(0.5, 1), dDown.Summary(0.5, 1), probes.Summary(0.5, 1))
	cs, ds := c.Summary(0.5, 1), d.Summary(0.5, 1)
	if len(c) > 0 {
		b.res.Set("vm_migrate_512m_total_s", c.Median().Seconds(), cs, ds)
	}
	if len(cDown) > 0 {
		b.res.Set("vm_migrate_downtime_ms", stats.Millis(cDown.Median()), cDown.Summary(0.5, 1), dDown.Summary(0.5, 1))
	}
	if len(d) > 0 {
		b.res.Set("vm_migrate_direct_512m_total_s", d.Median().Seconds(), cs, ds)
	}
	if len(c) > 0 && len(d) > 0 {
		b.res.Set("vm_migrate_over_direct_ratio", stats.Ratio(c.Median(), d.Median()), cs, ds)
	}
	if len(probes) > 0 {
		b.res.Set("vm_migrate_downtime_probe_ms", stats.Millis(probes.Median()), probes.Summary(0.5, 1), "")
	}
	b.noteMigrateMethods(t)
	b.noteMigrateShortfalls(t)
}

// noteMigrateMethods notes how each figure was measured, on either path.
func (b *bench) noteMigrateMethods(t *migrateTally) {
	crimuxHow := "the four VM API calls from the bench over gRPC, as crimuxctl vm migrate makes them, the target pod made on node two beforehand (untimed); " +
		"crimux's defaults (auto-converge, streams carried over crimux's TLS, the guest readdressed through its agent), " + b.migrateBandwidth()
	directHow := "virsh migrate --live --p2p --copy-storage-inc --migrateuri tcp://" + node2Addr + " --listen-address " + node2Addr +
		" --xml (the source's migratable XML, its disk, cloud-init volume and console on files of their own, the overlay made beforehand, untimed) to " +
		"qemu+tls://" + node2Addr + "/system, timed from the XML's dump to virsh's exit; no bandwidth cap, plain TCP streams"
	for _, name := range migrateFigures {
		b.res.Note(name, "%s; %d rounds per path, alternating which goes first", migrateShape, b.opts.migrateRounds)
	}
	b.res.Note("vm_migrate_512m_total_s", "%s", crimuxHow)
	if len(t.c) > 0 {
		var med [4]time.Duration
		for i := range t.calls {
			med[i] = t.calls[i].Median()
		}
		b.res.Note("vm_migrate_512m_total_s", "the calls' medians: %s", callsText(med))
	}
	b.res.Note("vm_migrate_direct_512m_total_s", "%s", directHow)
	b.res.Note("vm_migrate_over_direct_ratio", "median over median; crimux: %s; direct: %s", crimuxHow, directHow)
	b.res.Note("vm_migrate_downtime_ms", "FinishMigration's downtime_ms (libvirt's job statistics of the arrived domain on node two); "+
		"direct column: virsh domjobinfo --completed of the direct domain on node two")
	b.res.Note("vm_migrate_downtime_probe_ms", "the guest's loop (sh, echo, sleep 0.01) writes to /dev/console, started through CRI ExecSync; "+
		"from the source's CRI log's last line of it to the target's first, each stamped by crimux's console copier when it read it")
}

// noteMigrateShortfalls notes the rounds that failed, path by path, the
// probe's resolution and the migrations that gave no probe figure.
func (b *bench) noteMigrateShortfalls(t *migrateTally) {
	for _, f := range []struct {
		failed []error
		path   string
		names  []string
	}{
		{t.cFailed, "crimux", []string{"vm_migrate_512m_total_s", "vm_migrate_over_direct_ratio", "vm_migrate_downtime_ms", "vm_migrate_downtime_probe_ms"}},
		{t.dFailed, "direct", []string{"vm_migrate_direct_512m_total_s", "vm_migrate_over_direct_ratio"}},
	} {
		if len(f.failed) == 0 {
			continue
		}
		for _, name := range f.names {
			b.res.Note(name, "%d of %d %s rounds failed, first: %v", len(f.failed), b.opts.migrateRounds, f.path, f.failed[0])
		}
	}
	if len(t.periods) > 0 {
		b.res.Note("vm_migrate_downtime_probe_ms", "the loop printed a line every %s on the source (median of the rounds' means): the probe's resolution",
			stats.Human(t.periods.Median()))
	}
	if lost := len(t.c) - len(t.probes); lost > 0 {
		b.res.Note("vm_migrate_downtime_probe_ms", "%d of %d migrations gave no probe figure (the bench's log says why)", lost, len(t.c))
	}
}
