package vmimage

import (
	"archive/tar"
	"bytes"
	"testing"
)

// TestSniffVMEntries: the top layer's first entries tell a VM image (a
// file under disk/, boot/vmlinuz) from a container image, within the
// bounds.
func TestSniffVMEntries(t *testing.T) {
	layer := func(names ...string) *tar.Reader {
		var b bytes.Buffer
		w := tar.NewWriter(&b)
		for _, n := range names {
			typ, body := byte(tar.TypeReg), []byte("x")
			if n[len(n)-1] == '/' {
				typ, body = tar.TypeDir, nil
			}
			if err := w.WriteHeader(&tar.Header{Name: n, Typeflag: typ, Size: int64(len(body)), Mode: 0o644}); err != nil {
				t.Fatal(err)
			}
			w.Write(body)
		}
		w.Close()
		return tar.NewReader(&b)
	}
	many := make([]string, sniffEntries+1)
	for i := range many {
		many[i] = "etc/f" + string(rune('a'+i))
	}
	for name, tc := range map[string]struct {
		tr   *tar.Reader
		want bool
	}{
		"containerDisk":        {layer("disk/", "disk/disk.qcow2"), true},
		"./-prefixed":          {layer("./disk/", "./disk/root.img"), true},
		"kernel":               {layer("boot/", "boot/vmlinuz", "boot/initrd.img"), true},
		"container image":      {layer("bin/", "bin/sh", "etc/passwd"), false},
		"disk dir, no file":    {layer("disk/"), false},
		"deeper under disk/":   {layer("disk/a/", "disk/a/b.img"), false},
		"past the entry bound": {layer(append(many, "disk/d.img")...), false},
		"empty":                {layer(), false},
	} {
		got, err := sniffVMEntries(tc.tr)
		if err != nil || got != tc.want {
			t.Errorf("%s: %v, %v; want %v", name, got, err, tc.want)
		}
	}
}
