package cidata_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/crimux/crimux/converter/cloudinit"
	"github.com/crimux/crimux/runtimes/libvirt/cidata"
)

// TestISO: the volume lands in the VM's directory, root's alone, an
// ISO 9660 image labelled cidata; a bad file name writes nothing.
func TestISO(t *testing.T) {
	dir := t.TempDir()
	p, err := cidata.ISO{}.WriteCIData(dir, cloudinit.Files{"meta-data": []byte("instance-id: x\n"), "user-data": []byte("#cloud-config\n{}\n")})
	if err != nil {
		t.Fatal(err)
	}
	if p != filepath.Join(dir, cidata.File) {
		t.Fatalf("path %s", p)
	}
	st, err := os.Stat(p)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("%v, mode %v: want 0600", err, st.Mode())
	}
	img, _ := os.ReadFile(p)
	if len(img) < 17*2048 || string(img[16*2048+1:16*2048+6]) != "CD001" || string(img[16*2048+40:16*2048+46]) != "cidata" {
		t.Fatal("not an ISO 9660 volume labelled cidata")
	}
	other := t.TempDir()
	if _, err := (cidata.ISO{}).WriteCIData(other, cloudinit.Files{"../escape": nil}); err == nil {
		t.Fatal("a file name with a slash was accepted")
	}
	if entries, _ := os.ReadDir(other); len(entries) != 0 {
		t.Fatalf("left %v", entries)
	}
}
