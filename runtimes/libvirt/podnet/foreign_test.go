package podnet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

// foreignManager is a Manager on temp dirs (no mounts: NewManager makes
// the netns dir a shared mount) whose one CNI plugin is a script logging
// each call's command, container ID, netns and interface; failDel makes
// DEL fail.
func foreignManager(t *testing.T) (m *Manager, netnsDir, calls, failDel string) {
	t.Helper()
	dir := t.TempDir()
	netnsDir, conf, bin := filepath.Join(dir, "netns"), filepath.Join(dir, "net.d"), filepath.Join(dir, "bin")
	calls, failDel = filepath.Join(dir, "calls"), filepath.Join(dir, "fail-del")
	for _, d := range []string{netnsDir, conf, bin} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeConf(t, conf, "10-pods.conflist", `{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"logcni"}]}`)
	script := fmt.Sprintf("#!/bin/sh\necho \"$CNI_COMMAND $CNI_CONTAINERID netns=$CNI_NETNS $CNI_IFNAME\" >> %s\n"+
		"if [ \"$CNI_COMMAND\" = DEL ] && [ -e %s ]; then echo '{\"code\":11,\"msg\":\"plugin down\"}'; exit 1; fi\n", calls, failDel)
	if err := os.WriteFile(filepath.Join(bin, "logcni"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	m = newManager(Config{ConfDir: conf, BinDirs: []string{bin}, CacheDir: filepath.Join(dir, "cache"), NetnsDir: netnsDir, Instance: "crimux-me"},
		libcni.NewCNIConfigWithCacheDir([]string{bin}, filepath.Join(dir, "cache"), nil), testLogger(t))
	return m, netnsDir, calls, failDel
}

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o444); err != nil {
		t.Fatal(err)
	}
}

func TestSplitNamespace(t *testing.T) {
	for _, tc := range []struct {
		name, inst, id, words string
	}{
		{"crimux-1234_abcdef09", "crimux-1234", "abcdef09", ""},
		{"other_ABC123", "other", "ABC123", ""},
		{"", "", "", "not a file name"},
		{"..", "", "", "not a file name"},
		{"a/b_c", "", "", "not a file name"},
		{"cni-1234", "", "", "<instance>_<sandbox ID>"},
		{"_abc", "", "", "<instance>_<sandbox ID>"},
		{"inst_", "", "", "<instance>_<sandbox ID>"},
		{"inst_ab-c", "", "", "letters and digits"},
		{"inst_a_b", "", "", "letters and digits"},
		{"inst_" + strings.Repeat("a", 200), "", "", "200 bytes"},
	} {
		inst, id, err := SplitNamespace(tc.name)
		if tc.words == "" {
			if err != nil || inst != tc.inst || id != tc.id {
				t.Errorf("SplitNamespace(%q) = %q, %q, %v; want %q, %q", tc.name, inst, id, err, tc.inst, tc.id)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.words) {
			t.Errorf("SplitNamespace(%q) = %v, want an error saying %q", tc.name, err, tc.words)
		}
	}
}

// TestAdoptNamespaceRenamesAnUnmountedOne: a foreign file (its namespace
// gone) becomes <this instance>_<sandbox ID>; this instance's own, a
// missing one and one whose new name is taken are refused, untouched.
func TestAdoptNamespaceRenamesAnUnmountedOne(t *testing.T) {
	m, dir, _, _ := foreignManager(t)
	touch(t, filepath.Join(dir, "crimux-other_abc1"))
	id, err := m.AdoptNamespace("crimux-other_abc1")
	if err != nil || id != "abc1" {
		t.Fatalf("AdoptNamespace = %q, %v", id, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "crimux-me_abc1")); err != nil {
		t.Fatalf("adopted namespace not under this instance's name: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "crimux-other_abc1")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("old name still there: %v", err)
	}
	own, foreign, _ := m.Namespaces()
	if own["abc1"] == "" || len(foreign) != 0 {
		t.Fatalf("Namespaces after adoption: own %v foreign %v", own, foreign)
	}

	touch(t, filepath.Join(dir, "crimux-third_abc1"))
	for name, words := range map[string]string{
		"crimux-me_abc1":    "this crimux's identity",
		"crimux-other_gone": "no such file",
		"crimux-third_abc1": "exists already",
		"../etc_passwd":     "not a file name",
	} {
		if _, err := m.AdoptNamespace(name); err == nil || !strings.Contains(err.Error(), words) {
			t.Errorf("AdoptNamespace(%q) = %v, want an error saying %q", name, err, words)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "crimux-third_abc1")); err != nil {
		t.Fatalf("a refused namespace was touched: %v", err)
	}
}

// TestAdoptNamespaceBindMountsAMountedOne: a live namespace cannot be
// renamed; it is mounted at the new name and the old mount goes. Needs
// root (skipped otherwise).
func TestAdoptNamespaceBindMountsAMountedOne(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: mounts a network namespace")
	}
	m, dir, _, _ := foreignManager(t)
	old := filepath.Join(dir, "crimux-other_abc2")
	if err := createNetNS(old); err != nil {
		t.Skipf("cannot make a network namespace here: %v", err)
	}
	t.Cleanup(func() { _ = removeNetNS(old); _ = removeNetNS(m.NetNSPath("abc2")) })
	if _, err := m.AdoptNamespace("crimux-other_abc2"); err != nil {
		t.Fatal(err)
	}
	if !isNetNS(m.NetNSPath("abc2")) {
		t.Fatal("the new name is no mounted namespace")
	}
	if _, err := os.Lstat(old); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("old name still there: %v", err)
	}
}

// TestDeleteNamespace: CNI DEL with the conf dir's config, the sandbox ID
// as container ID (netns empty: the file is no live namespace), then the
// file goes; a failed DEL keeps it; this instance's own is refused.
func TestDeleteNamespace(t *testing.T) {
	m, dir, calls, failDel := foreignManager(t)
	ctx := context.Background()
	touch(t, filepath.Join(dir, "crimux-other_abc3"))
	touch(t, filepath.Join(dir, "crimux-me_abc4"))
	touch(t, failDel)
	if err := m.DeleteNamespace(ctx, "crimux-other_abc3"); err == nil || !strings.Contains(err.Error(), "plugin down") {
		t.Fatalf("DeleteNamespace with DEL failing = %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "crimux-other_abc3")); err != nil {
		t.Fatalf("namespace removed although DEL failed: %v", err)
	}
	_ = os.Remove(failDel)
	if err := m.DeleteNamespace(ctx, "crimux-other_abc3"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "crimux-other_abc3")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("namespace file left: %v", err)
	}
	b, _ := os.ReadFile(calls)
	if want := "DEL abc3 netns= eth0\nDEL abc3 netns= eth0\n"; string(b) != want {
		t.Fatalf("CNI calls:\n%s\nwant:\n%s", b, want)
	}
	if err := m.DeleteNamespace(ctx, "crimux-me_abc4"); err == nil || !strings.Contains(err.Error(), "not foreign") {
		t.Fatalf("DeleteNamespace of this instance's own = %v", err)
	}
	if err := m.DeleteNamespace(ctx, "crimux-other_abc3"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("DeleteNamespace of a gone one = %v, want ErrNotExist", err)
	}
}
