package registry

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Abilities. A backend declares what it can do beyond CRI by implementing
// small interfaces, and callers ask for an ability with Ability instead of
// type-asserting a runtime's concrete type, so neither the daemon nor the
// VM API needs to know which runtime implements what. The abilities asked
// for today:
//
//   - Recoverer: catches up after a start (the daemon waits for it before
//     telling systemd it is ready);
//   - PowerStateCounter: counts its VMs by power state (metrics);
//   - ImageCollector and ImageFsContributor: keeps files of images outside
//     any image store (the VM runtime's image cache), which the CRI server
//     has collected after RemoveImage and counts in ImageFsInfo;
//   - EncodedLister: keeps its list items encoded, which the CRI server's
//     lists append to their answer as they are;
//   - vmtypes.Operator: the VM operations of crimux's VM API (reboot, power
//     state, snapshots, foreign resources), declared beside the VM types.
//
// A new ability is a new interface here (or beside the types it speaks);
// a backend gains it by growing the methods.

// Recoverer is a backend that recovers its state after a start (the VM
// runtime: store and libvirt reconciled, first garbage collection done).
type Recoverer interface {
	// Recovered is closed once the backend has caught up.
	Recovered() <-chan struct{}
}

// PowerStateCounter is a backend that runs VMs and counts them by power
// state.
type PowerStateCounter interface {
	PowerStateCounts() (map[string]int, error)
}

// ImageCollector is a backend that keeps files made from images outside
// the image store (the VM runtime's image cache, in the primary's store
// otherwise) and drops those of images that are gone. The CRI server asks
// it after every RemoveImage.
type ImageCollector interface {
	CollectImages(ctx context.Context) error
}

// ImagePreparer is a backend that makes files of an image ahead of its
// first use (the VM runtime's disk out of a VM image): the CRI server
// asks it after every PullImage, so the wait falls in the pull, where
// kubelet and crictl expect one, not in CreateContainer. An image that
// is none of the backend's is no error.
type ImagePreparer interface {
	PrepareImage(ctx context.Context, ref string) error
}

// ImageFsContributor is a backend whose files of images (and of what runs
// from them) live outside any image store; kubelet's image garbage
// collection and eviction must see them in ImageFsInfo.
type ImageFsContributor interface {
	// ImageFsUsage is those files' usage; FsId.Mountpoint is the
	// directory that holds them, which tells their filesystem.
	ImageFsUsage(ctx context.Context) (*runtimeapi.FilesystemUsage, error)
}

// EncodedLister is a backend that keeps its pods' and containers' list
// items encoded, with the IDs clients see (the VM runtime). Its answers
// are the bytes of a ListPodSandboxResponse or ListContainersResponse of
// the items that match f, a client's filter; the CRI server appends them
// to its own answer (cri/list_raw.go) with no copy, ID rewrite or
// encoding of its own.
type EncodedLister interface {
	EncodedSandboxes(ctx context.Context, f *runtimeapi.PodSandboxFilter) ([]byte, error)
	EncodedContainers(ctx context.Context, f *runtimeapi.ContainerFilter) ([]byte, error)
}

// Ability returns rt's backend as T (an ability interface) and whether the
// backend has that ability.
func Ability[T any](rt *Runtime) (T, bool) {
	var zero T
	if rt == nil || rt.Backend == nil {
		return zero, false
	}
	a, ok := rt.Backend.(T)
	return a, ok
}
