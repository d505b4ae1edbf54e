package qcow2

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crimux/crimux/internal/testbed"
)

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(testbed.Tool(t, name), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// info is what qemu-img says of an image.
type info struct {
	VirtualSize    int64  `json:"virtual-size"`
	ClusterSize    int64  `json:"cluster-size"`
	Format         string `json:"format"`
	Backing        string `json:"backing-filename"`
	BackingFormat  string `json:"backing-filename-format"`
	FormatSpecific struct {
		Data struct {
			Compat       string `json:"compat"`
			RefcountBits int    `json:"refcount-bits"`
			Corrupt      bool   `json:"corrupt"`
		} `json:"data"`
	} `json:"format-specific"`
}

func infoOf(t *testing.T, path string) info {
	t.Helper()
	var i info
	if err := json.Unmarshal([]byte(run(t, "qemu-img", "info", "--output=json", path)), &i); err != nil {
		t.Fatal(err)
	}
	return i
}

// backings are a qcow2 and a raw disk of size bytes whose first sector,
// and the 64 KiB at 1 MiB when they fit, hold 0x5a.
func backings(t *testing.T, dir string, size string) map[string]string {
	raw := filepath.Join(dir, "base.raw")
	run(t, "qemu-img", "create", "-q", "-f", "raw", raw, size)
	run(t, "qemu-io", "-f", "raw", "-c", "write -P 0x5a 0 512", raw)
	if size != "512" {
		run(t, "qemu-io", "-f", "raw", "-c", "write -P 0x5a 1M 64k", raw)
	}
	q := filepath.Join(dir, "base.qcow2")
	run(t, "qemu-img", "convert", "-f", "raw", "-O", "qcow2", raw, q)
	return map[string]string{"raw": raw, "qcow2": q}
}

// TestOverlayIsWhatQemuImgMakes: for both backing formats and sizes from
// one sector to several L2 tables' worth, qemu-img finds the overlay
// clean, with the size, backing file and format qemu-img's own overlay of
// the same backing has, and reading it reads the backing file.
func TestOverlayIsWhatQemuImgMakes(t *testing.T) {
	for _, size := range []string{"512", "70M", "1537M"} {
		dir := t.TempDir()
		for format, base := range backings(t, dir, size) {
			want := filepath.Join(dir, "want-"+format)
			run(t, "qemu-img", "create", "-q", "-f", "qcow2", "-b", base, "-F", format, want)
			wi := infoOf(t, want)
			got := filepath.Join(dir, "got-"+format)
			if err := CreateOverlay(got, base, format, wi.VirtualSize, 0o600); err != nil {
				t.Fatal(err)
			}
			run(t, "qemu-img", "check", "-f", "qcow2", got)
			gi := infoOf(t, got)
			if gi != wi {
				t.Fatalf("%s over %s: qemu-img info\n got %+v\nwant %+v", size, format, gi, wi)
			}
			run(t, "qemu-img", "compare", "-f", "qcow2", "-F", format, got, base)
			if fi, _ := os.Stat(got); fi.Mode().Perm() != 0o600 {
				t.Fatalf("mode %v, want 0600", fi.Mode().Perm())
			}
		}
	}
}

// TestGuestWritesLand: what is written to the overlay reads back from it,
// the rest still from the backing file, which is left as it was, and the
// image stays clean.
func TestGuestWritesLand(t *testing.T) {
	dir := t.TempDir()
	base := backings(t, dir, "1G")["qcow2"]
	before := run(t, "qemu-img", "info", base)
	got := filepath.Join(dir, "overlay")
	if err := CreateOverlay(got, base, "qcow2", 1<<30, 0o600); err != nil {
		t.Fatal(err)
	}
	run(t, "qemu-io", "-f", "qcow2", "-c", "write -P 0xa5 0 128k", "-c", "write -P 0x3c 700M 64k", got)
	run(t, "qemu-img", "check", "-f", "qcow2", got)
	out := run(t, "qemu-io", "-f", "qcow2",
		"-c", "read -P 0xa5 0 128k", "-c", "read -P 0x5a 1M 64k", "-c", "read -P 0x3c 700M 64k", "-c", "read -P 0 900M 64k", got)
	if strings.Contains(out, "Pattern verification failed") {
		t.Fatalf("reads of the overlay:\n%s", out)
	}
	if after := run(t, "qemu-img", "info", base); after != before {
		t.Fatalf("the backing file changed:\n%s\n%s", before, after)
	}
}

func TestOverlayRefusesWhatItCannotWrite(t *testing.T) {
	dir := t.TempDir()
	for name, c := range map[string]struct {
		backing, format string
		size            int64
	}{
		"format":    {"/b", "vmdk", 1 << 20},
		"no name":   {"", "raw", 1 << 20},
		"long name": {"/" + strings.Repeat("b", maxBackingName), "raw", 1 << 20},
		"no size":   {"/b", "raw", 0},
		"huge":      {"/b", "raw", maxVirtualSize + 1},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := CreateOverlay(p, c.backing, c.format, c.size, 0o600); err == nil {
			t.Errorf("%s: no error", name)
		}
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s: a file was left: %v", name, err)
		}
	}
	existing := filepath.Join(dir, "existing")
	if err := os.WriteFile(existing, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := CreateOverlay(existing, "/b", "raw", 1<<20, 0o600); err == nil {
		t.Fatal("an existing file was overwritten")
	}
	if b, _ := os.ReadFile(existing); !bytes.Equal(b, []byte("data")) {
		t.Fatalf("existing file now %q", b)
	}
}
