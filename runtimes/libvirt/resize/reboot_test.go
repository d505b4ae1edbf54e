package resize

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
	"github.com/crimux/crimux/vmtypes"
)

// guestCPUs is a guest agent of a guest with n logical CPUs, all online
// (as after a boot), that records which it is asked to take offline.
type guestCPUs struct {
	mu        sync.Mutex
	n         int
	offline   []string
	memOnline bool
}

func (g *guestCPUs) answer(cmd string) (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case strings.Contains(cmd, "guest-get-vcpus"):
		var cpus []string
		for i := range g.n {
			id := `"logical-id":` + strconv.Itoa(i)
			online := true
			for _, off := range g.offline {
				online = online && !strings.Contains(off, id)
			}
			cpus = append(cpus, fmt.Sprintf(`{%s,"online":%v,"can-offline":%v}`, id, online, i > 0))
		}
		return `{"return":[` + strings.Join(cpus, ",") + `]}`, nil
	case strings.Contains(cmd, "guest-set-vcpus"):
		g.offline = append(g.offline, cmd)
		return `{"return":1}`, nil
	case strings.Contains(cmd, "guest-get-memory-blocks"):
		return `{"return":[{"phys-index":40,"online":` + strconv.FormatBool(g.memOnline) + `}]}`, nil
	case strings.Contains(cmd, "guest-set-memory-blocks"):
		g.memOnline = true
		return `{"return":[{"phys-index":40,"response":"success"}]}`, nil
	}
	return `{"return":{}}`, nil
}

func (g *guestCPUs) asked() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.offline...)
}

// TestRebootedGuestGetsExtraVCPUsOffline: a VM that keeps a vCPU plugged
// beyond its size (a TCG shrink) has it taken offline again after its
// guest reboots; a VM without one is not asked anything.
func TestRebootedGuestGetsExtraVCPUsOffline(t *testing.T) {
	afterRebootFast()
	for _, plugged := range []uint{2, 0} {
		e := rebootingCore(t)
		e.PutPod(t, "sb1", nil)
		e.PutVM(t, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
		editRecord(t, e, "c1", func(c *store.Container) { c.MaxVCPUs, c.PluggedVCPUs = 2, plugged })
		g := &guestCPUs{n: 2}
		e.Libvirt.Edit("crimux-c1", func(d *virtfake.Domain) { d.Agent = g.answer })
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); e.R.OnConnect(ctx, e.Libvirt) }()
		<-e.R.Recovered()
		dom, err := e.Libvirt.Lookup("crimux-c1")
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // the reboot subscription is up once recovered
		if err := e.Libvirt.Reboot(dom); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		got := g.asked()
		cancel()
		e.Libvirt.Disconnect() // ends the event streams, and OnConnect
		<-done
		if plugged == 0 {
			if len(got) != 0 {
				t.Fatalf("a VM with no extra vCPU plugged was asked %q", got)
			}
			continue
		}
		if len(got) != 1 || !strings.Contains(got[0], `"logical-id":1,"online":false`) {
			t.Fatalf("after the reboot the guest was asked %q; want vCPU 1 offline, once", got)
		}
	}
}

// afterRebootFast: a rebooted guest is asked often, for a while.
func afterRebootFast() { afterRebootWait, afterRebootPoll = 5*time.Second, 10*time.Millisecond }

// rebootingCore is a core on fakes whose reboot events reach a Resizer,
// as the runtime wires it.
func rebootingCore(t *testing.T) *coretest.Env {
	e := coretest.New(t)
	e.R.AfterReboot = New(CoreOf(e.R)).AfterReboot
	return e
}

func editRecord(t *testing.T, e *coretest.Env, id string, edit func(*store.Container)) {
	t.Helper()
	c, err := e.R.Store.Container(id)
	if err != nil {
		t.Fatal(err)
	}
	edit(c)
	if err := e.R.Store.PutContainer(c); err != nil {
		t.Fatal(err)
	}
}

// TestRebootedGuestGetsItsMemoryOnline: a VM grown above its boot RAM
// has the memory its guest plugs again after a reboot onlined, once the
// guest has plugged it all.
func TestRebootedGuestGetsItsMemoryOnline(t *testing.T) {
	afterRebootFast()
	e := rebootingCore(t)
	e.PutPod(t, "sb1", nil)
	e.PutVM(t, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
	editRecord(t, e, "c1", func(c *store.Container) { c.BootMemoryMiB, c.MemoryMiB, c.MaxMemoryMiB = 128, 256, 256 })
	g := &guestCPUs{n: 1}
	e.Libvirt.Edit("crimux-c1", func(d *virtfake.Domain) {
		d.Agent = g.answer
		d.Memory = virt.MemoryPlug{SizeMiB: 128, RequestedMiB: 128, CurrentMiB: 0} // not plugged again yet
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.R.OnConnect(ctx, e.Libvirt) }()
	defer func() { cancel(); e.Libvirt.Disconnect(); <-done }()
	<-e.R.Recovered()
	dom, err := e.Libvirt.Lookup("crimux-c1")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if err := e.Libvirt.Reboot(dom); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	g.mu.Lock()
	early := g.memOnline
	g.mu.Unlock()
	if early {
		t.Fatal("memory onlined before the guest plugged it")
	}
	e.Libvirt.Edit("crimux-c1", func(d *virtfake.Domain) { d.Memory.CurrentMiB = 128 })
	deadline := time.Now().Add(3 * time.Second)
	for {
		g.mu.Lock()
		online := g.memOnline
		g.mu.Unlock()
		if online {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the rebooted guest's memory was not onlined")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
