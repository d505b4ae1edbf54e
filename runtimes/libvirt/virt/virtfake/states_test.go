package virtfake_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crimux/crimux/runtimes/libvirt/saveimage"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
)

// TestSaveAndRestoreAClone: the fake saves a running domain as libvirt
// does (a save image, the domain shut off) and restores, from a FIFO fed
// with a new header, a clone under the name its XML gives, with the
// template's stream.
func TestSaveAndRestoreAClone(t *testing.T) {
	f := virtfake.New()
	f.Put("tmpl", virtfake.Domain{XML: "<domain><name>tmpl</name></domain>", State: virt.StateRunning, SavedMemory: []byte("guest RAM")})
	state := filepath.Join(t.TempDir(), "state")
	if err := f.SaveState(virt.Domain{Name: "tmpl"}, state); err != nil {
		t.Fatal(err)
	}
	if s, _ := f.State(virt.Domain{Name: "tmpl"}); s != virt.StateShutoff {
		t.Fatalf("the template after its save: %v, want shut off", s)
	}
	img, err := saveimage.Read(state)
	if err != nil || img.XML != "<domain><name>tmpl</name></domain>" {
		t.Fatalf("the save image: %+v, %v", img, err)
	}
	feed, err := saveimage.StartFeed(context.Background(), saveimage.FeedSpec{FIFO: filepath.Join(t.TempDir(), "fifo"),
		XML: strings.ReplaceAll(img.XML, "tmpl", "clone"), Cookie: img.Cookie, Template: state, Offset: img.StreamOffset})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.RestoreState(feed.Path()); err != nil {
		feed.Abort()
		t.Fatal(err)
	}
	if err := feed.Wait(); err != nil {
		t.Fatal(err)
	}
	if s, _ := f.State(virt.Domain{Name: "clone"}); s != virt.StateRunning {
		t.Fatalf("the clone: %v, want running", s)
	}
	clone, _ := f.Domain("clone")
	if got := string(clone.Restored); got != "guest RAM" {
		t.Fatalf("the clone read %q, want the template's stream", got)
	}
	now := time.Unix(1700000000, 5)
	err = f.SetTime(virt.Domain{Name: "clone"}, now)
	if clone, _ = f.Domain("clone"); err != nil || !clone.GuestTime.Equal(now) {
		t.Fatalf("SetTime: %v", err)
	}
}
