package vmnet_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/podnet"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/vmnet"
)

// TestNIC: the tap file and the NIC arguments for a VM of a pod
// with a network; nothing for one without; an error once it is down.
func TestNIC(t *testing.T) {
	e := coretest.New(t)
	r := e.R
	e.PutPod(t, "sb1", nil)
	e.PutPod(t, "sb2", func(sb *store.Sandbox) { sb.Net = nil })
	for _, c := range []*store.Container{{ID: "c1", SandboxID: "sb1"}, {ID: "c2", SandboxID: "sb2"}} {
		c.Config = &runtimeapi.ContainerConfig{}
		if err := r.Store.PutContainer(c); err != nil {
			t.Fatal(err)
		}
	}
	f, args, err := r.Networks.NIC("crimux-c1", "{fd0}")
	if err != nil || f == nil {
		t.Fatalf("NIC of c1: %v, %v", f, err)
	}
	f.Close()
	want := "virtio-net-pci,netdev=crimux-net0,id=crimux-nic0,mac=52:54:00:00:00:01,bus=pci.0,addr=0x1e"
	if len(args) != 4 || args[1] != "tap,id=crimux-net0,fd={fd0},vhost=off" || args[3] != want {
		t.Fatalf("args = %q", args)
	}
	if f, args, err := r.Networks.NIC("crimux-c2", "{fd0}"); f != nil || args != nil || err != nil {
		t.Fatalf("NIC of a pod without network: %v %v %v", f, args, err)
	}
	sb, _ := r.Store.Sandbox("sb1")
	sb.NetDown = true
	_ = r.Store.PutSandbox(sb)
	if _, _, err := r.Networks.NIC("crimux-c1", "{fd0}"); err == nil {
		t.Fatal("a NIC was handed out for a pod whose network is down")
	}
}

// TestNICRefusals: no NIC for what is not a VM of this runtime,
// for a pod whose network is not up yet, or when the tap cannot be had.
func TestNICRefusals(t *testing.T) {
	e := coretest.New(t)
	putVM(t, e, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_CREATED, "")
	e.PutPod(t, "sb2", func(sb *store.Sandbox) { sb.Net.Ready = false })
	e.PutVM(t, "sb2", "c2", runtimeapi.ContainerState_CONTAINER_CREATED, "")
	orphan := &store.Container{ID: "c3", SandboxID: "gone", Config: &runtimeapi.ContainerConfig{}}
	if err := e.R.Store.PutContainer(orphan); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		domain string
		words  string
	}{
		{"not-crimux", "no crimux VM"},
		{"crimux-nope", "not found"},
		{"crimux-c2", "not up"},
		{"crimux-c3", "not found"},
	} {
		if f, _, err := e.R.Networks.NIC(tc.domain, "{fd}"); err == nil || f != nil || !strings.Contains(err.Error(), tc.words) {
			t.Errorf("NIC(%s) = %v, %v; want an error saying %q", tc.domain, f, err, tc.words)
		}
	}
	w := wrapNet(e)
	w.failTap = errors.New("tap0: no such device")
	if _, _, err := e.R.Networks.NIC("crimux-c1", "{fd}"); err == nil || !strings.Contains(err.Error(), "tap0") {
		t.Fatalf("NIC with the tap missing: %v", err)
	}
	e = coretest.New(t, coretest.Options{NoNetwork: true})
	putVM(t, e, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_CREATED, "")
	if f, args, err := e.R.Networks.NIC("crimux-c1", "{fd}"); f != nil || args != nil || err != nil {
		t.Fatalf("NIC without a pod network: %v %v %v, want nothing", f, args, err)
	}
}

// TestSetup: CNI is told the pod; the addresses are recorded; a
// failure of CNI or of the guest's DHCP is Unavailable.
func TestSetup(t *testing.T) {
	ctx := context.Background()
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "ns", Uid: "u1"}, Hostname: "web-0",
		DnsConfig:    &runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"}, Searches: []string{"ns.svc.cluster.local"}},
		PortMappings: []*runtimeapi.PortMapping{{Protocol: runtimeapi.Protocol_UDP, ContainerPort: 53, HostPort: 5353, HostIp: "127.0.0.1"}},
	}
	t.Run("up", func(t *testing.T) {
		e := coretest.New(t)
		w := wrapNet(e)
		sb := &store.Sandbox{ID: "sb1", Config: cfg}
		if err := e.R.Networks.Plan(sb); err != nil || sb.Net == nil {
			t.Fatalf("Plan: %v, net %v", err, sb.Net)
		}
		if err := e.R.Networks.Setup(ctx, sb); err != nil {
			t.Fatal(err)
		}
		rec, err := e.R.Store.Sandbox("sb1")
		if err != nil || rec.Net == nil || rec.Net.IP != "10.1.0.5" || !rec.Net.Ready {
			t.Fatalf("record after setup: %+v, %v; want the address recorded", rec, err)
		}
		if st := vmnet.PodStatus(rec); st.GetIp() != "10.1.0.5" {
			t.Fatalf("PodStatus = %v", st)
		}
		p := w.setupPods[0]
		if p.SandboxID != "sb1" || p.Name != "web" || p.Namespace != "ns" || p.UID != "u1" || p.Hostname != "web-0" ||
			len(p.DNS) != 1 || len(p.Search) != 1 || len(p.Ports) != 1 || p.Ports[0].Protocol != "udp" ||
			p.Ports[0].HostPort != 5353 || p.Ports[0].ContainerPort != 53 || p.Ports[0].HostIP != "127.0.0.1" {
			t.Fatalf("CNI told %+v", p)
		}
		if len(w.dhcpOfPods) != 1 {
			t.Fatal("no DHCP responder for the guest")
		}
	})
	t.Run("plan fails", func(t *testing.T) {
		e := coretest.New(t)
		wrapNet(e).failPlan = errors.New("no CNI config in /etc/cni/net.d")
		sb := &store.Sandbox{ID: "sb1", Config: cfg}
		if err := e.R.Networks.Plan(sb); errdefs.Code(err) != errdefs.Code(errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "net.d") {
			t.Fatalf("Plan: %v, want FailedPrecondition with the cause", err)
		}
	})
	for name, fail := range map[string]func(*coretest.Env){
		"CNI ADD fails": func(e *coretest.Env) { e.Net.FailSetup = errors.New("bridge: exec: not found") },
		"DHCP fails":    func(e *coretest.Env) { wrapNet(e).failDHCP = errors.New("bind :67: in use") },
	} {
		t.Run(name, func(t *testing.T) {
			e := coretest.New(t)
			sb := &store.Sandbox{ID: "sb1", Config: cfg}
			if err := e.R.Networks.Plan(sb); err != nil {
				t.Fatal(err)
			}
			fail(e)
			if err := e.R.Networks.Setup(ctx, sb); !errdefs.IsUnavailable(err) {
				t.Fatalf("Setup: %v, want Unavailable", err)
			}
		})
	}
	t.Run("no network", func(t *testing.T) {
		e := coretest.New(t, coretest.Options{NoNetwork: true})
		sb := &store.Sandbox{ID: "sb1", Config: cfg}
		if err := e.R.Networks.Plan(sb); err != nil || sb.Net != nil {
			t.Fatalf("Plan without a network: %v, %v", err, sb.Net)
		}
		if err := e.R.Networks.Setup(ctx, sb); err != nil {
			t.Fatal(err)
		}
		if err := e.R.Networks.Teardown(ctx, sb); err != nil {
			t.Fatal(err)
		}
		if st := vmnet.PodStatus(sb); st != nil {
			t.Fatalf("PodStatus of a pod without network: %v, want none", st)
		}
		e.R.Networks.Resume()
	})
}

// TestTeardown: once, recorded; a failure is Unavailable and
// leaves the network owed.
func TestTeardown(t *testing.T) {
	e := coretest.New(t)
	sb := e.PutPod(t, "sb1", nil)
	e.Net.FailDel = errors.New("host-local: lock timeout")
	if err := e.R.Networks.Teardown(context.Background(), sb); !errdefs.IsUnavailable(err) {
		t.Fatalf("Teardown with DEL failing: %v, want Unavailable", err)
	}
	if rec, _ := e.R.Store.Sandbox("sb1"); rec.NetDown {
		t.Fatal("network recorded down although DEL failed")
	}
	e.Net.FailDel = nil
	for range 2 {
		if err := e.R.Networks.Teardown(context.Background(), sb); err != nil {
			t.Fatal(err)
		}
	}
	if rec, _ := e.R.Store.Sandbox("sb1"); !rec.NetDown || len(e.Net.Teardowns) != 1 {
		t.Fatalf("down %v, teardowns %v; want recorded down, once", rec.NetDown, e.Net.Teardowns)
	}
}

// TestResume: DHCP restarts for ready pods whose network is up,
// and for no other.
func TestResume(t *testing.T) {
	e := coretest.New(t)
	e.PutPod(t, "ready", nil)
	e.PutPod(t, "down", func(sb *store.Sandbox) { sb.NetDown = true })
	e.PutPod(t, "notready", func(sb *store.Sandbox) { sb.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY })
	e.PutPod(t, "creating", func(sb *store.Sandbox) { sb.Creating = true })
	e.PutPod(t, "removing", func(sb *store.Sandbox) { sb.Removing = true })
	e.PutPod(t, "planned", func(sb *store.Sandbox) { sb.Net.Ready = false })
	e.PutPod(t, "nonet", func(sb *store.Sandbox) { sb.Net = nil })
	e.PutPod(t, "failing", nil)
	w := wrapNet(e)
	e.R.Networks.Resume()
	if len(w.dhcpOfPods) != 2 {
		t.Fatalf("DHCP restarted for %d pods, want 2 (ready, failing)", len(w.dhcpOfPods))
	}
	w.failDHCP = errors.New("bind: in use")
	e.R.Networks.Resume() // logged, not fatal
}

// TestPodStatusDualStack: the pod IP first, every other address of
// the guest in additional_ips, in the recorded order.
func TestPodStatusDualStack(t *testing.T) {
	a := &podnet.Attachment{Ready: true}
	a.IP, a.PrefixLen = "10.1.0.5", 24
	a.AdditionalIPs = []podnet.Address{{IP: "fd00:1::5", PrefixLen: 64}, {IP: "fd00:2::5", PrefixLen: 64}}
	st := vmnet.PodStatus(&store.Sandbox{ID: "sb1", Net: a})
	var extra []string
	for _, ip := range st.GetAdditionalIps() {
		extra = append(extra, ip.GetIp())
	}
	if st.GetIp() != "10.1.0.5" || strings.Join(extra, ",") != "fd00:1::5,fd00:2::5" {
		t.Fatalf("PodStatus = %v", st)
	}
}
