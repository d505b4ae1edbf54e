package virtfake_test

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"libvirt.org/go/libvirtxml"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
)

var boom = errors.New("boom")

func domXML(name string) string {
	return fmt.Sprintf("<domain type='qemu'><name>%s</name></domain>", name)
}

func define(t *testing.T, f *virtfake.Libvirt, name string) virt.Domain {
	t.Helper()
	d, err := f.Define(domXML(name))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func state(t *testing.T, f *virtfake.Libvirt, d virt.Domain) virt.State {
	t.Helper()
	s, err := f.State(d)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func code(t *testing.T, err error, want codes.Code, what string) {
	t.Helper()
	if errdefs.Code(err) != want {
		t.Fatalf("%s: %v (%s), want %s", what, err, errdefs.Code(err), want)
	}
}

// TestDomains: define, look up, list, redefine, undefine, as libvirt does.
func TestDomains(t *testing.T) {
	t.Parallel()
	f := virtfake.New()
	if v, err := f.Version(); err != nil || v != 9_000_000 {
		t.Fatalf("Version = %d, %v", v, err)
	}
	b := define(t, f, "b")
	a := define(t, f, "a")
	if a.Name != "a" || a.UUID == (virt.UUID{}) || a.UUID == b.UUID {
		t.Fatalf("defined %+v and %+v: want named handles with distinct UUIDs", a, b)
	}
	if s := state(t, f, a); s != virt.StateShutoff {
		t.Fatalf("a new domain is %v, want shut off", s)
	}
	if got, err := f.Lookup("a"); err != nil || got != a {
		t.Fatalf("Lookup(a) = %+v, %v; want %+v", got, err, a)
	}
	_, err := f.Lookup("nope")
	code(t, err, codes.NotFound, "Lookup of a missing domain")
	all, err := f.ListAll()
	if err != nil || len(all) != 2 || all[0] != a || all[1] != b {
		t.Fatalf("ListAll = %+v, %v; want a, b", all, err)
	}
	if fmt.Sprint(f.Names()) != "[a b]" {
		t.Fatalf("Names = %v", f.Names())
	}

	// Redefining keeps the state and the UUID, replaces the XML.
	if err := f.Start(a); err != nil {
		t.Fatal(err)
	}
	newXML := "<domain type='kvm'><name>a</name></domain>"
	again, err := f.Define(newXML)
	if err != nil || again.Name != a.Name || again.UUID != a.UUID || state(t, f, a) != virt.StateRunning {
		t.Fatalf("redefine: %+v, %v, state %v", again, err, state(t, f, a))
	}
	// As libvirt's list, the fake's tells running domains from shut off.
	if all, err := f.ListAll(); err != nil || all[0].Inactive() || !all[1].Inactive() {
		t.Fatalf("ListAll with a running and b shut off = %+v, %v", all, err)
	}
	if x, err := f.XML(a); err != nil || x != newXML {
		t.Fatalf("XML = %q, %v", x, err)
	}
	for _, bad := range []string{"<domain", "<domain type='qemu'></domain>"} {
		if _, err := f.Define(bad); err == nil || !strings.Contains(err.Error(), "XML error") {
			t.Fatalf("Define(%q) = %v, want an XML error", bad, err)
		}
	}

	// A running domain is not undefined (the fake keeps no transient ones).
	code(t, f.Undefine(a), codes.FailedPrecondition, "Undefine of a running domain")
	if err := f.Destroy(a); err != nil {
		t.Fatal(err)
	}
	if err := f.Undefine(a); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Domain("a"); ok {
		t.Fatal("an undefined domain is still there")
	}
	code(t, f.Undefine(a), codes.NotFound, "Undefine of a missing domain")
	for name, call := range map[string]func() error{
		"State":          func() error { _, err := f.State(a); return err },
		"HasManagedSave": func() error { _, err := f.HasManagedSave(a); return err },
		"XML":            func() error { _, err := f.XML(a); return err },
		"SetMetadata":    func() error { return f.SetMetadata(a, "<x></x>", "x", "urn:x") },
		"Start":          func() error { return f.Start(a) },
		"ListSnapshots":  func() error { _, err := f.ListSnapshots(a); return err },
		"CreateSnapshot": func() error {
			_, err := f.CreateSnapshot(a, "<domainsnapshot><name>s</name></domainsnapshot>")
			return err
		},
	} {
		code(t, call(), codes.NotFound, name+" of a missing domain")
	}
}

// TestPower: every power operation from each state it accepts, and the
// ones libvirt refuses.
func TestPower(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		from    virt.State
		saved   bool
		ignores bool
		op      func(*virtfake.Libvirt, virt.Domain) error
		want    virt.State
		save    bool // managed save afterwards
		refused bool
		event   virt.StopReason // -1: none
	}{
		{"start", virt.StateShutoff, false, false, (*virtfake.Libvirt).Start, virt.StateRunning, false, false, -1},
		{"start restores a managed save", virt.StateShutoff, true, false, (*virtfake.Libvirt).Start, virt.StateRunning, false, false, -1},
		{"start paused", virt.StateShutoff, true, false, (*virtfake.Libvirt).StartPaused, virt.StatePaused, false, false, -1},
		{"start a running one", virt.StateRunning, false, false, (*virtfake.Libvirt).Start, virt.StateRunning, false, true, -1},
		{"start paused a paused one", virt.StatePaused, false, false, (*virtfake.Libvirt).StartPaused, virt.StatePaused, false, true, -1},
		{"shutdown", virt.StateRunning, false, false, (*virtfake.Libvirt).Shutdown, virt.StateShutoff, false, false, virt.StopShutdown},
		{"shutdown ignored", virt.StateRunning, false, true, (*virtfake.Libvirt).Shutdown, virt.StateRunning, false, false, -1},
		{"shutdown of a paused guest", virt.StatePaused, false, false, (*virtfake.Libvirt).Shutdown, virt.StatePaused, false, false, -1},
		{"shutdown a shut off one", virt.StateShutoff, false, false, (*virtfake.Libvirt).Shutdown, virt.StateShutoff, false, true, -1},
		{"destroy", virt.StateRunning, false, true, (*virtfake.Libvirt).Destroy, virt.StateShutoff, false, false, virt.StopDestroyed},
		{"destroy paused", virt.StatePaused, false, false, (*virtfake.Libvirt).Destroy, virt.StateShutoff, false, false, virt.StopDestroyed},
		{"destroy a shut off one", virt.StateShutoff, false, false, (*virtfake.Libvirt).Destroy, virt.StateShutoff, false, true, -1},
		{"suspend", virt.StateRunning, false, false, (*virtfake.Libvirt).Suspend, virt.StatePaused, false, false, -1},
		{"suspend a shut off one", virt.StateShutoff, false, false, (*virtfake.Libvirt).Suspend, virt.StateShutoff, false, true, -1},
		{"resume", virt.StatePaused, false, false, (*virtfake.Libvirt).Resume, virt.StateRunning, false, false, -1},
		{"resume a running one", virt.StateRunning, false, false, (*virtfake.Libvirt).Resume, virt.StateRunning, false, true, -1},
		{"reset", virt.StateRunning, false, true, (*virtfake.Libvirt).Reset, virt.StateRunning, false, false, -1},
		{"reset a shut off one", virt.StateShutoff, false, false, (*virtfake.Libvirt).Reset, virt.StateShutoff, false, true, -1},
		{"managed save", virt.StateRunning, false, false, (*virtfake.Libvirt).ManagedSave, virt.StateShutoff, true, false, virt.StopSaved},
		{"managed save paused", virt.StatePaused, false, false, (*virtfake.Libvirt).ManagedSave, virt.StateShutoff, true, false, virt.StopSaved},
		{"managed save a shut off one", virt.StateShutoff, false, false, (*virtfake.Libvirt).ManagedSave, virt.StateShutoff, false, true, -1},
		{"reboot a paused one", virt.StatePaused, false, false, (*virtfake.Libvirt).Reboot, virt.StatePaused, false, true, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := virtfake.New()
			f.Put("d", virtfake.Domain{State: tc.from, ManagedSave: tc.saved, IgnoresACPI: tc.ignores})
			events, err := f.LifecycleEvents(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			d, _ := f.Lookup("d")
			err = tc.op(f, d)
			if tc.refused {
				code(t, err, codes.FailedPrecondition, tc.name)
			} else if err != nil {
				t.Fatal(err)
			}
			got, _ := f.Domain("d")
			if got.State != tc.want || got.ManagedSave != tc.save {
				t.Fatalf("domain %v (save %v), want %v (save %v)", got.State, got.ManagedSave, tc.want, tc.save)
			}
			if has, err := f.HasManagedSave(d); err != nil || has != tc.save {
				t.Fatalf("HasManagedSave = %v, %v", has, err)
			}
			select {
			case ev := <-events:
				if tc.event < 0 || ev != (virt.LifecycleEvent{Domain: "d", Stopped: true, Why: tc.event}) {
					t.Fatalf("event %+v, want %v", ev, tc.event)
				}
			default:
				if tc.event >= 0 {
					t.Fatalf("no stop event, want %v", tc.event)
				}
			}
		})
	}
}

// TestRebootEvents: a guest that obeys reboots at once (its event); one
// that ignores ACPI never does; both are counted.
func TestRebootEvents(t *testing.T) {
	t.Parallel()
	f := virtfake.New()
	f.Put("obeys", virtfake.Domain{State: virt.StateRunning})
	f.Put("ignores", virtfake.Domain{State: virt.StateRunning, IgnoresACPI: true})
	reboots, err := f.RebootEvents(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"ignores", "obeys"} {
		d, _ := f.Lookup(n)
		if err := f.Reboot(d); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case name := <-reboots:
		if name != "obeys" {
			t.Fatalf("reboot event of %s", name)
		}
	default:
		t.Fatal("no reboot event")
	}
	select {
	case name := <-reboots:
		t.Fatalf("a second reboot event, of %s", name)
	default:
	}
	if f.Calls("Reboot") != 2 {
		t.Fatalf("Reboot counted %d times", f.Calls("Reboot"))
	}
}

// TestCrashAndDisconnect: Crash stops an active domain with its event;
// Disconnect closes Disconnected and every event stream, once.
func TestCrashAndDisconnect(t *testing.T) {
	t.Parallel()
	f := virtfake.New()
	f.Put("d", virtfake.Domain{State: virt.StatePaused})
	f.Put("off", virtfake.Domain{State: virt.StateShutoff})
	events, _ := f.LifecycleEvents(context.Background())
	reboots, _ := f.RebootEvents(context.Background())
	f.Crash("off")
	f.Crash("missing")
	f.Crash("d")
	if ev := <-events; ev != (virt.LifecycleEvent{Domain: "d", Stopped: true, Why: virt.StopCrashed}) {
		t.Fatalf("event %+v", ev)
	}
	if d, _ := f.Domain("d"); d.State != virt.StateShutoff {
		t.Fatalf("crashed domain is %v", d.State)
	}
	select {
	case <-f.Disconnected():
		t.Fatal("disconnected before Disconnect")
	default:
	}
	f.Disconnect()
	f.Disconnect() // twice: no panic
	<-f.Disconnected()
	if _, ok := <-events; ok {
		t.Fatal("lifecycle stream open after Disconnect")
	}
	if _, ok := <-reboots; ok {
		t.Fatal("reboot stream open after Disconnect")
	}
}

// TestSlowReaderLosesEvents: events never block the fake.
func TestSlowReaderLosesEvents(t *testing.T) {
	t.Parallel()
	f := virtfake.New()
	f.Put("d", virtfake.Domain{State: virt.StateRunning})
	events, _ := f.LifecycleEvents(context.Background())
	d, _ := f.Lookup("d")
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 100 {
			_ = f.Start(d)
			_ = f.Destroy(d)
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the fake blocked on an unread event stream")
	}
	if n := len(events); n != cap(events) {
		t.Fatalf("%d events buffered, want the buffer (%d) full", n, cap(events))
	}
}

// TestFailureInjection: Fail makes the next calls of a method fail in
// order (nil: succeed), before anything happens; Calls counts every call.
func TestFailureInjection(t *testing.T) {
	t.Parallel()
	f := virtfake.New()
	d := define(t, f, "d")
	other := errors.New("other")
	f.Fail("Start", boom, nil, other)
	if err := f.Start(d); !errors.Is(err, boom) || state(t, f, d) != virt.StateShutoff {
		t.Fatalf("first Start = %v, state %v; want boom, nothing done", err, state(t, f, d))
	}
	if err := f.Start(d); err != nil {
		t.Fatalf("second Start = %v, want nil", err)
	}
	if err := f.Start(d); !errors.Is(err, other) {
		t.Fatalf("third Start = %v, want other", err)
	}
	if err := f.Start(d); errdefs.Code(err) != codes.FailedPrecondition {
		t.Fatalf("fourth Start = %v, want libvirt's own refusal", err)
	}
	if f.Calls("Start") != 4 || f.Calls("Destroy") != 0 {
		t.Fatalf("calls: Start %d, Destroy %d", f.Calls("Start"), f.Calls("Destroy"))
	}
	// Every method can be failed by name.
	for name, call := range map[string]func() error{
		"Version":         func() error { _, err := f.Version(); return err },
		"Lookup":          func() error { _, err := f.Lookup("d"); return err },
		"ListAll":         func() error { _, err := f.ListAll(); return err },
		"Define":          func() error { _, err := f.Define(domXML("d")); return err },
		"Undefine":        func() error { return f.Undefine(d) },
		"State":           func() error { _, err := f.State(d); return err },
		"HasManagedSave":  func() error { _, err := f.HasManagedSave(d); return err },
		"XML":             func() error { _, err := f.XML(d); return err },
		"SetMetadata":     func() error { return f.SetMetadata(d, "<x></x>", "x", "urn:x") },
		"LifecycleEvents": func() error { _, err := f.LifecycleEvents(context.Background()); return err },
		"RebootEvents":    func() error { _, err := f.RebootEvents(context.Background()); return err },
		"StartPaused":     func() error { return f.StartPaused(d) },
		"Shutdown":        func() error { return f.Shutdown(d) },
		"Destroy":         func() error { return f.Destroy(d) },
		"Suspend":         func() error { return f.Suspend(d) },
		"Resume":          func() error { return f.Resume(d) },
		"Reboot":          func() error { return f.Reboot(d) },
		"Reset":           func() error { return f.Reset(d) },
		"ManagedSave":     func() error { return f.ManagedSave(d) },
		"CreateSnapshot": func() error {
			_, err := f.CreateSnapshot(d, "<domainsnapshot><name>s</name></domainsnapshot>")
			return err
		},
		"LookupSnapshot":    func() error { _, err := f.LookupSnapshot(d, "s"); return err },
		"ListSnapshots":     func() error { _, err := f.ListSnapshots(d); return err },
		"SnapshotXML":       func() error { _, err := f.SnapshotXML(virt.Snapshot{Name: "s", Domain: d}); return err },
		"IsCurrentSnapshot": func() error { _, err := f.IsCurrentSnapshot(virt.Snapshot{Name: "s", Domain: d}); return err },
		"RevertToSnapshot":  func() error { return f.RevertToSnapshot(virt.Snapshot{Name: "s", Domain: d}) },
		"DeleteSnapshot":    func() error { return f.DeleteSnapshot(virt.Snapshot{Name: "s", Domain: d}) },
	} {
		before := f.Calls(name)
		f.Fail(name, boom)
		if err := call(); !errors.Is(err, boom) {
			t.Errorf("%s with a failure injected = %v", name, err)
		}
		if f.Calls(name) != before+1 {
			t.Errorf("%s not counted", name)
		}
	}
	if _, ok := f.Domain("d"); !ok {
		t.Fatal("a failed call changed the domains")
	}
}

// TestConnection: the fake is its own connection; SetDown makes Get fail
// until it is up again.
func TestConnection(t *testing.T) {
	t.Parallel()
	f := virtfake.New()
	if l, err := f.Get(); err != nil || l != virt.Libvirt(f) {
		t.Fatalf("Get = %v, %v", l, err)
	}
	down := fmt.Errorf("libvirtd down: %w", errdefs.ErrUnavailable)
	f.SetDown(down)
	if l, err := f.Get(); l != nil || err != down {
		t.Fatalf("Get while down = %v, %v", l, err)
	}
	f.SetDown(nil)
	if _, err := f.Get(); err != nil {
		t.Fatal(err)
	}
}

// TestPutAndEdit: Put adds a domain as it is (a default XML naming it),
// Domain returns a copy, Edit changes it in place.
func TestPutAndEdit(t *testing.T) {
	t.Parallel()
	f := virtfake.New()
	f.Put("d", virtfake.Domain{State: virt.StateRunning})
	d, ok := f.Domain("d")
	if !ok || !strings.Contains(d.XML, "<name>d</name>") || d.Snapshots == nil {
		t.Fatalf("Put domain: %+v", d)
	}
	d.State = virt.StateCrashed // a copy
	if got, _ := f.Domain("d"); got.State != virt.StateRunning {
		t.Fatal("Domain returned the domain itself, not a copy")
	}
	f.Edit("d", func(d *virtfake.Domain) { d.State = virt.StatePaused })
	f.Edit("missing", func(*virtfake.Domain) { t.Fatal("edited a missing domain") })
	if got, _ := f.Domain("d"); got.State != virt.StatePaused {
		t.Fatalf("after Edit: %v", got.State)
	}
	if _, ok := f.Domain("missing"); ok {
		t.Fatal("a missing domain found")
	}
}

// TestMetadata: SetMetadata puts crimux's element in its namespace,
// replacing what <metadata> held, and it parses back.
func TestMetadata(t *testing.T) {
	t.Parallel()
	f := virtfake.New()
	d := define(t, f, "crimux-c")
	m := vm.Metadata{Instance: "i", SandboxID: "sb", ContainerID: "c", PodName: "web", PodNamespace: "ns"}
	b, _ := xml.Marshal(m)
	el := strings.Replace(string(b), ` xmlns="https://crimux.io/xmlns/vm/1"`, "", 1)
	for range 2 { // the second replaces the first
		if err := f.SetMetadata(d, el, "crimux", "https://crimux.io/xmlns/vm/1"); err != nil {
			t.Fatal(err)
		}
	}
	x, _ := f.XML(d)
	if strings.Count(x, "<metadata>") != 1 || strings.Count(x, "<crimux:crimux") != 1 {
		t.Fatalf("XML after two SetMetadata: %s", x)
	}
	var dom libvirtxml.Domain
	if err := dom.Unmarshal(x); err != nil {
		t.Fatal(err)
	}
	got, ok := vm.ParseMetadata(&dom)
	m.XMLName = got.XMLName
	if !ok || got != m || dom.Name != "crimux-c" {
		t.Fatalf("metadata read back: %+v, %v; want %+v", got, ok, m)
	}
	for _, bad := range []string{`<crimux xmlns="urn:x"></crimux>`, "<other></other>", "<crimux>"} {
		if err := f.SetMetadata(d, bad, "crimux", "urn:y"); err == nil {
			t.Errorf("SetMetadata(%q) accepted", bad)
		}
	}
	// A domain XML without a </domain> end is left as it is.
	f.Put("odd", virtfake.Domain{XML: "<domain/>"})
	od, _ := f.Lookup("odd")
	if err := f.SetMetadata(od, "<x></x>", "x", "urn:x"); err != nil {
		t.Fatal(err)
	}
	if x, _ := f.XML(od); x != "<domain/>" {
		t.Fatalf("XML of odd domain: %s", x)
	}
}

// TestSnapshots: create records the domain's state and time and becomes
// current; duplicates are refused; revert restores the state (a running
// qemu is replaced, with its event); delete clears current.
func TestSnapshots(t *testing.T) {
	t.Parallel()
	f := virtfake.New()
	d := define(t, f, "d")
	if err := f.Start(d); err != nil {
		t.Fatal(err)
	}
	events, _ := f.LifecycleEvents(context.Background())
	snap := func(name string) virt.Snapshot {
		t.Helper()
		s, err := f.CreateSnapshot(d, "<domainsnapshot><name>"+name+"</name><description>x</description></domainsnapshot>")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	running := snap("running")
	if running != (virt.Snapshot{Name: "running", Domain: d}) {
		t.Fatalf("CreateSnapshot = %+v", running)
	}
	x, err := f.SnapshotXML(running)
	if err != nil || !strings.Contains(x, "<state>running</state>") || !strings.Contains(x, "<creationTime>") || !strings.Contains(x, "<description>x</description>") {
		t.Fatalf("SnapshotXML = %s, %v", x, err)
	}
	if _, err := f.CreateSnapshot(d, "<domainsnapshot><name>running</name></domainsnapshot>"); errdefs.Code(err) != codes.FailedPrecondition {
		t.Fatalf("duplicate snapshot: %v", err)
	}
	if _, err := f.CreateSnapshot(d, "<domainsnapshot"); err == nil || !strings.Contains(err.Error(), "XML error") {
		t.Fatalf("broken snapshot XML: %v", err)
	}
	if err := f.Destroy(d); err != nil {
		t.Fatal(err)
	}
	<-events
	off := snap("off")
	if cur, _ := f.IsCurrentSnapshot(off); !cur {
		t.Fatal("the newest snapshot is not current")
	}
	if cur, _ := f.IsCurrentSnapshot(running); cur {
		t.Fatal("an older snapshot is current")
	}
	list, err := f.ListSnapshots(d)
	if err != nil || len(list) != 2 || list[0].Name != "off" || list[1].Name != "running" {
		t.Fatalf("ListSnapshots = %+v, %v; want by name", list, err)
	}
	if got, err := f.LookupSnapshot(d, "off"); err != nil || got != off {
		t.Fatalf("LookupSnapshot = %+v, %v", got, err)
	}

	// Revert a shut off domain to a running snapshot: no stop event.
	if err := f.RevertToSnapshot(running); err != nil || state(t, f, d) != virt.StateRunning {
		t.Fatalf("revert to running: %v, state %v", err, state(t, f, d))
	}
	select {
	case ev := <-events:
		t.Fatalf("revert of a shut off domain sent %+v", ev)
	default:
	}
	// Revert a running domain: its qemu stops (saved), the snapshot's runs.
	if err := f.RevertToSnapshot(off); err != nil || state(t, f, d) != virt.StateShutoff {
		t.Fatalf("revert to off: %v, state %v", err, state(t, f, d))
	}
	if ev := <-events; ev != (virt.LifecycleEvent{Domain: "d", Stopped: true, Why: virt.StopSaved}) {
		t.Fatalf("event %+v", ev)
	}
	if dd, _ := f.Domain("d"); dd.Current != "off" {
		t.Fatalf("current after revert: %q", dd.Current)
	}

	if err := f.DeleteSnapshot(off); err != nil {
		t.Fatal(err)
	}
	if dd, _ := f.Domain("d"); dd.Current != "" || len(dd.Snapshots) != 1 {
		t.Fatalf("after deleting the current snapshot: current %q, %d left", dd.Current, len(dd.Snapshots))
	}
	if err := f.DeleteSnapshot(running); err != nil {
		t.Fatal(err)
	}
	gone := virt.Snapshot{Name: "running", Domain: d}
	for name, call := range map[string]func() error{
		"LookupSnapshot":    func() error { _, err := f.LookupSnapshot(d, "running"); return err },
		"SnapshotXML":       func() error { _, err := f.SnapshotXML(gone); return err },
		"IsCurrentSnapshot": func() error { _, err := f.IsCurrentSnapshot(gone); return err },
		"RevertToSnapshot":  func() error { return f.RevertToSnapshot(gone) },
		"DeleteSnapshot":    func() error { return f.DeleteSnapshot(gone) },
	} {
		err := call()
		if !virt.IsNoSnapshot(err) || !errdefs.IsNotFound(err) {
			t.Errorf("%s of a deleted snapshot: %v, want ErrNoSnapshot, NotFound", name, err)
		}
	}
	// Snapshots of a missing domain: the domain's NotFound.
	missing := virt.Snapshot{Name: "s", Domain: virt.Domain{Name: "missing"}}
	if _, err := f.SnapshotXML(missing); virt.IsNoSnapshot(err) || !errdefs.IsNotFound(err) {
		t.Fatalf("SnapshotXML of a missing domain: %v", err)
	}
}
