// Package iso9660 writes small ISO 9660 images: one root directory of
// regular files, with Joliet names (so "meta-data" stays "meta-data" for
// Linux and every other reader) and ISO level 1 names beside them. It is
// what cloud-init's NoCloud "cidata" volume needs, written in a few
// microseconds without an external tool (ECMA-119; Joliet: the
// supplementary volume descriptor with UCS-2 names).
//
// Layout, in 2048-byte sectors:
//
//	0-15   system area (zeros)
//	16     primary volume descriptor
//	17     Joliet supplementary volume descriptor
//	18     volume descriptor set terminator
//	19-22  path tables: primary L and M, Joliet L and M
//	23     primary root directory
//	24     Joliet root directory
//	25-    the files, each from a sector boundary
package iso9660

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
	"unicode/utf16"
)

const sector = 2048

const (
	pvdSector, svdSector, termSector = 16, 17, 18
	pathSector                       = 19 // four: primary L, M, Joliet L, M
	rootSector, jolietRootSector     = 23, 24
	firstFileSector                  = 25
	pathTableSize                    = 10 // the root's record alone
)

// File is one file of the image.
type File struct {
	Name string
	Data []byte
}

// Write writes an image labelled volume holding files (at most as many
// as fit in one directory sector; names up to 64 characters, no '/').
func Write(w io.Writer, volume string, files []File, now time.Time) error {
	files = append([]File(nil), files...)
	sort.Slice(files, func(i, j int) bool { return files[i].Name < files[j].Name })
	placed, total, err := place(files)
	if err != nil {
		return err
	}
	img := make([]byte, total*sector)
	primary, joliet, err := directories(placed, now)
	if err != nil {
		return err
	}
	copy(img[rootSector*sector:], primary)
	copy(img[jolietRootSector*sector:], joliet)
	for _, p := range placed {
		copy(img[p.sector*sector:], p.Data)
	}
	for i, table := range [][]byte{pathTable(rootSector, false), pathTable(rootSector, true),
		pathTable(jolietRootSector, false), pathTable(jolietRootSector, true)} {
		copy(img[(pathSector+i)*sector:], table)
	}
	copy(img[pvdSector*sector:], descriptor(1, volume, total, pathSector, pathSector+1, rootSector, now))
	copy(img[svdSector*sector:], descriptor(2, volume, total, pathSector+2, pathSector+3, jolietRootSector, now))
	copy(img[termSector*sector:], append([]byte{255}, "CD001\x01"...))
	_, err = w.Write(img)
	return err
}

// placed is a file with its sector and level 1 name.
type placed struct {
	File
	sector int
	short  string
}

// place gives every file its sectors and a unique level 1 name.
func place(files []File) ([]placed, int, error) {
	out := make([]placed, 0, len(files))
	used := map[string]bool{}
	next := firstFileSector
	for i, f := range files {
		if f.Name == "" || len(f.Name) > 64 || strings.ContainsAny(f.Name, "/\x00;") {
			return nil, 0, fmt.Errorf("iso9660: bad file name %q", f.Name)
		}
		if i > 0 && files[i-1].Name == f.Name {
			return nil, 0, fmt.Errorf("iso9660: file %q twice", f.Name)
		}
		short := shortName(f.Name, used)
		out = append(out, placed{File: f, sector: next, short: short})
		next += (len(f.Data) + sector - 1) / sector
	}
	if next == firstFileSector {
		next++ // a volume of empty files still ends after its directories
	}
	return out, next, nil
}

// shortName is an ISO level 1 name (8.3, d-characters) not used yet.
func shortName(name string, used map[string]bool) string {
	base := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9'):
			return r
		}
		return '_'
	}, name)
	if len(base) > 8 {
		base = base[:8]
	}
	s := base + ".;1"
	for n := 1; used[s]; n++ {
		suffix := fmt.Sprint(n)
		s = base[:min(len(base), 8-len(suffix))] + suffix + ".;1"
	}
	used[s] = true
	return s
}

// directories are the primary and the Joliet root directory sectors.
func directories(files []placed, now time.Time) ([]byte, []byte, error) {
	var primary, joliet bytes.Buffer
	for _, d := range []struct {
		buf    *bytes.Buffer
		sector int
	}{{&primary, rootSector}, {&joliet, jolietRootSector}} {
		d.buf.Write(record([]byte{0}, d.sector, sector, true, now))
		d.buf.Write(record([]byte{1}, d.sector, sector, true, now))
	}
	// Records sorted by their identifier, in each directory.
	byShort := append([]placed(nil), files...)
	sort.Slice(byShort, func(i, j int) bool { return byShort[i].short < byShort[j].short })
	for _, f := range byShort {
		primary.Write(record([]byte(f.short), f.sector, len(f.Data), false, now))
	}
	for _, f := range files {
		joliet.Write(record(ucs2(f.Name+";1"), f.sector, len(f.Data), false, now))
	}
	if primary.Len() > sector || joliet.Len() > sector {
		return nil, nil, fmt.Errorf("iso9660: %d files do not fit one directory sector", len(files))
	}
	return primary.Bytes(), joliet.Bytes(), nil
}

// record is a directory record.
func record(id []byte, extent, size int, dir bool, now time.Time) []byte {
	n := 33 + len(id)
	if n%2 == 1 {
		n++
	}
	r := make([]byte, n)
	r[0] = byte(n)
	both32(r[2:], uint32(extent))
	both32(r[10:], uint32(size))
	copy(r[18:25], recordDate(now))
	if dir {
		r[25] = 2
	}
	both16(r[28:], 1)
	r[32] = byte(len(id))
	copy(r[33:], id)
	return r
}

// pathTable is a path table of the root alone (bigEndian: the M table).
func pathTable(root int, bigEndian bool) []byte {
	t := make([]byte, pathTableSize)
	t[0] = 1
	var order binary.ByteOrder = binary.LittleEndian
	if bigEndian {
		order = binary.BigEndian
	}
	order.PutUint32(t[2:], uint32(root))
	order.PutUint16(t[6:], 1)
	return t
}

// descriptor is the primary (kind 1) or the Joliet supplementary (kind 2)
// volume descriptor.
func descriptor(kind byte, volume string, total, lTable, mTable, root int, now time.Time) []byte {
	d := make([]byte, sector)
	d[0] = kind
	copy(d[1:], "CD001\x01")
	text := func(off, size int, s string) {
		if kind == 2 {
			copy(d[off:off+size], padUCS2(s, size))
			return
		}
		copy(d[off:off+size], s+strings.Repeat(" ", size-min(len(s), size)))
	}
	text(8, 32, "LINUX")
	text(40, 32, volume)
	both32(d[80:], uint32(total))
	if kind == 2 {
		copy(d[88:], "%/E") // Joliet, UCS-2 level 3
	}
	both16(d[120:], 1)
	both16(d[124:], 1)
	both16(d[128:], sector)
	both32(d[132:], pathTableSize)
	binary.LittleEndian.PutUint32(d[140:], uint32(lTable))
	binary.BigEndian.PutUint32(d[148:], uint32(mTable))
	copy(d[156:190], record([]byte{0}, root, sector, true, now))
	for _, f := range [][2]int{{190, 128}, {318, 128}, {446, 128}, {574, 128}, {702, 37}, {739, 37}, {776, 37}} {
		text(f[0], f[1], "")
	}
	copy(d[813:], volumeDate(now))
	copy(d[830:], volumeDate(now))
	copy(d[847:], volumeDate(time.Time{}))
	copy(d[864:], volumeDate(time.Time{}))
	d[881] = 1
	return d
}

// recordDate is the 7-byte date of a directory record, in UTC.
func recordDate(t time.Time) []byte {
	t = t.UTC()
	return []byte{byte(t.Year() - 1900), byte(t.Month()), byte(t.Day()), byte(t.Hour()), byte(t.Minute()), byte(t.Second()), 0}
}

// volumeDate is the 17-byte date of a volume descriptor; the zero time
// is "not specified".
func volumeDate(t time.Time) []byte {
	if t.IsZero() {
		return append([]byte(strings.Repeat("0", 16)), 0)
	}
	return append([]byte(t.UTC().Format("20060102150405")+"00"), 0)
}

func ucs2(s string) []byte {
	u := utf16.Encode([]rune(s))
	b := make([]byte, 2*len(u))
	for i, c := range u {
		binary.BigEndian.PutUint16(b[2*i:], c)
	}
	return b
}

// padUCS2 is s in UCS-2, padded with spaces to size bytes.
func padUCS2(s string, size int) []byte {
	b := ucs2(s)
	if len(b) > size {
		b = b[:size]
	}
	for len(b) < size {
		b = append(b, 0, ' ')
	}
	return b
}

func both16(b []byte, v uint16) {
	binary.LittleEndian.PutUint16(b, v)
	binary.BigEndian.PutUint16(b[2:], v)
}

func both32(b []byte, v uint32) {
	binary.LittleEndian.PutUint32(b, v)
	binary.BigEndian.PutUint32(b[4:], v)
}
