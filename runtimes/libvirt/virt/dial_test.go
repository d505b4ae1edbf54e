package virt

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crimux/crimux/internal/errdefs"
)

// TestDialFails: a URI crimux does not serve is refused, a libvirtd that
// does not answer is Unavailable naming its socket.
func TestDialFails(t *testing.T) {
	if _, _, err := Dial("qemu:///session"); err == nil || !strings.Contains(err.Error(), "qemu:///session") {
		t.Fatalf("Dial of qemu:///session: %v", err)
	}
	sock := filepath.Join(t.TempDir(), "libvirt-sock")
	_, _, err := Dial("qemu:///system?socket=" + sock)
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), sock) {
		t.Fatalf("Dial of a socket nobody serves: %v", err)
	}
}
