// Package virtfake is an in-memory libvirtd for unit tests: domains
// defined from XML, with the states, managed saves, snapshots, metadata
// and events libvirt would give them, and failures injected per call.
// Guests obey the ACPI power button and reboot requests unless told not
// to (Guest). It implements virt.Libvirt and hands itself out as a
// connection (Get).
package virtfake

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"libvirt.org/go/libvirtxml"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

// Libvirt is the fake libvirtd. The zero value is not usable: use New.
type Libvirt struct {
	mu      sync.Mutex
	domains map[string]*Domain
	// failures are the errors the next calls of a method return.
	failures map[string][]error
	// calls counts the calls of each method.
	calls map[string]int
	// down, when set, is what Get returns instead of the connection.
	down         error
	disconnected chan struct{}
	lifecycle    []chan virt.LifecycleEvent
	reboots      []chan string
	clock        int64
	// agent is every new domain's Agent (SetAgent).
	agent func(cmd string) (string, error)
	// peer is the libvirtd migrations reach (SetPeer).
	peer       *Libvirt
	migrations []virt.Migration
}

// SetAgent gives every domain defined or restored from now on a guest
// agent answering as agent does (a domain's own Agent can replace it).
func (f *Libvirt) SetAgent(agent func(cmd string) (string, error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.agent = agent
}

// Domain is a fake domain.
type Domain struct {
	XML         string
	State       virt.State
	ManagedSave bool
	// IgnoresACPI: the guest does not power off on the power button, nor
	// reboot when asked.
	IgnoresACPI bool
	Snapshots   map[string]*Snapshot
	Current     string
	// Agent answers guest agent commands; nil: the guest has no agent
	// (FailedPrecondition, as libvirt says of an agent not connected).
	Agent func(cmd string) (string, error)
	// VCPUs is what SetVCPUs last set in the definition (0: never
	// called); LiveVCPUs what it last set live.
	VCPUs, LiveVCPUs uint
	// UnplugTimesOut: a live vCPU unplug fails as libvirt's does when qemu
	// never reports the device deleted (qemu 7.2 under TCG).
	UnplugTimesOut bool
	// Memory is the virtio-mem device, once RequestMemory changed it;
	// GuestPlugs says whether the guest follows a request (current becomes
	// requested) or ignores it (no driver: current stays).
	Memory     virt.MemoryPlug
	GuestPlugs bool
	// SavedMemory is what SaveState writes as the domain's qemu stream
	// (nil: a few bytes); Restored is the stream RestoreState read;
	// GuestTime what SetTime last set.
	SavedMemory, Restored []byte
	GuestTime             time.Time
	// GuestMemory is what the guest's balloon driver reports of its RAM
	// while the domain runs; nil: it reports nothing.
	GuestMemory *virt.GuestMemory
	// IO is what IO reports while the domain runs.
	IO virt.IO
	// MigratedAway: Migrate moved it to the peer (until it starts again).
	MigratedAway bool
	uuid         virt.UUID
}

// Snapshot is a fake snapshot: the state it was taken in and its XML.
type Snapshot struct {
	XML     string
	State   virt.State
	Created int64
}

// New returns an empty fake libvirtd.
func New() *Libvirt {
	return &Libvirt{domains: map[string]*Domain{}, failures: map[string][]error{}, calls: map[string]int{},
		disconnected: make(chan struct{})}
}

// Get returns the connection, or the error SetDown set.
func (f *Libvirt) Get() (virt.Libvirt, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down != nil {
		return nil, f.down
	}
	return f, nil
}

// SetDown makes Get fail with err (nil: up again).
func (f *Libvirt) SetDown(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = err
}

// Fail makes the next calls of method (e.g. "Start") return errs, one
// each, in order.
func (f *Libvirt) Fail(method string, errs ...error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failures[method] = append(f.failures[method], errs...)
}

// Calls is how often method was called.
func (f *Libvirt) Calls(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[method]
}

// Domain returns a copy of the domain named name; ok is false if there is
// none.
func (f *Libvirt) Domain(name string) (Domain, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.domains[name]
	if !ok {
		return Domain{}, false
	}
	return *d, true
}

// Names lists the domains' names, sorted.
func (f *Libvirt) Names() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.domains))
	for n := range f.domains {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Put adds or replaces a domain as it is (tests that need a domain crimux
// did not define).
func (f *Libvirt) Put(name string, d Domain) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d.Snapshots == nil {
		d.Snapshots = map[string]*Snapshot{}
	}
	if d.XML == "" {
		d.XML = fmt.Sprintf("<domain type='qemu'><name>%s</name></domain>", name)
	}
	f.domains[name] = &d
}

// Edit changes a domain in place (e.g. Guest behaviour, a crash).
func (f *Libvirt) Edit(name string, edit func(*Domain)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d, ok := f.domains[name]; ok {
		edit(d)
	}
}

// Crash stops a running domain as qemu dying would, with its event.
func (f *Libvirt) Crash(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d, ok := f.domains[name]; ok && d.State.Active() {
		d.State = virt.StateShutoff
		f.emitStop(name, virt.StopCrashed)
	}
}

// Disconnect closes the connection (Disconnected) and ends the event
// streams.
func (f *Libvirt) Disconnect() {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.disconnected:
		return
	default:
	}
	close(f.disconnected)
	for _, ch := range f.lifecycle {
		close(ch)
	}
	for _, ch := range f.reboots {
		close(ch)
	}
	f.lifecycle, f.reboots = nil, nil
}

// enter counts a call and returns its injected failure, if any. The
// caller holds mu.
// call counts a call of method and returns its injected failure, under
// mu, for methods that do their work without it.
func (f *Libvirt) call(method string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.enter(method)
}

func (f *Libvirt) enter(method string) error {
	f.calls[method]++
	if errs := f.failures[method]; len(errs) > 0 {
		f.failures[method] = errs[1:]
		return errs[0]
	}
	return nil
}

// find returns the domain of a handle, or libvirt's NotFound. The caller
// holds mu.
func (f *Libvirt) find(d virt.Domain) (*Domain, error) {
	dom, ok := f.domains[d.Name]
	if !ok {
		return nil, notFound(d.Name)
	}
	return dom, nil
}

func notFound(name string) error {
	return fmt.Errorf("Domain not found: no domain with matching name '%s': %w", name, errdefs.ErrNotFound)
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("Requested operation is not valid: "+format+": %w", append(args, errdefs.ErrFailedPrecondition)...)
}

// nameOf reads a domain's name from its XML.
func nameOf(xml string) (string, error) {
	var d libvirtxml.Domain
	if err := d.Unmarshal(xml); err != nil {
		return "", fmt.Errorf("XML error: %w", err)
	}
	if d.Name == "" {
		return "", fmt.Errorf("XML error: domain has no name: %w", errdefs.ErrInvalidArgument)
	}
	return d.Name, nil
}

// The fake is a virt.Libvirt.
var _ virt.Libvirt = (*Libvirt)(nil)
