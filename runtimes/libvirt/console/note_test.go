package console

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// streamLines reads a CRI log as "stream tag text" lines.
func streamLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if l == "" {
			continue
		}
		f := strings.SplitN(l, " ", 4)
		if len(f) != 4 {
			t.Fatalf("CRI log line %q", l)
		}
		out = append(out, strings.Join(f[1:], " "))
	}
	return out
}

// TestNoteBetweenConsoleLines: a note goes to stderr after the console's
// complete lines, never inside a line the guest has not ended.
func TestNoteBetweenConsoleLines(t *testing.T) {
	v := newVM(t)
	if err := os.MkdirAll(filepath.Dir(v.dst), 0o755); err != nil {
		t.Fatal(err)
	}
	cs := New(discard())
	cs.Start("c1", v.dir, v.dst)
	defer cs.StopAll()
	appendTo(t, v.src, "line 1\nlog")
	if err := cs.Note("c1", v.dst, "crimux: a note\nof two lines"); err != nil {
		t.Fatal(err)
	}
	appendTo(t, v.src, "in: \n")
	want := []string{"stdout F line 1", "stderr F crimux: a note", "stderr F of two lines", "stdout F login: "}
	waitFor(t, "the console's second line", func() bool { return len(streamLines(t, v.dst)) == len(want) })
	if got := streamLines(t, v.dst); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("CRI log %q, want %q", got, want)
	}
}

// TestNoteWithoutCopier: a VM not running gets its note appended.
func TestNoteWithoutCopier(t *testing.T) {
	v := newVM(t)
	if err := os.MkdirAll(filepath.Dir(v.dst), 0o755); err != nil {
		t.Fatal(err)
	}
	appendTo(t, v.dst, "2026-01-01T00:00:00Z stdout F before\n")
	cs := New(discard())
	if err := cs.Note("c1", v.dst, "crimux: importing"); err != nil {
		t.Fatal(err)
	}
	if got := streamLines(t, v.dst); strings.Join(got, "|") != "stdout F before|stderr F crimux: importing" {
		t.Fatalf("CRI log %q", got)
	}
	if err := cs.Note("c1", "", "nowhere"); err != nil {
		t.Fatalf("a VM without a log: %v", err)
	}
}
