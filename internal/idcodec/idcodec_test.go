package idcodec

import (
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestSplit(t *testing.T) {
	tests := []struct {
		id, prefix, inner string
		ok                bool
	}{
		{"vm--abc", "vm", "abc", true},
		{"kata-vm--abc", "kata-vm", "abc", true},
		{"vm--abc--def", "vm", "abc--def", true},
		{"--abc", "", "abc", true},
		// Without a prefix only ok is defined.
		{"4f2c9e", "", "", false},
		{"vm-abc", "", "", false},
		{"", "", "", false},
	}
	for _, tt := range tests {
		prefix, inner, ok := Split(tt.id)
		if ok != tt.ok || (ok && (prefix != tt.prefix || inner != tt.inner)) {
			t.Errorf("Split(%q) = %q, %q, %v; want %q, %q, %v", tt.id, prefix, inner, ok, tt.prefix, tt.inner, tt.ok)
		}
	}
}

func TestEncodeDecode(t *testing.T) {
	c := New("vm")
	tests := []struct{ in, encoded, decoded string }{
		{"abc", "vm--abc", "abc"},
		{"vm--abc", "vm--abc", "abc"}, // Encode is idempotent
		{"", "", ""},                  // an unset ID stays unset
		{"kata--abc", "vm--kata--abc", "kata--abc"},
	}
	for _, tt := range tests {
		if got := c.Encode(tt.in); got != tt.encoded {
			t.Errorf("Encode(%q) = %q, want %q", tt.in, got, tt.encoded)
		}
		if got := c.Encode(c.Encode(tt.in)); got != tt.encoded {
			t.Errorf("Encode(Encode(%q)) = %q, want %q", tt.in, got, tt.encoded)
		}
		if got := c.Decode(c.Encode(tt.in)); got != tt.decoded {
			t.Errorf("Decode(Encode(%q)) = %q, want %q", tt.in, got, tt.decoded)
		}
	}
	if got := c.Decode("abc"); got != "abc" {
		t.Errorf("Decode of an ID without the prefix = %q, want it unchanged", got)
	}
}

// image is an image spec as it appears in containers and their statuses.
var image = &runtimeapi.ImageSpec{Image: "docker.io/library/busybox:1", UserSpecifiedImage: "busybox:1"}

func TestRewriteEncode(t *testing.T) {
	tests := []struct {
		name string
		in   proto.Message
		want proto.Message
	}{
		{
			name: "PodSandbox.id",
			in:   &runtimeapi.PodSandbox{Id: "p1", Metadata: &runtimeapi.PodSandboxMetadata{Name: "n", Uid: "uid-1"}, RuntimeHandler: "vm"},
			want: &runtimeapi.PodSandbox{Id: "vm--p1", Metadata: &runtimeapi.PodSandboxMetadata{Name: "n", Uid: "uid-1"}, RuntimeHandler: "vm"},
		},
		{
			name: "Container.id and pod_sandbox_id, not its image fields",
			in:   &runtimeapi.Container{Id: "c1", PodSandboxId: "p1", Image: image, ImageRef: "sha256:aaa", ImageId: "sha256:bbb"},
			want: &runtimeapi.Container{Id: "vm--c1", PodSandboxId: "vm--p1", Image: image, ImageRef: "sha256:aaa", ImageId: "sha256:bbb"},
		},
		{
			name: "ContainerStatus.id, not image_id or image_ref",
			in:   &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{Id: "c1", Image: image, ImageRef: "sha256:aaa", ImageId: "sha256:bbb", LogPath: "c1.log"}},
			want: &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{Id: "vm--c1", Image: image, ImageRef: "sha256:aaa", ImageId: "sha256:bbb", LogPath: "c1.log"}},
		},
		{
			name: "ContainerEventResponse with nested pod and container statuses",
			in: &runtimeapi.ContainerEventResponse{
				ContainerId:        "c1",
				PodSandboxStatus:   &runtimeapi.PodSandboxStatus{Id: "p1"},
				ContainersStatuses: []*runtimeapi.ContainerStatus{{Id: "c1", ImageId: "sha256:bbb"}, {Id: "c2", ImageRef: "sha256:aaa"}},
			},
			want: &runtimeapi.ContainerEventResponse{
				ContainerId:        "vm--c1",
				PodSandboxStatus:   &runtimeapi.PodSandboxStatus{Id: "vm--p1"},
				ContainersStatuses: []*runtimeapi.ContainerStatus{{Id: "vm--c1", ImageId: "sha256:bbb"}, {Id: "vm--c2", ImageRef: "sha256:aaa"}},
			},
		},
		{
			name: "ListContainerStatsResponse",
			in: &runtimeapi.ListContainerStatsResponse{Stats: []*runtimeapi.ContainerStats{
				{Attributes: &runtimeapi.ContainerAttributes{Id: "c1"}}, {Attributes: &runtimeapi.ContainerAttributes{Id: "c2"}},
			}},
			want: &runtimeapi.ListContainerStatsResponse{Stats: []*runtimeapi.ContainerStats{
				{Attributes: &runtimeapi.ContainerAttributes{Id: "vm--c1"}}, {Attributes: &runtimeapi.ContainerAttributes{Id: "vm--c2"}},
			}},
		},
		{
			name: "ListPodSandboxStatsResponse with its containers' stats",
			in: &runtimeapi.ListPodSandboxStatsResponse{Stats: []*runtimeapi.PodSandboxStats{{
				Attributes: &runtimeapi.PodSandboxAttributes{Id: "p1"},
				Linux:      &runtimeapi.LinuxPodSandboxStats{Containers: []*runtimeapi.ContainerStats{{Attributes: &runtimeapi.ContainerAttributes{Id: "c1"}}}},
			}}},
			want: &runtimeapi.ListPodSandboxStatsResponse{Stats: []*runtimeapi.PodSandboxStats{{
				Attributes: &runtimeapi.PodSandboxAttributes{Id: "vm--p1"},
				Linux:      &runtimeapi.LinuxPodSandboxStats{Containers: []*runtimeapi.ContainerStats{{Attributes: &runtimeapi.ContainerAttributes{Id: "vm--c1"}}}},
			}}},
		},
		{
			name: "PodSandboxStatusResponse",
			in: &runtimeapi.PodSandboxStatusResponse{
				Status:             &runtimeapi.PodSandboxStatus{Id: "p1"},
				ContainersStatuses: []*runtimeapi.ContainerStatus{{Id: "c1"}},
				Info:               map[string]string{"info": `{"id":"p1"}`},
			},
			want: &runtimeapi.PodSandboxStatusResponse{
				Status:             &runtimeapi.PodSandboxStatus{Id: "vm--p1"},
				ContainersStatuses: []*runtimeapi.ContainerStatus{{Id: "vm--c1"}},
				Info:               map[string]string{"info": `{"id":"p1"}`},
			},
		},
		{
			name: "ListPodSandboxMetricsResponse",
			in: &runtimeapi.ListPodSandboxMetricsResponse{PodMetrics: []*runtimeapi.PodSandboxMetrics{{
				PodSandboxId: "p1", ContainerMetrics: []*runtimeapi.ContainerMetrics{{ContainerId: "c1"}},
			}}},
			want: &runtimeapi.ListPodSandboxMetricsResponse{PodMetrics: []*runtimeapi.PodSandboxMetrics{{
				PodSandboxId: "vm--p1", ContainerMetrics: []*runtimeapi.ContainerMetrics{{ContainerId: "vm--c1"}},
			}}},
		},
		{
			name: "RestorePodResponse and its restored containers",
			in:   &runtimeapi.RestorePodResponse{PodSandboxId: "p1", RestoredContainers: []*runtimeapi.RestoredContainer{{Name: "app", ContainerId: "c1"}}},
			want: &runtimeapi.RestorePodResponse{PodSandboxId: "vm--p1", RestoredContainers: []*runtimeapi.RestoredContainer{{Name: "app", ContainerId: "vm--c1"}}},
		},
		{
			name: "Image.id is never rewritten",
			in:   &runtimeapi.ListImagesResponse{Images: []*runtimeapi.Image{{Id: "sha256:aaa", RepoTags: []string{"busybox:1"}, Spec: image}}},
			want: &runtimeapi.ListImagesResponse{Images: []*runtimeapi.Image{{Id: "sha256:aaa", RepoTags: []string{"busybox:1"}, Spec: image}}},
		},
		{
			name: "PullImageResponse.image_ref is never rewritten",
			in:   &runtimeapi.PullImageResponse{ImageRef: "sha256:aaa"},
			want: &runtimeapi.PullImageResponse{ImageRef: "sha256:aaa"},
		},
		{
			name: "unset IDs stay unset",
			in:   &runtimeapi.Container{Metadata: &runtimeapi.ContainerMetadata{Name: "app"}},
			want: &runtimeapi.Container{Metadata: &runtimeapi.ContainerMetadata{Name: "app"}},
		},
		{
			name: "labels and annotations that look like IDs are left alone",
			in:   &runtimeapi.PodSandbox{Id: "p1", Labels: map[string]string{"id": "x"}, Annotations: map[string]string{"container_id": "y"}},
			want: &runtimeapi.PodSandbox{Id: "vm--p1", Labels: map[string]string{"id": "x"}, Annotations: map[string]string{"container_id": "y"}},
		},
	}
	c := New("vm")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := proto.Clone(tt.in)
			Rewrite(got, c.Encode)
			if !proto.Equal(got, tt.want) {
				t.Errorf("Rewrite(Encode):\n got %s\nwant %s", prototext.Format(got), prototext.Format(tt.want))
			}
			// Encoding twice changes nothing; decoding gives the original back.
			Rewrite(got, c.Encode)
			if !proto.Equal(got, tt.want) {
				t.Errorf("Rewrite(Encode) twice:\n got %s\nwant %s", prototext.Format(got), prototext.Format(tt.want))
			}
			Rewrite(got, c.Decode)
			if !proto.Equal(got, tt.in) {
				t.Errorf("Rewrite(Decode) does not undo Encode:\n got %s\nwant %s", prototext.Format(got), prototext.Format(tt.in))
			}
		})
	}
}

func TestRewriteDecodeRequests(t *testing.T) {
	tests := []struct {
		name string
		in   proto.Message
		want proto.Message
	}{
		{
			name: "StopContainerRequest",
			in:   &runtimeapi.StopContainerRequest{ContainerId: "vm--c1", Timeout: 30},
			want: &runtimeapi.StopContainerRequest{ContainerId: "c1", Timeout: 30},
		},
		{
			name: "CreateContainerRequest keeps its image",
			in:   &runtimeapi.CreateContainerRequest{PodSandboxId: "vm--p1", Config: &runtimeapi.ContainerConfig{Image: &runtimeapi.ImageSpec{Image: "vm--disk:1"}}},
			want: &runtimeapi.CreateContainerRequest{PodSandboxId: "p1", Config: &runtimeapi.ContainerConfig{Image: &runtimeapi.ImageSpec{Image: "vm--disk:1"}}},
		},
		{
			name: "ListContainersRequest filter",
			in:   &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{Id: "vm--c1", PodSandboxId: "vm--p1"}},
			want: &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{Id: "c1", PodSandboxId: "p1"}},
		},
		{
			name: "ListPodSandboxRequest filter",
			in:   &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{Id: "vm--p1"}},
			want: &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{Id: "p1"}},
		},
		{
			name: "stats filters",
			in:   &runtimeapi.ListContainerStatsRequest{Filter: &runtimeapi.ContainerStatsFilter{Id: "vm--c1", PodSandboxId: "vm--p1"}},
			want: &runtimeapi.ListContainerStatsRequest{Filter: &runtimeapi.ContainerStatsFilter{Id: "c1", PodSandboxId: "p1"}},
		},
		{
			name: "pod stats filter",
			in:   &runtimeapi.ListPodSandboxStatsRequest{Filter: &runtimeapi.PodSandboxStatsFilter{Id: "vm--p1"}},
			want: &runtimeapi.ListPodSandboxStatsRequest{Filter: &runtimeapi.PodSandboxStatsFilter{Id: "p1"}},
		},
		{
			name: "image requests are left alone",
			in:   &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: "vm--disk:1"}},
			want: &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: "vm--disk:1"}},
		},
		// CheckpointPodRequest.container_ids is a repeated string: the VM
		// runtime must see its own container IDs, as for pod_sandbox_id.
		{
			name: "CheckpointPodRequest.container_ids",
			in:   &runtimeapi.CheckpointPodRequest{PodSandboxId: "vm--p1", OutputPath: "/ckpt", ContainerIds: []string{"vm--c1", "vm--c2"}},
			want: &runtimeapi.CheckpointPodRequest{PodSandboxId: "p1", OutputPath: "/ckpt", ContainerIds: []string{"c1", "c2"}},
		},
		// NamespaceOption.target_id names a container of the same pod
		// (kubectl debug --target): it must reach the runtime unprefixed.
		{
			name: "NamespaceOption.target_id",
			in: &runtimeapi.CreateContainerRequest{PodSandboxId: "vm--p1", Config: &runtimeapi.ContainerConfig{Linux: &runtimeapi.LinuxContainerConfig{
				SecurityContext: &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_TARGET, TargetId: "vm--c1"}},
			}}},
			want: &runtimeapi.CreateContainerRequest{PodSandboxId: "p1", Config: &runtimeapi.ContainerConfig{Linux: &runtimeapi.LinuxContainerConfig{
				SecurityContext: &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_TARGET, TargetId: "c1"}},
			}}},
		},
	}
	c := New("vm")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := proto.Clone(tt.in)
			Rewrite(got, c.Decode)
			if !proto.Equal(got, tt.want) {
				t.Errorf("Rewrite(Decode):\n got %s\nwant %s", prototext.Format(got), prototext.Format(tt.want))
			}
		})
	}
}

func TestRewriteNil(t *testing.T) {
	Rewrite(nil, New("vm").Encode)
	var sb *runtimeapi.PodSandbox
	Rewrite(sb, New("vm").Encode) // a typed nil must not panic either
	Rewrite(&runtimeapi.ListPodSandboxResponse{}, New("vm").Encode)
}

func TestFor(t *testing.T) {
	primary := For("")
	for _, id := range []string{"abc", "vm--abc", ""} {
		if got := primary.Encode(id); got != id {
			t.Errorf("primary Encode(%q) = %q, want it unchanged", id, got)
		}
		if got := primary.Decode(id); got != id {
			t.Errorf("primary Decode(%q) = %q, want it unchanged", id, got)
		}
	}
	if got := For("vm").Encode("abc"); got != New("vm").Encode("abc") {
		t.Errorf("For(vm) encodes %q, want New(vm)'s %q", got, New("vm").Encode("abc"))
	}
}

func TestValidPrefix(t *testing.T) {
	for name, want := range map[string]bool{"vm": true, "kata-vm": true, "": false, "kata--vm": false, "vm--": false} {
		if got := ValidPrefix(name); got != want {
			t.Errorf("ValidPrefix(%q) = %v, want %v", name, got, want)
		}
	}
}
