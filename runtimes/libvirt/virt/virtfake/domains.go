package virtfake

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

// Version answers like libvirt 9.0.
func (f *Libvirt) Version() (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return 9_000_000, f.enter("Version")
}

func (f *Libvirt) Lookup(name string) (virt.Domain, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("Lookup"); err != nil {
		return virt.Domain{}, err
	}
	d, ok := f.domains[name]
	if !ok {
		return virt.Domain{}, notFound(name)
	}
	return handle(name, d), nil
}

func (f *Libvirt) ListAll() ([]virt.Domain, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("ListAll"); err != nil {
		return nil, err
	}
	out := make([]virt.Domain, 0, len(f.domains))
	for n, d := range f.domains {
		out = append(out, handle(n, d))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Define defines a new domain shut off, or redefines one (keeping its
// state), as libvirt does.
func (f *Libvirt) Define(xml string) (virt.Domain, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("Define"); err != nil {
		return virt.Domain{}, err
	}
	name, err := nameOf(xml)
	if err != nil {
		return virt.Domain{}, err
	}
	d, ok := f.domains[name]
	if !ok {
		f.clock++
		d = &Domain{State: virt.StateShutoff, Snapshots: map[string]*Snapshot{}, uuid: virt.UUID{byte(f.clock)}, Agent: f.agent}
		f.domains[name] = d
	}
	d.XML = xml
	return handle(name, d), nil
}

// Undefine removes a shut off domain; a running one becomes transient in
// libvirt, which the fake does not model: it refuses.
func (f *Libvirt) Undefine(h virt.Domain) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("Undefine"); err != nil {
		return err
	}
	d, err := f.find(h)
	if err != nil {
		return err
	}
	if d.State.Active() {
		return invalid("domain %s is running (the fake keeps no transient domains)", h.Name)
	}
	delete(f.domains, h.Name)
	return nil
}

func (f *Libvirt) State(h virt.Domain) (virt.State, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("State"); err != nil {
		return 0, err
	}
	d, err := f.find(h)
	if err != nil {
		return 0, err
	}
	return d.State, nil
}

func (f *Libvirt) HasManagedSave(h virt.Domain) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("HasManagedSave"); err != nil {
		return false, err
	}
	d, err := f.find(h)
	if err != nil {
		return false, err
	}
	return d.ManagedSave, nil
}

func (f *Libvirt) XML(h virt.Domain) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("XML"); err != nil {
		return "", err
	}
	d, err := f.find(h)
	if err != nil {
		return "", err
	}
	return d.XML, nil
}

// SetMetadata replaces the element as libvirt does: it puts xml (no
// namespace of its own) into ns under prefix, inside <metadata>.
func (f *Libvirt) SetMetadata(h virt.Domain, xml, prefix, ns string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("SetMetadata"); err != nil {
		return err
	}
	d, err := f.find(h)
	if err != nil {
		return err
	}
	if strings.Contains(xml, "xmlns") {
		return fmt.Errorf("metadata %q declares a namespace of its own", xml)
	}
	open, end := "<"+prefix+">", "</"+prefix+">"
	if !strings.HasPrefix(xml, open) || !strings.HasSuffix(xml, end) {
		return fmt.Errorf("metadata %q is not one <%s> element", xml, prefix)
	}
	el := fmt.Sprintf(`<%s:%s xmlns:%s="%s">%s</%s:%s>`, prefix, prefix, prefix, ns,
		strings.TrimSuffix(strings.TrimPrefix(xml, open), end), prefix, prefix)
	d.XML = replaceMetadata(d.XML, el)
	return nil
}

// replaceMetadata puts el as the only content of the domain's <metadata>.
func replaceMetadata(doc, el string) string {
	if i := strings.Index(doc, "<metadata>"); i >= 0 {
		if j := strings.Index(doc, "</metadata>"); j > i {
			return doc[:i] + "<metadata>" + el + doc[j:]
		}
	}
	i := strings.LastIndex(doc, "</domain>")
	if i < 0 {
		return doc
	}
	return doc[:i] + "<metadata>" + el + "</metadata>" + doc[i:]
}

// LifecycleEvents and RebootEvents stream what the fake's domains do
// until ctx ends or Disconnect.
func (f *Libvirt) LifecycleEvents(ctx context.Context) (<-chan virt.LifecycleEvent, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("LifecycleEvents"); err != nil {
		return nil, err
	}
	ch := make(chan virt.LifecycleEvent, 64)
	f.lifecycle = append(f.lifecycle, ch)
	return ch, nil
}

func (f *Libvirt) RebootEvents(ctx context.Context) (<-chan string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("RebootEvents"); err != nil {
		return nil, err
	}
	ch := make(chan string, 64)
	f.reboots = append(f.reboots, ch)
	return ch, nil
}

func (f *Libvirt) Disconnected() <-chan struct{} { return f.disconnected }

// emitStop and emitReboot never block: a test that does not read loses
// events, as a slow client of libvirtd would. The caller holds mu.
func (f *Libvirt) emitStop(name string, why virt.StopReason) {
	for _, ch := range f.lifecycle {
		select {
		case ch <- virt.LifecycleEvent{Domain: name, Stopped: true, Why: why}:
		default:
		}
	}
}

func (f *Libvirt) emitReboot(name string) {
	for _, ch := range f.reboots {
		select {
		case ch <- name:
		default:
		}
	}
}

// AgentCommand hands cmd to the domain's Agent.
func (f *Libvirt) AgentCommand(h virt.Domain, cmd string, _ time.Duration) (string, error) {
	f.mu.Lock()
	if err := f.enter("AgentCommand"); err != nil {
		f.mu.Unlock()
		return "", err
	}
	d, err := f.find(h)
	var agent func(string) (string, error)
	if err == nil {
		agent = d.Agent
		if !d.State.Active() {
			err = invalid("domain is not running")
		}
	}
	f.mu.Unlock()
	switch {
	case err != nil:
		return "", err
	case agent == nil:
		return "", invalid("QEMU guest agent is not connected")
	}
	return agent(cmd) // outside the lock: an agent may call back into the fake
}

// handle is the domain's handle as libvirt gives it: its ID is -1 while it
// is shut off (the fake numbers every running domain 1).
func handle(name string, d *Domain) virt.Domain {
	h := virt.Domain{Name: name, UUID: d.uuid, ID: 1}
	if d.State == virt.StateShutoff {
		h.ID = -1
	}
	return h
}
