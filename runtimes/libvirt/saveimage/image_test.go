package saveimage

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

// testImage lays out a save image the way libvirt 9.0's
// virQEMUSaveDataWrite does (64 KiB of padding, cookieOffset only with a
// cookie), written independently of the package's own encoder so that the
// two check each other. Fields left zero get libvirt's values.
type testImage struct {
	magic        string
	version      uint32
	dataLen      uint32 // 0: computed
	cookieOffset uint32 // 0: computed
	compressed   uint32
	order        binary.ByteOrder // nil: host order
	xml, cookie  string
	stream       []byte
}

func (ti testImage) bytes() []byte {
	if ti.magic == "" {
		ti.magic = "LibvirtQemudSave"
	}
	if ti.version == 0 {
		ti.version = 2
	}
	if ti.order == nil {
		ti.order = binary.NativeEndian
	}
	data := append([]byte(ti.xml), 0)
	if ti.cookie != "" {
		if ti.cookieOffset == 0 {
			ti.cookieOffset = uint32(len(data))
		}
		data = append(data, ti.cookie...)
		data = append(data, 0)
	}
	data = append(data, make([]byte, 64*1024)...)
	if ti.dataLen == 0 {
		ti.dataLen = uint32(len(data))
	}
	var b bytes.Buffer
	b.WriteString(ti.magic)
	for _, v := range []uint32{ti.version, ti.dataLen, 1, ti.compressed, ti.cookieOffset} {
		binary.Write(&b, ti.order, v)
	}
	b.Write(make([]byte, 14*4))
	b.Write(data)
	b.Write(ti.stream)
	return b.Bytes()
}

func (ti testImage) write(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state")
	if err := os.WriteFile(path, ti.bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// otherEndian is the byte order of a host unlike this one.
func otherEndian() binary.ByteOrder {
	if binary.NativeEndian.Uint16([]byte{1, 0}) == 1 {
		return binary.BigEndian
	}
	return binary.LittleEndian
}

const (
	domainXML = "<domain type='kvm'><name>template</name></domain>"
	cookieXML = "<qemu-save-cookie><cpu mode='custom'/></qemu-save-cookie>"
)
