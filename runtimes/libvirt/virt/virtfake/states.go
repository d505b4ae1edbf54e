package virtfake

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/crimux/crimux/runtimes/libvirt/saveimage"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

// SaveState stops a running domain and writes a save image of it at path:
// libvirt's header with the domain's XML, then Domain.SavedMemory (or a
// few bytes) as the "qemu stream".
func (f *Libvirt) SaveState(h virt.Domain, path string) error {
	return f.power("SaveState", h, func(d *Domain) error {
		if !d.State.Active() {
			return invalid("domain is not running")
		}
		memory := d.SavedMemory
		if memory == nil {
			memory = []byte("fake qemu migration stream\n")
		}
		if err := saveimage.WriteImage(path, d.XML, "<qemu-save-cookie/>", memory); err != nil {
			return fmt.Errorf("fake save of %s: %w", h.Name, err)
		}
		d.State = virt.StateShutoff
		f.emitStop(h.Name, virt.StopSaved)
		return nil
	})
}

// RestoreState reads the save image at path (a FIFO too) as libvirtd
// does, from start to end, and runs the domain its XML names: a new one,
// or one defined shut off with that name. Restored records the stream it
// read.
func (f *Libvirt) RestoreState(path string) error {
	if err := f.call("RestoreState"); err != nil {
		return err
	}
	file, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("fake restore: %w", err)
	}
	defer file.Close()
	img, err := saveimage.Parse(file)
	if err != nil {
		return invalid(err.Error())
	}
	stream, err := io.ReadAll(file) // qemu reads the rest
	if err != nil {
		return fmt.Errorf("fake restore: read the stream: %w", err)
	}
	name, err := nameOf(img.XML)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.domains[name]
	if !ok {
		f.clock++
		d = &Domain{State: virt.StateShutoff, Snapshots: map[string]*Snapshot{}, uuid: virt.UUID{byte(f.clock)}, Agent: f.agent}
		f.domains[name] = d
	} else if d.State.Active() {
		return invalid("domain " + name + " is already active")
	}
	d.XML, d.State, d.Restored = img.XML, virt.StateRunning, stream
	return nil
}

// SetTime records the time the guest was told.
func (f *Libvirt) SetTime(h virt.Domain, t time.Time) error {
	return f.power("SetTime", h, func(d *Domain) error {
		if d.State != virt.StateRunning {
			return invalid("domain is not running")
		}
		d.GuestTime = t
		return nil
	})
}
