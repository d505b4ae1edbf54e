package cri_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/registry"
)

// imageFilesBackend is a runtime like the VM runtime: no image store of
// its own (it shares the primary's), files made from images kept beside
// it, collected when asked and counted in ImageFsInfo.
type imageFilesBackend struct {
	registry.Backend
	mu         sync.Mutex
	collects   int
	collectErr error
	usage      *runtimeapi.FilesystemUsage
	usageErr   error
}

func (b *imageFilesBackend) Images() runtimeapi.ImageServiceClient { return nil }

func (b *imageFilesBackend) CollectImages(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.collects++
	return b.collectErr
}

func (b *imageFilesBackend) ImageFsUsage(context.Context) (*runtimeapi.FilesystemUsage, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return proto.Clone(b.usage).(*runtimeapi.FilesystemUsage), b.usageErr
}

func (b *imageFilesBackend) collected() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.collects
}

// newImageFilesHarness is the harness whose VM runtime is an
// imageFilesBackend.
func newImageFilesHarness(t *testing.T, b *imageFilesBackend) *harness {
	t.Helper()
	return newHarnessWith(t, 5*time.Second, func(inner registry.Backend) registry.Backend {
		b.Backend = inner
		return b
	})
}

func removeImage(t *testing.T, h *harness, image string) error {
	_, err := h.is.RemoveImage(ctx(t), &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: image}})
	return err
}

func TestRemoveImageCollects(t *testing.T) {
	t.Run("removed: collected", func(t *testing.T) {
		b := &imageFilesBackend{}
		h := newImageFilesHarness(t, b)
		if err := removeImage(t, h, "vm-image"); err != nil {
			t.Fatal(err)
		}
		if b.collected() != 1 {
			t.Fatalf("collections after RemoveImage = %d, want 1", b.collected())
		}
	})
	t.Run("collection fails: the image is removed all the same", func(t *testing.T) {
		b := &imageFilesBackend{collectErr: errors.New("cache dir unreadable")}
		h := newImageFilesHarness(t, b)
		if err := removeImage(t, h, "vm-image"); err != nil {
			t.Fatalf("RemoveImage = %v, want success", err)
		}
		if logs := h.logs.String(); !strings.Contains(logs, "cache dir unreadable") {
			t.Fatalf("the collection's failure is not logged:\n%s", logs)
		}
	})
	t.Run("the store refuses: nothing collected", func(t *testing.T) {
		b := &imageFilesBackend{}
		h := newImageFilesHarness(t, b)
		h.ctrd.Handle("RemoveImage", func(context.Context, proto.Message) (proto.Message, error) {
			return nil, status.Error(codes.FailedPrecondition, "image in use")
		})
		if err := removeImage(t, h, "vm-image"); status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("RemoveImage = %v, want the store's FailedPrecondition", err)
		}
		if b.collected() != 0 {
			t.Fatalf("collections after a refused RemoveImage = %d, want 0", b.collected())
		}
	})
}

func usage(mount string, bytes uint64, inodes *runtimeapi.UInt64Value) *runtimeapi.FilesystemUsage {
	return &runtimeapi.FilesystemUsage{Timestamp: 7, FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: mount},
		UsedBytes: &runtimeapi.UInt64Value{Value: bytes}, InodesUsed: inodes}
}

func inodes(n uint64) *runtimeapi.UInt64Value { return &runtimeapi.UInt64Value{Value: n} }

func TestImageFsInfoCountsImageFiles(t *testing.T) {
	storeDir, stateDir := t.TempDir(), t.TempDir() // one filesystem
	tests := []struct {
		name      string
		store     *runtimeapi.FilesystemUsage // containerd's image filesystem
		files     *runtimeapi.FilesystemUsage // the VM runtime's files
		filesErr  error
		wantImage []*runtimeapi.FilesystemUsage
	}{
		{
			name:  "state dir on the store's filesystem: added to its entry",
			store: usage(storeDir, 1000, inodes(10)), files: usage(stateDir, 500, inodes(5)),
			wantImage: []*runtimeapi.FilesystemUsage{usage(storeDir, 1500, inodes(15))},
		},
		{
			name:  "state dir on another filesystem: an entry of its own",
			store: usage("/proc", 1000, inodes(10)), files: usage(stateDir, 500, inodes(5)),
			wantImage: []*runtimeapi.FilesystemUsage{usage("/proc", 1000, inodes(10)), usage(stateDir, 500, inodes(5))},
		},
		{
			name:  "the store's mountpoint is not visible here: an entry of its own",
			store: usage("/nonexistent/containerd", 1000, inodes(10)), files: usage(stateDir, 500, inodes(5)),
			wantImage: []*runtimeapi.FilesystemUsage{usage("/nonexistent/containerd", 1000, inodes(10)), usage(stateDir, 500, inodes(5))},
		},
		{
			name:  "the store does not count inodes: still not counted",
			store: usage(storeDir, 1000, nil), files: usage(stateDir, 500, inodes(5)),
			wantImage: []*runtimeapi.FilesystemUsage{usage(storeDir, 1500, nil)},
		},
		{
			name:  "the runtime cannot tell: the store's answer",
			store: usage(storeDir, 1000, inodes(10)), filesErr: errors.New("walk: permission denied"),
			wantImage: []*runtimeapi.FilesystemUsage{usage(storeDir, 1000, inodes(10))},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newImageFilesHarness(t, &imageFilesBackend{usage: tt.files, usageErr: tt.filesErr})
			h.ctrd.Handle("ImageFsInfo", func(context.Context, proto.Message) (proto.Message, error) {
				return &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{tt.store}}, nil
			})
			resp, err := h.is.ImageFsInfo(ctx(t), &runtimeapi.ImageFsInfoRequest{})
			if err != nil {
				t.Fatal(err)
			}
			want := &runtimeapi.ImageFsInfoResponse{ImageFilesystems: tt.wantImage}
			if !proto.Equal(resp, want) {
				t.Fatalf("ImageFsInfo =\n%v\nwant\n%v", resp, want)
			}
		})
	}
}
