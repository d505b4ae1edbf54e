package virt

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"

	golibvirt "github.com/digitalocean/go-libvirt"
	"google.golang.org/grpc/codes"

	"github.com/crimux/crimux/internal/errdefs"
)

// TestClassify: libvirt's errors get crimux's classes, keeping what they
// were (errors.As still finds libvirt's); others pass unchanged.
func TestClassify(t *testing.T) {
	lv := func(code golibvirt.ErrorNumber) error {
		return golibvirt.Error{Code: uint32(code), Message: fmt.Sprintf("libvirt error %d", code)}
	}
	plain := errors.New("connection reset by peer")
	for _, tc := range []struct {
		name       string
		err        error
		code       codes.Code
		noSnapshot bool
		same       bool // returned as it is
	}{
		{name: "no domain", err: lv(golibvirt.ErrNoDomain), code: codes.NotFound},
		{name: "no domain, wrapped", err: fmt.Errorf("lookup: %w", lv(golibvirt.ErrNoDomain)), code: codes.NotFound},
		{name: "no snapshot", err: lv(golibvirt.ErrNoDomainSnapshot), code: codes.NotFound, noSnapshot: true},
		{name: "operation invalid", err: lv(golibvirt.ErrOperationInvalid), code: codes.FailedPrecondition},
		{name: "unsupported procedure", err: golibvirt.ErrUnsupported, code: codes.Unimplemented},
		{name: "libvirtd gone mid-call", err: fmt.Errorf("start domain d: %w", golibvirt.ErrInterrupted), code: codes.Unavailable},
		{name: "closed connection", err: syscall.EINVAL, code: codes.Unavailable},
		{name: "libvirtd died", err: &net.OpError{Op: "write", Err: syscall.EPIPE}, code: codes.Unavailable},
		{name: "another libvirt error", err: lv(golibvirt.ErrNoNetwork), code: codes.Unknown, same: true},
		{name: "operation failed", err: lv(golibvirt.ErrOperationFailed), code: codes.Unknown, same: true},
		{name: "not libvirt's", err: plain, code: codes.Unknown, same: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := classify(tc.err)
			if errdefs.Code(got) != tc.code {
				t.Fatalf("classify(%v) = %v (%s), want %s", tc.err, got, errdefs.Code(got), tc.code)
			}
			if IsNoSnapshot(got) != tc.noSnapshot {
				t.Fatalf("IsNoSnapshot(classify(%v)) = %v, want %v", tc.err, IsNoSnapshot(got), tc.noSnapshot)
			}
			if tc.same && got != tc.err {
				t.Fatalf("classify(%v) = %v, want it unchanged", tc.err, got)
			}
			if !errors.Is(got, tc.err) || !strings.Contains(got.Error(), tc.err.Error()) {
				t.Fatalf("classify(%v) = %v: lost the original error", tc.err, got)
			}
			var le golibvirt.Error
			if errors.As(tc.err, &le) && !errors.As(got, &le) {
				t.Fatalf("classify(%v) = %v: libvirt's error no longer found", tc.err, got)
			}
		})
	}
	if classify(nil) != nil {
		t.Fatal("classify(nil) is not nil")
	}
}

func TestNoSnapshot(t *testing.T) {
	base := errors.New("Domain snapshot not found")
	err := noSnapshot(base)
	if !IsNoSnapshot(err) || !errdefs.IsNotFound(err) || !errors.Is(err, base) {
		t.Fatalf("noSnapshot(%v) = %v: want ErrNoSnapshot, NotFound and the cause", base, err)
	}
	if IsNoSnapshot(base) || IsNoSnapshot(nil) || IsNoSnapshot(fmt.Errorf("x: %w", errdefs.ErrNotFound)) {
		t.Fatal("IsNoSnapshot of an error that is no missing snapshot")
	}
}

func TestStopReason(t *testing.T) {
	for d, want := range map[golibvirt.DomainEventStoppedDetailType]StopReason{
		golibvirt.DomainEventStoppedShutdown:       StopShutdown,
		golibvirt.DomainEventStoppedDestroyed:      StopDestroyed,
		golibvirt.DomainEventStoppedCrashed:        StopCrashed,
		golibvirt.DomainEventStoppedFailed:         StopFailed,
		golibvirt.DomainEventStoppedSaved:          StopSaved,
		golibvirt.DomainEventStoppedFromSnapshot:   StopSaved,
		golibvirt.DomainEventStoppedMigrated:       StopMigrated,
		golibvirt.DomainEventStoppedDetailType(99): StopOther,
	} {
		if got := stopReason(d); got != want {
			t.Errorf("stopReason(%d) = %d, want %d", d, got, want)
		}
	}
}

func TestSocketOf(t *testing.T) {
	for _, tc := range []struct {
		uri, want, err string
	}{
		{"qemu:///system", defaultSocket, ""},
		{"qemu:///system?socket=/run/test/libvirt-sock", "/run/test/libvirt-sock", ""},
		{"qemu:///system?other=1", defaultSocket, ""},
		{"qemu:///session", "", "only local qemu:///system"},
		{"qemu+ssh://host/system", "", "only local qemu:///system"},
		{"qemu://host/system", "", "only local qemu:///system"},
		{"xen:///system", "", "only local qemu:///system"},
		{"", "", "only local qemu:///system"},
		{"qemu:///system%zz", "", `libvirt uri "qemu:///system%zz"`},
	} {
		t.Run(tc.uri, func(t *testing.T) {
			got, err := socketOf(tc.uri)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("socketOf(%q) = %q, %v; want an error saying %q", tc.uri, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("socketOf(%q) = %q, %v; want %q", tc.uri, got, err, tc.want)
			}
		})
	}
}

// TestState: libvirt's numbering, crimux's names, and which states have
// a qemu.
func TestState(t *testing.T) {
	for _, tc := range []struct {
		s      State
		name   string
		active bool
	}{
		{StateNoState, "nostate", false},
		{StateRunning, "running", true},
		{StateBlocked, "blocked", true},
		{StatePaused, "paused", true},
		{StateShutdown, "shutting-down", true},
		{StateShutoff, "shutoff", false},
		{StateCrashed, "crashed", false},
		{StatePMSuspended, "pmsuspended", true},
	} {
		if got := tc.s.String(); got != tc.name {
			t.Errorf("State(%d).String() = %q, want %q", tc.s, got, tc.name)
		}
		if got := tc.s.Active(); got != tc.active {
			t.Errorf("%s.Active() = %v, want %v", tc.name, got, tc.active)
		}
	}
	if State(42).String() != "nostate" {
		t.Errorf("an unknown state is %q, want nostate", State(42).String())
	}
	// Our numbering is libvirt's.
	for s, lv := range map[State]golibvirt.DomainState{
		StateNoState: golibvirt.DomainNostate, StateRunning: golibvirt.DomainRunning, StateBlocked: golibvirt.DomainBlocked,
		StatePaused: golibvirt.DomainPaused, StateShutdown: golibvirt.DomainShutdown, StateShutoff: golibvirt.DomainShutoff,
		StateCrashed: golibvirt.DomainCrashed, StatePMSuspended: golibvirt.DomainPmsuspended,
	} {
		if int32(s) != int32(lv) {
			t.Errorf("%s is %d, libvirt's %d", s, s, lv)
		}
	}
}

// TestHandles: a domain's and a snapshot's handles go to go-libvirt's and
// back unchanged.
func TestHandles(t *testing.T) {
	d := Domain{Name: "crimux-x", UUID: UUID{1, 2, 3, 15: 16}, ID: 7}
	if got := ours(dom(d)); got != d {
		t.Fatalf("ours(dom(%+v)) = %+v", d, got)
	}
	s := snap(Snapshot{Name: "s1", Domain: d})
	if s.Name != "s1" || ours(s.Dom) != d {
		t.Fatalf("snap = %+v", s)
	}
}
