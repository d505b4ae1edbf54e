package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// The guest-side probe of a migration's pause (vm_migrate_downtime_probe_ms):
// a shell loop in the guest prints a numbered line to its serial console
// every 10 ms; crimux copies each console line into the pod's CRI log
// stamped with when it read it. The probe is the time between the last
// line in the source pod's CRI log and the first in the target's.

// probeMarker starts each of the probe's lines.
const probeMarker = "CRIMUX-PROBE "

// probeScript starts the loop in the background (sh -c): busybox's sleep
// takes fractions.
const probeScript = `(i=0; while :; do i=$((i+1)); echo "` + probeMarker + `$i"; sleep 0.01; done) </dev/null >/dev/console 2>&1 &`

// probeWait bounds the wait for the probe's first line in a log.
const probeWait = 20 * time.Second

// probeLine is one of the probe's lines in a CRI log: when crimux read
// it, and its number.
type probeLine struct {
	at time.Time
	n  int
}

// probeLines reads the probe's lines out of the CRI log at path, in the
// CRI text format: "<RFC3339Nano timestamp> stdout F <line>" ("P" for a
// partial line).
func probeLines(path string) ([]probeLine, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []probeLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), " ", 4)
		if len(parts) < 4 || !strings.HasPrefix(parts[3], probeMarker) {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, parts[0])
		if err != nil {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(parts[3], probeMarker)))
		if err != nil {
			continue // a line the console mixed with other output
		}
		out = append(out, probeLine{at: at, n: n})
	}
	return out, sc.Err()
}

// waitProbeLine waits until the CRI log at path holds a line of the probe.
func waitProbeLine(ctx context.Context, path string) error {
	ctx, cancel := context.WithTimeout(ctx, probeWait)
	defer cancel()
	return waitUntil(ctx, 50*time.Millisecond, func() error {
		lines, err := probeLines(path)
		if err == nil && len(lines) == 0 {
			err = fmt.Errorf("no %q line in %s yet", probeMarker, path)
		}
		return err
	})
}

// probeGap is the probe's figure of one migration: from the source's
// last line to the target's first, once the target's log has one and
// the source's copier has had time to copy what the source's guest
// printed last; period is the loop's mean period on the source (the
// probe's resolution), what says which lines these were.
func probeGap(ctx context.Context, source, target string) (gap, period time.Duration, what string, err error) {
	if err := waitProbeLine(ctx, target); err != nil {
		return 0, 0, "", fmt.Errorf("the target's CRI log: %w", err)
	}
	time.Sleep(time.Second)
	src, err := probeLines(source)
	if err != nil {
		return 0, 0, "", err
	}
	dst, err := probeLines(target)
	if err != nil {
		return 0, 0, "", err
	}
	if len(src) < 2 || len(dst) == 0 {
		return 0, 0, "", errors.New("the probe has too few lines in the logs")
	}
	last, first := src[len(src)-1], dst[0]
	gap = first.at.Sub(last.at)
	if lines := last.n - src[0].n; lines > 0 {
		period = last.at.Sub(src[0].at) / time.Duration(lines)
	}
	what = fmt.Sprintf("source's line %d at %s, target's line %d at %s; a line every %s on the source", last.n, last.at.Format("15:04:05.000"),
		first.n, first.at.Format("15:04:05.000"), period.Round(100*time.Microsecond))
	if gap <= 0 || first.n <= last.n {
		return 0, 0, what, fmt.Errorf("the probe's lines do not follow each other across the migration: %s", what)
	}
	return gap, period, what, nil
}
