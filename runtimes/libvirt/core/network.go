package core

import (
	"context"
	"fmt"
	"os"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/podnet"
	"github.com/crimux/crimux/runtimes/libvirt/store"
)

// PodNetwork wires VM pods to the pod network (podnet.Manager on a host;
// a fake in unit tests). See runtimes/libvirt/podnet for how the guest
// gets the pod IP.
type PodNetwork interface {
	Plan(sandboxID string) (*podnet.Attachment, error)
	Setup(ctx context.Context, pod *podnet.Pod, a *podnet.Attachment) error
	Teardown(ctx context.Context, pod *podnet.Pod, a *podnet.Attachment) error
	StartDHCP(pod *podnet.Pod, a *podnet.Attachment) error
	StopDHCP(sandboxID string)
	OpenTap(a *podnet.Attachment) (*os.File, error)
	// GuestPackets counts what the guest sent on its tap (the boot
	// watch's sign of an operating system).
	GuestPackets(a *podnet.Attachment) (uint64, error)
	Namespaces() (own map[string]string, foreign []string, err error)
	Collect(ctx context.Context, sandboxID string) error
	// Status is CNI STATUS of the node's network (nil: ready); GC is CNI
	// GC naming the sandboxes live returns (podnet/cni11.go).
	Status(ctx context.Context) error
	GC(ctx context.Context, live func(context.Context) ([]string, error)) (int, error)
	// AdoptNamespace and DeleteNamespace act on a namespace of another
	// crimux identity, by file name, on an operator's command
	// (gc_foreign.go).
	AdoptNamespace(name string) (sandboxID string, err error)
	DeleteNamespace(ctx context.Context, name string) error
	Close()
}

// podOf is what CNI and the guest's DHCP are told about a pod. Its
// bandwidth annotations were checked by RunPodSandbox; a record from a
// crimux that did not check them (and ignored them) keeps them ignored.
func podOf(sb *store.Sandbox) *podnet.Pod {
	cfg := sb.Config
	p := &podnet.Pod{
		SandboxID: sb.ID, Namespace: cfg.GetMetadata().GetNamespace(), Name: cfg.GetMetadata().GetName(),
		UID: cfg.GetMetadata().GetUid(), Hostname: cfg.GetHostname(),
		DNS: cfg.GetDnsConfig().GetServers(), Search: cfg.GetDnsConfig().GetSearches(),
	}
	if bw, err := vm.PodBandwidth(cfg.GetAnnotations()); err == nil {
		p.Bandwidth = podnet.Bandwidth{Ingress: bw.Ingress, Egress: bw.Egress}
	}
	for _, m := range cfg.GetPortMappings() {
		p.Ports = append(p.Ports, podnet.PortMapping{
			HostPort: m.GetHostPort(), ContainerPort: m.GetContainerPort(),
			Protocol: strings.ToLower(m.GetProtocol().String()), HostIP: m.GetHostIp(),
		})
	}
	return p
}

// PlanNetwork picks the network of a new pod (nothing created yet).
func (r *Runtime) PlanNetwork(sb *store.Sandbox) error {
	if r.Net == nil {
		return nil
	}
	a, err := r.Net.Plan(sb.ID)
	if err != nil {
		return fmt.Errorf("%w: VM pod network: %v", errdefs.ErrFailedPrecondition, err)
	}
	sb.Net = a
	return nil
}

// SetupNetwork creates the planned network and starts its DHCP
// responder; the record is saved as soon as the addresses are known.
func (r *Runtime) SetupNetwork(ctx context.Context, sb *store.Sandbox) error {
	if sb.Net == nil {
		return nil
	}
	pod := podOf(sb)
	if err := r.Net.Setup(ctx, pod, sb.Net); err != nil {
		return fmt.Errorf("%w: VM pod network (CNI ADD): %v", errdefs.ErrUnavailable, err)
	}
	if err := r.Store.PutSandbox(sb); err != nil {
		return err
	}
	if err := r.Net.StartDHCP(pod, sb.Net); err != nil {
		return fmt.Errorf("%w: VM pod network (DHCP for the guest): %v", errdefs.ErrUnavailable, err)
	}
	return nil
}

// TeardownNetwork releases a pod's network (CNI DEL, namespace) and
// records that it is down. Idempotent.
func (r *Runtime) TeardownNetwork(ctx context.Context, sb *store.Sandbox) error {
	if sb.Net == nil || sb.NetDown {
		return nil
	}
	if err := r.Net.Teardown(ctx, podOf(sb), sb.Net); err != nil {
		return fmt.Errorf("%w: VM pod network teardown (CNI DEL) of %s: %v", errdefs.ErrUnavailable, sb.ID, err)
	}
	sb.NetDown = true
	if err := r.Store.PutSandbox(sb); err != nil && !errdefs.IsNotFound(err) {
		return err
	}
	r.Log.Info("VM pod network removed", "sandbox", sb.ID, "ip", sb.Net.IP)
	return nil
}

// ResumeNetworks restarts the DHCP responders of ready pods after a
// start: the guests keep their leases (infinite), but a guest that
// reboots asks again.
func (r *Runtime) ResumeNetworks() {
	if r.Net == nil {
		return
	}
	recs, err := r.Store.Sandboxes()
	if err != nil {
		return
	}
	for _, sb := range recs {
		if sb.Net == nil || !sb.Net.Ready || sb.NetDown || sb.Creating || sb.Removing ||
			sb.State != runtimeapi.PodSandboxState_SANDBOX_READY {
			continue
		}
		if err := r.Net.StartDHCP(podOf(sb), sb.Net); err != nil {
			r.Log.Warn("DHCP responder not restarted", "sandbox", sb.ID, "err", err)
		}
	}
}

// NICForDomain is what the qemu wrapper of domain gets besides its
// placement: the pod's tap, opened in the pod's namespace, and the qemu
// arguments of the guest NIC that uses it (fd is the wrapper's
// placeholder for the file's number). No network: nothing, no error.
func (r *Runtime) NICForDomain(domain, fd string) (*os.File, []string, error) {
	if r.Net == nil {
		return nil, nil, nil
	}
	id, found := strings.CutPrefix(domain, vm.DomainName(""))
	if !found {
		return nil, nil, fmt.Errorf("%s is no crimux VM", domain)
	}
	c, err := r.Store.Container(id)
	if err != nil {
		return nil, nil, err
	}
	sb, err := r.Store.Sandbox(c.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	if sb.Net == nil {
		return nil, nil, nil
	}
	if !sb.Net.Ready || sb.NetDown {
		return nil, nil, fmt.Errorf("the network of pod %s is not up", sb.ID)
	}
	f, err := r.Net.OpenTap(sb.Net)
	if err != nil {
		return nil, nil, err
	}
	return f, sb.Net.QemuArgs(fd), nil
}

// NetworkStatus is the pod's IPs for kubelet: none at all (not an empty
// one) when the pod has no network, since kubelet recreates a sandbox
// whose network status has no IP. The pod IP is the one podnet chose as
// containerd does (the first IPv4 address), the others are
// additional_ips, as a dual-stack container pod's.
func NetworkStatus(sb *store.Sandbox) *runtimeapi.PodSandboxNetworkStatus {
	if sb.Net == nil || !sb.Net.Ready {
		return nil
	}
	st := &runtimeapi.PodSandboxNetworkStatus{Ip: sb.Net.IP}
	for _, a := range sb.Net.AdditionalIPs {
		st.AdditionalIps = append(st.AdditionalIps, &runtimeapi.PodIP{Ip: a.IP})
	}
	return st
}
