package saveimage

import (
	"bytes"
	"io"
	"os"
	"testing"
)

// TestSpliceMovesStream pins the zero-copy path: on the test's file system
// splice works, so the io.Copy fallback is not what the feed tests pass on.
func TestSpliceMovesStream(t *testing.T) {
	path, img, stream := template(t)
	src, err := openStream(path, img.StreamOffset)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(r)
		got <- b
	}()
	if err := src.splice(w); err != nil {
		t.Fatalf("splice: %v", err)
	}
	w.Close()
	if b := <-got; !bytes.Equal(b, stream) {
		t.Fatalf("spliced %d bytes, differ from the %d-byte stream", len(b), len(stream))
	}
}
