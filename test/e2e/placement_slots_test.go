package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// A qemu wrapper asks one placement socket, fixed when it is built
// (libvirt clears qemu's environment), and the last crimux to start owns a
// socket path: crimuxes running side by side on this host (parallel tests,
// the second host lane) would each take the others' VMs for strangers and
// refuse to place them. So each state dir gets a slot: a wrapper and a
// socket of its own while a test uses it.

// The bed's own qemu wrapper (test/bed/libvirt-up.sh) and the socket it
// asks: crimux's defaults.
const (
	bedWrapper   = "/usr/local/lib/crimux/crimux-qemu-wrapper"
	bedPlacement = "/run/crimux/placement.sock"
)

// ownPlacement gives a crimux of this host whose config names no qemu
// wrapper the wrapper and placement socket of its state dir's slot, in a
// config beside dir that adds them to the test's. Every crimux a test
// starts on one state dir gets the same pair: its VMs' <emulator> asks it.
func (c *crimux) ownPlacement(dir string) {
	c.t.Helper()
	cfg := lastFlag(c.args, "--config")
	body, err := os.ReadFile(cfg)
	if err != nil {
		c.t.Fatalf("read crimux's config %s: %v", cfg, err)
	}
	if strings.Contains(string(body), "emulator") || strings.Contains(string(body), "placement_socket") {
		return
	}
	c.wrapper, c.placement = placementSlot(c.t, c.stateDir)
	path := filepath.Join(dir, "placement.toml")
	c.args = append(c.args, "--config", path)
	c.rewriteConfig(c.t, string(body))
}

// rewriteConfig makes body what crimux reads from its config file (at
// its next start or reload), with its slot's wrapper and socket when it
// has one: a test that edits crimux's config while it runs edits this.
func (c *crimux) rewriteConfig(t *testing.T, body string) {
	t.Helper()
	if c.wrapper != "" {
		body = withLibvirtKeys(body, fmt.Sprintf("emulator = %q\nplacement_socket = %q\n", c.wrapper, c.placement))
	}
	writeFile(t, lastFlag(c.args, "--config"), body)
}

// lastFlag is the value of the last name in args (the one crimux takes).
func lastFlag(args []string, name string) string {
	v := ""
	for i := 0; i+1 < len(args); i++ {
		if args[i] == name {
			v = args[i+1]
		}
	}
	return v
}

// withLibvirtKeys is the TOML body with keys added to its [libvirt] table
// (made when it has none).
func withLibvirtKeys(body, keys string) string {
	lines := strings.SplitAfter(body, "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) == "[libvirt]" {
			return strings.Join(lines[:i+1], "") + keys + strings.Join(lines[i+1:], "")
		}
	}
	if body != "" && !strings.HasSuffix(body, "\n") {
		body += "\n"
	}
	return body + "[libvirt]\n" + keys
}

// slots are the placement slots in use, by state dir, with how many
// crimuxes of running tests use each; free ones are taken again.
var slots = struct {
	sync.Mutex
	byDir map[string]*slot
	inUse map[int]bool
}{byDir: map[string]*slot{}, inUse: map[int]bool{}}

type slot struct{ n, users int }

// placementSlot is the wrapper and socket of stateDir's slot (the lowest
// free one when it has none), built and installed at first use in this
// run and unchanged otherwise: libvirt caches each <emulator>'s
// capabilities by path and ctime. The slot is freed when the last test
// using it ends. Its name carries the bed instance: the two host lanes run
// in separate processes.
func placementSlot(t *testing.T, stateDir string) (wrapper, socket string) {
	t.Helper()
	slots.Lock()
	s := slots.byDir[stateDir]
	if s == nil {
		s = &slot{}
		for slots.inUse[s.n] {
			s.n++
		}
		slots.inUse[s.n] = true
		slots.byDir[stateDir] = s
	}
	s.users++
	slots.Unlock()
	t.Cleanup(func() {
		slots.Lock()
		defer slots.Unlock()
		if s.users--; s.users == 0 {
			delete(slots.byDir, stateDir)
			delete(slots.inUse, s.n)
		}
	})
	name := fmt.Sprintf("%s-%d", bedInstance("e2e"), s.n)
	wrapper = "/usr/local/lib/crimux/crimux-qemu-wrapper-" + name
	socket = filepath.Join(bed.runDir, name, "placement.sock")
	installQemuWrapper(t, wrapper, socket)
	if err := os.MkdirAll(filepath.Dir(socket), 0o755); err != nil {
		t.Fatal(err)
	}
	return wrapper, socket
}
