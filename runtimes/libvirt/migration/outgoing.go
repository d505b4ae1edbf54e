package migration

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/migproxy"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

var errOff = fmt.Errorf("live migration is off on this node (libvirt.migration.address and pki_dir unset): %w", errdefs.ErrFailedPrecondition)

// Move is one VM leaving this node.
type Move struct {
	Domain virt.Domain
	// DestXML, DestName and Disks as the target prepared them.
	DestXML, DestName string
	Disks             []string
	// Token, Target and TargetLibvirtURI: the target's streams endpoint
	// and libvirtd, as it prepared them.
	Token, Target, TargetLibvirtURI string
	// UID and GID are the source qemu's, which connects to the streams'
	// sockets here.
	UID, GID int
	// SizeBytes (RAM and disk) sets the completion timeout.
	SizeBytes uint64
}

// progressEvery is how often a migration's progress is read.
const progressEvery = 500 * time.Millisecond

// Send moves m.Domain to the target and returns when it runs there (nil)
// or still runs here (an error). At most MaxOutgoing VMs leave at once:
// the others wait, as long as ctx lets them. report hears the progress.
func (n *Node) Send(ctx context.Context, l virt.Libvirt, m Move, report func(virt.MigrationProgress)) error {
	if n == nil {
		return errOff
	}
	select {
	case n.out <- struct{}{}:
		defer func() { <-n.out }()
	case <-ctx.Done():
		return fmt.Errorf("waiting for this node's other migrations to end: %w", ctx.Err())
	}
	peer, err := n.PeerURI(m.TargetLibvirtURI)
	if err != nil {
		return errdefs.Invalid("target.libvirt_uri", "%v", err)
	}
	fwd, err := migproxy.Start(migproxy.Forward{Token: m.Token, Target: m.Target, Client: n.client,
		Channels: n.sockets(m.Token), UID: m.UID, GID: m.GID, Log: n.log})
	if err != nil {
		return fmt.Errorf("carry the migration's streams to %s: %w", m.Target, err)
	}
	defer fwd.Close()
	memory, disks := n.URIs(m.Token)
	mig := virt.Migration{PeerURI: peer, DestXML: m.DestXML, DestName: m.DestName, MemoryURI: memory, DisksURI: disks,
		Disks: m.Disks, BandwidthMiB: n.Config().BandwidthMiB, AutoConverge: true}
	done := make(chan error, 1)
	go func() { done <- l.Migrate(m.Domain, mig) }()
	return n.follow(ctx, l, m, done, report, func() { _ = fwd.Close() })
}

// follow reports the migration's progress until it ends, and aborts it
// when ctx ends, it runs past its completion timeout or it stalls: libvirt
// is asked to abort, and the streams are cut (qemu may be blocked on
// them in the middle of a monitor command, where an abort waits).
func (n *Node) follow(ctx context.Context, l virt.Libvirt, m Move, done <-chan error, report func(virt.MigrationProgress), cut func()) error {
	timeout := n.completionTimeout(m.SizeBytes)
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(progressEvery)
	defer tick.Stop()
	stop := make(chan struct{})
	defer close(stop)
	progress := pollProgress(l, m.Domain, stop)
	stall := stallWatch{limit: n.Config().ProgressTimeout, since: time.Now()}
	var why error
	for {
		select {
		case err := <-done:
			if err != nil && why != nil {
				return fmt.Errorf("%w (libvirt: %v)", why, err)
			}
			return err
		case p := <-progress:
			stall.saw(p)
			if report != nil {
				report(p)
			}
			continue
		case <-tick.C:
			if why != nil || !stall.stalled() {
				continue
			}
			why = fmt.Errorf("the migration moved nothing for %s: aborted: %w", stall.limit, context.DeadlineExceeded)
		case <-deadline.C:
			why = fmt.Errorf("the migration ran past its completion timeout of %s: aborted: %w", timeout, context.DeadlineExceeded)
		case <-ctx.Done():
			why = fmt.Errorf("the migration was cancelled: aborted: %w", ctx.Err())
		}
		n.abort(l, m.Domain, why, cut)
		deadline.Reset(time.Hour) // one abort; then wait for libvirt's answer
		ctx = context.Background()
	}
}

// abort cuts the streams and asks libvirt to abort, without waiting: it
// may answer only once qemu lets go of its monitor.
func (n *Node) abort(l virt.Libvirt, d virt.Domain, why error, cut func()) {
	n.log.Warn("aborting a migration", "domain", d.Name, "why", why)
	cut()
	go func() {
		if err := l.AbortMigration(d); err != nil && !errors.Is(err, errdefs.ErrFailedPrecondition) {
			n.log.Warn("abort migration", "domain", d.Name, "err", err)
		}
	}()
}

// pollProgress reads the migration's progress every progressEvery until
// stop, on a goroutine of its own: a read can wait long on libvirt's job
// lock (a stuck monitor command), the migration's watch must not.
func pollProgress(l virt.Libvirt, d virt.Domain, stop <-chan struct{}) <-chan virt.MigrationProgress {
	out := make(chan virt.MigrationProgress)
	go func() {
		tick := time.NewTicker(progressEvery)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			p, ok, err := l.MigrationProgress(d)
			if err != nil || !ok || p.DataTotal == 0 || p.Elapsed == 0 { // no job, or one just over
				continue
			}
			select {
			case out <- p:
			case <-stop:
				return
			}
		}
	}()
	return out
}

// completionTimeout is CompletionTimeoutPerGiB for each started GiB.
func (n *Node) completionTimeout(size uint64) time.Duration {
	gib := max(1, (size+(1<<30)-1)>>30)
	return n.Config().CompletionTimeoutPerGiB * time.Duration(gib)
}

// stallWatch tells a migration that has moved no byte for limit (a link
// cut, a target gone quiet) from one that is slow (KubeVirt's
// progressTimeout).
type stallWatch struct {
	limit     time.Duration
	processed uint64
	since     time.Time
}

// saw records progress p.
func (w *stallWatch) saw(p virt.MigrationProgress) {
	if p.DataProcessed != w.processed {
		w.processed, w.since = p.DataProcessed, time.Now()
	}
}

// stalled: nothing moved for limit.
func (w *stallWatch) stalled() bool {
	return w.limit > 0 && time.Since(w.since) > w.limit
}
