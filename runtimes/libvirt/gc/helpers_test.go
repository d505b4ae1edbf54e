package gc

import (
	"encoding/xml"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
	"github.com/crimux/crimux/runtimes/libvirt/vmnet"
)

// boom is a libvirt failure of no particular class.
var boom = errors.New("libvirt: internal error: boom")

// env is a core on fakes (instance "i") with its collector.
type env struct {
	*coretest.Env
	gc *Collector
}

func newEnv(t *testing.T, opts ...coretest.Options) *env {
	t.Helper()
	e := coretest.New(t, opts...)
	return &env{Env: e, gc: New(e.R)}
}

// stamp is crimux's metadata as it defines a domain.
func stamp(t *testing.T, instance, sandboxID, containerID string) string {
	t.Helper()
	b, err := xml.Marshal(vm.Metadata{Instance: instance, PodName: "web", PodNamespace: "ns", SandboxID: sandboxID, ContainerID: containerID})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// domainXML is a domain named name whose <metadata> holds meta ("": no
// metadata element).
func domainXML(name, meta string) string {
	md := ""
	if meta != "" {
		md = "<metadata>" + meta + "</metadata>"
	}
	return fmt.Sprintf("<domain type='qemu'><name>%s</name><memory unit='KiB'>131072</memory>%s</domain>", name, md)
}

// putDomain defines a domain in the fake libvirtd as it is.
func (e *env) putDomain(name, meta string, state virt.State) {
	e.Libvirt.Put(name, virtfake.Domain{XML: domainXML(name, meta), State: state})
}

// hasDomain reports whether the fake libvirtd has the domain, and its state.
func (e *env) hasDomain(name string) (virt.State, bool) {
	d, ok := e.Libvirt.Domain(name)
	return d.State, ok
}

// wantCode fails unless err is of class code and its message holds words.
func wantCode(t *testing.T, err error, code codes.Code, words string) {
	t.Helper()
	if errdefs.Code(err) != code || !strings.Contains(err.Error(), words) {
		t.Fatalf("err %v (%s), want %s saying %q", err, errdefs.Code(err), code, words)
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// vmDir makes a VM directory with a file in it.
func (e *env) vmDir(t *testing.T, id string) string {
	t.Helper()
	dir := e.R.VMDir(id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "disk.qcow2"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

var (
	errExist    = os.ErrExist
	errNotExist = os.ErrNotExist
)

// failingNet is a pod network whose namespaces cannot be listed.
type failingNet struct{ *coretest.Net }

func (failingNet) Namespaces() (map[string]string, []string, error) {
	return nil, nil, errors.New("read netns dir: permission denied")
}

// refusingNet is a pod network that refuses to adopt namespaces.
type refusingNet struct {
	*coretest.Net
	err error
}

func (n refusingNet) AdoptNamespace(string) (string, error) { return "", n.err }

// noNetwork runs VM pods without a pod network.
var noNetwork = coretest.Options{NoNetwork: true}

// setNet gives the core and the collector the pod network n (a test's
// failing one).
func (e *env) setNet(n vmnet.PodNetwork) { e.R.Networks.Net, e.gc.Net = n, n }
