package vmmigration

import (
	"fmt"
	"strings"
	"time"

	"github.com/crimux/crimux/kubeapi"
)

// finishLine is the migration's outcome: its time, the VM's downtime and
// its addresses in T.
func finishLine(took time.Duration, f kubeapi.MigrationFinish) string {
	addrs := "none"
	if len(f.Addresses) > 0 {
		addrs = strings.Join(f.Addresses, ", ")
	}
	return fmt.Sprintf("moved in %.1fs: downtime %d ms; addresses %s", took.Seconds(), f.DowntimeMS, addrs)
}

// shortDigest is an image digest cut for reading.
func shortDigest(d string) string {
	if i := strings.IndexByte(d, ':'); i >= 0 && len(d) > i+13 {
		return d[:i+13]
	}
	return d
}
