package qcow2

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestCheckOverlay: the header crimux wrote passes; one that a compromised
// qemu rewrote to name another backing file, a raw host file, or an
// external data file is refused, as is a link.
func TestCheckOverlay(t *testing.T) {
	dir := t.TempDir()
	want := Backing{Path: "/var/lib/crimux/images/sha256-ab/disk.qcow2", Format: "qcow2"}
	good := filepath.Join(dir, "good.qcow2")
	if err := CreateOverlay(good, want.Path, want.Format, 1<<30, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := CheckOverlay(good, want); err != nil {
		t.Fatalf("crimux's own overlay: %v", err)
	}
	rewrite := func(name, backing, format string, patch func([]byte)) string {
		p := filepath.Join(dir, name)
		if err := CreateOverlay(p, backing, format, 1<<30, 0o600); err != nil {
			t.Fatal(err)
		}
		if patch != nil {
			b, _ := os.ReadFile(p)
			patch(b)
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return p
	}
	link := filepath.Join(dir, "link.qcow2")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	for name, path := range map[string]string{
		"raw host file":  rewrite("shadow.qcow2", "/etc/shadow", "raw", nil),
		"other backing":  rewrite("other.qcow2", "/var/lib/crimux/images/sha256-cd/disk.qcow2", "qcow2", nil),
		"same name, raw": rewrite("fmt.qcow2", want.Path, "raw", nil),
		"data file bit":  rewrite("df.qcow2", want.Path, want.Format, func(b []byte) { b[79] |= incompatDataFile }),
		"data file ext":  rewrite("dfext.qcow2", want.Path, want.Format, func(b []byte) { binary.BigEndian.PutUint32(b[headerLength:], extDataFile) }),
		"not qcow2":      rewrite("zero.qcow2", want.Path, want.Format, func(b []byte) { copy(b, "\x00\x00\x00\x00") }),
		"a symlink":      link,
	} {
		t.Run(name, func(t *testing.T) {
			err := CheckOverlay(path, want)
			if err == nil {
				t.Fatal("accepted")
			}
			if name != "a symlink" && !errors.Is(err, ErrHeaderChanged) {
				t.Errorf("error %v is not ErrHeaderChanged", err)
			}
			t.Log(err)
		})
	}
}
