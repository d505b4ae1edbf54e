package migrate

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/agent"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/template"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/vmtypes"
)

// defaultReaddressWait bounds the arrived guest's network change.
const defaultReaddressWait = 30 * time.Second

// arrived records that target c's VM runs here and gives its guest the
// target pod's network through its agent.
func (r *Room) arrived(ctx context.Context, c *store.Container) (vmtypes.MigrationResult, error) {
	l, err := r.Conn.Get()
	if err != nil {
		return vmtypes.MigrationResult{}, err
	}
	dom, err := l.Lookup(c.Domain)
	if err != nil {
		return vmtypes.MigrationResult{}, fmt.Errorf("the VM has not arrived (%v): %w", err, errdefs.ErrFailedPrecondition)
	}
	if st, err := l.State(dom); err != nil || st != virt.StateRunning {
		return vmtypes.MigrationResult{}, fmt.Errorf("the VM has not arrived: its domain is %s (%v): %w", st, err, errdefs.ErrFailedPrecondition)
	}
	r.MigrationNode().Forget(c.ID)
	_ = os.Remove(filepath.Join(c.Dir, incomingFile))
	from := c.Migration.From
	var res vmtypes.MigrationResult
	if p, ok, err := l.CompletedMigration(dom); err == nil && ok {
		res.Downtime = p.Downtime
		r.Opts.Counters.MigrationDowntime(p.Downtime)
	}
	res.Addresses, res.Note = r.readdress(ctx, l, dom, c)
	r.TargetTook(c, core.MigrationSucceeded)
	c.Migration = nil
	if err := r.Store.PutContainer(c); err != nil {
		return res, err
	}
	if sb, err := r.Store.Sandbox(c.SandboxID); err == nil {
		sb.Arrived = true // its later containers boot the disk the VM brought
		sb.ArrivalNote = res.Note
		if err := r.Store.PutSandbox(sb); err != nil {
			return res, err
		}
	}
	r.Opts.Counters.MigrationEnded(c.ID, core.MigrationIncoming, core.MigrationSucceeded)
	msg := fmt.Sprintf("this VM arrived from %s by live migration (downtime %s)", from, res.Downtime)
	if res.Note != "" {
		msg += "; " + res.Note
	}
	r.StartNotice(c.ID, ReasonMigrated, msg)
	r.Log.Info("VM arrived by live migration", "container", c.ID, "from", from, "downtime", res.Downtime, "note", res.Note)
	return res, nil
}

// ReasonMigrated is the event of a VM that arrived by live migration.
const ReasonMigrated = "VMMigrated"

// readdress gives the arrived guest its pod's MAC and addresses, found by
// the MAC it had on its source. A guest without an agent keeps its old
// address until it asks DHCP again: note says so.
func (r *Room) readdress(ctx context.Context, l virt.Libvirt, dom virt.Domain, c *store.Container) (addrs []string, note string) {
	sb, err := r.Store.Sandbox(c.SandboxID)
	if err != nil || sb.Net == nil || r.Net == nil {
		return nil, ""
	}
	var want []template.Address
	for _, a := range sb.Net.Addresses() {
		want = append(want, template.Address{IP: a.IP, PrefixLen: a.PrefixLen, Gateway: a.Gateway})
		addrs = append(addrs, a.IP)
	}
	from := c.Migration.SourceMAC
	if from == "" || from == sb.Net.GuestMAC && len(want) == 0 {
		return addrs, ""
	}
	script, err := template.ReaddressScript(from, sb.Net.GuestMAC, want)
	if err != nil {
		return addrs, "its network was not changed: " + err.Error()
	}
	wait := cmp.Or(r.ReaddressWait, defaultReaddressWait)
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	// The agent's channel reconnects on this node: asked too soon, the
	// script would not start (and it may run once only: it finds the NIC
	// by the MAC it changes).
	send := agent.SendTo(l, dom)
	if err := agent.Wait(ctx, send, 250*time.Millisecond); err != nil {
		return addrs, fmt.Sprintf("its guest agent could not give it its new pod's address (%v): it keeps %s's until it asks DHCP again", err, c.Migration.From)
	}
	res, err := agent.ExecPolling(ctx, send, []string{"/bin/sh", "-s"}, []byte(script), 25*time.Millisecond)
	switch {
	case err != nil:
		return addrs, fmt.Sprintf("its guest agent could not give it its new pod's address (%v): it keeps %s's until it asks DHCP again", err, c.Migration.From)
	case res.ExitCode != 0:
		return addrs, fmt.Sprintf("its new pod's address failed in the guest: exit %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	return addrs, ""
}
