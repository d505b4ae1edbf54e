package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crimux/crimux/runtimes/libvirt/store/rebuild"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
)

// storeCLI runs crimuxctl store with a fake libvirtd and returns the exit
// code, stdout, stderr and the URI it was asked to connect to.
func storeCLI(args ...string) (code int, stdout, stderr, uri string) {
	var out, errOut bytes.Buffer
	c := &cli{stdout: &out, stderr: &errOut, output: "table", endpoint: "unix:///none",
		libvirt: func(u string) (rebuild.Domains, func() error, error) {
			uri = u
			return virtfake.New(), func() error { return nil }, nil
		}}
	store, _ := lookup(commands(), "store")
	code = c.exit(c.runCommand("store", store, args))
	return code, out.String(), errOut.String(), uri
}

// damagedStateDir is a state dir whose store is empty (damaged), named
// as state_dir by a config file it returns.
func damagedStateDir(t *testing.T) (state, cfg string) {
	t.Helper()
	dir := t.TempDir()
	state = filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "vm.db"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg = filepath.Join(dir, "config.toml")
	toml := "state_dir = \"" + state + "\"\n[libvirt]\nuri = \"qemu:///system?socket=/run/x.sock\"\n"
	if err := os.WriteFile(cfg, []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	return state, cfg
}

// TestStoreRebuild: the config's state dir and libvirt URI are the
// defaults, the flags win; the damaged store is moved aside and the
// summary printed; -o json is the report.
func TestStoreRebuild(t *testing.T) {
	state, cfg := damagedStateDir(t)
	code, out, errOut, uri := storeCLI("rebuild", "--config", cfg, "--dry-run")
	if code != exitOK || uri != "qemu:///system?socket=/run/x.sock" || !strings.Contains(out, "dry run: nothing is changed") ||
		!strings.Contains(out, "would rebuild 0 sandboxes, 0 containers; 0 left alone") {
		t.Fatalf("dry run: exit %d, uri %q\n%s%s", code, uri, out, errOut)
	}
	code, out, errOut, uri = storeCLI("rebuild", "--config", cfg, "--libvirt-uri", "qemu:///system", "-o", "json")
	var rep rebuild.Report
	if code != exitOK || uri != "qemu:///system" || json.Unmarshal([]byte(out), &rep) != nil ||
		!strings.HasPrefix(rep.MovedTo, filepath.Join(state, "vm.db.damaged-")) || rep.Damage != "the file is empty" {
		t.Fatalf("rebuild: exit %d, uri %q\n%s%s", code, uri, out, errOut)
	}
	// The store is intact now: refused, exit 1, saying why.
	code, out, errOut, _ = storeCLI("rebuild", "--config", cfg)
	if code != exitCall || !strings.Contains(errOut, "is intact") || out != "" {
		t.Fatalf("rebuild of an intact store: exit %d\n%s%s", code, out, errOut)
	}
}

// TestStoreRebuildBadUsage: a missing config given, an unknown command or
// a state dir that is not crimux's are refused, naming what is wrong.
func TestStoreRebuildBadUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"rebuild", "--config", "/nonexistent/config.toml"}, exitCall, "/nonexistent/config.toml"},
		{[]string{"rebuild", "--config", "/dev/null", "--state-dir", t.TempDir()}, exitCall, "holds no crimux state"},
		{[]string{"rebuild", "--config", "/dev/null", "--state-dir", "/nonexistent"}, exitCall, "/nonexistent"},
		{[]string{"rebuild", "extra"}, exitUsage, "want 0 argument(s)"},
		{[]string{"fix"}, exitUsage, `unknown command "fix"`},
		{nil, exitUsage, "Usage: crimuxctl store rebuild"},
	} {
		code, out, errOut, _ := storeCLI(tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, want %d saying %q\n%s%s", tc.args, code, tc.code, tc.want, out, errOut)
		}
	}
}
