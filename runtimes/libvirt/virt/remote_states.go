package virt

import (
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
)

// SaveState and RestoreState move a whole guest's memory: each goes on a
// connection of its own (remote.long), as a managed save does.
func (r remote) SaveState(d Domain, path string) error {
	return r.long(func(l *golibvirt.Libvirt) error {
		return l.DomainSaveFlags(dom(d), path, nil, uint32(golibvirt.DomainSaveRunning))
	})
}

// RestoreState never passes DomainSaveBypassCache: libvirt would read
// path through its O_DIRECT helper, meant for regular files, not FIFOs.
func (r remote) RestoreState(path string) error {
	return r.long(func(l *golibvirt.Libvirt) error {
		return l.DomainRestoreFlags(path, nil, uint32(golibvirt.DomainSaveRunning))
	})
}

// SetTime is the agent's guest-set-time, through libvirt.
func (r remote) SetTime(d Domain, t time.Time) error {
	return r.own(func(l *golibvirt.Libvirt) error {
		return l.DomainSetTime(dom(d), t.Unix(), uint32(t.Nanosecond()), 0)
	})
}
