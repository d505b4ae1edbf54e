package gc

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

// The image cache (runtimes/libvirt/vmimage) keeps one copy of each VM
// image's files, by manifest digest. An entry goes once its image is gone
// from containerd and no record uses it; the cache decides under each
// entry's lock, so a VM being made from it (Prepare'd, not yet recorded)
// keeps it too. The collector asks for that in every pass, and crimux
// after every RemoveImage (cri/image.go).

// imageCache is the VM image cache as the collector prunes it
// (vmimage.Reader.Collect, through the runtime's image reader).
type imageCache interface {
	Collect(ctx context.Context, inUse func() (map[string]bool, error)) ([]string, error)
}

// errUseUnknown: something might use an entry without saying which.
var errUseUnknown = errors.New("cannot tell which image cache entries are in use")

// CollectImages removes the image cache entries no VM needs: their image
// is gone from containerd and no record names them — no container record,
// whatever its state (being created or removed included), and no pod's
// root disk. It returns the digests removed. Nothing is collected while a
// record does not say which entry it uses (a VM made by an older crimux,
// or adopted) or while libvirt has a crimux-named domain without a record
// that uses files of this state dir (an orphan not adopted yet): either
// might run on any entry. It needs libvirtd, to tell.
func (r *Collector) CollectImages(ctx context.Context) ([]string, error) {
	cache, ok := r.Images.(imageCache)
	if !ok {
		return nil, nil // an image reader without a cache (tests)
	}
	removed, err := r.collectImages(ctx, cache)
	if len(removed) > 0 {
		r.Log.Info("image cache entries removed: their image is gone and no VM uses them", "digests", removed)
		r.collectTemplates(removed)
	}
	switch {
	case errors.Is(err, errUseUnknown):
		r.Log.Debug("image cache not collected", "reason", err)
	case err != nil:
		return removed, fmt.Errorf("collect the VM image cache: %w", err)
	}
	return removed, nil
}

func (r *Collector) collectImages(ctx context.Context, cache imageCache) ([]string, error) {
	l, err := r.Conn.Get()
	if err != nil {
		return nil, err
	}
	if err := r.everyDomainRecorded(l); err != nil {
		return nil, err
	}
	// Checked once first, so that a store of an older crimux costs no
	// walk of containerd's images; then again for each entry, under its
	// lock.
	if _, err := r.imagesInUse(); err != nil {
		return nil, err
	}
	return cache.Collect(ctx, r.imagesInUse)
}

// imagesInUse returns the manifest digests the records name: every
// container record's image and every pod's root disk's backing image.
func (r *Collector) imagesInUse() (map[string]bool, error) {
	ctrs, err := r.Store.Containers()
	if err != nil {
		return nil, err
	}
	used := map[string]bool{}
	for _, c := range ctrs {
		if c.ImageDigest == "" {
			return nil, fmt.Errorf("VM %s: its record names no image (made by an older crimux, or adopted): %w", c.ID, errUseUnknown)
		}
		used[c.ImageDigest] = true
	}
	pods, err := r.Store.Sandboxes()
	if err != nil {
		return nil, err
	}
	for _, sb := range pods {
		if sb.Disk == nil {
			continue
		}
		if sb.Disk.ImageDigest == "" {
			return nil, fmt.Errorf("pod %s: its root disk names no image: %w", sb.ID, errUseUnknown)
		}
		used[sb.Disk.ImageDigest] = true
	}
	return used, nil
}

// everyDomainRecorded checks that no crimux-named domain without a
// readable record names a file under the state dir (a kernel, an initrd,
// a disk whose backing file may be an entry): such a domain (an orphan
// not adopted yet) might run on any entry. The domains of another crimux
// on the same libvirtd, with a state dir of its own, do not matter.
func (r *Collector) everyDomainRecorded(l virt.Libvirt) error {
	doms, err := l.ListAll()
	if err != nil {
		return fmt.Errorf("list libvirt's domains: %w", err)
	}
	state, err := filepath.Abs(r.Opts.StateDir)
	if err != nil {
		return err
	}
	prefix := vm.DomainName("")
	for _, d := range doms {
		if !strings.HasPrefix(d.Name, prefix) {
			continue
		}
		if _, err := r.Store.AnyContainer(strings.TrimPrefix(d.Name, prefix)); err == nil {
			continue
		}
		x, err := l.XML(d)
		if errdefs.IsNotFound(err) {
			continue // gone since the list (another crimux's VM, removed)
		}
		if err != nil {
			return fmt.Errorf("domain %s has no record and its XML cannot be read (%v): %w", d.Name, err, errUseUnknown)
		}
		if namesFileUnder(x, state) {
			return fmt.Errorf("domain %s has no record and uses files under %s: %w", d.Name, state, errUseUnknown)
		}
	}
	return nil
}

// namesFileUnder reports whether a domain's XML holds a path under dir,
// in an attribute (a disk's source) or as text (a kernel). XML it cannot
// read counts as naming one.
func namesFileUnder(domainXML, dir string) bool {
	under := func(p string) bool { p = strings.TrimSpace(p); return p == dir || strings.HasPrefix(p, dir+"/") }
	dec := xml.NewDecoder(strings.NewReader(domainXML))
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return false
		}
		if err != nil {
			return true
		}
		switch t := tok.(type) {
		case xml.StartElement:
			for _, a := range t.Attr {
				if under(a.Value) {
					return true
				}
			}
		case xml.CharData:
			if under(string(t)) {
				return true
			}
		}
	}
}
