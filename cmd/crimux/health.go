package main

import (
	"context"
	"strings"
	"sync"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/metrics"
	"github.com/crimux/crimux/registry"
)

// healthInterval is how often the runtimes are checked, or half of
// systemd's WatchdogSec when that is shorter.
const healthInterval = 10 * time.Second

// healthTimeout bounds one runtime's Status call.
const healthTimeout = 5 * time.Second

// healthLoop checks every runtime for real (its Status: containerd's own,
// libvirtd answering and the emulator present) on a timer, exports each
// runtime's readiness and pings systemd's watchdog while the primary
// answers. The pings come from this loop alone, so a loop that hangs, or a
// primary that stops answering, stops them and systemd restarts crimux
// after WatchdogSec (harmless: KillMode=process keeps qemu and the
// containers running, and the new crimux finds them by ID).
func (d *daemon) healthLoop(ctx context.Context, listen string) {
	interval, timeout := healthTimes()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		d.checkHealth(ctx, timeout, listen)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// healthTimes derives the check interval and timeout from the watchdog
// systemd asks for (WATCHDOG_USEC), if any.
func healthTimes() (interval, timeout time.Duration) {
	interval = healthInterval
	if wd, err := sd.SdWatchdogEnabled(false); err == nil && wd > 0 && wd/2 < interval {
		interval = wd / 2
	}
	return interval, min(healthTimeout, interval*3/4)
}

// healthState remembers the last round, to log and report changes only.
type healthState struct {
	mu      sync.Mutex
	summary string
}

func (d *daemon) checkHealth(ctx context.Context, timeout time.Duration, listen string) {
	reg := d.cri.Registry()
	primaryAnswered, states := checkRuntimes(ctx, reg, timeout)
	d.metrics.SetRuntimeReady(states)
	if primaryAnswered {
		d.notify.send("WATCHDOG=1")
	}
	var ready, notReady []string
	for _, s := range states {
		if s.Ready {
			ready = append(ready, s.Runtime)
		} else {
			notReady = append(notReady, s.Runtime)
		}
	}
	summary := "ready: " + strings.Join(ready, ", ")
	if len(notReady) > 0 {
		summary += "; not ready: " + strings.Join(notReady, ", ")
	}
	d.health.mu.Lock()
	changed := summary != d.health.summary
	d.health.summary = summary
	d.health.mu.Unlock()
	if !changed {
		return
	}
	if len(notReady) > 0 {
		d.log.Warn("runtime health changed", "ready", ready, "not_ready", notReady, "primary_answers", primaryAnswered)
	} else {
		d.log.Info("runtime health changed", "ready", ready)
	}
	d.notify.send("STATUS=serving on " + listen + "; runtimes " + summary)
}

// checkRuntimes asks each backend for its Status once, concurrently, and
// reports whether the primary answered and each runtime's readiness (its
// RuntimeReady condition).
func checkRuntimes(ctx context.Context, reg *registry.Registry, timeout time.Duration) (primaryAnswered bool, states []metrics.RuntimeReadiness) {
	type answer struct {
		ready bool
		err   error
	}
	backends := reg.Backends()
	answers := make(map[registry.Backend]answer, len(backends))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, b := range backends {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			resp, err := b.Backend.Runtime().Status(cctx, &runtimeapi.StatusRequest{})
			a := answer{err: err}
			for _, c := range resp.GetStatus().GetConditions() {
				if c.GetType() == runtimeapi.RuntimeReady {
					a.ready = c.GetStatus()
				}
			}
			mu.Lock()
			answers[b.Backend] = a
			mu.Unlock()
		}()
	}
	wg.Wait()
	for _, rt := range reg.Runtimes() {
		a := answers[rt.Backend]
		if rt.Primary {
			primaryAnswered = a.err == nil
		}
		states = append(states, metrics.RuntimeReadiness{Runtime: rt.Name, Type: rt.Type, Ready: a.err == nil && a.ready})
	}
	return primaryAnswered, states
}
