package crifake

import (
	"context"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// image finds an image by ID or repo tag; the caller holds f.mu.
func (f *Fake) image(ref string) (int, *runtimeapi.Image) {
	i := slices.IndexFunc(f.images, func(img *runtimeapi.Image) bool {
		return img.Id == ref || slices.Contains(img.RepoTags, ref)
	})
	if i < 0 {
		return -1, nil
	}
	return i, f.images[i]
}

func (f *Fake) listImages(filter *runtimeapi.ImageFilter) []*runtimeapi.Image {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*runtimeapi.Image
	for _, img := range f.images {
		ref := filter.GetImage().GetImage()
		if ref == "" || img.Id == ref || slices.Contains(img.RepoTags, ref) {
			out = append(out, proto.Clone(img).(*runtimeapi.Image))
		}
	}
	return out
}

// ListImages lists the images matching the filter.
func (f *Fake) ListImages(_ context.Context, req *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	return &runtimeapi.ListImagesResponse{Images: f.listImages(req.GetFilter())}, nil
}

// StreamImages sends the matching images in one message.
func (f *Fake) StreamImages(req *runtimeapi.StreamImagesRequest, s grpc.ServerStreamingServer[runtimeapi.StreamImagesResponse]) error {
	return sendNonEmpty(f.listImages(req.GetFilter()), func(items []*runtimeapi.Image) error {
		return s.Send(&runtimeapi.StreamImagesResponse{Images: items})
	})
}

// ImageStatus reports an image, or no image (not an error) when unknown.
func (f *Fake) ImageStatus(_ context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &runtimeapi.ImageStatusResponse{}
	if _, img := f.image(req.GetImage().GetImage()); img != nil {
		resp.Image = proto.Clone(img).(*runtimeapi.Image)
	}
	return resp, nil
}

// PullImage adds the image (ID "sha256:<ref>") unless it is there.
func (f *Fake) PullImage(_ context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ref := req.GetImage().GetImage()
	if _, img := f.image(ref); img != nil {
		return &runtimeapi.PullImageResponse{ImageRef: img.Id}, nil
	}
	img := &runtimeapi.Image{Id: "sha256:" + ref, RepoTags: []string{ref}, Size: 1}
	f.images = append(f.images, img)
	return &runtimeapi.PullImageResponse{ImageRef: img.Id}, nil
}

// RemoveImage forgets an image; NotFound when unknown.
func (f *Fake) RemoveImage(_ context.Context, req *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, _ := f.image(req.GetImage().GetImage())
	if i < 0 {
		return nil, notFound("image", req.GetImage().GetImage())
	}
	f.images = slices.Delete(f.images, i, i+1)
	return &runtimeapi.RemoveImageResponse{}, nil
}

// ImageFsInfo reports one image and one container filesystem under /fake/<name>.
func (f *Fake) ImageFsInfo(context.Context, *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	usage := func(dir string) []*runtimeapi.FilesystemUsage {
		return []*runtimeapi.FilesystemUsage{{
			Timestamp: 1, FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: "/fake/" + f.name + "/" + dir},
			UsedBytes: &runtimeapi.UInt64Value{Value: 1}, InodesUsed: &runtimeapi.UInt64Value{Value: 1},
		}}
	}
	return &runtimeapi.ImageFsInfoResponse{ImageFilesystems: usage("images"), ContainerFilesystems: usage("containers")}, nil
}
