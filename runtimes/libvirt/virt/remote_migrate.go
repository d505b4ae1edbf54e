package virt

import (
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
)

// migrateFlags: live, peer to peer, the target keeps the domain defined.
// The source's definition stays (shut off), for crimux to remove with its
// container. Local disks' top layers are copied (MigrateNonSharedInc)
// when the migration names any: a root disk on a volume both nodes reach
// is shared, and without the flag libvirt copies nothing (with it and no
// disk named it would copy every writable disk).
const migrateFlags = golibvirt.MigrateLive | golibvirt.MigratePeer2peer | golibvirt.MigratePersistDest

// Migrate goes on a connection of its own (remote.long): the call lasts
// the whole migration.
func (r remote) Migrate(d Domain, m Migration) error {
	params := []golibvirt.TypedParam{
		strParam("destination_xml", m.DestXML),
		strParam("destination_name", m.DestName),
		strParam("migrate_uri", m.MemoryURI),
	}
	flags := migrateFlags
	if len(m.Disks) > 0 {
		flags |= golibvirt.MigrateNonSharedInc
		params = append(params, strParam("disks_uri", m.DisksURI))
	}
	for _, disk := range m.Disks {
		params = append(params, strParam("migrate_disks", disk))
	}
	if m.BandwidthMiB > 0 {
		params = append(params, golibvirt.TypedParam{Field: "bandwidth", Value: *golibvirt.NewTypedParamValueUllong(m.BandwidthMiB)})
	}
	if m.AutoConverge {
		flags |= golibvirt.MigrateAutoConverge
	}
	return r.long(func(l *golibvirt.Libvirt) error {
		if m.MaxDowntime > 0 {
			if err := l.DomainMigrateSetMaxDowntime(dom(d), uint64(m.MaxDowntime.Milliseconds()), 0); err != nil {
				return err
			}
		}
		_, err := l.DomainMigratePerform3Params(dom(d), golibvirt.OptString{m.PeerURI}, params, nil, flags)
		return err
	})
}

func strParam(field, v string) golibvirt.TypedParam {
	return golibvirt.TypedParam{Field: field, Value: *golibvirt.NewTypedParamValueString(v)}
}

// MigrationProgress asks on a connection of its own: the shared one may
// wait behind the migration's calls.
func (r remote) MigrationProgress(d Domain) (p MigrationProgress, ok bool, err error) {
	return r.jobStats(d, 0)
}

func (r remote) CompletedMigration(d Domain) (p MigrationProgress, ok bool, err error) {
	return r.jobStats(d, golibvirt.DomainJobStatsCompleted|golibvirt.DomainJobStatsKeepCompleted)
}

func (r remote) jobStats(d Domain, flags golibvirt.DomainGetJobStatsFlags) (p MigrationProgress, ok bool, err error) {
	err = r.own(func(l *golibvirt.Libvirt) error {
		kind, params, err := l.DomainGetJobStats(dom(d), flags)
		if err != nil {
			return err
		}
		ok = golibvirt.DomainJobType(kind) != golibvirt.DomainJobNone
		p = progressOf(params)
		return nil
	})
	return p, ok, err
}

// progressOf reads libvirt's job statistics (VIR_DOMAIN_JOB_*).
func progressOf(params []golibvirt.TypedParam) MigrationProgress {
	var p MigrationProgress
	var pageSize uint64 = 4096
	for _, tp := range params {
		v, isNum := tp.Value.I.(uint64)
		if !isNum {
			continue
		}
		switch tp.Field {
		case "time_elapsed":
			p.Elapsed = time.Duration(v) * time.Millisecond
		case "data_total":
			p.DataTotal = v
		case "data_processed":
			p.DataProcessed = v
		case "data_remaining":
			p.DataRemaining = v
		case "memory_dirty_rate":
			p.DirtyRate = v
		case "memory_page_size":
			pageSize = v
		case "memory_iteration":
			p.Iteration = v
		case "downtime":
			p.Downtime = time.Duration(v) * time.Millisecond
		}
	}
	p.DirtyRate *= pageSize // libvirt counts pages per second
	return p
}

func (r remote) AbortMigration(d Domain) error {
	return r.own(func(l *golibvirt.Libvirt) error { return l.DomainAbortJob(dom(d)) })
}

func (r remote) MigratableXML(d Domain) (string, error) {
	x, err := r.l.DomainGetXMLDesc(dom(d), golibvirt.DomainXMLMigratable)
	return x, classify(err)
}

func (r remote) ShutoffMigrated(d Domain) (bool, error) {
	state, reason, err := r.l.DomainGetState(dom(d), 0)
	if err != nil {
		return false, classify(err)
	}
	return golibvirt.DomainState(state) == golibvirt.DomainShutoff &&
		golibvirt.DomainShutoffReason(reason) == golibvirt.DomainShutoffMigrated, nil
}
