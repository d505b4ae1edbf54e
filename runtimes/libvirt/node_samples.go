package libvirt

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/fsusage"
	"github.com/crimux/crimux/runtimes/libvirt/template"
	"github.com/crimux/crimux/vmtypes"
)

// The node-wide state of the VM runtime's bounds, for metrics: the
// guest-agent call slots, the templates, the image cache and the guests
// the boot watch reports stuck. All of it is crimux's own state (counters
// in memory, the store, files under the state dir): a scrape asks
// libvirtd nothing, so a hung libvirtd leaves these series served.

var _ vmtypes.NodeSampler = (*backend)(nil)

// NodeSample is the node-wide state of the VM runtime's bounds
// (vmtypes.NodeSampler).
func (b *backend) NodeSample(ctx context.Context) (vmtypes.NodeSample, error) {
	return b.rt.NodeSample(ctx)
}

// NodeSample reads the node-wide state of the runtime's bounds; ctx
// bounds the walks of the template and image cache directories.
func (rt *Runtime) NodeSample(ctx context.Context) (vmtypes.NodeSample, error) {
	var s vmtypes.NodeSample
	if rt.conn != nil {
		st := rt.conn.AgentSlots().Stats()
		s.AgentCallsInFlight, s.AgentCallsWaiting = st.InFlight, st.Waiting
		s.AgentCapPerVM, s.AgentCapPerNode = st.Caps.PerVM, st.Caps.PerNode
	}
	if err := rt.sampleTemplates(ctx, &s); err != nil {
		return s, err
	}
	if err := rt.sampleImageCache(ctx, &s); err != nil {
		return s, err
	}
	n, err := rt.stuckBoots()
	s.GuestBootsStuck = n
	return s, err
}

// sampleTemplates counts the templates by state and adds up what their
// files take, as the VM API's ListTemplates (crimuxctl template list)
// shows them: read from the template store, not from the Maker's makings
// in memory, so a template counts once its directory exists.
func (rt *Runtime) sampleTemplates(ctx context.Context, s *vmtypes.NodeSample) error {
	if rt.instant == nil || rt.instant.Maker == nil {
		return nil // templates are off
	}
	s.TemplatesOn = true
	all, err := rt.instant.ListTemplates(ctx)
	if err != nil {
		return err
	}
	for _, t := range all {
		switch t.State {
		case template.Making:
			s.Templates.Making++
		case template.Ready:
			s.Templates.Ready++
		default: // failed, or a meta that does not read (listed failed)
			s.Templates.Failed++
		}
		s.TemplateBytes += t.SizeBytes
	}
	return nil
}

// sampleImageCache measures the VM image cache as ImageFsUsage does
// (allocated bytes; the cache alone, not the VMs' and pods' files) and
// counts its images when the runtime reads them from containerd through
// it (another ImageReader, in tests, caches nothing there).
func (rt *Runtime) sampleImageCache(ctx context.Context, s *vmtypes.NodeSample) error {
	u, err := fsusage.Measure(ctx, imageCacheDir(rt.core.Opts.StateDir))
	if err != nil {
		return err
	}
	s.ImageCacheBytes = u.Bytes
	if vi, ok := rt.core.Images.(vmImages); ok {
		cached, err := vi.r.Cached()
		if err != nil {
			return err
		}
		s.ImageCacheEntries = len(cached)
	}
	return nil
}

// stuckBoots counts the running VMs the boot watch reports stuck: those
// whose CRI status says GuestNotBooted.
func (rt *Runtime) stuckBoots() (int, error) {
	if rt.core.Store == nil {
		return 0, nil
	}
	recs, err := rt.core.Store.LiveContainers()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, c := range recs {
		if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		if _, stuck := rt.core.Boots.Stuck(c.ID); stuck {
			n++
		}
	}
	return n, nil
}
