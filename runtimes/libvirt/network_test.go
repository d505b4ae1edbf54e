package libvirt

import (
	"context"
	"errors"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/podnet"
)

// fakeNet is a PodNetwork that records calls and fails on demand.
type fakeNet struct {
	mu          sync.Mutex
	failDel     error
	teardowns   []string
	collected   []string
	own         map[string]string
	foreign     []string
	dhcpStarted []string
	// Foreign namespaces adopted and deleted (by file name).
	adoptedNS, deletedNS []string
}

func (f *fakeNet) Plan(id string) (*podnet.Attachment, error) {
	return &podnet.Attachment{NetNS: "/run/test/netns/i_" + id, Conf: []byte(`{}`)}, nil
}

func (f *fakeNet) Setup(_ context.Context, _ *podnet.Pod, a *podnet.Attachment) error {
	a.IP, a.PrefixLen, a.GuestMAC, a.Ready = "10.1.0.5", 24, "52:54:00:00:00:01", true
	return nil
}

func (f *fakeNet) Teardown(_ context.Context, p *podnet.Pod, _ *podnet.Attachment) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failDel != nil {
		return f.failDel
	}
	f.teardowns = append(f.teardowns, p.SandboxID)
	return nil
}

func (f *fakeNet) StartDHCP(p *podnet.Pod, _ *podnet.Attachment) error {
	f.dhcpStarted = append(f.dhcpStarted, p.SandboxID)
	return nil
}
func (f *fakeNet) StopDHCP(string) {}
func (f *fakeNet) OpenTap(a *podnet.Attachment) (*os.File, error) {
	return os.Open(os.DevNull)
}
func (f *fakeNet) Namespaces() (map[string]string, []string, error) { return f.own, f.foreign, nil }
func (f *fakeNet) Collect(_ context.Context, id string) error {
	f.collected = append(f.collected, id)
	return nil
}
func (f *fakeNet) Close() {}

// AdoptNamespace moves a foreign name to own, as podnet renames it.
func (f *fakeNet) AdoptNamespace(name string) (string, error) {
	_, id, err := podnet.SplitNamespace(name)
	if err != nil {
		return "", err
	}
	f.adoptedNS = append(f.adoptedNS, name)
	f.foreign = slices.DeleteFunc(f.foreign, func(n string) bool { return n == name })
	if f.own == nil {
		f.own = map[string]string{}
	}
	f.own[id] = "/run/test/netns/i_" + id
	return id, nil
}

func (f *fakeNet) DeleteNamespace(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failDel != nil {
		return f.failDel
	}
	f.deletedNS = append(f.deletedNS, name)
	f.foreign = slices.DeleteFunc(f.foreign, func(n string) bool { return n == name })
	return nil
}

func netRuntime(t *testing.T) (*Runtime, *fakeNet) {
	r := newTestRuntime(t)
	f := &fakeNet{}
	r.net = f
	return r, f
}

func putNetSandbox(t *testing.T, r *Runtime, id string, edit func(*sandboxRecord)) *sandboxRecord {
	t.Helper()
	sb := &sandboxRecord{ID: id, State: runtimeapi.PodSandboxState_SANDBOX_READY, CreatedAt: time.Now().UnixNano(),
		Config: &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: id, Namespace: "ns", Uid: id + "-uid"}}}
	sb.Net, _ = (&fakeNet{}).Plan(id)
	_ = (&fakeNet{}).Setup(context.Background(), nil, sb.Net)
	if edit != nil {
		edit(sb)
	}
	if err := r.store.putSandbox(sb); err != nil {
		t.Fatal(err)
	}
	return sb
}

// TestStopPodSandboxReleasesTheNetworkAndRetries: a failed CNI DEL fails
// StopPodSandbox (kubelet retries) and stays owed; the collector (or the
// next call) finishes it, once.
func TestStopPodSandboxReleasesTheNetworkAndRetries(t *testing.T) {
	r, f := netRuntime(t)
	putNetSandbox(t, r, "sb1", nil)
	f.failDel = errors.New("plugin bridge: exec: not found")
	_, err := r.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: "sb1"})
	if !errdefs.IsUnavailable(err) {
		t.Fatalf("StopPodSandbox with CNI DEL failing: %v, want Unavailable", err)
	}
	var rep GCReport
	r.collectNetworks(&rep, false, true)
	if rep.Pending != 1 {
		t.Fatalf("collector with DEL failing: %+v, want 1 pending", rep)
	}
	f.failDel = nil
	rep = GCReport{}
	r.collectNetworks(&rep, false, true)
	if rep.Networks != 1 || rep.Pending != 0 || len(f.teardowns) != 1 {
		t.Fatalf("collector after the plugin came back: %+v, teardowns %v", rep, f.teardowns)
	}
	if _, err := r.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: "sb1"}); err != nil {
		t.Fatal(err)
	}
	if len(f.teardowns) != 1 {
		t.Fatalf("network torn down again: %v", f.teardowns)
	}
	st, err := r.PodSandboxStatus(context.Background(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: "sb1"})
	if err != nil || st.GetStatus().GetNetwork().GetIp() != "10.1.0.5" {
		t.Fatalf("status after stop: %v, %v; want the last known IP", st, err)
	}
}

// TestRemovePodSandboxHidesThePodUntilTheNetworkIsGone: removal succeeds
// for CRI at once; the record stays (Removing, unlisted) until DEL works.
func TestRemovePodSandboxHidesThePodUntilTheNetworkIsGone(t *testing.T) {
	r, f := netRuntime(t)
	putNetSandbox(t, r, "sb1", nil)
	f.failDel = errors.New("host-local: lock timeout")
	if _, err := r.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: "sb1"}); err != nil {
		t.Fatal(err)
	}
	list, _ := r.ListPodSandbox(context.Background(), &runtimeapi.ListPodSandboxRequest{})
	if len(list.Items) != 0 {
		t.Fatalf("a removed pod is listed: %v", list.Items)
	}
	if _, err := r.PodSandboxStatus(context.Background(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: "sb1"}); !errdefs.IsNotFound(err) {
		t.Fatalf("status of a removed pod: %v, want NotFound", err)
	}
	if sb, err := r.store.sandbox("sb1"); err != nil || !sb.Removing {
		t.Fatalf("record: %+v, %v; want it kept, Removing", sb, err)
	}
	f.failDel = nil
	var rep GCReport
	r.collectNetworks(&rep, false, true)
	if _, err := r.store.sandbox("sb1"); !errdefs.IsNotFound(err) || len(f.teardowns) != 1 {
		t.Fatalf("after the collector: record %v, teardowns %v", err, f.teardowns)
	}
}

// TestCollectorFinishesAbandonedCreates: a pod still Creating after a
// restart (afterStart) loses its network and record; a fresh one in a
// periodic pass is left to its call.
func TestCollectorFinishesAbandonedCreates(t *testing.T) {
	r, f := netRuntime(t)
	putNetSandbox(t, r, "crashed", func(sb *sandboxRecord) { sb.Creating = true })
	var rep GCReport
	r.collectNetworks(&rep, false, true)
	if len(f.teardowns) != 0 {
		t.Fatalf("a fresh Creating pod was torn down: %v", f.teardowns)
	}
	r.collectNetworks(&rep, true, true)
	if _, err := r.store.sandbox("crashed"); !errdefs.IsNotFound(err) || len(f.teardowns) != 1 {
		t.Fatalf("after start: record %v, teardowns %v", err, f.teardowns)
	}
}

// TestCollectorNamespaces: this instance's namespaces without a record
// go (only once libvirt was asked: orphans); foreign ones are reported.
func TestCollectorNamespaces(t *testing.T) {
	r, f := netRuntime(t)
	putNetSandbox(t, r, "live", nil)
	f.own = map[string]string{"live": "/x/i_live", "orphan": "/x/i_orphan"}
	f.foreign = []string{"other_abc"}
	var rep GCReport
	r.collectNetworks(&rep, false, false)
	if len(f.collected) != 0 {
		t.Fatalf("orphans collected without libvirt's word: %v", f.collected)
	}
	r.collectNetworks(&rep, false, true)
	if len(f.collected) != 1 || f.collected[0] != "orphan" || rep.Networks != 1 || len(rep.ForeignNetns) != 1 {
		t.Fatalf("collected %v, report %+v", f.collected, rep)
	}
}

// TestNICForDomain: the tap file and the NIC arguments for a VM of a pod
// with a network; nothing for one without; an error once it is down.
func TestNICForDomain(t *testing.T) {
	r, _ := netRuntime(t)
	putNetSandbox(t, r, "sb1", nil)
	putNetSandbox(t, r, "sb2", func(sb *sandboxRecord) { sb.Net = nil })
	for _, c := range []*containerRecord{{ID: "c1", SandboxID: "sb1"}, {ID: "c2", SandboxID: "sb2"}} {
		c.Config = &runtimeapi.ContainerConfig{}
		if err := r.store.putContainer(c); err != nil {
			t.Fatal(err)
		}
	}
	f, args, err := r.NICForDomain("crimux-c1", "{fd0}")
	if err != nil || f == nil {
		t.Fatalf("NIC of c1: %v, %v", f, err)
	}
	f.Close()
	want := "virtio-net-pci,netdev=crimux-net0,id=crimux-nic0,mac=52:54:00:00:00:01,bus=pci.0,addr=0x1e"
	if len(args) != 4 || args[1] != "tap,id=crimux-net0,fd={fd0},vhost=off" || args[3] != want {
		t.Fatalf("args = %q", args)
	}
	if f, args, err := r.NICForDomain("crimux-c2", "{fd0}"); f != nil || args != nil || err != nil {
		t.Fatalf("NIC of a pod without network: %v %v %v", f, args, err)
	}
	sb, _ := r.store.sandbox("sb1")
	sb.NetDown = true
	_ = r.store.putSandbox(sb)
	if _, _, err := r.NICForDomain("crimux-c1", "{fd0}"); err == nil {
		t.Fatal("a NIC was handed out for a pod whose network is down")
	}
}
