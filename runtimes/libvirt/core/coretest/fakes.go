package coretest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/crimux/crimux/converter/cloudinit"
	"github.com/crimux/crimux/runtimes/libvirt/cidata"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/podnet"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

type virtStateT = virt.State

const (
	stateRunning = virt.StateRunning
	statePaused  = virt.StatePaused
	stateShutoff = virt.StateShutoff
)

// Net is a vmnet.PodNetwork that records calls and fails on demand.
type Net struct {
	mu sync.Mutex
	// FailSetup and FailDel fail CNI ADD and DEL (and DeleteNamespace).
	FailSetup, FailDel error
	Setups, Teardowns  []string
	// SetupPods is what each Setup was told, by sandbox ID.
	SetupPods   map[string]podnet.Pod
	Collected   []string
	Own         map[string]string
	Foreign     []string
	DHCPStarted []string
	// Foreign namespaces adopted and deleted (by file name).
	AdoptedNS, DeletedNS []string
	// StatusErr is what STATUS answers; GCLists the sandboxes each GC
	// named, sorted.
	StatusErr error
	GCLists   [][]string
	// Packets is what GuestPackets counts (every sandbox alike).
	Packets uint64
}

func upAttachment(id string) *podnet.Attachment {
	a := &podnet.Attachment{NetNS: "/run/test/netns/i_" + id, Conf: []byte(`{}`), GuestMAC: "52:54:00:00:00:01", Ready: true}
	a.IP, a.PrefixLen = "10.1.0.5", 24
	return a
}

func (f *Net) Plan(id string) (*podnet.Attachment, error) {
	return &podnet.Attachment{NetNS: "/run/test/netns/i_" + id, Conf: []byte(`{}`)}, nil
}

func (f *Net) Setup(_ context.Context, p *podnet.Pod, a *podnet.Attachment) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.FailSetup != nil {
		return f.FailSetup
	}
	f.Setups = append(f.Setups, p.SandboxID)
	if f.SetupPods == nil {
		f.SetupPods = map[string]podnet.Pod{}
	}
	f.SetupPods[p.SandboxID] = *p
	up := upAttachment(p.SandboxID)
	a.IP, a.PrefixLen, a.GuestMAC, a.Ready = up.IP, up.PrefixLen, up.GuestMAC, true
	return nil
}

func (f *Net) Teardown(_ context.Context, p *podnet.Pod, _ *podnet.Attachment) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.FailDel != nil {
		return f.FailDel
	}
	f.Teardowns = append(f.Teardowns, p.SandboxID)
	return nil
}

func (f *Net) StartDHCP(p *podnet.Pod, _ *podnet.Attachment) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.DHCPStarted = append(f.DHCPStarted, p.SandboxID)
	return nil
}

func (f *Net) StopDHCP(string) {}

func (f *Net) OpenTap(*podnet.Attachment) (*os.File, error) { return os.Open(os.DevNull) }

func (f *Net) GuestPackets(*podnet.Attachment) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.Packets, nil
}

// SetPackets sets what GuestPackets counts.
func (f *Net) SetPackets(n uint64) {
	f.mu.Lock()
	f.Packets = n
	f.mu.Unlock()
}

func (f *Net) Namespaces() (map[string]string, []string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.Own, slices.Clone(f.Foreign), nil
}

func (f *Net) Collect(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Collected = append(f.Collected, id)
	delete(f.Own, id)
	return nil
}

func (f *Net) Close() {}

// Status answers StatusErr.
func (f *Net) Status(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.StatusErr
}

// GC records the sandboxes live names.
func (f *Net) GC(ctx context.Context, live func(context.Context) ([]string, error)) (int, error) {
	ids, err := live(ctx)
	if err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.GCLists = append(f.GCLists, slices.Sorted(slices.Values(ids)))
	return len(ids), nil
}

// AdoptNamespace moves a foreign name to own, as podnet renames it.
func (f *Net) AdoptNamespace(name string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, id, err := podnet.SplitNamespace(name)
	if err != nil {
		return "", err
	}
	f.AdoptedNS = append(f.AdoptedNS, name)
	f.Foreign = slices.DeleteFunc(f.Foreign, func(n string) bool { return n == name })
	if f.Own == nil {
		f.Own = map[string]string{}
	}
	f.Own[id] = "/run/test/netns/i_" + id
	return id, nil
}

func (f *Net) DeleteNamespace(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.FailDel != nil {
		return f.FailDel
	}
	f.DeletedNS = append(f.DeletedNS, name)
	f.Foreign = slices.DeleteFunc(f.Foreign, func(n string) bool { return n == name })
	return nil
}

// Images is a core.ImageReader: every image is Layout (a direct kernel
// boot of files that need not exist) unless Err is set.
type Images struct {
	Layout core.ImageLayout
	Err    error
	Refs   []string
}

func (i *Images) Prepare(_ context.Context, ref string) (core.ImageLayout, error) {
	i.Refs = append(i.Refs, ref)
	if i.Err != nil {
		return core.ImageLayout{}, i.Err
	}
	if i.Layout == (core.ImageLayout{}) {
		return core.ImageLayout{Kernel: "/images/vmlinuz", Initrd: "/images/initrd.img", KernelArgs: "console=ttyS0"}, nil
	}
	return i.Layout, nil
}

// Cgroups is a core.Cgroups that keeps the cgroups it made in memory.
type Cgroups struct {
	mu sync.Mutex
	// Live are the cgroups that exist, by name.
	Live map[string]core.VMCgroup
	// Fail fails every call.
	Fail error
	// RemoveFail fails Remove alone: a cgroup that still holds a process.
	RemoveFail error
	// CPU and Memory are what Stats reports.
	CPU, Memory uint64
	// Rooms are the memory limits of pod cgroup parents (none: no limit).
	Rooms map[string]int64
}

// MemoryRoom reports Rooms.
func (c *Cgroups) MemoryRoom(parent string) (int64, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.Fail != nil {
		return 0, false, c.Fail
	}
	room, ok := c.Rooms[parent]
	return room, ok, nil
}

func (c *Cgroups) Create(cg core.VMCgroup) error { return c.set(cg) }
func (c *Cgroups) Update(cg core.VMCgroup) error { return c.set(cg) }

// Place records nothing: the fake has no processes.
func (c *Cgroups) Place(core.VMCgroup, int) error { return nil }

func (c *Cgroups) set(cg core.VMCgroup) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.Fail != nil {
		return c.Fail
	}
	if c.Live == nil {
		c.Live = map[string]core.VMCgroup{}
	}
	c.Live[cg.Name] = cg
	return nil
}

func (c *Cgroups) Remove(cg core.VMCgroup) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.Fail != nil {
		return c.Fail
	}
	if c.RemoveFail != nil {
		return c.RemoveFail
	}
	delete(c.Live, cg.Name)
	return nil
}

// SetRemoveFail sets RemoveFail while other goroutines may call Remove.
func (c *Cgroups) SetRemoveFail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.RemoveFail = err
}

// Stats reports CPU and Memory (as both the charge and the working set).
func (c *Cgroups) Stats(cg core.VMCgroup) (core.CgroupUsage, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.Fail != nil {
		return core.CgroupUsage{}, c.Fail
	}
	if _, ok := c.Live[cg.Name]; !ok {
		return core.CgroupUsage{}, errors.New("no such cgroup: " + cg.Name)
	}
	return core.CgroupUsage{CPUNanos: c.CPU, MemoryBytes: c.Memory, WorkingSetBytes: c.Memory}, nil
}

// Get returns a cgroup by name.
func (c *Cgroups) Get(name string) (core.VMCgroup, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cg, ok := c.Live[name]
	return cg, ok
}

// CIData is a cidata.Writer that keeps the files it was given (by VM
// directory) and writes a placeholder file where the ISO would be.
type CIData struct {
	mu    sync.Mutex
	Files map[string]cloudinit.Files
}

// WriteCIData records files and writes dir/cidata.iso.
func (c *CIData) WriteCIData(dir string, files cloudinit.Files) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.Files == nil {
		c.Files = map[string]cloudinit.Files{}
	}
	c.Files[dir] = files
	p := filepath.Join(dir, cidata.File)
	return p, os.WriteFile(p, []byte("cidata placeholder\n"), 0o600)
}

// Of returns the files written for the VM in dir.
func (c *CIData) Of(dir string) cloudinit.Files {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Files[dir]
}
