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
		Disks: m.Disks, BandwidthMiB: n.cfg.BandwidthMiB, AutoConverge: true}
	done := make(chan error, 1)
	go func() { done <- l.Migrate(m.Domain, mig) }()
	return n.follow(ctx, l, m, done, report)
}

// follow reports the migration's progress until it ends, and aborts it
// when ctx ends or it runs past its completion timeout.
func (n *Node) follow(ctx context.Context, l virt.Libvirt, m Move, done <-chan error, report func(virt.MigrationProgress)) error {
	timeout := n.completionTimeout(m.SizeBytes)
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(progressEvery)
	defer tick.Stop()
	var why error
	for {
		select {
		case err := <-done:
			if err != nil && why != nil {
				return fmt.Errorf("%w (libvirt: %v)", why, err)
			}
			return err
		case <-tick.C:
			if p, ok, err := l.MigrationProgress(m.Domain); err == nil && ok && report != nil {
				report(p)
			}
			continue
		case <-deadline.C:
			why = fmt.Errorf("the migration ran past its completion timeout of %s: aborted: %w", timeout, context.DeadlineExceeded)
		case <-ctx.Done():
			why = fmt.Errorf("the migration was cancelled: aborted: %w", ctx.Err())
		}
		if err := l.AbortMigration(m.Domain); err != nil && !errors.Is(err, errdefs.ErrFailedPrecondition) {
			n.log.Warn("abort migration", "domain", m.Domain.Name, "err", err)
		}
		deadline.Reset(time.Hour) // one abort; then wait for libvirt's answer
		ctx = context.Background()
	}
}

// completionTimeout is CompletionTimeoutPerGiB for each started GiB.
func (n *Node) completionTimeout(size uint64) time.Duration {
	gib := max(1, (size+(1<<30)-1)>>30)
	return n.cfg.CompletionTimeoutPerGiB * time.Duration(gib)
}
