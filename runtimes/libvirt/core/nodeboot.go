package core

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/crimux/crimux/runtimes/libvirt/store"
)

// A VM that ran when the node went down (a reboot, a power cut) ended
// with the node: its exit is not its guest's. Like containerd's for a task
// lost with the node, its exit code is 255; its reason says what happened.
const (
	ExitNodeRebooted   = 255
	ReasonNodeRebooted = "NodeRebooted"
)

// HostBootTime is when the node booted: /proc/stat's btime; zero if it
// cannot be read.
func HostBootTime() time.Time {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return time.Time{}
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "btime "); ok {
			if sec, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
				return time.Unix(sec, 0)
			}
		}
	}
	return time.Time{}
}

// startedBefore: VM c was started before the node booted at boot, so
// whatever ended it, the node's restart did (with a second's slack for
// btime's precision). A zero boot (unknown) says no.
func startedBefore(c *store.Container, boot time.Time) bool {
	return !boot.IsZero() && c.StartedAt > 0 && time.Unix(0, c.StartedAt).Before(boot.Add(-time.Second))
}

func (r *Runtime) bootTime() time.Time {
	if r.BootTime != nil {
		return r.BootTime()
	}
	return HostBootTime()
}

// nodeRebootMessage is the exit message of a VM lost with the node.
func nodeRebootMessage(domain string, boot time.Time) string {
	return fmt.Sprintf("the node restarted (booted %s) while VM %s ran: it ended with the node",
		boot.UTC().Format(time.RFC3339), domain)
}
