package cri_test

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestListImagesDedups(t *testing.T) {
	h := newHarness(t)
	h.ctrd.AddImages(
		&runtimeapi.Image{Id: "sha256:a", RepoTags: []string{"a:1"}},
		&runtimeapi.Image{Id: "sha256:b", RepoTags: []string{"b:1"}},
	)
	h.vm.AddImages(
		&runtimeapi.Image{Id: "sha256:b", RepoTags: []string{"b:1"}},
		&runtimeapi.Image{Id: "sha256:c", RepoTags: []string{"c:1"}},
	)
	resp, err := h.is.ListImages(ctx(t), &runtimeapi.ListImagesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, img := range resp.Images {
		ids = append(ids, img.Id)
	}
	if want := []string{"sha256:a", "sha256:b", "sha256:c"}; !sameIDs(ids, want) {
		t.Errorf("ListImages = %v, want %v (each ID once, image IDs never prefixed)", ids, want)
	}
}

func TestImageRouting(t *testing.T) {
	h := newHarness(t)
	tests := []struct {
		name     string
		call     func(context.Context) error
		method   string
		want     string // the fake that must get the call
		wantCode codes.Code
		wantMsg  string
	}{
		{
			name:   "PullImage goes to the primary's store",
			call:   pull(h, &runtimeapi.ImageSpec{Image: "busybox"}),
			method: "PullImage", want: "ctrd",
		},
		{
			name:   "PullImage for the vm handler goes to the vm store",
			call:   pull(h, &runtimeapi.ImageSpec{Image: "disk", RuntimeHandler: "vm"}),
			method: "PullImage", want: "vm",
		},
		{
			name:   "PullImage for runc",
			call:   pull(h, &runtimeapi.ImageSpec{Image: "busybox", RuntimeHandler: "runc"}),
			method: "PullImage", want: "ctrd",
		},
		{
			name:     "PullImage of no image",
			call:     pull(h, &runtimeapi.ImageSpec{}),
			wantCode: codes.InvalidArgument, wantMsg: "image",
		},
		{
			name:     "PullImage without an image spec",
			call:     pull(h, nil),
			wantCode: codes.InvalidArgument, wantMsg: "image",
		},
		{
			name:     "PullImage for an unknown handler",
			call:     pull(h, &runtimeapi.ImageSpec{Image: "busybox", RuntimeHandler: "kata"}),
			wantCode: codes.InvalidArgument, wantMsg: `"kata"`,
		},
		{
			name: "ImageStatus",
			call: func(c context.Context) error {
				_, err := h.is.ImageStatus(c, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: "disk", RuntimeHandler: "vm"}})
				return err
			},
			method: "ImageStatus", want: "vm",
		},
		{
			name: "ImageStatus of no image",
			call: func(c context.Context) error {
				_, err := h.is.ImageStatus(c, &runtimeapi.ImageStatusRequest{})
				return err
			},
			wantCode: codes.InvalidArgument, wantMsg: "image",
		},
		{
			name: "RemoveImage of no image",
			call: func(c context.Context) error {
				_, err := h.is.RemoveImage(c, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{}})
				return err
			},
			wantCode: codes.InvalidArgument, wantMsg: "image",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h.ctrd.ResetCalls()
			h.vm.ResetCalls()
			err := tt.call(ctx(t))
			if tt.wantCode != codes.OK {
				wantCode(t, err, tt.wantCode, tt.wantMsg)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			checkAsked(t, h, tt.method, tt.want)
		})
	}
}

func pull(h *harness, spec *runtimeapi.ImageSpec) func(context.Context) error {
	return func(c context.Context) error {
		resp, err := h.is.PullImage(c, &runtimeapi.PullImageRequest{Image: spec})
		if err == nil && resp.ImageRef == "" {
			return errEmptyRef
		}
		return err
	}
}

var errEmptyRef = errors.New("PullImage succeeded without an image_ref")

// A runtime answering a pull without an image_ref did not pull: crimux
// must not report success.
func TestPullImageEmptyRef(t *testing.T) {
	h := newHarness(t)
	h.ctrd.Handle("PullImage", func(context.Context, proto.Message) (proto.Message, error) {
		return &runtimeapi.PullImageResponse{}, nil
	})
	_, err := h.is.PullImage(ctx(t), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "busybox"}})
	wantCode(t, err, codes.Unavailable, `"containerd"`, "busybox")
}

func TestImageFsInfoMerges(t *testing.T) {
	h := newHarness(t)
	resp, err := h.is.ImageFsInfo(ctx(t), &runtimeapi.ImageFsInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var mounts []string
	for _, fs := range resp.ImageFilesystems {
		mounts = append(mounts, fs.FsId.Mountpoint)
	}
	if want := []string{"/fake/ctrd/images", "/fake/vm/images"}; !sameIDs(mounts, want) {
		t.Errorf("image filesystems = %v, want %v", mounts, want)
	}
	if len(resp.ContainerFilesystems) != 2 {
		t.Errorf("container filesystems = %v, want one per runtime", resp.ContainerFilesystems)
	}
}
