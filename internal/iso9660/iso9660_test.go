package iso9660

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf16"
)

// readDir reads the root directory a volume descriptor points at and
// returns its files (name → data), as a reader of the format would.
func readDir(t *testing.T, img []byte, descSector int, joliet bool) (string, map[string]string) {
	t.Helper()
	d := img[descSector*sector:]
	if string(d[1:6]) != "CD001" {
		t.Fatalf("sector %d is no volume descriptor", descSector)
	}
	if joliet && string(d[88:91]) != "%/E" {
		t.Fatal("no Joliet escape sequence")
	}
	if n := int(binary.LittleEndian.Uint32(d[80:])); n*sector != len(img) || int(binary.BigEndian.Uint32(d[84:])) != n {
		t.Fatalf("volume space size %d sectors, image %d bytes", n, len(img))
	}
	label := strings.TrimRight(string(d[40:72]), " ")
	if joliet {
		label = strings.TrimRight(decode(d[40:72]), " ")
	}
	root := d[156:]
	extent, size := binary.LittleEndian.Uint32(root[2:]), binary.LittleEndian.Uint32(root[10:])
	dir := img[int(extent)*sector : int(extent)*sector+int(size)]
	files := map[string]string{}
	for off := 0; off < len(dir) && dir[off] != 0; off += int(dir[off]) {
		r := dir[off:]
		id := r[33 : 33+int(r[32])]
		if r[25]&2 != 0 {
			continue // . and ..
		}
		name := string(id)
		if joliet {
			name = decode(id)
		}
		ext, n := binary.LittleEndian.Uint32(r[2:]), binary.LittleEndian.Uint32(r[10:])
		if binary.BigEndian.Uint32(r[6:]) != ext || binary.BigEndian.Uint32(r[14:]) != n {
			t.Fatalf("%s: both-endian fields disagree", name)
		}
		files[strings.TrimSuffix(name, ";1")] = string(img[int(ext)*sector : int(ext)*sector+int(n)])
	}
	return label, files
}

func decode(b []byte) string {
	u := make([]uint16, len(b)/2)
	for i := range u {
		u[i] = binary.BigEndian.Uint16(b[2*i:])
	}
	return string(utf16.Decode(u))
}

var cidata = []File{
	{"user-data", []byte("#cloud-config\nhostname: vm\n")},
	{"meta-data", []byte("instance-id: \"uid\"\n")},
	{"network-config", bytes.Repeat([]byte("x"), 5000)}, // three sectors
	{"empty", nil},
}

func TestJolietNamesAndData(t *testing.T) {
	var buf bytes.Buffer
	if err := Write(&buf, "cidata", cidata, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	label, files := readDir(t, buf.Bytes(), svdSector, true)
	if label != "cidata" || len(files) != len(cidata) {
		t.Fatalf("Joliet: label %q, files %v", label, files)
	}
	for _, f := range cidata {
		if files[f.Name] != string(f.Data) {
			t.Errorf("Joliet %s: %q, want %q", f.Name, files[f.Name], f.Data)
		}
	}
	label, files = readDir(t, buf.Bytes(), pvdSector, false)
	if label != "cidata" || files["USER_DAT."] != string(cidata[0].Data) || files["NETWORK_."] != string(cidata[2].Data) {
		t.Fatalf("primary: label %q, files %v", label, files)
	}
}

func TestShortNamesStayUnique(t *testing.T) {
	var buf bytes.Buffer
	err := Write(&buf, "v", []File{{"user-data-1", []byte("a")}, {"user-data-2", []byte("b")}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	_, files := readDir(t, buf.Bytes(), pvdSector, false)
	if len(files) != 2 {
		t.Fatalf("primary names collide: %v", files)
	}
}

func TestBadNames(t *testing.T) {
	for _, files := range [][]File{{{Name: ""}}, {{Name: "a/b"}}, {{Name: strings.Repeat("n", 65)}}, {{Name: "a"}, {Name: "a"}}} {
		if err := Write(&bytes.Buffer{}, "v", files, time.Now()); err == nil {
			t.Errorf("Write(%q) accepted", files[0].Name)
		}
	}
}

// TestXorrisoReadsIt: where Debian's xorriso is installed, it reads the
// same names, label and contents.
func TestXorrisoReadsIt(t *testing.T) {
	if _, err := exec.LookPath("xorriso"); err != nil {
		t.Skip("xorriso is not installed")
	}
	dir := t.TempDir()
	var buf bytes.Buffer
	if err := Write(&buf, "cidata", cidata, time.Now()); err != nil {
		t.Fatal(err)
	}
	iso := filepath.Join(dir, "c.iso")
	if err := os.WriteFile(iso, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("xorriso", "-indev", iso, "-osirrox", "on", "-extract", "/", filepath.Join(dir, "x")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Volume id    : 'cidata'") {
		t.Fatalf("xorriso: %v\n%s", err, out)
	}
	for _, f := range cidata {
		got, err := os.ReadFile(filepath.Join(dir, "x", f.Name))
		if err != nil || !bytes.Equal(got, f.Data) {
			t.Errorf("xorriso extracted %s: %q, %v", f.Name, got, err)
		}
	}
}
