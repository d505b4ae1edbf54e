package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/crimux/crimux/test/bench/loadgen"
)

// The load phase's probe runs in a process of its own (the bench run as
// -serve-load-probe), as kubelet does. In the bench's process it shared
// one Go scheduler with the load it measures (200 polling clients, 100
// exec sessions and their streams): each of its calls then waited for
// its own goroutine to be run among theirs, and its tail was the load
// generator's as much as crimux's, on containerd's socket too. Each
// window is a run of its own: a second of warm-up, then the window.

// probeFlag is the bench's flag that makes it the probe's process; its
// value is a probeRequest as JSON.
const probeFlag = "serve-load-probe"

// probeRequest is what the bench asks of the probe's process.
type probeRequest struct {
	Crimux, Containerd string // the endpoints, as criclient.Dial takes them
	VMs                []string
	Container          string
	Window             time.Duration
}

// probeReport is what the probe's process answers on its stdout.
type probeReport struct {
	VM, Ctr, Direct *loadgen.Latencies
	Outcomes        *loadgen.Outcomes
	From, To        time.Time
}

// probeWindow times ContainerStatus for d: in a process of its own, or in
// the bench's with -load-probe-in-process.
func (b *bench) probeWindow(ctx context.Context, t loadTargets, d time.Duration) (*probeSamples, error) {
	req := probeRequest{Crimux: "unix://" + b.socket, Containerd: b.opts.containerd, Container: t.ctr.container,
		VMs: t.vmContainers(), Window: d}
	if b.opts.loadProbeInProcess {
		return probeOnce(ctx, req)
	}
	return runProbeProcess(ctx, req)
}

// probeOnce is one window as req asks, on connections of its own, after
// a second of warm-up.
func probeOnce(ctx context.Context, req probeRequest) (*probeSamples, error) {
	probe, err := dialProbe(req.Containerd, req.Crimux)
	if err != nil {
		return nil, err
	}
	defer probe.close()
	probe.window(ctx, req.Container, req.VMs, time.Second) // warm-up, unrecorded
	return probe.window(ctx, req.Container, req.VMs, req.Window), nil
}

// runProbeProcess runs the bench itself as the probe for req's window.
func runProbeProcess(ctx context.Context, req probeRequest) (*probeSamples, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	arg, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, self, "-"+probeFlag, string(arg))
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("the probe's process: %w", err)
	}
	var rep probeReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		return nil, fmt.Errorf("the probe's process answered %q: %w", out.String(), err)
	}
	return &probeSamples{vm: rep.VM, ctr: rep.Ctr, direct: rep.Direct, outcomes: rep.Outcomes, from: rep.From, to: rep.To}, nil
}

// serveProbe is the probe's process: one window as asked in arg (a
// probeRequest), its samples written to stdout as a probeReport.
func serveProbe(ctx context.Context, arg string) error {
	var req probeRequest
	if err := json.Unmarshal([]byte(arg), &req); err != nil {
		return fmt.Errorf("-%s: %w", probeFlag, err)
	}
	if len(req.VMs) == 0 || req.Container == "" {
		return fmt.Errorf("-%s: a container and at least one VM to ask", probeFlag)
	}
	p, err := probeOnce(ctx, req)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(probeReport{VM: p.vm, Ctr: p.ctr, Direct: p.direct, Outcomes: p.outcomes, From: p.from, To: p.to})
}
