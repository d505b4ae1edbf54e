package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/crimux/crimux/kubeapi"
)

const mib = 1 << 20

// progressLine is one of S's progress reports, as a person reads it:
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

// printf writes one line of the migration's story.
func (m *migration) printf(format string, args ...any) {
	fmt.Fprintf(m.out, format+"\n", args...)
}

// eprintf writes one line of its failure.
func (m *migration) eprintf(format string, args ...any) {
	fmt.Fprintf(m.errOut, format+"\n", args...)
}

// told remembers what the user was told, to tell each thing once.
type told struct {
	source, target, running, moved bool
	progress, waiting              string
	hintedSource, hintedTarget     bool
}

// tell prints what step says that was not said before.
func (m *migration) tell(r relay, st step, said *told) {
	if st.targetRunning && !said.running {
		said.running = true
		m.printf("target pod %s running on %s", r.target, r.node)
	}
	if st.targetWaiting != said.waiting {
		said.waiting = st.targetWaiting
		if st.targetWaiting != "" && !said.running {
			m.printf("target pod %s: %s", r.target, st.targetWaiting)
		}
	}
	if st.sourceReady != nil && !said.source {
		said.source = true
		if d := st.sourceReady.ImageDigest; d != "" {
			m.printf("source pod %s ready to send its VM (image %s)", r.source, shortDigest(d))
		} else {
			m.printf("source pod %s ready to send its VM", r.source)
		}
	}
	if st.targetReady != nil && !said.target {
		said.target = true
		m.printf("target pod %s ready to receive it at %s (libvirt %s)", r.target, st.targetReady.Address, st.targetReady.LibvirtURI)
	}
	if st.progress != "" && st.progress != said.progress {
		said.progress = st.progress
		m.printf("%s", progressLine(st.prog))
	}
	if st.state.moved && !said.moved {
		said.moved = true
		m.printf("the VM left %s; waiting for %s to take it over", r.source, r.target)
	}
}

// hint names the agent the migration has waited for a while, once: S's
// answers migrate-to at once, T's once T's VM container runs.
func (m *migration) hint(r relay, sourceNode string, said *told) {
	const on = "is crimux's node agent on there ([kubernetes] in crimux's config)?"
	switch {
	case !said.source && !said.hintedSource:
		said.hintedSource = true
		m.printf("still waiting for %s's node agent to answer for pod %s: %s", sourceNode, r.source, on)
	case said.source && said.running && !said.target && !said.hintedTarget:
		said.hintedTarget = true
		m.printf("still waiting for %s's node agent to answer for pod %s: %s", r.node, r.target, on)
	}
}
