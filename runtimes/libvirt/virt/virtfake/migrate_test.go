package virtfake

import (
	"errors"
	"testing"

	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

// TestMigrateMovesToThePeer: a running domain migrated is defined and
// running on the peer under the destination name, from the destination
// XML, with its guest agent; here it is shut off, defined, migrated
// away; the migration is recorded.
func TestMigrateMovesToThePeer(t *testing.T) {
	src, dst := New(), New()
	src.SetPeer(dst)
	agent := func(string) (string, error) { return `{"return":{}}`, nil }
	src.Put("a", Domain{State: virt.StateRunning, Agent: agent})
	h, _ := src.Lookup("a")
	m := virt.Migration{PeerURI: "qemu+tls://b/system", DestName: "b", DestXML: "<domain><name>a</name></domain>"}
	if err := src.Migrate(h, m); err != nil {
		t.Fatal(err)
	}
	if d, ok := dst.Domain("b"); !ok || d.State != virt.StateRunning || d.XML != m.DestXML || d.Agent == nil {
		t.Errorf("on the peer: %+v (defined %v)", d, ok)
	}
	if away, err := src.ShutoffMigrated(h); err != nil || !away {
		t.Errorf("here: migrated away %v, %v", away, err)
	}
	if got := src.Migrations(); len(got) != 1 || got[0].DestName != "b" {
		t.Errorf("migrations %+v", got)
	}
}

// TestMigrateHook: a hook runs with the migration before anything
// moves; its error is Migrate's and the domain stays; removed, it runs
// no more.
func TestMigrateHook(t *testing.T) {
	src, dst := New(), New()
	src.SetPeer(dst)
	src.Put("a", Domain{State: virt.StateRunning})
	h, _ := src.Lookup("a")
	refused := errors.New("refused")
	var seen []string
	src.SetMigrateHook(func(m virt.Migration) error {
		seen = append(seen, m.DestName)
		_ = src.Calls("Migrate") // the fake's lock is not held
		return refused
	})
	if err := src.Migrate(h, virt.Migration{DestName: "b"}); !errors.Is(err, refused) {
		t.Fatalf("Migrate: %v, want the hook's error", err)
	}
	if d, _ := src.Domain("a"); d.State != virt.StateRunning {
		t.Errorf("the domain is %s after a refused migration", d.State)
	}
	if _, ok := dst.Domain("b"); ok {
		t.Error("the domain arrived although the hook refused")
	}
	src.SetMigrateHook(nil)
	if err := src.Migrate(h, virt.Migration{DestName: "b"}); err != nil {
		t.Fatalf("Migrate without the hook: %v", err)
	}
	if len(seen) != 1 || seen[0] != "b" {
		t.Errorf("the hook saw %q, want one migration to b", seen)
	}
}
