package saveimage

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadAccepts(t *testing.T) {
	stream := []byte("QEVM\x00\x00\x00\x03 migration stream")
	tests := []struct {
		name       string
		img        testImage
		wantCookie string
	}{
		{"with cookie", testImage{xml: domainXML, cookie: cookieXML, stream: stream}, cookieXML},
		{"without cookie", testImage{xml: domainXML, stream: stream}, ""},
		// libvirt byte-swaps a version above 2 and tries again.
		{"other endianness", testImage{xml: domainXML, cookie: cookieXML, order: otherEndian(), stream: stream}, cookieXML},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw := tt.img.bytes()
			path := tt.img.write(t)
			img, err := Read(path)
			if err != nil {
				t.Fatal(err)
			}
			want := Image{
				XML: domainXML, Cookie: tt.wantCookie, Version: 2, WasRunning: true,
				StreamOffset: int64(len(raw) - len(stream)), Size: int64(len(raw)),
			}
			if *img != want {
				t.Fatalf("Read = %+v\nwant %+v", *img, want)
			}
			if err := img.Clonable(); err != nil {
				t.Fatalf("Clonable: %v", err)
			}
			if got := raw[img.StreamOffset:]; !bytes.Equal(got, stream) {
				t.Fatalf("bytes at StreamOffset = %q, want the stream", got)
			}
		})
	}
}

func TestReadRefuses(t *testing.T) {
	tests := []struct {
		name    string
		raw     []byte
		want    error
		wantMsg string
	}{
		{"partial", testImage{magic: "LibvirtQemudPart", xml: domainXML}.bytes(), ErrIncomplete, "incomplete"},
		{"wrong magic", testImage{magic: "QEVM0000QEVM0000", xml: domainXML}.bytes(), ErrNotSaveImage, "magic"},
		{"version 3", testImage{version: 3, xml: domainXML}.bytes(), ErrVersion, "byte-swapped"},
		{"version 1", testImage{version: 1, xml: domainXML}.bytes(), ErrVersion, "version 1"},
		{"short header", testImage{xml: domainXML}.bytes()[:50], ErrTruncated, "header"},
		{"data_len past the end", testImage{xml: domainXML}.bytes()[:headerSize+100], ErrTruncated, "data_len"},
		{"cookie offset past data", testImage{xml: domainXML, cookie: cookieXML, cookieOffset: 1 << 20}.bytes(), ErrNotSaveImage, "cookieOffset"},
		{"XML without NUL", testImage{xml: domainXML, cookie: cookieXML, cookieOffset: 4}.bytes(), ErrNotSaveImage, "NUL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state")
			if err := os.WriteFile(path, tt.raw, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Read(path)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Read = %v, want %v", err, tt.want)
			}
			if msg := err.Error(); !strings.Contains(msg, path) || !strings.Contains(msg, tt.wantMsg) {
				t.Fatalf("error %q should name %s and say %q", msg, path, tt.wantMsg)
			}
		})
	}
}

func TestReadRefusesNonRegular(t *testing.T) {
	if _, err := Read(t.TempDir()); !errors.Is(err, ErrNotSaveImage) {
		t.Fatalf("Read(directory) = %v, want ErrNotSaveImage", err)
	}
}

func TestClonableRefuses(t *testing.T) {
	img, err := Read(testImage{xml: domainXML, compressed: 3, stream: []byte("xz")}.write(t))
	if err != nil {
		t.Fatal(err)
	}
	if img.Compressed != 3 {
		t.Fatalf("Compressed = %d, want 3", img.Compressed)
	}
	if err := img.Clonable(); !errors.Is(err, ErrCompressed) || !strings.Contains(err.Error(), "xz") {
		t.Fatalf("Clonable = %v, want ErrCompressed naming xz", err)
	}
	img, err = Read(testImage{xml: domainXML}.write(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := img.Clonable(); !errors.Is(err, ErrTruncated) {
		t.Fatalf("Clonable without a stream = %v, want ErrTruncated", err)
	}
}

// TestParseStopsAtStream: Parse leaves the reader where qemu would start.
func TestParseStopsAtStream(t *testing.T) {
	r := bytes.NewReader(testImage{xml: domainXML, cookie: cookieXML, stream: []byte("stream")}.bytes())
	img, err := Parse(r)
	if err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(r)
	if string(rest) != "stream" || img.Cookie != cookieXML || img.Size != 0 {
		t.Fatalf("after Parse: rest %q, image %+v", rest, img)
	}
}

// TestParseForgedDataLen: a data_len of 4 GiB in a short stream fails as
// truncated without reserving the 4 GiB first.
func TestParseForgedDataLen(t *testing.T) {
	raw := testImage{xml: domainXML, dataLen: 1<<32 - 1}.bytes()
	if _, err := Parse(bytes.NewReader(raw)); !errors.Is(err, ErrTruncated) {
		t.Fatalf("Parse = %v, want ErrTruncated", err)
	}
}

func TestCloneHeader(t *testing.T) {
	for _, cookie := range []string{cookieXML, ""} {
		head, err := cloneHeader(domainXML, cookie)
		if err != nil {
			t.Fatal(err)
		}
		img, err := Parse(bytes.NewReader(head))
		if err != nil {
			t.Fatalf("cookie %q: %v", cookie, err)
		}
		want := Image{XML: domainXML, Cookie: cookie, Version: 2, WasRunning: true, StreamOffset: streamAlign}
		if *img != want || len(head) != streamAlign {
			t.Fatalf("cookie %q: parsed %+v from %d bytes, want %+v from %d", cookie, *img, len(head), want, streamAlign)
		}
	}
	for _, bad := range [][2]string{{"", ""}, {"<domain>\x00</domain>", ""}, {domainXML, "a\x00b"}} {
		if _, err := cloneHeader(bad[0], bad[1]); err == nil {
			t.Errorf("cloneHeader(%q, %q) succeeded", bad[0], bad[1])
		}
	}
}
