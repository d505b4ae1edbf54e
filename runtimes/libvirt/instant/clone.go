package instant

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/runtimes/libvirt/agent"
	"github.com/crimux/crimux/runtimes/libvirt/saveimage"
	"github.com/crimux/crimux/runtimes/libvirt/template"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

// CloneXML is the domain of a clone of template key: the template's
// saved domain with what spec makes the clone's own.
func (m *Maker) CloneXML(key string, spec vm.CloneSpec) (string, error) {
	img, err := saveimage.Read(m.Store.Paths(key).State)
	if err != nil {
		return "", fmt.Errorf("template %s: %w", key, err)
	}
	return vm.CloneXML(img.XML, spec)
}

// CopyDisk copies template key's disk (its overlay over the image's) to
// path, a new file, root's alone (0600) like every VM's disk until it is
// given to the VM's identity.
func (m *Maker) CopyDisk(key, path string) (err error) {
	src, err := os.Open(m.Store.Paths(key).Disk)
	if err != nil {
		return fmt.Errorf("template %s: %w", key, err)
	}
	defer src.Close()
	dst, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := dst.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			_ = os.Remove(path)
		}
	}()
	if _, err := io.Copy(dst, src); err != nil { // copy_file_range: shared extents where the filesystem can
		return fmt.Errorf("copy template %s's disk to %s: %w", key, path, err)
	}
	return dst.Sync()
}

// Restore starts the clone whose domain is xml (CloneXML's) from template
// key's saved state, through a FIFO at fifo (a path in a directory of
// root's; one left by a crimux killed mid-restore is replaced). It
// returns once qemu has loaded the whole state and the clone runs.
func (m *Maker) Restore(ctx context.Context, l virt.Libvirt, key, xml, fifo string) error {
	meta, err := m.Store.Get(key)
	if err != nil {
		return err
	}
	if meta.State != template.Ready {
		return fmt.Errorf("template %s is %s, not ready", key, meta.State)
	}
	p := m.Store.Paths(key)
	img, err := saveimage.Read(p.State)
	if err != nil {
		return fmt.Errorf("template %s: %w", key, err)
	}
	if err := os.Remove(fifo); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	feed, err := saveimage.StartFeed(ctx, saveimage.FeedSpec{FIFO: fifo, XML: xml, Cookie: img.Cookie,
		Template: p.State, Offset: img.StreamOffset})
	if err != nil {
		return err
	}
	if err := l.RestoreState(feed.Path()); err != nil {
		_ = feed.Abort()
		return fmt.Errorf("restore from template %s: %w", key, err)
	}
	return feed.Wait()
}

// identityTimeout bounds a clone's becoming itself; identityPoll is how
// often its script is first asked whether it ended.
const (
	identityTimeout = 30 * time.Second
	identityPoll    = 25 * time.Millisecond
)

// BecomeItself makes a restored clone its own machine: its clock set, its
// RNG reseeded with host entropy, its NIC, hostname, machine ID and SSH
// host keys its own (template.Identity.Script), through its guest agent.
// id.Seed is filled here.
func BecomeItself(ctx context.Context, l virt.Libvirt, dom virt.Domain, id template.Identity) error {
	ctx, cancel := context.WithTimeout(ctx, identityTimeout)
	defer cancel()
	id.Seed = make([]byte, 64)
	if _, err := rand.Read(id.Seed); err != nil {
		return err
	}
	script, err := id.Script()
	if err != nil {
		return err
	}
	// The restored agent answers at once on an idle host; on a busy one
	// (many clones restored at once) its first answer can take seconds.
	send := agent.SendTo(l, dom)
	if err := agent.Wait(ctx, send, identityPoll); err != nil {
		return fmt.Errorf("the clone's guest agent: %w", err)
	}
	if err := setTime(ctx, l, dom); err != nil {
		return fmt.Errorf("set the clone's clock: %w", err)
	}
	res, err := agent.ExecPolling(ctx, send, []string{"/bin/sh", "-s"}, []byte(script), identityPoll)
	if err != nil {
		return fmt.Errorf("give the clone its identity: %w", err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("give the clone its identity: exit %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	return nil
}

// setTime sets the clone's clock to the host's, asking again while its
// agent is busy until ctx ends.
func setTime(ctx context.Context, l virt.Libvirt, dom virt.Domain) error {
	for {
		err := l.SetTime(dom, time.Now())
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(identityPoll):
		}
	}
}

// Restores bounds the clones restored and made themselves at once to
// the host's CPUs: a burst of restores all at once makes every one of
// them slow (each guest and its agent wait for a CPU), one after another
// makes the first ones ready soon.
type Restores struct {
	once sync.Once
	sem  chan struct{}
}

// Begin waits for a turn, or ctx's end; done ends the turn.
func (r *Restores) Begin(ctx context.Context) (done func(), err error) {
	r.once.Do(func() { r.sem = make(chan struct{}, max(runtime.NumCPU(), 1)) })
	select {
	case r.sem <- struct{}{}:
		return func() { <-r.sem }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
