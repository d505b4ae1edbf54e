package mountinfo

import "testing"

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`/mnt/a\040b`: "/mnt/a b",
		`/mnt/plain`:  "/mnt/plain",
		`/mnt/x\04`:   `/mnt/x\04`,
		`/mnt/\134z`:  `/mnt/\z`,
	} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestIsMountPoint(t *testing.T) {
	if ok, err := IsMountPoint("/proc"); err != nil || !ok {
		t.Fatalf("/proc: %v, %v; want a mount point", ok, err)
	}
	if ok, err := IsMountPoint(t.TempDir()); err != nil || ok {
		t.Fatalf("a temp dir: %v, %v; want none", ok, err)
	}
}
