package gc

import (
	"context"
	"time"

	"github.com/crimux/crimux/runtimes/libvirt/store"
)

// DefaultGCInterval is the period of the collector when
// core.Options.GCInterval is 0.
const DefaultGCInterval = time.Minute

// staleCreate is how old a record still Creating must be before a
// periodic pass treats it as abandoned (the first pass after a start
// treats every one so: no call survived the restart).
const staleCreate = 10 * time.Minute

// GCReport counts what one collector pass did.
type GCReport struct {
	Domains, Dirs, Records int // removed
	Adopted                int
	Foreign                []string // domains of another crimux identity, left alone
	Pending                int      // teardowns still failing
	// Networks counts pod networks removed (CNI DEL and namespace);
	// ForeignNetns names namespaces of another identity, left alone.
	Networks     int
	ForeignNetns []string
	// Images counts image cache entries removed (images.go).
	Images int
}

func (r *Collector) runCollector(ctx context.Context) {
	for {
		every, changed := r.period.get(r.Opts.GCInterval)
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-changed:
			t.Stop()
		case <-t.C:
			r.CollectGarbage(ctx, false)
		}
	}
}

// CollectGarbage runs one collector pass. afterStart treats every
// record still Creating as abandoned. Pod networks the store records as
// going are finished even while libvirtd is away; orphan namespaces only
// once libvirt said which VMs run (a VM adopted back keeps its network).
// The image cache is collected last, once the records are settled.
func (r *Collector) CollectGarbage(ctx context.Context, afterStart bool) GCReport {
	var rep GCReport
	l, err := r.Conn.Get()
	if err == nil {
		r.finishTeardowns(&rep, afterStart)
		if present, ok := r.collectDomains(l, &rep); ok {
			r.collectDirs(&rep, present)
			r.collectPodDirs(&rep)
		}
	}
	r.collectNetworks(&rep, afterStart, err == nil)
	if err == nil {
		r.collectImageCache(ctx, &rep)
	}
	if rep.Domains+rep.Dirs+rep.Records+rep.Adopted+rep.Networks+rep.Images > 0 || len(rep.Foreign)+len(rep.ForeignNetns) > 0 || rep.Pending > 0 {
		r.Log.Info("garbage collection", "domains_removed", rep.Domains, "dirs_removed", rep.Dirs,
			"records_removed", rep.Records, "networks_removed", rep.Networks, "images_removed", rep.Images,
			"adopted", rep.Adopted, "foreign", rep.Foreign, "foreign_netns", rep.ForeignNetns, "pending", rep.Pending)
	}
	r.countGC(rep)
	return rep
}

// owesTeardown: the record is being removed, or was abandoned half made.
func owesTeardown(c *store.Container, afterStart bool) bool {
	abandoned := c.Creating && (afterStart || time.Since(time.Unix(0, c.CreatedAt)) > staleCreate)
	return c.Removing || abandoned
}

// finishTeardown tears a VM down under its pod's lock, deciding again on
// the record read under the lock: a call that held the lock meanwhile
// (a CreateContainer in flight while the first pass after a restart
// listed the records) may have finished it. done says whether a teardown
// was tried.
func (r *Collector) finishTeardown(sandboxID, id string, afterStart bool) (done bool, err error) {
	defer r.Locks.Lock(sandboxID)()
	c, err := r.Store.AnyContainer(id)
	if err != nil || !owesTeardown(c, afterStart) {
		return false, nil
	}
	return true, r.Teardown(c)
}

// finishTeardowns retries every teardown the store still records.
func (r *Collector) finishTeardowns(rep *GCReport, afterStart bool) {
	recs, err := r.Store.Containers()
	if err != nil {
		return
	}
	for _, c := range recs {
		if !owesTeardown(c, afterStart) {
			continue
		}
		done, err := r.finishTeardown(c.SandboxID, c.ID, afterStart)
		if !done {
			continue
		}
		if err != nil {
			rep.Pending++
			r.Log.Warn("teardown still failing", "container", c.ID, "err", err)
			continue
		}
		rep.Records++
	}
}

// countGC counts what a collector pass removed, by kind.
func (r *Collector) countGC(rep GCReport) {
	r.Counters.GCRemoved("domain", rep.Domains)
	r.Counters.GCRemoved("dir", rep.Dirs)
	r.Counters.GCRemoved("record", rep.Records)
	r.Counters.GCRemoved("network", rep.Networks)
	r.Counters.GCRemoved("image", rep.Images)
}

// collectImageCache runs CollectImages in a pass; a failure waits for the
// next pass.
func (r *Collector) collectImageCache(ctx context.Context, rep *GCReport) {
	removed, err := r.CollectImages(ctx)
	rep.Images += len(removed)
	if err != nil {
		r.Log.Warn("image cache not collected in this pass", "err", err)
	}
}
