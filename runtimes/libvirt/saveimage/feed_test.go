package saveimage

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const cloneXML = "<domain type='kvm'><name>clone-1</name><uuid>6f3b0a52-9c0e-4f0b-8d1a-0c3b2a1d4e5f</uuid></domain>"

// template writes a template image whose stream is larger than a 1 MiB
// pipe, so that the feed really waits on its reader, and returns its path,
// header and stream.
func template(t *testing.T) (string, *Image, []byte) {
	t.Helper()
	stream := randomBytes(t, 3<<20+4321)
	path := testImage{xml: domainXML, cookie: cookieXML, stream: stream}.write(t)
	img, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, img, stream
}

func startFeed(t *testing.T, ctx context.Context, cookie string) (*Feed, []byte) {
	t.Helper()
	path, img, stream := template(t)
	f, err := StartFeed(ctx, FeedSpec{
		FIFO: filepath.Join(t.TempDir(), "restore.fifo"), XML: cloneXML, Cookie: cookie,
		Template: path, Offset: img.StreamOffset,
	})
	if err != nil {
		t.Fatal(err)
	}
	return f, stream
}

// waitFeed fails the test if the feed outlives a generous bound: every
// path through it should end in milliseconds.
func waitFeed(t *testing.T, f *Feed) error {
	t.Helper()
	ended := make(chan error, 1)
	go func() { ended <- f.Wait() }()
	select {
	case err := <-ended:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("feed did not end within 5s")
		return nil
	}
}

func assertRemoved(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("fifo %s still there: %v", path, err)
	}
}

// TestFeedRoundTrip reads the FIFO as libvirt and qemu do together: the
// clone's header parses to the clone's XML and the template's cookie, and
// what follows is the template's stream, byte for byte.
func TestFeedRoundTrip(t *testing.T) {
	for _, cookie := range []string{cookieXML, ""} {
		t.Run("cookie="+cookie, func(t *testing.T) {
			f, stream := startFeed(t, context.Background(), cookie)
			st, err := os.Lstat(f.Path())
			if err != nil || st.Mode() != fs.ModeNamedPipe|0o600 {
				t.Fatalf("fifo mode %v (%v), want a named pipe 0600", st.Mode(), err)
			}
			r, err := os.Open(f.Path())
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			img, err := Parse(r)
			if err != nil {
				t.Fatal(err)
			}
			rest, err := io.ReadAll(r)
			if err != nil {
				t.Fatal(err)
			}
			if err := waitFeed(t, f); err != nil {
				t.Fatalf("Wait: %v", err)
			}
			want := Image{XML: cloneXML, Cookie: cookie, Version: 2, WasRunning: true, StreamOffset: streamAlign}
			if *img != want {
				t.Fatalf("clone header %+v, want %+v", *img, want)
			}
			if !bytes.Equal(rest, stream) {
				t.Fatalf("stream after the header: %d bytes, differs from the template's %d", len(rest), len(stream))
			}
			assertRemoved(t, f.Path())
		})
	}
}

// TestFeedCancelWithoutReader: libvirt never opened the FIFO (the restore
// failed first); ending ctx ends the blocked open and removes the FIFO.
func TestFeedCancelWithoutReader(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	f, _ := startFeed(t, ctx, cookieXML)
	time.Sleep(20 * time.Millisecond) // let the open block
	cancel()
	if err := waitFeed(t, f); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), f.Path()) {
		t.Fatalf("Wait = %v, want context.Canceled naming the fifo", err)
	}
	assertRemoved(t, f.Path())
}

func TestFeedAbortWithoutReader(t *testing.T) {
	f, _ := startFeed(t, context.Background(), cookieXML)
	if err := f.Abort(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Abort = %v, want context.Canceled", err)
	}
	assertRemoved(t, f.Path())
}

// TestFeedCancelStalledReader: the reader keeps the FIFO open but stops
// reading (qemu hung mid-load); ending ctx still ends the blocked write.
func TestFeedCancelStalledReader(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	f, _ := startFeed(t, ctx, cookieXML)
	r, err := os.Open(f.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := Parse(r); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // let the pipe fill
	cancel()
	if err := waitFeed(t, f); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want context.Canceled", err)
	}
	assertRemoved(t, f.Path())
}

// TestFeedReaderLeaves: libvirtd read the header and closed the FIFO (it
// refused the XML); the feed reports EPIPE, naming the FIFO.
func TestFeedReaderLeaves(t *testing.T) {
	f, _ := startFeed(t, context.Background(), cookieXML)
	r, err := os.Open(f.Path())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(r, make([]byte, headerSize)); err != nil {
		t.Fatal(err)
	}
	r.Close()
	err = waitFeed(t, f)
	if !errors.Is(err, syscall.EPIPE) || !strings.Contains(err.Error(), f.Path()) {
		t.Fatalf("Wait = %v, want EPIPE naming the fifo", err)
	}
	assertRemoved(t, f.Path())
}

// TestStartFeedRefuses: bad input fails at once and leaves no FIFO, and an
// existing path is never taken over.
func TestStartFeedRefuses(t *testing.T) {
	path, img, _ := template(t)
	dir := t.TempDir()
	taken := filepath.Join(dir, "taken")
	if err := os.WriteFile(taken, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := FeedSpec{FIFO: filepath.Join(dir, "fifo"), XML: cloneXML, Cookie: cookieXML, Template: path, Offset: img.StreamOffset}
	tests := []struct {
		name string
		edit func(*FeedSpec)
	}{
		{"fifo path exists", func(s *FeedSpec) { s.FIFO = taken }},
		{"no template", func(s *FeedSpec) { s.Template = filepath.Join(dir, "missing") }},
		{"offset inside the header", func(s *FeedSpec) { s.Offset = 10 }},
		{"offset past the end", func(s *FeedSpec) { s.Offset = img.Size + 1 }},
		{"empty XML", func(s *FeedSpec) { s.XML = "" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := good
			tt.edit(&spec)
			if f, err := StartFeed(context.Background(), spec); err == nil {
				f.Abort()
				t.Fatal("StartFeed succeeded")
			}
			assertRemoved(t, good.FIFO)
			if b, err := os.ReadFile(taken); err != nil || string(b) != "keep" {
				t.Fatalf("existing file changed: %q, %v", b, err)
			}
		})
	}
}
