package virt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/crimux/crimux/internal/errdefs"
)

// remote is Libvirt over go-libvirt: one shared connection to libvirtd,
// and a dialer to open one of its own for a call that may last seconds
// (nil: every call on the shared one). It stays comparable: tests and
// callers compare connections.
//
// libvirtd serves at most max_client_requests (5 by default) calls of one
// connection at once and reads nothing more from it meanwhile. A burst of
// DomainCreates, each seconds long while other guests load the host, held
// all five slots of the shared connection: the next starts, every lookup,
// define and stop, and the health check's Version queued behind them, so
// libvirtd started crimux's qemus five at a time and the VM runtime
// reported itself not ready. Long calls therefore go on a connection of
// their own (opening one is a few hundred µs beside calls of seconds).
type remote struct {
	l    *golibvirt.Libvirt
	more dialer
}

// dialer gives a connection to libvirtd for one call (*Conn: an idle one
// kept from an earlier call, or a new one, pool.go), and takes it back
// after the call, with the call's error.
type dialer interface {
	dial() (*golibvirt.Libvirt, error)
	release(l *golibvirt.Libvirt, callErr error)
}

// long runs call on a connection of its own, or on the shared one when
// none can be opened (the call then fails or succeeds as it would have).
func (r remote) long(call func(l *golibvirt.Libvirt) error) error {
	if r.more != nil {
		if l, err := r.more.dial(); err == nil {
			err = call(l)
			r.more.release(l, err)
			return classify(err)
		}
	}
	return classify(call(r.l))
}

// own runs call on a connection of its own; when none can be opened it
// is Unavailable. A remote without a dialer (tests) uses its one
// connection.
func (r remote) own(call func(l *golibvirt.Libvirt) error) error {
	if r.more == nil {
		return classify(call(r.l))
	}
	l, err := r.more.dial()
	if err != nil {
		return fmt.Errorf("no connection of its own to libvirtd for a guest-agent call: %v: %w", err, errdefs.ErrUnavailable)
	}
	err = call(l)
	r.more.release(l, err)
	return classify(err)
}

// undefineFlags drop everything libvirt keeps for a domain.
const undefineFlags = golibvirt.DomainUndefineManagedSave | golibvirt.DomainUndefineSnapshotsMetadata | golibvirt.DomainUndefineNvram

func dom(d Domain) golibvirt.Domain {
	return golibvirt.Domain{Name: d.Name, UUID: golibvirt.UUID(d.UUID), ID: d.ID}
}
func ours(d golibvirt.Domain) Domain { return Domain{Name: d.Name, UUID: UUID(d.UUID), ID: d.ID} }
func snap(s Snapshot) golibvirt.DomainSnapshot {
	return golibvirt.DomainSnapshot{Name: s.Name, Dom: dom(s.Domain)}
}

// Version is the health check: on a connection of its own, so that it
// tells whether libvirtd answers, not whether the shared connection's
// slots are all taken by long calls.
func (r remote) Version() (v uint64, err error) {
	err = r.long(func(l *golibvirt.Libvirt) (err error) {
		v, err = l.ConnectGetVersion()
		return err
	})
	return v, err
}

func (r remote) Lookup(name string) (Domain, error) {
	d, err := r.l.DomainLookupByName(name)
	return ours(d), classify(err)
}

func (r remote) ListAll() ([]Domain, error) {
	ds, _, err := r.l.ConnectListAllDomains(1, 0)
	if err != nil {
		return nil, classify(err)
	}
	out := make([]Domain, len(ds))
	for i, d := range ds {
		out[i] = ours(d)
	}
	return out, nil
}

func (r remote) Define(xml string) (Domain, error) {
	d, err := r.l.DomainDefineXML(xml)
	return ours(d), classify(err)
}

func (r remote) Undefine(d Domain) error {
	return classify(r.l.DomainUndefineFlags(dom(d), undefineFlags))
}

func (r remote) State(d Domain) (State, error) {
	s, _, err := r.l.DomainGetState(dom(d), 0)
	return State(s), classify(err)
}

func (r remote) HasManagedSave(d Domain) (bool, error) {
	has, err := r.l.DomainHasManagedSaveImage(dom(d), 0)
	return has == 1, classify(err)
}

func (r remote) XML(d Domain) (string, error) {
	x, err := r.l.DomainGetXMLDesc(dom(d), 0)
	return x, classify(err)
}

func (r remote) SetMetadata(d Domain, xml, prefix, ns string) error {
	flags := golibvirt.DomainAffectCurrent
	if p, err := r.l.DomainIsPersistent(dom(d)); err != nil {
		return classify(err)
	} else if p == 1 {
		flags |= golibvirt.DomainAffectConfig
	}
	if a, err := r.l.DomainIsActive(dom(d)); err != nil {
		return classify(err)
	} else if a == 1 {
		flags |= golibvirt.DomainAffectLive
	}
	return classify(r.l.DomainSetMetadata(dom(d), int32(golibvirt.DomainMetadataElement), golibvirt.OptString{xml},
		golibvirt.OptString{prefix}, golibvirt.OptString{ns}, flags))
}

func (r remote) Start(d Domain) error {
	return r.long(func(l *golibvirt.Libvirt) error { return l.DomainCreate(dom(d)) })
}

func (r remote) StartIfOff(name string) (started bool, err error) {
	err = r.long(func(l *golibvirt.Libvirt) error {
		d, err := l.DomainLookupByName(name)
		if err != nil {
			return err
		}
		if s, _, err := l.DomainGetState(d, 0); err == nil && State(s) != StateShutoff {
			return nil
		}
		started = true
		return l.DomainCreate(d)
	})
	return started, err
}

func (r remote) StartPaused(d Domain) error {
	return r.long(func(l *golibvirt.Libvirt) error {
		_, err := l.DomainCreateWithFlags(dom(d), uint32(golibvirt.DomainStartPaused))
		return err
	})
}

func (r remote) Shutdown(d Domain) error { return classify(r.l.DomainShutdown(dom(d))) }

// Destroy waits for qemu to die (up to libvirt's SIGKILL grace).
func (r remote) Destroy(d Domain) error {
	return r.long(func(l *golibvirt.Libvirt) error { return l.DomainDestroy(dom(d)) })
}
func (r remote) Suspend(d Domain) error { return classify(r.l.DomainSuspend(dom(d))) }
func (r remote) Resume(d Domain) error  { return classify(r.l.DomainResume(dom(d))) }
func (r remote) Reset(d Domain) error   { return classify(r.l.DomainReset(dom(d), 0)) }

// Reboot: with both flags libvirt tries the agent (guest-shutdown
// mode=reboot; the call returns once qemu reports the guest's reset, or
// after libvirt's 60 s agent shutdown timeout) and falls back to the
// power button when no agent is connected or it fails.
func (r remote) Reboot(d Domain) error {
	return r.long(func(l *golibvirt.Libvirt) error {
		return l.DomainReboot(dom(d), golibvirt.DomainRebootGuestAgent|golibvirt.DomainRebootAcpiPowerBtn)
	})
}

// ManagedSave saves the domain as running: whether it comes back running
// or paused is chosen when it is started.
func (r remote) ManagedSave(d Domain) error {
	return r.long(func(l *golibvirt.Libvirt) error {
		return l.DomainManagedSave(dom(d), uint32(golibvirt.DomainSaveRunning))
	})
}

func (r remote) SetVCPUs(d Domain, n uint, live bool) error {
	flags := golibvirt.DomainVCPUConfig
	if live {
		flags |= golibvirt.DomainVCPULive
	}
	return classify(r.l.DomainSetVcpusFlags(dom(d), uint32(n), uint32(flags)))
}

// RequestMemory updates the virtio-mem device as libvirt shows it (its
// alias and address included: libvirt finds the device to update by
// them) with the new requested size, as virsh update-memory-device does:
// the running domain with its live XML, then the definition with its
// inactive XML — one call for both makes libvirt 9.0 send qemu the
// definition's device, which has no alias ("Device
// '/machine/peripheral/(null)' not found").
func (r remote) RequestMemory(d Domain, requestedMiB uint64, live bool) error {
	if live {
		if err := r.requestMemory(d, requestedMiB, 0, golibvirt.DomainDeviceModifyLive); err != nil {
			return err
		}
	}
	return r.requestMemory(d, requestedMiB, golibvirt.DomainXMLInactive, golibvirt.DomainDeviceModifyConfig)
}

func (r remote) requestMemory(d Domain, requestedMiB uint64, xmlFlags golibvirt.DomainXMLFlags, flags golibvirt.DomainDeviceModifyFlags) error {
	x, err := r.l.DomainGetXMLDesc(dom(d), xmlFlags)
	if err != nil {
		return classify(err)
	}
	dev, err := withRequestedMemory(x, requestedMiB)
	if err != nil {
		return err
	}
	return classify(r.l.DomainUpdateDeviceFlags(dom(d), dev, flags))
}

func (r remote) Disconnected() <-chan struct{} { return r.l.Disconnected() }

// AgentCommand waits up to timeout for the guest's answer in libvirtd,
// on a connection of its own and never on the shared one, even when none
// can be opened: the guest decides how long the call lasts, and the
// shared connection's few request slots are every other VM's.
func (r remote) AgentCommand(d Domain, cmd string, timeout time.Duration) (string, error) {
	var out []string
	err := r.own(func(l *golibvirt.Libvirt) (err error) {
		out, err = l.QEMUDomainAgentCommand(dom(d), cmd, int32(max(timeout/time.Second, 1)), 0)
		return err
	})
	if err != nil {
		return "", err
	}
	if len(out) == 0 {
		return "", fmt.Errorf("the guest agent of %s gave no answer: %w", d.Name, errdefs.ErrUnavailable)
	}
	return out[0], nil
}

func (r remote) LifecycleEvents(ctx context.Context) (<-chan LifecycleEvent, error) {
	in, err := r.l.LifecycleEvents(ctx)
	if err != nil {
		return nil, classify(err)
	}
	out := make(chan LifecycleEvent)
	go func() {
		defer close(out)
		for ev := range in {
			e := LifecycleEvent{Domain: ev.Dom.Name}
			switch golibvirt.DomainEventType(ev.Event) {
			case golibvirt.DomainEventStopped:
				e.Stopped, e.Why = true, stopReason(golibvirt.DomainEventStoppedDetailType(ev.Detail))
			case golibvirt.DomainEventSuspended:
				e.PausedIOError = golibvirt.DomainEventSuspendedDetailType(ev.Detail) == golibvirt.DomainEventSuspendedIoerror
			}
			select { // drained to its end either way: go-libvirt closes in
			case out <- e:
			case <-ctx.Done():
			}
		}
	}()
	return out, nil
}

func stopReason(d golibvirt.DomainEventStoppedDetailType) StopReason {
	switch d {
	case golibvirt.DomainEventStoppedShutdown:
		return StopShutdown
	case golibvirt.DomainEventStoppedDestroyed:
		return StopDestroyed
	case golibvirt.DomainEventStoppedCrashed:
		return StopCrashed
	case golibvirt.DomainEventStoppedFailed:
		return StopFailed
	case golibvirt.DomainEventStoppedSaved, golibvirt.DomainEventStoppedFromSnapshot:
		return StopSaved
	case golibvirt.DomainEventStoppedMigrated:
		return StopMigrated
	}
	return StopOther
}

func (r remote) RebootEvents(ctx context.Context) (<-chan string, error) {
	in, err := r.l.SubscribeEvents(ctx, golibvirt.DomainEventIDReboot, golibvirt.OptDomain{})
	if err != nil {
		return nil, classify(err)
	}
	out := make(chan string)
	go func() {
		defer close(out)
		for ev := range in {
			if msg, ok := ev.(*golibvirt.DomainEventCallbackRebootMsg); ok {
				select {
				case out <- msg.Msg.Dom.Name:
				case <-ctx.Done():
				}
			}
		}
	}()
	return out, nil
}

// classify maps libvirt's errors to crimux's error classes, once for
// every call (the rest of crimux uses errors.Is with errdefs).
func classify(err error) error {
	var le golibvirt.Error
	switch {
	case err == nil:
		return nil
	case golibvirt.IsNotFound(err):
		return fmt.Errorf("%w: %w", err, errdefs.ErrNotFound)
	case errors.As(err, &le) && le.Code == uint32(golibvirt.ErrNoDomainSnapshot):
		return noSnapshot(err)
	case errors.As(err, &le) && (le.Code == uint32(golibvirt.ErrOperationInvalid) || le.Code == uint32(golibvirt.ErrArgumentUnsupported)):
		return fmt.Errorf("%w: %w", err, errdefs.ErrFailedPrecondition)
	case errors.As(err, &le) && (le.Code == uint32(golibvirt.ErrAgentUnresponsive) || le.Code == uint32(golibvirt.ErrAgentCommandTimeout) ||
		le.Code == uint32(golibvirt.ErrAgentUnsynced)):
		return fmt.Errorf("%w: %w", err, errdefs.ErrUnavailable)
	case errors.Is(err, golibvirt.ErrInterrupted): // the connection went, libvirtd with it (a restart)
		return fmt.Errorf("%w (libvirtd's connection was lost during the call; crimux reconnects): %w", err, errdefs.ErrUnavailable)
	case !errors.As(err, &le) && connClosed(err): // go-libvirt's socket, closed under the call
		return fmt.Errorf("%w (libvirtd's connection is closed; crimux reconnects): %w", err, errdefs.ErrUnavailable)
	case errors.Is(err, golibvirt.ErrUnsupported):
		return fmt.Errorf("%w: %w", err, errdefs.ErrUnimplemented)
	}
	return err
}

// connClosed tells a call that failed on a closed connection: go-libvirt's
// socket says EINVAL (or a closed pipe) once it has been closed, the
// kernel EPIPE or ECONNRESET as libvirtd dies. libvirtd's own errors are
// golibvirt.Error, never these.
func connClosed(err error) bool {
	for _, e := range []error{syscall.EINVAL, syscall.EPIPE, syscall.ECONNRESET, io.ErrClosedPipe, io.EOF, net.ErrClosed} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
