package landlock

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// childEnv makes the test binary the confined child of TestRestrict.
const childEnv = "LANDLOCK_TEST_CHILD"

// TestMain runs the confined child: it restricts itself to reading the
// system's programs and writing in $allowed, then tries what it is given.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "" {
		os.Exit(m.Run())
	}
	allowed := os.Getenv("LANDLOCK_TEST_ALLOWED")
	rules := []Rule{{Path: allowed, Access: All}, {Path: "/nonexistent-is-left-out", Access: Read}, {Path: "/dev/null", Access: ReadWrite}}
	for _, p := range []string{"/usr", "/lib", "/lib64", "/bin", "/etc"} {
		rules = append(rules, Rule{Path: p, Access: Read})
	}
	if _, err := Restrict(rules, false); err != nil {
		os.Stderr.WriteString("restrict: " + err.Error())
		os.Exit(2)
	}
	// What the child is asked to do: cat a file, as a program it execs.
	out, err := exec.Command("/bin/cat", os.Getenv("LANDLOCK_TEST_READ")).CombinedOutput()
	if err != nil {
		os.Stdout.WriteString("denied: " + string(out) + " (" + err.Error() + ")")
		os.Exit(0)
	}
	os.Stdout.WriteString("read: " + string(out))
	os.Exit(0)
}

func TestRestrict(t *testing.T) {
	if ABI() == 0 {
		t.Skip("this kernel has no Landlock")
	}
	allowed, other := t.TempDir(), t.TempDir()
	for _, d := range []string{allowed, other} {
		if err := os.WriteFile(filepath.Join(d, "f"), []byte("secret of "+filepath.Base(d)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		path, want string
	}{
		{filepath.Join(allowed, "f"), "read: secret of " + filepath.Base(allowed)},
		{filepath.Join(other, "f"), "denied:"},
		// A link in the allowed directory to a file outside it.
		{link(t, filepath.Join(other, "f"), filepath.Join(allowed, "link")), "denied:"},
		{"/proc/self/environ", "denied:"},
	} {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), childEnv+"=1", "LANDLOCK_TEST_ALLOWED="+allowed, "LANDLOCK_TEST_READ="+c.path)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child reading %s: %v\n%s", c.path, err, out)
		}
		if !strings.HasPrefix(string(out), c.want) {
			t.Errorf("the confined child's cat %s: %q, want %q...", c.path, out, c.want)
		}
	}
}

func link(t *testing.T, target, at string) string {
	t.Helper()
	if err := os.Symlink(target, at); err != nil {
		t.Fatal(err)
	}
	return at
}

func TestHandledGrowsWithTheABI(t *testing.T) {
	if handled(1)&Access(1<<13) != 0 || handled(2)&Access(1<<13) == 0 || handled(3)&Access(1<<14) == 0 {
		t.Fatalf("handled: v1 %#x v2 %#x v3 %#x: REFER from v2, TRUNCATE from v3", handled(1), handled(2), handled(3))
	}
}
