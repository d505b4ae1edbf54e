package criservice

import (
	"bytes"
	"context"
	"sync"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/crifilter"
	"github.com/crimux/crimux/internal/idcodec"
	"github.com/crimux/crimux/runtimes/libvirt/store"
)

// Lists, encoded. kubelet lists every pod and container of the node every
// second; crimux passes containerd's answer on as the bytes it sent
// (cri/list_raw.go), and this runtime's VMs are appended to it. Built,
// copied, given their prefixed IDs and encoded at each list, 300 VMs cost
// crimux 2.5 ms of CPU per list, most of it protobuf's reflection over
// their labels and annotations (BenchmarkListContainers300). So each VM's
// list item is kept encoded, with the IDs clients see, and encoded again
// only when what it is made of changed: its record's config (the store
// replaces a config, never changes one in place, and keeps the decoded
// one while the record is unchanged), state, times and image.
//
// An unfiltered list is, moreover, kept whole with the store's generation
// it was made at: while no record was written since, the next unfiltered
// list is the same bytes, and neither the store nor the items are read
// (kubelet's relist every second, on a node whose VMs changed nothing).
// The bytes are shared by the lists that return them: read-only.

// EncodedContainers is ListContainers as the bytes of a
// ListContainersResponse, with the IDs ids shows clients: f is a client's
// filter (its IDs as ids shows them).
func (r *Service) EncodedContainers(ctx context.Context, f *runtimeapi.ContainerFilter, ids idcodec.Codec) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	gen := r.Store.Generation()
	if b, ok := r.containerItems.whole(isEmptyContainerFilter(f), gen, ids); ok {
		return b, nil
	}
	recs, err := r.Store.LiveContainers()
	if err != nil {
		return nil, err
	}
	f = innerFilter(f, ids)
	pass := r.containerItems.begin(isEmptyContainerFilter(f))
	defer pass.end()
	out := make([][]byte, 0, len(recs))
	for _, c := range recs {
		item := containerItem(c)
		if !crifilter.Container(f, item) {
			continue
		}
		key := containerKey{c.Config, ids, c.SandboxID, c.ImageRef, c.State, c.CreatedAt}
		b, err := pass.get(c.ID, key, func() proto.Message {
			item.Id, item.PodSandboxId = ids.Encode(item.Id), ids.Encode(item.PodSandboxId)
			return &runtimeapi.ListContainersResponse{Containers: []*runtimeapi.Container{item}}
		})
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return pass.keep(bytes.Join(out, nil), gen, ids), nil
}

// EncodedSandboxes is ListPodSandbox as the bytes of a
// ListPodSandboxResponse, as EncodedContainers.
func (r *Service) EncodedSandboxes(ctx context.Context, f *runtimeapi.PodSandboxFilter, ids idcodec.Codec) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	gen := r.Store.Generation()
	if b, ok := r.sandboxItems.whole(isEmptySandboxFilter(f), gen, ids); ok {
		return b, nil
	}
	recs, err := r.Store.LiveSandboxes()
	if err != nil {
		return nil, err
	}
	f = innerFilter(f, ids)
	pass := r.sandboxItems.begin(isEmptySandboxFilter(f))
	defer pass.end()
	out := make([][]byte, 0, len(recs))
	for _, sb := range recs {
		item := sandboxItem(sb)
		if !crifilter.Sandbox(f, item) {
			continue
		}
		key := sandboxKey{sb.Config, ids, sb.Handler, sb.State, sb.CreatedAt}
		b, err := pass.get(sb.ID, key, func() proto.Message {
			item.Id = ids.Encode(item.Id)
			return &runtimeapi.ListPodSandboxResponse{Items: []*runtimeapi.PodSandbox{item}}
		})
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return pass.keep(bytes.Join(out, nil), gen, ids), nil
}

// containerKey is what a VM's list item is made of (containerItem).
type containerKey struct {
	config              *runtimeapi.ContainerConfig
	ids                 idcodec.Codec
	sandboxID, imageRef string
	state               runtimeapi.ContainerState
	createdAt           int64
}

// sandboxKey is what a VM pod's list item is made of (sandboxItem).
type sandboxKey struct {
	config    *runtimeapi.PodSandboxConfig
	ids       idcodec.Codec
	handler   string
	state     runtimeapi.PodSandboxState
	createdAt int64
}

// containerItem is a VM's item in a container list.
func containerItem(c *store.Container) *runtimeapi.Container {
	return &runtimeapi.Container{
		Id: c.ID, PodSandboxId: c.SandboxID, Metadata: c.Config.GetMetadata(), Image: c.Config.GetImage(),
		ImageRef: c.ImageRef, State: c.State, CreatedAt: c.CreatedAt,
		Labels: c.Config.GetLabels(), Annotations: c.Config.GetAnnotations(),
	}
}

// sandboxItem is a VM pod's item in a pod list.
func sandboxItem(sb *store.Sandbox) *runtimeapi.PodSandbox {
	return &runtimeapi.PodSandbox{
		Id: sb.ID, Metadata: sb.Config.GetMetadata(), State: sb.State, CreatedAt: sb.CreatedAt,
		Labels: sb.Config.GetLabels(), Annotations: sb.Config.GetAnnotations(), RuntimeHandler: sb.Handler,
	}
}

// innerFilter is a client's filter with this runtime's own IDs.
func innerFilter[F proto.Message](f F, ids idcodec.Codec) F {
	if !f.ProtoReflect().IsValid() {
		return f
	}
	inner := proto.Clone(f).(F)
	idcodec.Rewrite(inner, ids.Decode)
	return inner
}

func isEmptyContainerFilter(f *runtimeapi.ContainerFilter) bool {
	return f.GetId() == "" && f.GetPodSandboxId() == "" && f.GetState() == nil && len(f.GetLabelSelector()) == 0
}

func isEmptySandboxFilter(f *runtimeapi.PodSandboxFilter) bool {
	return f.GetId() == "" && f.GetState() == nil && len(f.GetLabelSelector()) == 0
}

// itemCache keeps list items encoded, by ID, with the key they were
// encoded from, and the last unfiltered list whole. The zero itemCache is
// empty.
type itemCache[K comparable] struct {
	mu      sync.Mutex
	entries map[string]encodedItem[K]
	last    wholeList
}

// wholeList is an unfiltered list's answer, with the store's generation
// and the ID codec it was made with.
type wholeList struct {
	b   []byte
	gen uint64
	ids idcodec.Codec
	set bool
}

// whole is the last unfiltered list's answer if the list asked for is
// unfiltered and the store has not been written since it was made.
func (c *itemCache[K]) whole(unfiltered bool, gen uint64, ids idcodec.Codec) ([]byte, bool) {
	if !unfiltered {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.last
	return l.b, l.set && l.gen == gen && l.ids == ids
}

type encodedItem[K comparable] struct {
	key K
	b   []byte
}

// itemPass is one list's use of an itemCache, under its lock. After an
// unfiltered list the cache keeps only the items it listed: records gone
// from the store leave the cache with their next list.
type itemPass[K comparable] struct {
	c    *itemCache[K]
	seen map[string]encodedItem[K] // nil for a filtered list
}

func (c *itemCache[K]) begin(unfiltered bool) *itemPass[K] {
	c.mu.Lock()
	if c.entries == nil {
		c.entries = map[string]encodedItem[K]{}
	}
	p := &itemPass[K]{c: c}
	if unfiltered {
		p.seen = make(map[string]encodedItem[K], len(c.entries))
	}
	return p
}

// get is the encoding of id's item made of key: the cached one, or
// msg's, encoded now.
func (p *itemPass[K]) get(id string, key K, msg func() proto.Message) ([]byte, error) {
	e, ok := p.c.entries[id]
	if !ok || e.key != key {
		b, err := proto.Marshal(msg())
		if err != nil {
			return nil, err
		}
		e = encodedItem[K]{key: key, b: b}
		p.c.entries[id] = e
	}
	if p.seen != nil {
		p.seen[id] = e
	}
	return e.b, nil
}

// keep returns a list's answer b, kept whole if the list is unfiltered,
// made from the store at generation gen.
func (p *itemPass[K]) keep(b []byte, gen uint64, ids idcodec.Codec) []byte {
	if p.seen != nil {
		p.c.last = wholeList{b: b, gen: gen, ids: ids, set: true}
	}
	return b
}

func (p *itemPass[K]) end() {
	if p.seen != nil {
		p.c.entries = p.seen
	}
	p.c.mu.Unlock()
}
