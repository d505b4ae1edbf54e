package vmimage

import (
	"bytes"
	"context"
	"sync"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// fakeStore is containerd's image service and content store in memory,
// for one namespace.
type fakeStore struct {
	namespace string
	mu        sync.Mutex
	images    map[string]images.Image
	blobs     map[digest.Digest][]byte
	opens     map[digest.Digest]int
}

func newFakeStore() *fakeStore {
	return &fakeStore{namespace: Namespace, images: map[string]images.Image{}, blobs: map[digest.Digest][]byte{}, opens: map[digest.Digest]int{}}
}

func (s *fakeStore) put(name string, im *testImage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for d, b := range im.blobs {
		s.blobs[d] = b
	}
	s.images[name] = images.Image{Name: name, Target: im.top}
}

func (s *fakeStore) inNamespace(ctx context.Context) bool {
	ns, _ := namespaces.Namespace(ctx)
	return ns == s.namespace
}

func (s *fakeStore) Get(ctx context.Context, name string) (images.Image, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	img, ok := s.images[name]
	if !ok || !s.inNamespace(ctx) {
		return images.Image{}, cerrdefs.ErrNotFound
	}
	return img, nil
}

func (s *fakeStore) List(ctx context.Context, filters ...string) ([]images.Image, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []images.Image
	for _, img := range s.images {
		if s.inNamespace(ctx) {
			out = append(out, img)
		}
	}
	return out, nil
}

func (s *fakeStore) ReaderAt(ctx context.Context, desc ocispec.Descriptor) (content.ReaderAt, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.blobs[desc.Digest]
	if !ok || !s.inNamespace(ctx) {
		return nil, cerrdefs.ErrNotFound
	}
	s.opens[desc.Digest]++
	return nopCloser{bytes.NewReader(b)}, nil
}

func (s *fakeStore) openCount(d digest.Digest) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opens[d]
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }
