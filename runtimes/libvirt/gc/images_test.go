package gc

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
	"github.com/crimux/crimux/vmtypes"
)

// Manifest digests of the cache entries of the tests.
const (
	imgA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	imgB = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// fakeCache is an image cache of entries (by digest) as vmimage's
// Collect treats them: an entry whose image is not present and that
// inUse does not name is removed. It is the runtime's image reader too.
type fakeCache struct {
	*coretest.Images
	mu      sync.Mutex
	entries map[string]bool
	present map[string]bool // images containerd has, by manifest digest
	calls   int
}

func (c *fakeCache) Collect(_ context.Context, inUse func() (map[string]bool, error)) ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	var removed []string
	for _, d := range slices.Sorted(func(yield func(string) bool) {
		for d := range c.entries {
			if !yield(d) {
				return
			}
		}
	}) {
		if c.present[d] {
			continue
		}
		used, err := inUse()
		if err != nil {
			return removed, err
		}
		if !used[d] {
			delete(c.entries, d)
			removed = append(removed, d)
		}
	}
	return removed, nil
}

// imageEnv is a collector whose image cache holds entries A and B, whose
// images containerd no longer has.
func imageEnv(t *testing.T) (*env, *fakeCache) {
	t.Helper()
	e := newEnv(t, noNetwork)
	cache := &fakeCache{Images: e.Images, entries: map[string]bool{imgA: true, imgB: true}, present: map[string]bool{}}
	e.R.Images, e.gc.Images = cache, cache
	return e, cache
}

// putVMOf records VM id of a new pod sbID, made from image digest dgst.
func (e *env) putVMOf(t *testing.T, sbID, id, dgst string, edit func(*store.Container)) {
	t.Helper()
	e.PutPod(t, sbID, nil)
	c := e.PutVM(t, sbID, id, runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
	c.ImageDigest = dgst
	if edit != nil {
		edit(c)
	}
	if err := e.R.Store.PutContainer(c); err != nil {
		t.Fatal(err)
	}
}

// putDomainUsing defines a running crimux-named domain of another
// identity, without a record, whose XML holds parts (kernel, disks).
func (e *env) putDomainUsing(t *testing.T, parts string) {
	t.Helper()
	x := "<domain type='qemu'><name>" + orphanDom + "</name><metadata>" + stamp(t, "other", orphanSb, orphanCtr) + "</metadata>" + parts + "</domain>"
	e.Libvirt.Put(orphanDom, virtfake.Domain{XML: x, State: virt.StateRunning})
}

const (
	vm1 = "11111111111111111111111111111111"
	sb1 = "22222222222222222222222222222222"
)

func TestCollectImages(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		setup func(t *testing.T, e *env, c *fakeCache)
		want  []string // removed
	}{
		{"no record, image gone: removed", nil, []string{imgA, imgB}},
		{"image still in containerd: kept", func(_ *testing.T, _ *env, c *fakeCache) { c.present[imgA] = true }, []string{imgB}},
		{"a VM's record: kept", func(t *testing.T, e *env, _ *fakeCache) { e.putVMOf(t, sb1, vm1, imgA, nil) }, []string{imgB}},
		{"a record being created: kept", func(t *testing.T, e *env, _ *fakeCache) {
			e.putVMOf(t, sb1, vm1, imgA, func(c *store.Container) { c.Creating = true })
		}, []string{imgB}},
		{"a record being removed: kept", func(t *testing.T, e *env, _ *fakeCache) {
			e.putVMOf(t, sb1, vm1, imgA, func(c *store.Container) { c.Removing = true })
		}, []string{imgB}},
		{"an exited VM's record: kept", func(t *testing.T, e *env, _ *fakeCache) {
			e.putVMOf(t, sb1, vm1, imgA, func(c *store.Container) { c.State = runtimeapi.ContainerState_CONTAINER_EXITED })
		}, []string{imgB}},
		{"a pod's root disk, no container left: kept", func(t *testing.T, e *env, _ *fakeCache) {
			e.PutPod(t, sb1, func(sb *store.Sandbox) { sb.Disk = &store.PodDisk{Path: "/x/disk.qcow2", ImageDigest: imgB} })
		}, []string{imgA}},
		{"a record of an older crimux: nothing collected", func(t *testing.T, e *env, _ *fakeCache) {
			e.putVMOf(t, sb1, vm1, "", nil)
		}, nil},
		{"an adopted VM (no image recorded): nothing collected", func(t *testing.T, e *env, _ *fakeCache) {
			e.putVMOf(t, sb1, vm1, "", func(c *store.Container) { c.Adopted = true })
		}, nil},
		{"a crimux domain without a record, booting a kernel of this state dir: nothing collected", func(t *testing.T, e *env, _ *fakeCache) {
			e.putDomainUsing(t, "<os><kernel>"+e.Dir+"/images/sha256-aa/vmlinuz</kernel></os>")
		}, nil},
		{"a crimux domain without a record, on a disk of this state dir: nothing collected", func(t *testing.T, e *env, _ *fakeCache) {
			e.putDomainUsing(t, "<devices><disk type='file'><source file='"+e.Dir+"/pods/"+orphanSb+"/disk.qcow2'/></disk></devices>")
		}, nil},
		{"a crimux domain without a record whose XML cannot be read: nothing collected", func(t *testing.T, e *env, _ *fakeCache) {
			e.putDomainUsing(t, "")
			e.Libvirt.Fail("XML", boom)
		}, nil},
		{"a crimux domain without a record, gone before its XML was read: collected", func(t *testing.T, e *env, _ *fakeCache) {
			// Another crimux's VM removed between the list and the read.
			e.putDomainUsing(t, "<os><kernel>"+e.Dir+"/images/sha256-aa/vmlinuz</kernel></os>")
			e.Libvirt.Fail("XML", fmt.Errorf("Domain not found: no domain with matching uuid: %w", errdefs.ErrNotFound))
		}, []string{imgA, imgB}},
		{"another crimux's domain, of another state dir: collected", func(t *testing.T, e *env, _ *fakeCache) {
			e.putDomainUsing(t, "<os><kernel>"+e.Dir+"-other/images/sha256-aa/vmlinuz</kernel></os>")
		}, []string{imgA, imgB}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e, cache := imageEnv(t)
			if tt.setup != nil {
				tt.setup(t, e, cache)
			}
			removed, err := e.gc.CollectImages(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(removed, tt.want) {
				t.Fatalf("removed %v, want %v", removed, tt.want)
			}
		})
	}
}

// Records that cannot say which entries they use cost no walk of
// containerd's images.
func TestCollectImagesSkipsEarly(t *testing.T) {
	t.Parallel()
	e, cache := imageEnv(t)
	e.putVMOf(t, sb1, vm1, "", nil)
	if _, err := e.gc.CollectImages(context.Background()); err != nil || cache.calls != 0 {
		t.Fatalf("CollectImages = %v, cache asked %d times; want no error and no collection", err, cache.calls)
	}
}

func TestCollectImagesNeedsLibvirt(t *testing.T) {
	t.Parallel()
	e, cache := imageEnv(t)
	e.Libvirt.SetDown(errdefs.ErrUnavailable)
	removed, err := e.gc.CollectImages(context.Background())
	if !errdefs.IsUnavailable(err) || len(removed) != 0 || len(cache.entries) != 2 {
		t.Fatalf("CollectImages with libvirtd down = %v, %v; want Unavailable and nothing removed", removed, err)
	}
}

// A runtime whose image reader has no cache collects nothing, quietly.
func TestCollectImagesWithoutCache(t *testing.T) {
	t.Parallel()
	e := newEnv(t, noNetwork)
	if removed, err := e.gc.CollectImages(context.Background()); err != nil || removed != nil {
		t.Fatalf("CollectImages = %v, %v; want nothing", removed, err)
	}
}

// Every collector pass collects the image cache, and counts it.
func TestCollectGarbageCollectsImages(t *testing.T) {
	t.Parallel()
	e, cache := imageEnv(t)
	e.putVMOf(t, sb1, vm1, imgA, nil)
	rep := e.gc.CollectGarbage(context.Background(), false)
	if rep.Images != 1 || cache.entries[imgB] || !cache.entries[imgA] {
		t.Fatalf("pass removed %d images, cache %v; want B removed, A (in use) kept", rep.Images, cache.entries)
	}
	if n := e.Counters.Removed("image"); n != 1 {
		t.Fatalf("counted %d image removals, want 1", n)
	}
}
