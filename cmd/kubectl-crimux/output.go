package main

import (
	"fmt"

	"github.com/crimux/crimux/kubeapi"
)

const mib = 1 << 20

// progressLine is one of the source's progress reports (a VMMigration's
// status.progress), as a person reads it:
//
//	42%  remaining 120.0 MiB  dirty 3.1 MiB/s  pass 2  (5.2s)
//
// The share is of the VM's memory (and disk) not left to send; memory
// dirtied again is sent again, so it may fall back between passes.
func progressLine(p kubeapi.MigrationProgress) string {
	pct := 0
	if p.TotalBytes > 0 {
		pct = int((p.TotalBytes - min(p.RemainingBytes, p.TotalBytes)) * 100 / p.TotalBytes)
	}
	return fmt.Sprintf("%4d%%  remaining %.1f MiB  dirty %.1f MiB/s  pass %d  (%.1fs)",
		pct, float64(p.RemainingBytes)/mib, float64(p.DirtyRateBytes)/mib, p.Iteration, float64(p.ElapsedMS)/1000)
}
