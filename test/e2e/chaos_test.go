package e2e

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Host places the chaos test counts leaks in (test/bed/lib.sh; crimux's
// default netns_dir for VM pods).
const (
	vmNetnsDir = "/run/crimux/netns"
)

// netnsDir is where the bed's containerd (of BED_INSTANCE) keeps its pods'
// network namespaces.
var netnsDir = "/run/crimux-testbed/" + bedInstance("containerd") + "/io.containerd.grpc.v1.cri/netns"

// chaosCycles is how many pod cycles the chaos test runs; chaosMinKills,
// the fewest SIGKILLs of crimux that make the run count.
const (
	chaosCycles   = 200
	chaosMinKills = 30
)

// TestChaos runs 200 cycles of mixed container and VM pods through
// crimux (create, start, stop, remove) while crimux is SIGKILLed at random
// moments and restarted, as kubelet would see it: every call retried until
// it succeeds. At the end, with every pod removed and one collector pass
// done, it counts from the host — virsh, the state dir, the netns dir,
// cgroupfs, host-local's allocations on disk — what was leaked, and whether any VM was
// recreated (its qemu process replaced).
func TestChaos(t *testing.T) {
	requireVM(t)
	if os.Getenv("CRIMUX_CHAOS") != "1" {
		t.Skip("CRIMUX_CHAOS is not 1 (run make chaos)")
	}
	// The bed's network at CNI 1.1: the collector's CNI GC runs through
	// the kills too, and must release no live pod's address.
	confDir, _ := cni11ConfDir(t)
	c := startCrimux(t, bed.containerd, "--vm-accel", "tcg", "--log-level", "info", "--cni-conf-dir", confDir)
	c.crictl("pull", busyboxImage)
	c.crictl("pull", vmImage)
	parent := fmt.Sprintf("/crimux-chaos/run%d", time.Now().UnixNano())
	t.Cleanup(func() { removeCgroupTree(parent) })
	before := hostCounts(t, c, parent)

	ch := &chaos{t: t, c: c, parent: parent, run: time.Now().Unix() % 100000, qemu: map[string]map[int]bool{}}
	ch.rs, _ = c.client()
	ch.removeAll() // a failed earlier run's leftovers
	before = hostCounts(t, c, parent)
	rs, _ := c.client()
	ch.rs = rs
	// One VM cycle before the chaos: the first VM of an image extracts the
	// image's files (seconds), which a kill every second would never let
	// finish. Later VMs reuse them.
	ch.cycle(-1, true)
	stopKiller := ch.killer()
	for i := 0; i < chaosCycles; i++ {
		ch.cycle(i, i%3 == 0)
	}
	kills := stopKiller()
	ch.removeAll()
	c.restart() // the start-up collector pass
	time.Sleep(3 * time.Second)
	ch.removeAll()
	// A stray container cgroup (a runc create killed with its caller) is
	// swept once older than 10 s: one more start-up sweep after that.
	time.Sleep(12 * time.Second)
	c.restart()
	after := settledCounts(t, c, parent, before, settleTimeout)
	recreated := 0
	for id, pids := range ch.qemu {
		if len(pids) > 1 {
			recreated++
			t.Errorf("VM %s ran as qemu pids %v: recreated", id, pids)
		}
	}
	leak := func(k string) int { return after[k] - before[k] }
	line := fmt.Sprintf("chaos: %d kills, %d leaked domains, %d leaked disks, %d leaked netns, %d leaked cgroups, %d leaked IPs, %d VMs recreated",
		kills, leak("domains"), leak("disks"), leak("netns"), leak("cgroups"), leak("ips"), recreated)
	fmt.Println(line)
	t.Log(line)
	if kills < chaosMinKills {
		t.Errorf("only %d kills, want at least %d", kills, chaosMinKills)
	}
	for _, k := range []string{"domains", "disks", "netns", "cgroups", "ips"} {
		if leak(k) != 0 {
			t.Errorf("leaked %s: before %d, after %d", k, before[k], after[k])
		}
	}
}

// settleTimeout bounds how long the final count waits for the start-up
// collector pass to finish its work (seconds here; a slower machine may
// take longer): what is still there after it is leaked.
const settleTimeout = time.Minute

// settledCounts counts from the host until nothing is left over against
// before, or timeout has passed; it returns the last counts.
func settledCounts(t *testing.T, c *crimux, parent string, before map[string]int, timeout time.Duration) map[string]int {
	t.Helper()
	start := time.Now()
	for {
		after := hostCounts(t, c, parent)
		leaked := false
		for k, n := range after {
			leaked = leaked || n > before[k]
		}
		if !leaked || time.Since(start) > timeout {
			t.Logf("host counts after %v: %v (before: %v)", time.Since(start).Round(time.Millisecond), after, before)
			return after
		}
		time.Sleep(time.Second)
	}
}

type chaos struct {
	t      *testing.T
	c      *crimux
	rs     runtimeapi.RuntimeServiceClient
	parent string
	run    int64
	mu     sync.Mutex // held while crimux is being restarted
	qemu   map[string]map[int]bool
	// onErr, when set, sees every failed call of retry.
	onErr func(what string, err error)
}

// killer SIGKILLs and restarts crimux every 0.5–3 s until stopped; it
// returns the number of kills.
func (ch *chaos) killer() func() int {
	done := make(chan struct{})
	result := make(chan int)
	go func() {
		kills := 0
		for {
			select {
			case <-done:
				result <- kills
				return
			case <-time.After(time.Duration(500+rand.Intn(2500)) * time.Millisecond):
			}
			ch.mu.Lock()
			ch.c.restart()
			ch.mu.Unlock()
			kills++
		}
	}()
	return func() int { close(done); return <-result }
}

// retry calls f until it succeeds, as kubelet does; crimux may be dead or
// restarting meanwhile.
func (ch *chaos) retry(what string, f func(ctx context.Context) error) {
	ch.t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		err := f(ctx)
		cancel()
		if err == nil {
			return
		}
		if ch.onErr != nil {
			ch.onErr(what, err)
		}
		if time.Now().After(deadline) {
			ch.t.Fatalf("%s: still failing after 3 minutes: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cycle runs one pod through create, start, stop and remove.
func (ch *chaos) cycle(i int, isVM bool) {
	name, podID, ctrID := ch.up(i, isVM)
	if isVM {
		ch.noteQemu(ctrID)
		time.Sleep(time.Duration(rand.Intn(500)) * time.Millisecond)
		ch.noteQemu(ctrID)
	}
	ch.down(name, podID, ctrID)
}

// up makes pod i and starts its container, each call retried as kubelet
// would until the pod runs.
func (ch *chaos) up(i int, isVM bool) (name, podID, ctrID string) {
	name = fmt.Sprintf("chaos-%d-%d", ch.run, i) // unique per run: no clash with a failed run's leftovers
	podCfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "crimux-chaos", Uid: name + "-uid"},
		Labels:       map[string]string{"crimux-chaos": name},
		LogDirectory: ch.t.TempDir(),
		Linux:        &runtimeapi.LinuxPodSandboxConfig{CgroupParent: fmt.Sprintf("%s/pod%d", ch.parent, i)},
	}
	handler := ""
	ctrCfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "c"}, Image: &runtimeapi.ImageSpec{Image: busyboxImage},
		Command: []string{"sleep", "3600"}, LogPath: "c.log", Labels: map[string]string{"crimux-chaos": name},
		Linux: &runtimeapi.LinuxContainerConfig{},
	}
	if isVM {
		handler = "vm"
		ctrCfg.Image.Image, ctrCfg.Command = vmImage, nil
		ctrCfg.Linux.Resources = &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 128 << 20}
	}
	// Up: find or make the pod, then its container, then start it. A kill
	// can cut any call short, and containerd rolls back a call whose client
	// went away, so each attempt looks again at what exists, as kubelet's
	// sync loop does.
	ch.retry(name+" up", func(ctx context.Context) error {
		if podID = ch.find(ctx, name); podID == "" {
			// A new attempt past any not-ready one, as kubelet makes.
			all, err := ch.rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
				LabelSelector: map[string]string{"crimux-chaos": name}}})
			if err != nil {
				return err
			}
			podCfg.Metadata.Attempt = uint32(len(all.Items))
			resp, err := ch.rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podCfg, RuntimeHandler: handler})
			if err != nil {
				return err
			}
			podID = resp.PodSandboxId
		}
		l, err := ch.rs.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: podID}})
		if err != nil {
			return err
		}
		ctrID = ""
		for _, x := range l.Containers {
			switch x.State {
			case runtimeapi.ContainerState_CONTAINER_UNKNOWN:
				// kubelet kills a container in an unknown state (one
				// whose start a restarted containerd cannot tell) and
				// makes a new one.
				if _, err := ch.rs.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: x.Id}); err != nil {
					return err
				}
				if _, err := ch.rs.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: x.Id}); err != nil {
					return err
				}
			case runtimeapi.ContainerState_CONTAINER_EXITED:
			default:
				ctrID = x.Id
			}
		}
		if ctrID == "" { // none, or only exited ones: a new attempt, as kubelet makes
			ctrCfg.Metadata.Attempt = uint32(len(l.Containers))
			resp, err := ch.rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: ctrCfg, SandboxConfig: podCfg})
			if err != nil {
				return err
			}
			ctrID = resp.ContainerId
		}
		st, err := ch.rs.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ctrID})
		if err == nil && st.Status.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			return nil
		}
		_, err = ch.rs.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: ctrID})
		return err
	})
	return name, podID, ctrID
}

// down removes a pod, retried until it is gone.
func (ch *chaos) down(name, podID, ctrID string) {
	// Down, as kubelet's KillPod: stop and remove the container, stop and
	// remove the pod, all retried together (a call cut short by a kill may
	// still finish inside containerd after a later one, so the pod stop is
	// repeated until the removal succeeds).
	ch.retry(name+" down", func(ctx context.Context) error {
		if _, err := ch.rs.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: ctrID, Timeout: 0}); err != nil {
			return err
		}
		if _, err := ch.rs.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: ctrID}); err != nil {
			return err
		}
		if _, err := ch.rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
			return err
		}
		_, err := ch.rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: podID})
		return err
	})
}

// find returns the ID of the ready pod named name, if one exists.
func (ch *chaos) find(ctx context.Context, name string) string {
	// Only a ready pod: one a cut-short call left not ready is replaced by
	// a new one, as kubelet does, and removed at the end.
	l, err := ch.rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		LabelSelector: map[string]string{"crimux-chaos": name},
		State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}}})
	if err != nil || len(l.Items) == 0 {
		return ""
	}
	return l.Items[0].Id
}

// noteQemu records the qemu pid a VM container runs as.
func (ch *chaos) noteQemu(ctrID string) {
	b, err := os.ReadFile(filepath.Join("/run/libvirt/qemu", domainOf(ctrID)+".pid"))
	if err != nil {
		return
	}
	var pid int
	fmt.Sscan(strings.TrimSpace(string(b)), &pid)
	if ch.qemu[ctrID] == nil {
		ch.qemu[ctrID] = map[int]bool{}
	}
	ch.qemu[ctrID][pid] = true
}

// removeAll removes every chaos pod still listed (a pod whose
// RunPodSandbox answer was lost to a kill, say), as kubelet's cleanup of
// unknown pods would.
func (ch *chaos) removeAll() {
	ch.retry("remove leftover pods", func(ctx context.Context) error {
		l, err := ch.rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		if err != nil {
			return err
		}
		for _, p := range l.Items {
			if p.Metadata.GetNamespace() != "crimux-chaos" {
				continue
			}
			if _, err := ch.rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Id}); err != nil {
				return err
			}
			if _, err := ch.rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Id}); err != nil {
				return err
			}
		}
		return nil
	})
}

// hostLocalAllocations counts host-local's own allocations on disk: the
// reservation files of every network under the bed's IPAM data dir (not
// its lock or last_reserved_ip.* markers), whoever made them — crimux's
// VM pods, containerd's pods, or an ADD nobody recorded (which CNI GC
// releases).
func hostLocalAllocations() int {
	n := 0
	nets, _ := os.ReadDir(filepath.Dir(bed.ipamDir))
	for _, nw := range nets {
		files, _ := os.ReadDir(filepath.Join(filepath.Dir(bed.ipamDir), nw.Name()))
		for _, f := range files {
			if f.Type().IsRegular() && f.Name() != "lock" && !strings.HasPrefix(f.Name(), "last_reserved_ip") {
				n++
			}
		}
	}
	return n
}

// hostCounts counts, from the host and not from crimux, what pods leave
// behind.
func hostCounts(t *testing.T, c *crimux, parent string) map[string]int {
	t.Helper()
	counts := map[string]int{}
	// Domains stamped with this crimux's identity (other crimux instances
	// on the host, benchmarks say, are not this test's).
	id, _ := os.ReadFile(filepath.Join(c.stateDir, "identity"))
	for _, d := range strings.Fields(virsh(t, "list", "--all", "--name")) {
		if strings.HasPrefix(d, "crimux-") && len(id) > 0 &&
			strings.Contains(dumpxmlIfAny(d), "<instance>"+strings.TrimSpace(string(id))+"</instance>") {
			counts["domains"]++
		}
	}
	vms, _ := os.ReadDir(filepath.Join(c.stateDir, "vms"))
	counts["disks"] = len(vms)
	nss, _ := os.ReadDir(netnsDir)
	counts["netns"] = len(nss)
	vmNss, _ := os.ReadDir(vmNetnsDir)
	for _, e := range vmNss {
		if len(id) > 0 && strings.HasPrefix(e.Name(), strings.TrimSpace(string(id))+"_") {
			counts["netns"]++
		}
	}
	counts["ips"] = hostLocalAllocations()
	// Cgroups the pods' workloads had: VM leaves and container leaves below
	// each pod's parent, in every hierarchy (pod parents themselves are
	// kubelet's to remove).
	for _, root := range cgroupDirs(parent) {
		pods, _ := os.ReadDir(root)
		for _, p := range pods {
			leaves, _ := os.ReadDir(filepath.Join(root, p.Name()))
			for _, l := range leaves {
				if l.IsDir() {
					counts["cgroups"]++
				}
			}
		}
	}
	return counts
}

// dumpxmlIfAny is a domain's XML, "" when it went away since it was
// listed (another test's, or libvirtd's own).
func dumpxmlIfAny(domain string) string {
	out, _ := exec.Command("virsh", "-c", "qemu:///system", "dumpxml", domain).Output()
	return string(out)
}
