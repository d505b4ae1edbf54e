package cri_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/registry"
)

// preparingBackend is the VM runtime as PullImage sees it: it makes files
// of images it runs (registry.ImagePreparer).
type preparingBackend struct {
	imageFilesBackend
	mu       sync.Mutex
	prepared []string
	err      error
}

func (b *preparingBackend) PrepareImage(_ context.Context, ref string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.prepared = append(b.prepared, ref)
	return b.err
}

// TestPullImagePrepares: a pull through crimux has the VM runtime prepare
// the image's files before it returns, so CreateContainer finds them
// ready; a failure to prepare does not fail the pull.
func TestPullImagePrepares(t *testing.T) {
	for name, prepErr := range map[string]error{"prepared": nil, "preparing fails": errors.New("hostile disk")} {
		t.Run(name, func(t *testing.T) {
			b := &preparingBackend{err: prepErr}
			h := newHarnessWith(t, 5*time.Second, func(inner registry.Backend) registry.Backend {
				b.Backend = inner
				return b
			})
			if _, err := h.is.PullImage(ctx(t), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "vm-image"}}); err != nil {
				t.Fatalf("PullImage: %v", err)
			}
			b.mu.Lock()
			defer b.mu.Unlock()
			if len(b.prepared) != 1 || b.prepared[0] != "vm-image" {
				t.Fatalf("prepared %v after one pull, want [vm-image]", b.prepared)
			}
		})
	}
}
