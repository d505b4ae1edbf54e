package virtiofs

import (
	"net"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/crimux/crimux/converter/vm"
)

// TestConnectedPair: the listening end accepts the connection already made
// to it, and nothing is left in the directory.
func TestConnectedPair(t *testing.T) {
	dir := t.TempDir()
	listener, client, err := connectedPair(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	defer client.Close()
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("left in %s: %v", dir, left)
	}
	l, err := net.FileListener(listener)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	srv, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c, err := net.FileConn(client)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := srv.Read(buf); err != nil || string(buf) != "ping" {
		t.Fatalf("read %q, %v", buf, err)
	}
}

// TestHelperArgs: the helper is told the directory, its mode and what the
// share acts as; virtiofsd serves the listening socket with its own
// sandbox, without the capabilities the container was not given. A share
// without restrictions is served with no user, no squash and every
// capability.
func TestHelperArgs(t *testing.T) {
	restricted := vm.ShareRights{User: &vm.ShareUser{UID: 1000, GID: 3000, Groups: []uint32{2000}}, Squash: true, Drop: vm.VirtiofsdCaps}
	for _, tc := range []struct {
		name string
		sh   vm.Share
		want string
	}{
		{"no restrictions: as before", vm.Share{HostPath: "/v/cm", ReadOnly: true},
			"virtiofsd-sandbox /v/cm ro -- /usr/lib/qemu/virtiofsd --fd=3 -o source=/v/cm,cache=auto,sandbox=namespace,no_posix_lock,no_flock,no_xattr,log_level=warn --thread-pool-size=4"},
		{"root without MKNOD and FSETID", vm.Share{HostPath: "/v/data", Rights: vm.ShareRights{Drop: []string{"fsetid", "mknod"}}},
			"virtiofsd-sandbox /v/data rw -- /usr/lib/qemu/virtiofsd --fd=3 -o source=/v/data,cache=auto,sandbox=namespace,no_posix_lock,no_flock,no_xattr,log_level=warn,modcaps=-fsetid:-mknod --thread-pool-size=4"},
		{"root without SETUID: squashed", vm.Share{HostPath: "/v/data", Rights: vm.ShareRights{Squash: true, Drop: []string{"setuid"}}},
			"virtiofsd-sandbox /v/data rw --squash -- /usr/lib/qemu/virtiofsd --fd=3 -o source=/v/data,cache=auto,sandbox=namespace,no_posix_lock,no_flock,no_xattr,log_level=warn,modcaps=-setuid --thread-pool-size=4"},
		{"a user, every capability dropped", vm.Share{HostPath: "/v/data", Rights: restricted},
			"virtiofsd-sandbox /v/data rw --user 1000:3000:2000 --squash -- /usr/lib/qemu/virtiofsd --fd=3 -o source=/tmp/v/data,cache=auto,sandbox=namespace,no_posix_lock,no_flock,no_xattr,log_level=warn," +
				"modcaps=-chown:-dac_override:-fowner:-fsetid:-setgid:-setuid:-mknod:-setfcap --thread-pool-size=4 --rlimit-nofile=0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := HelperArgs(tc.sh, "/usr/lib/qemu/virtiofsd")
			if got := strings.Join(args, " "); got != tc.want {
				t.Fatalf("helper args:\n%s\nwant\n%s", got, tc.want)
			}
			cfg, err := parseHelperArgs(args[1:])
			if err != nil {
				t.Fatal(err)
			}
			if cfg.dir != tc.sh.HostPath || cfg.readOnly != tc.sh.ReadOnly || cfg.squash != tc.sh.Rights.Squash ||
				!reflect.DeepEqual(cfg.user, tc.sh.Rights.User) || cfg.argv[0] != "/usr/lib/qemu/virtiofsd" {
				t.Fatalf("the helper reads %+v (user %+v) back", cfg, cfg.user)
			}
		})
	}
}

// TestGateRefusesWithoutRelease: a helper whose gate closes unopened (crimux
// could not place it) never runs virtiofsd.
func TestGateRefusesWithoutRelease(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := waitGate(r); err == nil {
		t.Fatal("the gate opened on EOF")
	}
	r, w, _ = os.Pipe()
	go func() { w.Write([]byte(gateOpen)); w.Close() }()
	if err := waitGate(r); err != nil {
		t.Fatal(err)
	}
}

// TestHelperMainUsage: a malformed command line is refused.
func TestHelperMainUsage(t *testing.T) {
	for _, args := range [][]string{
		{"/d", "rx", "--", "/bin/true"},
		{"/d", "rw", "--user", "1000", "--", "/bin/true"},
		{"/d", "rw", "--user", "a:b", "--", "/bin/true"},
		{"/d", "rw", "--squash", "/bin/true"},
		{"/d", "rw", "--bogus", "--", "/bin/true"},
	} {
		if code := HelperMain(args); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}
