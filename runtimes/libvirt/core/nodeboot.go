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

// startedBeforeBoot: VM c was started before the node last booted, so
// whatever ended it, the node's restart did (with a second's slack for
// btime's precision).
func (r *Runtime) startedBeforeBoot(c *store.Container) bool {
	boot := r.bootTime()
	return !boot.IsZero() && c.StartedAt > 0 && time.Unix(0, c.StartedAt).Before(boot.Add(-time.Second))
}

func (r *Runtime) bootTime() time.Time {
	if r.BootTime != nil {
		return r.BootTime()
	}
	return HostBootTime()
}

// nodeRebootMessage is the exit message of a VM lost with the node.
func nodeRebootMessage(domain string) string {
	return fmt.Sprintf("the node restarted (booted %s) while VM %s ran: it ended with the node",
		HostBootTime().UTC().Format(time.RFC3339), domain)
}
