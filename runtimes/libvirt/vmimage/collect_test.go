package vmimage

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// remove drops an image record, as containerd's RemoveImage does (the
// blobs stay until containerd's own garbage collection).
func (s *fakeStore) remove(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.images, name)
}

// diskImage is a one-disk image whose disk holds body, so that each test
// image has its own manifest.
func diskImage(t *testing.T, body string) *testImage {
	return newTestImage(t, gzipped, nil, layer(t, text("disk/vm.raw", body)))
}

// collectEnv is a Reader on a fake store with images "a" and "b" in its
// cache, their holds released.
type collectEnv struct {
	store *fakeStore
	r     *Reader
	a, b  *testImage
}

func newCollectEnv(t *testing.T) *collectEnv {
	t.Helper()
	e := &collectEnv{store: newFakeStore(), a: diskImage(t, "a"), b: diskImage(t, "b")}
	e.store.put("a", e.a)
	e.store.put("b", e.b)
	e.r = NewReader(e.store, e.store, t.TempDir())
	for _, ref := range []string{"a", "b"} {
		ctx, end := WithHoldScope(context.Background())
		if _, err := e.r.Prepare(ctx, ref); err != nil {
			t.Fatal(err)
		}
		end()
	}
	return e
}

func (e *collectEnv) cached(t *testing.T) []string {
	t.Helper()
	got, err := e.r.Cached()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	return got
}

func uses(digests ...digest.Digest) InUse {
	return func() (map[string]bool, error) {
		m := map[string]bool{}
		for _, d := range digests {
			m[d.String()] = true
		}
		return m, nil
	}
}

func sorted(ds ...digest.Digest) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.String())
	}
	slices.Sort(out)
	return out
}

func TestCollect(t *testing.T) {
	tests := []struct {
		name        string
		removeImage bool // image b is gone from containerd
		inUse       func(e *collectEnv) InUse
		wantRemoved bool // b's entry removed
	}{
		{name: "image gone, no record: removed", removeImage: true, inUse: func(*collectEnv) InUse { return uses() }, wantRemoved: true},
		{name: "image gone, a record uses it: kept", removeImage: true, inUse: func(e *collectEnv) InUse { return uses(e.b.manifest) }},
		{name: "image still there, no record: kept", inUse: func(*collectEnv) InUse { return uses() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newCollectEnv(t)
			if tt.removeImage {
				e.store.remove("b")
			}
			removed, err := e.r.Collect(context.Background(), tt.inUse(e))
			if err != nil {
				t.Fatal(err)
			}
			want, wantRemoved := sorted(e.a.manifest, e.b.manifest), []string(nil)
			if tt.wantRemoved {
				want, wantRemoved = sorted(e.a.manifest), sorted(e.b.manifest)
			}
			if got := e.cached(t); !slices.Equal(got, want) || !slices.Equal(removed, wantRemoved) {
				t.Fatalf("cache %v, removed %v; want cache %v, removed %v", got, removed, want, wantRemoved)
			}
		})
	}
}

// An image known by several names, or reached through an index, is
// present while any of its names is.
func TestCollectResolvesLikePrepare(t *testing.T) {
	store := newFakeStore()
	im := vmImage(t, qcow2Image(nil)) // an index over amd64 and arm64 manifests
	store.put("vm:1", im)
	store.put("vm:2", im)
	r := NewReader(store, store, t.TempDir())
	ctx, end := WithHoldScope(context.Background())
	if _, err := r.Prepare(ctx, "vm:1"); err != nil {
		t.Fatal(err)
	}
	end()
	store.remove("vm:1")
	if removed, err := r.Collect(context.Background(), uses()); err != nil || len(removed) != 0 {
		t.Fatalf("Collect with vm:2 still there = %v, %v; want nothing removed", removed, err)
	}
	store.remove("vm:2")
	if removed, err := r.Collect(context.Background(), uses()); err != nil || !slices.Equal(removed, sorted(im.manifest)) {
		t.Fatalf("Collect with no name left = %v, %v; want %s removed", removed, err, im.manifest)
	}
}

// An entry is held from Prepare until the call that prepared it ends:
// its record may not be written yet.
func TestCollectKeepsHeldEntries(t *testing.T) {
	e := newCollectEnv(t)
	ctx, end := WithHoldScope(context.Background())
	if _, err := e.r.Prepare(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	e.store.remove("b")
	if removed, err := e.r.Collect(context.Background(), uses()); err != nil || len(removed) != 0 {
		t.Fatalf("Collect of a held entry = %v, %v; want it kept", removed, err)
	}
	end()
	if removed, err := e.r.Collect(context.Background(), uses()); err != nil || !slices.Equal(removed, sorted(e.b.manifest)) {
		t.Fatalf("Collect after the hold ended = %v, %v; want %s removed", removed, err, e.b.manifest)
	}
}

// Without a hold scope, the hold lasts until the caller's context is done.
func TestHoldEndsWithContext(t *testing.T) {
	e := newCollectEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := e.r.Prepare(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	key := cacheKey(e.b.manifest)
	if !e.r.holds.held(key) {
		t.Fatal("entry not held after Prepare")
	}
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for e.r.holds.held(key) {
		if time.Now().After(deadline) {
			t.Fatal("entry still held 5s after its context ended")
		}
		time.Sleep(time.Millisecond)
	}
}

// blockingBlobs is a content store whose reads of one blob wait for
// release: an extraction caught in the middle.
type blockingBlobs struct {
	*fakeStore
	blob    digest.Digest
	reached chan struct{}
	release chan struct{}
	once    sync.Once
}

func (b *blockingBlobs) ReaderAt(ctx context.Context, desc ocispec.Descriptor) (content.ReaderAt, error) {
	if desc.Digest == b.blob {
		b.once.Do(func() { close(b.reached) }) // a layer is read more than once
		<-b.release
	}
	return b.fakeStore.ReaderAt(ctx, desc)
}

// An image removed while Prepare extracts it: the extraction is not
// disturbed, and the entry it makes is held by its caller.
func TestCollectDuringPrepare(t *testing.T) {
	store := newFakeStore()
	im := diskImage(t, "c")
	store.put("c", im)
	blobs := &blockingBlobs{fakeStore: store, blob: im.layerBlobs()[0], reached: make(chan struct{}), release: make(chan struct{})}
	r := NewReader(store, blobs, t.TempDir())
	ctx, end := WithHoldScope(context.Background())
	defer end()
	done := make(chan error, 1)
	go func() {
		_, err := r.Prepare(ctx, "c")
		done <- err
	}()
	<-blobs.reached
	store.remove("c")
	if removed, err := r.Collect(context.Background(), uses()); err != nil || len(removed) != 0 {
		t.Fatalf("Collect during the extraction = %v, %v; want nothing removed", removed, err)
	}
	close(blobs.release)
	if err := <-done; err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	if removed, err := r.Collect(context.Background(), uses()); err != nil || len(removed) != 0 {
		t.Fatalf("Collect before the preparing call ended = %v, %v; want the entry kept", removed, err)
	}
	end()
	if removed, err := r.Collect(context.Background(), uses()); err != nil || !slices.Equal(removed, sorted(im.manifest)) {
		t.Fatalf("Collect after the call ended = %v, %v; want %s removed", removed, err, im.manifest)
	}
}

// A Prepare that comes while the collection decides waits for it, and
// then extracts the image again: it never returns files being removed.
func TestPrepareWaitsForCollect(t *testing.T) {
	e := newCollectEnv(t)
	e.store.remove("b")
	deciding, decide := make(chan struct{}), make(chan struct{})
	inUse := func() (map[string]bool, error) {
		close(deciding)
		<-decide
		return nil, nil
	}
	collected := make(chan []string, 1)
	go func() {
		removed, _ := e.r.Collect(context.Background(), inUse)
		collected <- removed
	}()
	<-deciding
	e.store.put("b", e.b) // pulled again
	prepared := make(chan Layout, 1)
	go func() {
		ctx, end := WithHoldScope(context.Background())
		defer end()
		l, err := e.r.Prepare(ctx, "b")
		if err != nil {
			t.Error(err)
		}
		prepared <- l
	}()
	select {
	case <-prepared:
		t.Fatal("Prepare returned while the collection held the entry")
	case <-time.After(50 * time.Millisecond):
	}
	close(decide)
	if removed := <-collected; !slices.Equal(removed, sorted(e.b.manifest)) {
		t.Fatalf("removed %v, want %s", removed, e.b.manifest)
	}
	l := <-prepared
	if _, err := os.Stat(l.Disk.Path); err != nil {
		t.Fatalf("Prepare after the collection returned a disk that is not there: %v", err)
	}
}

func TestCollectStopsWhenUnsure(t *testing.T) {
	t.Run("inUse fails", func(t *testing.T) {
		e := newCollectEnv(t)
		e.store.remove("b")
		boom := errors.New("store unreadable")
		removed, err := e.r.Collect(context.Background(), func() (map[string]bool, error) { return nil, boom })
		if !errors.Is(err, boom) || len(removed) != 0 || len(e.cached(t)) != 2 {
			t.Fatalf("Collect = %v, %v, cache %v; want the error and both entries kept", removed, err, e.cached(t))
		}
	})
	t.Run("an image cannot be resolved", func(t *testing.T) {
		e := newCollectEnv(t)
		e.store.remove("b")
		idx := vmImage(t, qcow2Image(nil))
		e.store.put("unreadable", idx)
		e.store.mu.Lock()
		delete(e.store.blobs, idx.top.Digest) // its index is missing
		e.store.mu.Unlock()
		removed, err := e.r.Collect(context.Background(), uses())
		if err == nil || len(removed) != 0 || len(e.cached(t)) != 2 {
			t.Fatalf("Collect = %v, %v, cache %v; want an error and both entries kept", removed, err, e.cached(t))
		}
	})
	t.Run("not a VM image for this host: skipped", func(t *testing.T) {
		e := newCollectEnv(t)
		e.store.remove("b")
		arm := newIndexImage(t, func(im *testImage) []ocispec.Descriptor {
			return []ocispec.Descriptor{im.addManifest(t, "arm64", gzipped, nil, layer(t, text("disk/arm.raw", "arm")))}
		})
		e.store.put("arm", arm)
		removed, err := e.r.Collect(context.Background(), uses())
		if err != nil || !slices.Equal(removed, sorted(e.b.manifest)) {
			t.Fatalf("Collect = %v, %v; want %s removed", removed, err, e.b.manifest)
		}
	})
}

// A removed entry leaves nothing in the cache directory.
func TestCollectLeavesNothing(t *testing.T) {
	e := newCollectEnv(t)
	e.store.remove("a")
	e.store.remove("b")
	if _, err := e.r.Collect(context.Background(), uses()); err != nil {
		t.Fatal(err)
	}
	left, _ := os.ReadDir(e.r.dir)
	if len(left) != 0 {
		t.Fatalf("cache dir %s holds %v after both entries were collected", filepath.Base(e.r.dir), left)
	}
}
