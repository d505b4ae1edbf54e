package cloudinit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
)

// Source is the pod's own cloud-init input, checked.
type Source struct {
	UserData []byte
	SSHKeys  []string
}

// ReadFile reads at most limit bytes of the file name beneath the
// directory dir of a tenant's volume; a name that does not exist is an
// error that is os.ErrNotExist. The caller's (internal/tenantfs's
// ReadBeneath): converting reads no file itself.
type ReadFile func(dir, name string, limit int64) ([]byte, error)

// FromPod reads the pod's cloud-init input: the annotations (pod first,
// the container's over them) and the user-data file of a volume mounted
// at MountPath, read by read. Bad input is InvalidArgument naming the
// annotation or the mount.
func FromPod(pod, container map[string]string, mounts []*runtimeapi.Mount, read ReadFile) (Source, error) {
	var s Source
	ud, fromAnn := lookup(AnnotationUserData, pod, container)
	if fromAnn {
		if err := CheckUserData([]byte(ud)); err != nil {
			return s, errdefs.Invalid("annotations["+AnnotationUserData+"]", "%v", err)
		}
		s.UserData = []byte(ud)
	} else {
		data, field, err := userDataFromMounts(mounts, read)
		if err != nil {
			return s, errdefs.Invalid(field, "%v", err)
		}
		if data != nil {
			if err := CheckUserData(data); err != nil {
				return s, errdefs.Invalid(field, "%s: %v", UserDataFile, err)
			}
			s.UserData = data
		}
	}
	if text, ok := lookup(AnnotationSSHKeys, pod, container); ok {
		keys, err := ParseSSHKeys(text)
		if err != nil {
			return s, errdefs.Invalid("annotations["+AnnotationSSHKeys+"]", "%v", err)
		}
		s.SSHKeys = keys
	}
	return s, nil
}

// lookup finds key in the container's annotations, else the pod's.
func lookup(key string, pod, container map[string]string) (string, bool) {
	if v, ok := container[key]; ok {
		return v, true
	}
	v, ok := pod[key]
	return v, ok
}

// userDataFromMounts reads <host path>/user-data of the mount at
// MountPath, if there is one. The file may be a symbolic link (kubelet's
// Secret and ConfigMap volumes are made of them) but must resolve inside
// the volume, and be a regular file; it is read up to the limit, never
// further. No user-data file (or no volume) is no user-data. FromPod
// runs under the pod's lock (CreateContainer's planVM): read must not
// wait on the tenant.
func userDataFromMounts(mounts []*runtimeapi.Mount, read ReadFile) ([]byte, string, error) {
	for i, m := range mounts {
		if filepath.Clean(m.GetContainerPath()) != MountPath {
			continue
		}
		field := fmt.Sprintf("config.mounts[%d] (%s)", i, MountPath)
		data, err := read(m.GetHostPath(), UserDataFile, MaxUserData+1)
		if errors.Is(err, os.ErrNotExist) {
			return nil, field, nil
		}
		return data, field, err
	}
	return nil, "", nil
}
