package main

import (
	"bytes"
	"fmt"
	"path"
	"sort"

	"github.com/crimux/crimux/test/images/oci"
)

// Mode bits of cpio entries (stat(2)'s S_IF* values).
const (
	cpioDir     = 0o040000
	cpioReg     = 0o100000
	cpioSymlink = 0o120000
	cpioChar    = 0o020000
)

// cpioEntry is one file of an initramfs.
type cpioEntry struct {
	name         string // relative, no leading slash
	mode         uint32 // S_IF* | permissions
	data         []byte // file contents, or a symlink's target
	major, minor uint32 // device number of a device node
}

// cpioArchive collects the files of an initramfs and writes them as a
// deterministic "newc" cpio archive (what the kernel unpacks): entries
// sorted by name, so parents come before their children, inode numbers in
// that order, every mtime the oci.Epoch, owner root.
type cpioArchive struct {
	entries map[string]cpioEntry
}

func newCpio() *cpioArchive { return &cpioArchive{entries: map[string]cpioEntry{}} }

func (a *cpioArchive) add(e cpioEntry) {
	e.name = oci.Clean(e.name)
	if parent := path.Dir(e.name); parent != "." {
		if _, ok := a.entries[parent]; !ok {
			a.dir(parent, 0o755)
		}
	}
	a.entries[e.name] = e
}

func (a *cpioArchive) dir(name string, perm uint32) {
	a.add(cpioEntry{name: name, mode: cpioDir | perm})
}

func (a *cpioArchive) file(name string, perm uint32, data []byte) {
	a.add(cpioEntry{name: name, mode: cpioReg | perm, data: data})
}

func (a *cpioArchive) symlink(name, target string) {
	a.add(cpioEntry{name: name, mode: cpioSymlink | 0o777, data: []byte(target)})
}

func (a *cpioArchive) charDev(name string, perm, major, minor uint32) {
	a.add(cpioEntry{name: name, mode: cpioChar | perm, major: major, minor: minor})
}

func (a *cpioArchive) bytes() []byte {
	names := make([]string, 0, len(a.entries))
	for name := range a.entries {
		names = append(names, name)
	}
	sort.Strings(names)
	var b bytes.Buffer
	mtime := uint32(oci.Epoch.Unix())
	for i, name := range names {
		e := a.entries[name]
		nlink := uint32(1)
		if e.mode&0o170000 == cpioDir {
			nlink = 2
		}
		writeNewc(&b, uint32(i+1), e.mode, nlink, mtime, e.major, e.minor, name, e.data)
	}
	writeNewc(&b, 0, 0, 1, 0, 0, 0, "TRAILER!!!", nil)
	return b.Bytes()
}

// writeNewc writes one "070701" header, the name and the data, each padded
// to a multiple of 4 bytes.
func writeNewc(b *bytes.Buffer, ino, mode, nlink, mtime, major, minor uint32, name string, data []byte) {
	pad := func() {
		for b.Len()%4 != 0 {
			b.WriteByte(0)
		}
	}
	fmt.Fprintf(b, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, mode, 0, 0, nlink, mtime, len(data), 0, 0, major, minor, len(name)+1, 0)
	b.WriteString(name)
	b.WriteByte(0)
	pad()
	b.Write(data)
	pad()
}
